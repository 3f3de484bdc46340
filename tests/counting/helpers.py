"""Drive the real publisher and projectors (count and reverse index), read the truth straight from
the shards, and the shared pieces of the observability and count-cache tests (one shard's publish,
dead letters, the count-cache process state and Redis round trips)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter

import pytest
import redis
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from counting import routing as count_routing
from counting import selectors
from counting.models import LikeCountProjection, VideoLikeCountVbucket
from counting.services.projection import CountProjector
from counting.services.reverse.projector import ReverseIndexProjector
from likes_project import l1cache, leases
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import ApplyResult, NonRetryable, consume_partition, dead_letter_record
from likes_project.eventlog.models import DeadLetter, Lease
from likes_project.redis_client import stream_redis
from relations.models import LikeRelation, OutboxEvent
from relations.services import outbox
from relations.services.outbox import ClaimedRow, event_envelope
from tests.relations.helpers import cmd

SHARDS = ("rel_00", "rel_01")  # the relation shards of the test settings

# Markers of the count-cache tests. Transactional: the publisher only takes rows whose transaction has
# committed (architecture §4).
ALL_DB = pytest.mark.django_db(databases="__all__")
TX_DB = pytest.mark.django_db(databases="__all__", transaction=True)


def publish_all(holder: str = "test-publisher") -> int:
    sent = 0
    for alias in settings.RELATION_SHARD_ALIASES:
        while True:
            report = outbox.outbox_publish_batch(alias=alias, holder=holder)
            sent += report.sent
            if report.claimed == 0:
                break
    return sent


def like_storm(users, video_ids) -> None:
    """Every user likes every video, and the i-th user unlikes the j-th video again where i + j is odd (some
    relations end LIKED, some UNLIKED at a second version); the events published to the log."""
    for i, user in enumerate(users):
        for j, video_id in enumerate(video_ids):
            cmd(user, video_id, "LIKED")
            if (i + j) % 2:
                cmd(user, video_id, "UNLIKED")
    publish_all()


def publish(alias: str) -> int:
    """Publish every pending row of one shard (the publisher only claims committed rows)."""
    sent = 0
    while (report := outbox.outbox_publish_batch(alias=alias, holder="t")).claimed:
        sent += report.sent
    assert not OutboxEvent.objects.using(alias).filter(status__in=["NEW", "RETRY", "UNCERTAIN"]).exists()
    return sent


def project_everything() -> None:
    """Run the count projector over every partition; each run must end "ok"."""
    for p in streams.all_partitions():
        report = consume_partition(CountProjector(), partition=p)
        assert report.status == "ok", report


def project_all(**kw) -> list:
    """One pass over every partition now (a partition backing off after a failure is retried at once)."""
    kw.setdefault("ignore_backoff", True)
    return [consume_partition(CountProjector(), partition=p, **kw) for p in streams.all_partitions()]


def project_reverse(**kw) -> list:
    kw.setdefault("ignore_backoff", True)
    return [consume_partition(ReverseIndexProjector(), partition=p, **kw) for p in streams.all_partitions()]


def consume_everything() -> None:
    """One pass of every consumer of the event log (every one the apps registered: count, reverse index,
    relation cache, notifications...) over every partition: what trimming, archiving and the lost-tail check
    wait for."""
    from likes_project.eventlog.registry import CONSUMERS

    for spec in CONSUMERS.values():
        for p in streams.all_partitions():
            consume_partition(spec.projector(), partition=p, ignore_backoff=True)


def drain() -> None:
    """Publish everything and run the count projector over every partition."""
    publish_all()
    project_all()


def drain_reverse() -> list:
    """Publish everything and run the reverse (who liked) projector over every partition."""
    publish_all()
    return project_reverse()


def drain_all() -> None:
    """Publish everything and run both the count and the reverse projector."""
    drain()
    project_reverse()


def lease_expire(grant: leases.LeaseGrant) -> None:
    """The holder of `grant` is gone (paused or crashed): its lease runs out, so another may take over."""
    Lease.objects.filter(resource=grant.resource).update(expires_at=timezone.now() - dt.timedelta(seconds=1))


def apply_then_crash(projector, *, partition: int) -> tuple[ApplyResult, list]:
    """A worker applies what is published on `partition` under its lease, then "crashes": the checkpoint
    is never advanced and the lease expires, so another worker takes over. Returns (result, batch)."""
    batch = streams.read_after(partition, "0-0", 100)
    grant = leases.lease_acquire(resource=f"consumer:{projector.name}:{partition}", holder="crashing-worker",
                                 ttl_s=30)
    result = projector.apply(batch, consumer=projector.name, partition=partition, token=grant.token)
    lease_expire(grant)
    return result, batch


def count_partition_of(user, video_id: str) -> str:
    """The count partition that holds the vbucket of this user's like of the video."""
    gen = count_routing.active()
    return gen.routes[count_routing.virtual_bucket(gen.space, video_id, user.pk)].partition


def liked_facts(video_id: str) -> int:
    return sum(LikeRelation.objects.using(a).filter(video_id=video_id, state="LIKED").count()
               for a in settings.RELATION_SHARD_ALIASES)


def bucket_sum(video_id: str) -> int:
    gen = count_routing.active()
    total = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        total += VideoLikeCountVbucket.objects.using(alias).filter(
            generation=gen.generation, video_id=video_id
        ).aggregate(s=Sum("active_count"))["s"] or 0
    return total


def projection_row(user_id: int, video_id: str) -> LikeCountProjection | None:
    gen = count_routing.active()
    vb = count_routing.virtual_bucket(gen.space, video_id, user_id)
    alias = gen.routes[vb].partition
    return LikeCountProjection.objects.using(alias).filter(generation=gen.generation, user_id=user_id,
                                                            video_id=video_id).first()


def envelopes(user_id: int, video_id: str) -> list[dict]:
    """The published form of every outbox event of one relation, in version order."""
    from relations import routing

    rows = OutboxEvent.objects.using(routing.alias_for_user(user_id)).filter(
        aggregate_key=f"{user_id}:{video_id}").order_by("relation_version")
    return [event_envelope(ClaimedRow(r.id, str(r.event_id), r.payload, r.retry_count)) for r in rows]


def mark_all_sent() -> None:
    """Pretend the outbox rows were published by us (tests that hand-craft the stream order)."""
    for alias in settings.RELATION_SHARD_ALIASES:
        OutboxEvent.objects.using(alias).update(status="SENT")


def dead_letter(entry_id: str, video_id: str = "vid-dl", consumer: str = "count") -> DeadLetter:
    """Dead-letter a malformed entry of partition 0 for `consumer`; returns its row."""
    entry = streams.StreamEntry(0, streams.stream_key(0), entry_id,
                                {"eventId": str(uuid.uuid4()), "videoId": video_id, "userId": 7, "bad": True})
    dead_letter_record(consumer=consumer, entry=entry, error=NonRetryable("payload is missing relationVersion"),
                       attempts=1)
    return DeadLetter.objects.get(entry_id=entry_id, consumer=consumer)


# --- the count cache --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Per-process caches start empty: the count-cache generation cache and every L1.

    Autouse only where a module imports it (the count-cache modules), not in every counting test."""
    selectors.reset_generation_cache()
    l1cache.clear_all()
    yield
    selectors.reset_generation_cache()
    l1cache.clear_all()


class RoundTrips:
    """Counts what the process sends to Redis (one send = one round trip), still calling Redis. `len()` is
    the round trips of the busiest server: the sends on a single Redis; on a Cluster, where a pipeline
    goes to each node it touches at once (side by side), the most sent to any one node."""

    def __init__(self, monkeypatch):
        self.sent: list = []
        self.by_server: Counter = Counter()
        real = redis.connection.Connection.send_packed_command

        def spy(conn, command, check_health=True):
            self.sent.append(command)
            self.by_server[(conn.host, conn.port)] += 1
            return real(conn, command, check_health)

        monkeypatch.setattr(redis.connection.Connection, "send_packed_command", spy)

    def clear(self) -> None:
        self.sent.clear()
        self.by_server.clear()

    def __len__(self) -> int:
        return max(self.by_server.values(), default=0)


def stream_event(user_id: int, video_id: str, version: int, state: str) -> None:
    """A relation event written straight into its stream partition (no outbox row): what a publisher would add."""
    key = f"{user_id}:{video_id}"
    event = {"eventType": "LikeRelationChanged", "eventId": str(uuid.uuid4()), "aggregateKey": key,
             "userId": user_id, "videoId": video_id, "relationVersion": version, "absoluteState": state,
             "stateChangedAt": dt.datetime.now(dt.UTC).isoformat()}
    stream_redis().xadd(streams.stream_key(streams.partition_for(key)), {"event": json.dumps(event)})
