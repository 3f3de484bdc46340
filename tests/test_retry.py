"""Retry or poison (issue 9 §1): every row of the classification table (docs/decisions.md D38), each
raised by the real store where the store can raise it, and what the consumer then does with it: an
infrastructure failure keeps the head and backs off, for as long as it takes; only poison is a dead
letter."""

from __future__ import annotations

import logging
import socket

import pytest
import redis
from django.db import IntegrityError, connections
from django.db.utils import load_backend
from django.utils import timezone

from counting.services import projection
from counting.services.group_kit import FenceLost
from counting.services.projection import BucketFrozen, CountProjector, NegativeBucket, RouteEpochMismatch
from counting.services.reverse.projector import ReverseIndexProjector
from likes_project import leases
from likes_project.eventlog import retry, streams
from likes_project.eventlog.consumer import ApplyResult, consume_partition
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter
from relations.events import validate_event
from tests.counting.helpers import bucket_sum, publish_all
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def _raised(fn):
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("expected the store to raise")


def _sql(sql: str, alias: str = "cnt_01"):
    with connections[alias].cursor() as cursor:
        cursor.execute(sql)


def _raise_sqlstate(code: str):
    return lambda: _sql(f"DO $$ BEGIN RAISE EXCEPTION 'drill' USING ERRCODE = '{code}'; END $$")


def _refused_connection():
    """A real Django connection to a port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = {**connections["cnt_01"].settings_dict, "PORT": port}
    conn = load_backend(cfg["ENGINE"]).DatabaseWrapper(cfg, "refused")
    try:
        conn.ensure_connection()
    finally:
        conn.close()


def _dropped_connection():
    """The server ends this session (pg_terminate_backend, as a restart does) under a live connection."""
    with connections["cnt_01"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    cfg = connections["cnt_01"].settings_dict  # a second session on the same server (shards may be on two)
    killer = load_backend(cfg["ENGINE"]).DatabaseWrapper(cfg, "killer")
    try:
        with killer.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        killer.close()
    try:
        _sql("SELECT 1")
    finally:
        connections["cnt_01"].close()


def _statement_timeout():
    _sql("SET statement_timeout = 50; SELECT pg_sleep(1)")


def _redis_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5).ping()


def _redis_timeout():
    from likes_project.redis_client import cache_redis, role_nodes

    server = role_nodes(cache_redis())[0].connection_pool.connection_kwargs  # a server of the cache role
    client = redis.Redis(host=server["host"], port=server["port"], db=server.get("db", 0), socket_timeout=0.05)
    client.execute_command("DEBUG", "SLEEP", "0.3")


def _invalid_event():
    validate_event({"eventType": "LIKED"})


def _lease_lost():
    grant = leases.lease_acquire(resource="retry-test", holder="a", ttl_s=30)
    leases.lease_release(grant)
    leases.lease_acquire(resource="retry-test", holder="b", ttl_s=30)
    leases.lease_renew(grant, ttl_s=30)


# (failure, how it is produced, expected verdict, expected reason): the table in D38, row by row.
TABLE = [
    ("invalid event", _invalid_event, "poison", "NonRetryable"),
    ("negative bucket", lambda: (_ for _ in ()).throw(NegativeBucket("b")), "poison", "NegativeBucket"),
    ("frozen bucket", lambda: (_ for _ in ()).throw(BucketFrozen("b")), "poison", "BucketFrozen"),
    ("connection refused", _refused_connection, "retry", "db_unavailable"),
    ("connection dropped", _dropped_connection, "retry", "db_unavailable"),
    ("statement timeout", _statement_timeout, "retry", "db_timeout"),
    ("lock timeout", _raise_sqlstate("55P03"), "retry", "db_lock"),
    ("deadlock", _raise_sqlstate("40P01"), "retry", "db_lock"),
    ("serialization failure", _raise_sqlstate("40001"), "retry", "db_serialization"),
    ("redis refused", _redis_refused, "retry", "redis"),
    ("redis timeout", _redis_timeout, "retry", "redis"),
    ("route epoch mismatch", lambda: (_ for _ in ()).throw(RouteEpochMismatch("e")), "retry", "route_epoch"),
    ("fence lost", lambda: (_ for _ in ()).throw(FenceLost("f")), "retry", "fence"),
    ("lease lost", _lease_lost, "retry", "fence"),
    ("other retryable", lambda: (_ for _ in ()).throw(retry.Retryable("r")), "retry", "retryable"),
    ("integrity error (a bug)", lambda: (_ for _ in ()).throw(IntegrityError("i")), "retry", "unclassified"),
    ("anything else (a bug)", lambda: (_ for _ in ()).throw(ValueError("v")), "retry", "unclassified"),
]


@pytest.mark.parametrize(("name", "make", "verdict", "reason"), TABLE, ids=[row[0] for row in TABLE])
def test_the_classification_table_row_by_row(name, make, verdict, reason):
    exc = _raised(make)
    assert retry.classify(exc) == (retry.Verdict(verdict), reason)
    if verdict == "retry":  # the projectors' wrapper keeps the reason of what it wraps
        assert retry.classify(retry.retryable_from(exc)) == (retry.Verdict.RETRY, reason)


@pytest.mark.parametrize(("name", "make", "verdict", "reason"), TABLE, ids=[row[0] for row in TABLE])
def test_the_consumer_keeps_the_head_on_every_retry_row_and_dead_letters_only_poison(
        name, make, verdict, reason, make_user, make_video, monkeypatch):
    user = make_user()
    video = make_video("retry-v", make_user())
    cmd(user, video.video_id, "LIKED")
    publish_all()
    p = next(p for p in streams.all_partitions() if streams.read_after(p, "0-0", 1))
    exc = _raised(make)

    def apply(self, entries, **kw):  # the projector reports the failure for the entry, as it does in life
        return ApplyResult(failed={e.entry_id: exc for e in entries})

    monkeypatch.setattr(CountProjector, "apply", apply)
    report = consume_partition(CountProjector(), partition=p)
    cp = ConsumerCheckpoint.objects.get(consumer="count", partition=p)
    if verdict == "poison":
        assert report.dead_lettered == 1 and cp.last_done_id != "0-0"
        assert DeadLetter.objects.get().error_class == exc.__class__.__name__
        return
    assert (report.dead_lettered, report.held_back, cp.last_done_id) == (0, 1, "0-0")
    assert (cp.blocked_reason, cp.blocked_attempts) == (reason, 1)
    assert cp.retry_at > timezone.now() and not DeadLetter.objects.exists()


def test_a_head_alerts_after_the_threshold_and_keeps_retrying(make_user, make_video, monkeypatch, settings, caplog):
    settings.LIKES_RETRY_ALERT_AFTER = 3
    user = make_user()
    video = make_video("alert-v", make_user())
    cmd(user, video.video_id, "LIKED")
    publish_all()
    p = next(p for p in streams.all_partitions() if streams.read_after(p, "0-0", 1))
    real = projection._apply_group
    monkeypatch.setattr(projection, "_apply_group", lambda *a, **k: (_ for _ in ()).throw(RouteEpochMismatch("e")))
    with caplog.at_level(logging.ERROR, logger="likes_project.eventlog.consumer"):
        for _ in range(5):
            consume_partition(CountProjector(), partition=p, ignore_backoff=True)
    alerts = [r for r in caplog.records if r.getMessage().startswith("ALERT count[")]
    assert len(alerts) == 1 and "3 attempts" in alerts[0].getMessage()  # once at the threshold, not every try
    monkeypatch.setattr(projection, "_apply_group", real)
    assert consume_partition(CountProjector(), partition=p, ignore_backoff=True).applied == 1
    assert bucket_sum(video.video_id) == 1 and not DeadLetter.objects.exists()


def test_backoff_doubles_with_jitter_up_to_its_cap(settings):
    settings.LIKES_RETRY_BASE_S, settings.LIKES_RETRY_MAX_BACKOFF_S = 0.5, 30.0
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (7, 30.0), (50, 30.0)]:
        waits = [retry.backoff_s(attempt) for _ in range(40)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits) and len(set(waits)) > 1


def test_a_blocked_partition_holds_only_itself(make_user, make_video, monkeypatch):
    """One stream partition stuck on its head: the other partitions of the same consumer and the other
    consumers of the same partition keep flowing."""
    author = make_user()
    users = [make_user() for _ in range(12)]
    video = make_video("flow-v", author)
    for u in users:
        cmd(u, video.video_id, "LIKED")
    publish_all()
    busy = [p for p in streams.all_partitions() if streams.read_after(p, "0-0", 1)]
    stuck, others = busy[0], busy[1:]
    assert others, "the likes spread over several stream partitions"
    real_apply = CountProjector.apply

    def apply(self, entries, *, consumer, partition, token):
        if partition == stuck:
            raise retry.retryable_from(_raised(_refused_connection))
        return real_apply(self, entries, consumer=consumer, partition=partition, token=token)

    monkeypatch.setattr(CountProjector, "apply", apply)
    assert consume_partition(CountProjector(), partition=stuck).status == "retrying"
    moved = sum(consume_partition(CountProjector(), partition=p).applied for p in others)
    assert moved == sum(len(streams.read_after(p, "0-0", 100)) for p in others)
    assert consume_partition(ReverseIndexProjector(), partition=stuck).applied == len(
        streams.read_after(stuck, "0-0", 100))
    cp = ConsumerCheckpoint.objects.get(consumer="count", partition=stuck)
    assert (cp.last_done_id, cp.blocked_reason) == ("0-0", "db_unavailable")
    monkeypatch.setattr(CountProjector, "apply", real_apply)
    consume_partition(CountProjector(), partition=stuck, ignore_backoff=True)
    assert bucket_sum(video.video_id) == len(users) and not DeadLetter.objects.exists()
