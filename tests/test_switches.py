"""The runtime switches' core (issue 14 §3, likes_project/switches.py): every process reads them through a
cache of at most SWITCH_CACHE_S, so a change another process made is seen within SWITCH_CACHE_S (and not
before: the counter-example that shows the cache is real), the process that made a change sees it at once,
and `switches_set` lists every switch that is set, of every kind, for the console's front page. The clock
is the cache's own, moved by hand: nothing here sleeps."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from likes_project import switches
from likes_project.audit.services import system_actor
from likes_project.switches import switch_is_set, switch_kinds, switch_set, switches_set
from relations.models import LikesReadOnlySwitch

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

ACTOR = system_actor("test-operator")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(switches._paused, "clock", clock)
    switches.switch_cache_reset()
    return clock


def set_from_another_process(paused: bool) -> None:
    """What another process's `switch_set` leaves in `default`: the row, committed on another connection
    (this process's cache is not told)."""
    def write():
        try:
            LikesReadOnlySwitch.objects.update_or_create(pk="global",
                                                         defaults={"paused": paused, "reason": "elsewhere"})
        finally:
            connections.close_all()

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()


def test_a_change_made_by_another_process_is_seen_within_switch_cache_s(clock, settings):
    settings.SWITCH_CACHE_S = 5.0
    assert switch_is_set(LikesReadOnlySwitch) is False  # read now, kept for 5 s
    set_from_another_process(True)
    assert LikesReadOnlySwitch.objects.get().paused is True
    clock.now += 4.9
    assert switch_is_set(LikesReadOnlySwitch) is False  # the cache still answers: it is one
    clock.now += 0.1
    assert switch_is_set(LikesReadOnlySwitch) is True  # within SWITCH_CACHE_S
    set_from_another_process(False)
    clock.now += 5.0
    assert switch_is_set(LikesReadOnlySwitch) is False


def test_the_process_that_sets_a_switch_sees_it_at_once(clock, settings):
    settings.SWITCH_CACHE_S = 5.0
    assert switch_is_set(LikesReadOnlySwitch) is False
    switch_set(kind="read-only", key=None, paused=True, reason="drill", actor=ACTOR)
    assert switch_is_set(LikesReadOnlySwitch) is True  # the clock has not moved
    switch_set(kind="read-only", key=None, paused=False, reason="drill over", actor=ACTOR)
    assert switch_is_set(LikesReadOnlySwitch) is False


def test_with_switch_cache_s_zero_every_check_reads_default(clock, settings):
    settings.SWITCH_CACHE_S = 0
    assert switch_is_set(LikesReadOnlySwitch) is False
    set_from_another_process(True)
    assert switch_is_set(LikesReadOnlySwitch) is True


def test_switches_set_lists_every_kind_that_is_set_and_nothing_cleared(make_user):
    assert switch_kinds() == ["auto-repair", "consumer", "publisher", "read-only", "refresh"]
    assert switches_set() == []
    for kind, key in [("read-only", None), ("publisher", "rel_00"), ("publisher", "rel_01"), ("consumer", "count"),
                      ("consumer", "reverse:1"), ("auto-repair", None), ("refresh", "vid-hot")]:
        switch_set(kind=kind, key=key, paused=True, reason=f"why {kind}", actor=ACTOR)
    switch_set(kind="publisher", key="rel_01", paused=False, reason="", actor=ACTOR)

    listed = switches_set()
    assert [(s.kind, s.key) for s in listed] == [
        ("auto-repair", "global"), ("consumer", "count"), ("consumer", "reverse:1"), ("publisher", "rel_00"),
        ("read-only", "global"), ("refresh", "vid-hot")]
    assert all(s.paused and s.reason == f"why {s.kind}" and s.updated_by == "test-operator" and s.updated_at
               for s in listed)
    assert set(listed[0].as_json()) == {"kind", "key", "paused", "reason", "updatedBy", "updatedAt"}
    assert ("publisher", "rel_01") in [(s.kind, s.key) for s in switches_set(include_cleared=True)]
