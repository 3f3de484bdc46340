"""The outbox publisher and republisher against real PostgreSQL and a real Redis stream
(consistency-techniques O2-O5, architecture §4), and the whole loop end to end."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from likes_project.eventlog import streams
from likes_project.redis_client import stream_redis
from relations import routing
from relations.models import OutboxArchive, OutboxEvent
from relations.services import outbox
from tests.counting.helpers import bucket_sum, consume_everything, drain, liked_facts, project_all, publish_all
from tests.factories import put_like
from tests.relations.helpers import cmd as like

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def rows(alias, **filters):
    return list(OutboxEvent.objects.using(alias).filter(**filters).order_by("id"))


@pytest.fixture
def video(make_user, make_video):
    return make_video("pub-v", make_user())


def _pending_like(make_user, video) -> str:
    """A new user's like of `video`, waiting in its shard's outbox; returns that shard's alias."""
    user = make_user()
    like(user, video.video_id)
    return routing.alias_for_user(user.pk)


def _publish_raising(monkeypatch, error: type[Exception], message: str):
    """Every stream publish raises `error(message)` from now on; returns the real one (to put back when Redis is)."""
    real = streams.publish_pipeline

    def publish_pipeline(events):
        raise error(message)

    monkeypatch.setattr(streams, "publish_pipeline", publish_pipeline)
    return real


def test_publish_records_the_stream_position_and_the_commit_sequence(make_user, video):
    alias = _pending_like(make_user, video)
    report = outbox.outbox_publish_batch(alias=alias, holder="p1")
    assert (report.claimed, report.sent) == (1, 1)
    (row,) = rows(alias)
    assert row.status == "SENT" and row.published_at is not None
    p = streams.partition_for(row.aggregate_key)
    assert row.stream_key == streams.stream_key(p) and row.stream_partition == p
    (entry,) = streams.read_after(p, "0-0", 10)
    assert entry.entry_id == row.stream_entry_id  # the sourceCommitSeq -> offset mapping (OUT-9)
    assert entry.event["sourceCommitSeq"] == row.id
    assert entry.event["eventId"] == str(row.event_id)
    assert entry.event["relationVersion"] == 1 and entry.event["absoluteState"] == "LIKED"


def test_two_publishers_on_one_shard_never_lose_or_double_assign_a_row(make_user, make_video):
    author = make_user()
    users = [make_user(shard="rel_00") for _ in range(3)]
    for i in range(40):
        like(users[i % 3], make_video(f"many-{i}", author).video_id)
    claimed: dict[str, list[int]] = {}
    barrier = threading.Barrier(2)

    def publisher(name):
        try:
            barrier.wait()
            got = []
            while batch := outbox.outbox_claim(alias="rel_00", holder=name, limit=7):
                got += [r.id for r in batch]
            claimed[name] = got
        finally:
            connections.close_all()

    threads = [threading.Thread(target=publisher, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    all_ids = [r.id for r in rows("rel_00")]
    assert sorted(claimed["a"] + claimed["b"]) == sorted(all_ids)  # nothing lost
    assert not set(claimed["a"]) & set(claimed["b"])  # nothing double-assigned
    assert {r.claimed_by for r in rows("rel_00")} <= {"a", "b"}


def _waiting_on_a_lock(alias: str) -> bool:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0] > 0


def test_a_transaction_that_commits_late_with_a_smaller_id_is_still_published(make_user, make_video):
    """A command held open in the store after its outbox insert: another session holds an uncommitted
    command row with the same operation id, so the command's own command insert waits on the unique
    index (its outbox row already has id N). Works on either write path (D84)."""
    author = make_user()
    slow_user, fast_user = make_user(shard="rel_00"), make_user(shard="rel_00")
    v1, v2 = make_video("slow-v", author), make_video("fast-v", author)
    holder = connections.create_connection("rel_00")  # a session of its own, in a transaction
    holder.set_autocommit(False)
    holder.cursor().execute(
        "INSERT INTO relations_likecommand (user_id, operation_id, video_id, desired_state, result_state, "
        "result_version, changed, device_id, created_at) VALUES (%s, 'slow-op', 'slow-v', 'LIKED', 'LIKED', 1, "
        "true, '', now())", [slow_user.pk])

    def slow_like():
        with connections["rel_00"].cursor() as cursor:
            cursor.execute("SET lock_timeout = '20s'")  # the session's: it waits for the holder below
        try:
            like(slow_user, v1.video_id, key="slow-op")
        finally:
            connections.close_all()

    slow = threading.Thread(target=slow_like)
    slow.start()
    deadline = timezone.now() + dt.timedelta(seconds=20)
    while not _waiting_on_a_lock("rel_00"):  # the slow transaction holds outbox id N, uncommitted
        assert timezone.now() < deadline and slow.is_alive()
    like(fast_user, v2.video_id)  # commits outbox id N+1
    first = outbox.outbox_publish_batch(alias="rel_00", holder="p")
    assert first.sent == 0  # N+1 is held back while N's transaction may still commit
    holder.rollback()  # the slow command's insert goes through
    holder.close()
    slow.join(20)
    second = outbox.outbox_publish_batch(alias="rel_00", holder="p")
    assert second.sent == 2
    slow_row, fast_row = rows("rel_00")
    assert slow_row.id < fast_row.id
    assert slow_row.status == fast_row.status == "SENT"


def test_a_publish_timeout_is_uncertain_then_retried(make_user, video, monkeypatch):
    alias = _pending_like(make_user, video)
    real = _publish_raising(monkeypatch, RedisTimeoutError, "t")
    report = outbox.outbox_publish_batch(alias=alias, holder="p")
    assert report.uncertain == 1
    (row,) = rows(alias)
    assert (row.status, row.retry_count) == ("UNCERTAIN", 1)
    assert row.next_retry_at > timezone.now()  # backed off
    assert "TimeoutError" in row.last_error
    assert outbox.outbox_publish_batch(alias=alias, holder="p").claimed == 0  # not due yet
    OutboxEvent.objects.using(alias).update(next_retry_at=timezone.now())
    monkeypatch.setattr(streams, "publish_pipeline", real)
    assert outbox.outbox_publish_batch(alias=alias, holder="p").sent == 1
    assert rows(alias)[0].status == "SENT"


def test_a_refused_connection_is_retried_forever_and_never_dead(make_user, video, monkeypatch):
    alias = _pending_like(make_user, video)
    real = _publish_raising(monkeypatch, RedisConnectionError, "no")
    statuses = []
    for _ in range(15):  # far past the old ten-attempt limit
        OutboxEvent.objects.using(alias).update(next_retry_at=timezone.now())
        outbox.outbox_publish_batch(alias=alias, holder="p")
        statuses.append(rows(alias)[0].status)
    assert set(statuses) == {"RETRY"}
    assert rows(alias)[0].next_retry_at <= timezone.now() + dt.timedelta(seconds=30)  # capped
    OutboxEvent.objects.using(alias).update(next_retry_at=timezone.now())
    monkeypatch.setattr(streams, "publish_pipeline", real)  # the stream Redis is back
    assert outbox.outbox_publish_batch(alias=alias, holder="p").sent == 1


def test_only_a_payload_that_can_never_be_published_is_dead(make_user, make_video):
    author, user = make_user(), make_user(shard="rel_00")
    for i in range(2):
        like(user, make_video(f"poison-{i}", author).video_id)
    first, second = rows("rel_00")
    OutboxEvent.objects.using("rel_00").filter(id=first.id).update(payload={"eventType": "LIKED"})  # no aggregateKey
    report = outbox.outbox_publish_batch(alias="rel_00", holder="p")
    assert (report.dead, report.sent) == (1, 1)  # the rest of the batch is published
    by_id = {r.id: r for r in rows("rel_00")}
    assert by_id[first.id].status == "DEAD" and "aggregateKey" in by_id[first.id].last_error
    assert by_id[second.id].status == "SENT"


def test_backoff_grows_with_jitter_and_a_cap():
    from likes_project.eventlog import retry

    first = [retry.backoff_s(1) for _ in range(50)]
    assert all(0.25 <= d <= 0.5 for d in first) and len(set(first)) > 1
    assert all(15 <= retry.backoff_s(99) <= 30 for _ in range(20))


def test_an_expired_claim_returns_to_the_publishers(make_user, video):
    alias = _pending_like(make_user, video)
    assert len(outbox.outbox_claim(alias=alias, holder="died", limit=10)) == 1  # then the worker dies
    assert outbox.outbox_claim(alias=alias, holder="other", limit=10) == []
    OutboxEvent.objects.using(alias).update(claim_expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert outbox.outbox_publish_batch(alias=alias, holder="other").sent == 1


def test_a_flushed_stream_is_detected_republished_and_counts_converge(make_user, video):
    users = [make_user() for _ in range(6)]
    for u in users[:3]:
        like(u, video.video_id)
    publish_all()
    consume_everything()
    assert bucket_sum(video.video_id) == 3
    for a in settings.RELATION_SHARD_ALIASES:  # a check ran before the loss: its watermark stays
        assert outbox.outbox_republish_lost(alias=a, older_than_s=0).republished == 0
    for u in users[3:]:
        like(u, video.video_id)
    publish_all()  # published, not yet consumed ...
    for p in streams.all_partitions():  # ... and Redis loses the streams (restart without AOF)
        stream_redis().delete(streams.stream_key(p))
    project_all()
    assert bucket_sum(video.video_id) == 3  # nothing left to read: the loss is silent so far
    found = sum(outbox.outbox_republish_lost(alias=a, older_than_s=0).republished
                for a in settings.RELATION_SHARD_ALIASES)
    assert found == 3  # only the unconsumed events; the consumed ones are not resent
    drain()
    assert bucket_sum(video.video_id) == liked_facts(video.video_id) == 6


def test_a_stream_that_lost_only_its_tail_is_repaired(make_user, video):
    users = [make_user() for _ in range(4)]
    for u in users:
        like(u, video.video_id)
    publish_all()
    # drop the last entry of every stream (a failover that lost the newest writes)
    lost = 0
    for p in streams.all_partitions():
        entries = streams.read_after(p, "0-0", 100)
        if entries:
            stream_redis().xdel(streams.stream_key(p), entries[-1].entry_id)
            lost += 1
    assert sum(outbox.outbox_republish_lost(alias=a, older_than_s=0).republished
               for a in settings.RELATION_SHARD_ALIASES) == lost
    drain()
    assert bucket_sum(video.video_id) == 4


def test_republisher_counter_example_a_healthy_stream_republishes_nothing(make_user, video):
    like(make_user(), video.video_id)
    publish_all()
    assert sum(outbox.outbox_republish_lost(alias=a, older_than_s=0).republished
               for a in settings.RELATION_SHARD_ALIASES) == 0


def test_archive_moves_only_old_consumed_rows(make_user, video, settings):
    settings.OUTBOX_RETENTION_HOURS = 1
    users = [make_user(shard="rel_00") for _ in range(3)]
    for u in users:
        like(u, video.video_id)
    publish_all()
    assert outbox.outbox_archive_batch(alias="rel_00") == 0  # not old enough, not consumed
    OutboxEvent.objects.using("rel_00").update(published_at=timezone.now() - dt.timedelta(hours=2))
    assert outbox.outbox_archive_batch(alias="rel_00") == 0  # old, but no consumer has read them yet
    project_all()
    # issue 9 §3: consumers with no checkpoint row yet (reverse, relcache) have not read them either
    assert outbox.outbox_archive_batch(alias="rel_00") == 0
    consume_everything()
    assert outbox.outbox_archive_batch(alias="rel_00") == 3
    assert OutboxEvent.objects.using("rel_00").count() == 0
    assert OutboxArchive.objects.using("rel_00").count() == 3


def test_end_to_end_api_to_like_count_with_the_real_tasks(make_user, make_video, api):
    from counting.tasks import display_snapshot_task, project_partition_task
    from relations.tasks import publish_outbox_task

    author = make_user()
    make_video("e2e", author)
    make_video("e2e-private", author, visibility="private")
    fans = [make_user(shard=a) for a in settings.RELATION_SHARD_ALIASES for _ in range(3)]
    for i, fan in enumerate(fans):
        assert put_like(api.as_user(fan), "e2e", "LIKED", f"k-{i}").status_code == 200
    assert put_like(api.as_user(fans[0]), "e2e", "UNLIKED", "k-un").status_code == 200
    for alias in settings.RELATION_SHARD_ALIASES:
        assert publish_outbox_task(alias)["status"] == "ok"
    for p in streams.all_partitions():
        assert project_partition_task(p)["status"] == "ok"
    assert display_snapshot_task()["videos"] == 1
    client = api.as_user(author)
    body = client.get("/v1/videos/e2e/like-count").json()
    assert body["displayCount"] == liked_facts("e2e") == len(fans) - 1
    assert body["countConsistency"] == "EVENTUAL" and body["countSnapshotAt"].endswith("Z")
    assert set(body) == {"videoId", "displayCount", "countSnapshotAt", "countConsistency"}
    # the Redis view lost: the durable snapshot answers the same
    from counting import cache, routing

    stream_redis().delete(cache.view_key(routing.active().generation, "e2e"))
    assert client.get("/v1/videos/e2e/like-count").json()["displayCount"] == len(fans) - 1
    # a video the caller cannot see is a 404, and a malformed id a 400
    assert api.as_user(fans[0]).get("/v1/videos/e2e-private/like-count").status_code == 404
    assert api.as_user(fans[0]).get("/v1/videos/nope/like-count").json()["code"] == "video_not_found"
    assert api.as_user(fans[0]).get("/v1/videos/bad%20id/like-count").json()["code"] == "invalid_video_id"
    assert api.anonymous().get("/v1/videos/e2e/like-count").status_code == 401


def test_like_count_before_any_snapshot_is_zero_with_no_snapshot_time(make_user, make_video, api):
    author = make_user()
    make_video("fresh", author)
    body = api.as_user(author).get("/v1/videos/fresh/like-count").json()
    assert (body["displayCount"], body["countSnapshotAt"]) == (0, None)
