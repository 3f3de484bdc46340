"""Pass groups (issue 34 §2, D143): one run of a group leader's pass task makes a pass of each consumer of its group
over the partition, reading the log once between them (`streams.SharedRead`), each with its own lease, checkpoint,
pause switch and backoff. The publisher and the sweepers nudge the group's task, not each member's. Real streams
and checkpoints; only `read_after` is wrapped, to count the log's reads."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from likes_project import leases
from likes_project.audit.services import system_actor
from likes_project.celery import app
from likes_project.eventlog import consumer, registry, streams
from likes_project.eventlog.apps import pass_groups_check
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.redis_client import stream_redis
from likes_project.switches import switch_set
from tests.counting.test_projection import like_published

LEADER, GROUP = "counting.project_partition", ("count", "relcache", "reverse")
# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
IN_THE_DATABASES = pytest.mark.django_db(databases="__all__", transaction=True)


def _checkpoint(name: str, partition: int) -> str:
    row = ConsumerCheckpoint.objects.filter(consumer=name, partition=partition).first()
    return row.last_done_id if row else "0-0"


@pytest.fixture
def reads(monkeypatch):
    """How many times the log was read (the real read, counted)."""
    calls: list[tuple] = []
    real = streams.read_after

    def counted(partition, after_id, count):
        calls.append((partition, after_id, count))
        return real(partition, after_id, count)

    monkeypatch.setattr(streams, "read_after", counted)
    return calls


@pytest.mark.topology
@pytest.mark.django_db(databases=["default"])
def test_a_shared_read_answers_as_the_log_does_and_reads_it_only_when_its_window_cannot():
    """Every answer is the log's own (the Cluster's streams on `scaled`). A read inside the window is not a
    round trip; one before it, or past the end of a window that came back full, is."""
    p = streams.all_partitions()[0]
    key = streams.stream_key(p)
    client = stream_redis()
    client.delete(key)
    ids = [i.decode() if isinstance(i, bytes) else i for i in (client.xadd(key, {"n": str(n)}) for n in range(30))]
    read = streams.SharedRead(p, prefetch=10)
    for after, count, reads in (("0-0", 5, 1), (ids[4], 5, 1), (ids[2], 3, 1), (ids[9], 5, 2), ("0-0", 2, 3),
                                (ids[1], 8, 3), (ids[25], 10, 4), (ids[27], 10, 4), (ids[29], 10, 4)):
        assert [e.entry_id for e in read(p, after, count)] == [e.entry_id for e in streams.read_after(p, after, count)]
        assert read.reads == reads, (after, count)
    # The window [26, 29] came back short: the log held nothing more then. An entry appended since is another
    # pass's (its nudge queues it); a read past the window's end is not answered from the window.
    client.xadd(key, {"n": "30"})
    assert [e.entry_id for e in read(p, ids[27], 10)] == ids[28:30]
    assert read.reads == 4
    client.delete(key)


@pytest.mark.topology_independent
@IN_THE_DATABASES
def test_the_leaders_task_runs_its_group_from_one_read_and_the_others_wait_for_their_own(make_user, make_video,
                                                                                         reads, settings):
    """Count, relation cache and reverse index move to the entry in one run of the count task and one read of the
    log. The notify and risk consumers are another group (DEG-2): untouched. The counter-example: with no groups
    the same task moves count alone."""
    video = make_video("pg-v", make_user())
    p = like_published(make_user(), video.video_id)
    last = streams.last_generated_id(p)
    reads.clear()
    assert app.tasks[LEADER].run(p) == {"status": "ok", "applied": 1, "dead": 0,
                                        "group": {"relcache": "ok", "reverse": "ok"}}
    assert [_checkpoint(name, p) for name in GROUP] == [last] * 3
    assert [r[0] for r in reads] == [p]
    assert _checkpoint("notify", p) == _checkpoint("risk", p) == "0-0"

    p2 = like_published(make_user(), make_video("pg-w", make_user()).video_id)
    settings.CONSUMER_PASS_GROUPS = ()
    assert app.tasks[LEADER].run(p2) == {"status": "ok", "applied": 1, "dead": 0}
    assert _checkpoint("count", p2) == streams.last_generated_id(p2) != _checkpoint("reverse", p2)


@pytest.mark.topology_independent
@IN_THE_DATABASES
def test_a_member_busy_or_paused_holds_up_none_of_the_others(make_user, make_video):
    video = make_video("pg-b", make_user())
    p = like_published(make_user(), video.video_id)
    other = leases.lease_acquire(resource=consumer.consumer_resource("relcache", p), holder="elsewhere", ttl_s=60)
    switch_set(kind="consumer", key=f"reverse:{p}", paused=True, reason="test", actor=system_actor("test"))
    try:
        assert app.tasks[LEADER].run(p)["group"] == {"relcache": "busy", "reverse": "paused"}
    finally:
        switch_set(kind="consumer", key=f"reverse:{p}", paused=False, reason="test", actor=system_actor("test"))
        leases.lease_release(other)
    assert _checkpoint("count", p) == streams.last_generated_id(p)
    assert _checkpoint("relcache", p) == _checkpoint("reverse", p) == "0-0"


@pytest.mark.topology_independent
@pytest.mark.django_db(databases=["default"])
def test_a_blocked_head_is_cleared_only_when_the_log_itself_has_none():
    """A shared window may predate the head another pass found blocked: the window says "nothing more" but the log
    holds it. The record stays (its attempts and backoff go on); the counter-example is the window's word."""
    p = streams.all_partitions()[0]
    head = streams.last_generated_id(p)
    read = streams.SharedRead(p, prefetch=10)
    assert read(p, head, 10) == []  # the window: nothing past `head`, then
    blocked = stream_redis().xadd(streams.stream_key(p), {"test": "blocked head"})  # appended since
    blocked = blocked.decode() if isinstance(blocked, bytes) else blocked
    ConsumerCheckpoint.objects.update_or_create(consumer="count", partition=p, defaults={
        "last_done_id": head, "blocked_entry_id": blocked, "blocked_attempts": 3,
        "retry_at": timezone.now() - dt.timedelta(seconds=1)})
    report = consumer.consume_partition(consumer.projector_get("count"), partition=p, read=read)
    assert report.status == "ok" and report.dispatched == 0
    row = ConsumerCheckpoint.objects.get(consumer="count", partition=p)
    assert (row.blocked_entry_id, row.blocked_attempts) == (blocked, 3)


@pytest.mark.topology_independent
def test_the_publisher_and_the_sweepers_nudge_the_groups_task(settings):
    assert {name: registry.pass_task(name) for name in registry.CONSUMERS} == {
        "count": LEADER, "relcache": LEADER, "reverse": LEADER,
        "notify": "notifications.project_partition", "risk": "notifications.project_partition"}
    assert registry.pass_members("count") == GROUP and registry.pass_members("reverse") == ("reverse",)
    assert registry.pass_tasks() == [LEADER, "notifications.project_partition"]  # what a publish nudges
    settings.CONSUMER_PASS_GROUPS = ()
    assert registry.pass_task("reverse") == "counting.project_reverse" and registry.pass_members("count") == ("count",)
    settings.CONSUMER_PASS_GROUPS = (("risk", "count", "nobody"), ("count",))
    assert registry.pass_task("count") == "riskscore.project_partition"
    assert [m.msg for m in pass_groups_check()] == ["CONSUMER_PASS_GROUPS: 'nobody' is not a consumer (the consumers: "
                                                    "count, notify, relcache, reverse, risk).",
                                                    "CONSUMER_PASS_GROUPS: 'count' is in two groups."]
    settings.CONSUMER_PASS_GROUPS = (("count", "relcache", "reverse"), ("notify", "risk"))
    assert pass_groups_check() == []
