"""The consumers' beat sweepers start a pass only where one has something to do (D139): the log holds an entry
past the consumer's checkpoint, or the checkpoint records a blocked head. Before, every sweeper started a pass on
every partition every second, and an idle worker spent a third of a core on passes that read nothing. Real streams
(the Cluster on `scaled`, where the pipelined read spans nodes) and real checkpoint rows; only the broker send is
recorded instead of made, since what is checked is which passes a sweep asks for."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from likes_project.celery import app
from likes_project.eventlog import checkpoints, consumer, streams
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.redis_client import stream_redis

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases=["default"])]
CONSUMER = "count"
SWEEP = "counting.project_all"
GROUP = ("count", "relcache", "reverse")  # count's pass group (D143): its sweeper sweeps for the three


def _caught_up() -> dict[int, str]:
    """Every partition's checkpoint at the end of its stream as it is now, for each consumer of the group: nothing
    waits anywhere."""
    written = streams.last_generated_ids(streams.all_partitions())
    for partition, last in written.items():
        for name in GROUP:
            ConsumerCheckpoint.objects.update_or_create(consumer=name, partition=partition,
                                                        defaults={"last_done_id": last, "blocked_attempts": 0})
    return written


def _write(partition: int) -> str:
    entry_id = stream_redis().xadd(streams.stream_key(partition), {"test": "sweep"})
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


@pytest.fixture
def sent(monkeypatch):
    calls: list[tuple] = []
    monkeypatch.setattr(consumer, "send_unless_pending", lambda name, args: calls.append((name, tuple(args))))
    return calls


def test_a_sweep_starts_passes_only_where_the_log_holds_something_past_the_checkpoint(sent):
    first, second, third, *_ = streams.all_partitions()
    _caught_up()
    app.tasks[SWEEP].run()
    assert sent == []  # idle: no pass anywhere (the counter-example: the old sweeper asked for one per partition)

    written = _write(first)
    assert checkpoints.partitions_with_work(CONSUMER) == [first]
    app.tasks[SWEEP].run()
    assert sent == [("counting.project_partition", (first,))]

    ConsumerCheckpoint.objects.filter(consumer=CONSUMER, partition=first).update(last_done_id=written)
    ConsumerCheckpoint.objects.filter(consumer=CONSUMER, partition=second).update(blocked_attempts=2)
    ConsumerCheckpoint.objects.filter(consumer=CONSUMER, partition=third).delete()
    _write(third)
    # A blocked head is retried (or cleared) by a pass even when nothing new was written; a partition the
    # consumer never read is read as soon as its stream holds anything.
    assert checkpoints.partitions_with_work(CONSUMER) == sorted([second, third])


def test_a_sweep_that_cannot_read_the_log_starts_a_pass_everywhere(sent, monkeypatch):
    _caught_up()

    def refused(partitions):
        raise RedisConnectionError("refused")

    monkeypatch.setattr(streams, "last_generated_ids", refused)
    app.tasks[SWEEP].run()
    assert sent == [("counting.project_partition", (p,)) for p in streams.all_partitions()]


def test_the_leaders_sweep_covers_its_group_and_a_members_own_sweep_sends_nothing(sent, settings):
    """D143: a partition where only the reverse index has work gets the group's task from count's sweeper; the
    reverse index's sweeper, a member's, sends nothing. With no groups, each sweeps for itself again."""
    first, *_ = streams.all_partitions()
    _caught_up()
    _write(first)
    ConsumerCheckpoint.objects.filter(partition=first).exclude(consumer="reverse").update(
        last_done_id=streams.last_generated_id(first))
    app.tasks["counting.project_reverse_all"].run()
    assert sent == []
    app.tasks[SWEEP].run()
    assert sent == [("counting.project_partition", (first,))]
    sent.clear()
    settings.CONSUMER_PASS_GROUPS = ()
    app.tasks[SWEEP].run()
    app.tasks["counting.project_reverse_all"].run()
    assert sent == [("counting.project_reverse", (first,))]
