"""The nudge's debounce (D86): one send at the start of a burst and one at its end, never one per nudge;
its counter-example, `debounce_s=0`, sends every nudge. The sender thread is real; only the broker call
is replaced by a recorder, since what is checked is how many sends the process makes."""

from __future__ import annotations

import threading
import time

import pytest

from likes_project import nudge as nudge_module

pytestmark = pytest.mark.topology


@pytest.fixture
def sent(settings, monkeypatch):
    settings.LIKES_NUDGE_ENABLED = True
    calls: list[tuple[str, tuple]] = []
    cond = threading.Condition()

    def record(task_name, args):
        with cond:
            calls.append((task_name, tuple(args)))
            cond.notify_all()

    monkeypatch.setattr(nudge_module, "_send", record)
    monkeypatch.setattr(nudge_module, "_last", {})
    monkeypatch.setattr(nudge_module, "_trailing", {})

    def wait_for(n: int, timeout_s: float = 10.0) -> list:
        deadline = time.monotonic() + timeout_s
        with cond:
            while len(calls) < n and time.monotonic() < deadline:
                cond.wait(0.05)
        return list(calls)

    return wait_for


def test_a_burst_costs_one_send_now_and_one_at_the_end_of_the_window(sent):
    assert nudge_module.nudge("t.publish", "rel_00", debounce_s=0.3) is True  # leading edge: at once
    folded = [nudge_module.nudge("t.publish", "rel_00", debounce_s=0.3) for _ in range(20)]
    assert folded == [False] * 20  # folded into one trailing send
    assert sent(2) == [("t.publish", ("rel_00",)), ("t.publish", ("rel_00",))]
    assert nudge_module.nudges_flush(2.0)
    assert len(sent(3, timeout_s=0.5)) == 2  # nothing more was held back


def test_each_key_has_its_own_window(sent):
    nudge_module.nudge("t.publish", "rel_00", debounce_s=30)
    nudge_module.nudge("t.publish", "rel_01", debounce_s=30)
    assert sorted(sent(2)) == [("t.publish", ("rel_00",)), ("t.publish", ("rel_01",))]


def test_flush_sends_a_trailing_send_still_held_back(sent):
    nudge_module.nudge("t.publish", "rel_00", debounce_s=30)
    nudge_module.nudge("t.publish", "rel_00", debounce_s=30)  # due in 30 s
    assert nudge_module.nudges_flush(5.0)
    assert sent(2) == [("t.publish", ("rel_00",))] * 2


def test_counter_example_without_a_window_every_nudge_is_sent(sent):
    for _ in range(5):
        assert nudge_module.nudge("t.repair", 7, debounce_s=0.0) is True
    assert len(sent(5)) == 5


# --- coalescing across processes (D89): the real broker and Redis --------------------------------------

PUBLISH_QUEUE = "publish"  # relations.publish_* (settings.CELERY_TASK_ROUTES)
TASK = "relations.publish_outbox"


@pytest.fixture
def broker(settings):
    """Nudges on against the real broker, every nudge sent at once (no in-process window), the publish
    queue and the nudge flags empty on the way in and out; yields the queue's length."""
    from likes_project.celery import app

    settings.LIKES_NUDGE_ENABLED = True
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.queue_purge(PUBLISH_QUEUE)
        nudge_module.pending_forget_all()

        def queued() -> int:
            assert nudge_module.nudges_flush(timeout_s=10)
            return int(channel.client.llen(PUBLISH_QUEUE))

        try:
            yield queued
        finally:
            settings.LIKES_NUDGE_ENABLED = False
            channel.queue_purge(PUBLISH_QUEUE)
            nudge_module.pending_forget_all()


class _Task:
    name = TASK


def test_one_nudged_copy_waits_in_the_broker_until_it_starts(broker):
    for _ in range(5):
        nudge_module.nudge(TASK, "rel_00", debounce_s=0)
    assert broker() == 1  # four folded into the copy that has not started
    nudge_module.nudge(TASK, "rel_01", debounce_s=0)
    assert broker() == 2  # another (task, args) is another flag
    nudge_module._on_task_prerun(task=_Task(), args=["rel_00"])  # the worker starts the first copy
    nudge_module.nudge(TASK, "rel_00", debounce_s=0)
    assert broker() == 3  # a change after that start queues the next run: no wake-up lost


def test_counter_example_without_the_flag_every_nudge_waits_in_the_broker(settings, broker):
    settings.NUDGE_PENDING_TTL_S = 0
    for _ in range(5):
        nudge_module.nudge(TASK, "rel_00", debounce_s=0)
    assert broker() == 5


def test_the_flag_of_a_lost_task_expires(settings, broker):
    settings.NUDGE_PENDING_TTL_S = 0.3
    nudge_module.nudge(TASK, "rel_00", debounce_s=0)
    assert broker() == 1
    nudge_module.nudge(TASK, "rel_00", debounce_s=0)
    assert broker() == 1
    deadline = time.monotonic() + 5
    while nudge_module.stream_redis().exists(nudge_module.pending_key(TASK, ("rel_00",))):
        assert time.monotonic() < deadline, "the flag never expired"
        time.sleep(0.05)  # wait for the flag's own expiry (what is tested)
    nudge_module.nudge(TASK, "rel_00", debounce_s=0)
    assert broker() == 2


def test_a_flag_the_cluster_cannot_set_sends_the_nudge(broker, monkeypatch):
    """A Redis Cluster node restarting answers with slot errors that are not RedisErrors (`SlotNotCoveredError`):
    Redis could not say whether a copy waits, so the nudge is sent (a send too many is harmless), rather than the
    error ending a sweep before its other partitions."""
    from redis.exceptions import SlotNotCoveredError

    class Down:
        def set(self, *args, **kwargs):
            raise SlotNotCoveredError("slot 1234 is not covered by the cluster")

    with monkeypatch.context() as patched:
        patched.setattr(nudge_module, "stream_redis", lambda: Down())
        assert nudge_module.send_unless_pending(TASK, ("rel_00",)) is True
    assert broker() == 1
