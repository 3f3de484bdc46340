"""The nudge's debounce (D86): one send at the start of a burst and one at its end, never one per nudge;
its counter-example, `debounce_s=0`, sends every nudge. The sender thread is real; only the broker call
is replaced by a recorder, since what is checked is how many sends the process makes."""

from __future__ import annotations

import threading
import time

import pytest

from likes_project import nudge as nudge_module


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
