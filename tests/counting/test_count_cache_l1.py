"""The in-process L1 of display counts: single-flight refresh of a hot key, one load for concurrent
misses, bounds (LRU), logical TTL and physical drop on an injected clock, and failed loads."""

from __future__ import annotations

import queue
import threading

import pytest

from likes_project import metrics
from likes_project.l1cache import L1Cache

# fresh_process_state is autouse: imported here, every test of this module starts with empty per-process caches.
from tests.counting.helpers import fresh_process_state  # noqa: F401

pytestmark = pytest.mark.topology


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# --- L1 ---------------------------------------------------------------------------------------------


def test_l1_single_flight_one_caller_refreshes_an_expired_hot_key_the_others_get_the_stale_value():
    clock = FakeClock()
    l1 = L1Cache("t-stale", ttl_s=1.0, max_entries=10, stale_s=60.0, clock=clock)
    assert l1.get("hot", lambda: "v1") == "v1"
    clock.t = 1.5  # logically expired, still within the stale window
    calls, entered, release = [], threading.Event(), threading.Event()

    def loader():
        calls.append(threading.get_ident())
        entered.set()
        assert release.wait(10)
        return "v2"

    n = 8
    before = metrics.value("likes_l1_stale_served_total", cache="t-stale")
    results: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=lambda: results.put(l1.get("hot", loader))) for _ in range(n)]
    for t in threads:
        t.start()
    assert entered.wait(10)
    # everyone but the refresher returns while the refresh is still running
    assert [results.get(timeout=10) for _ in range(n - 1)] == ["v1"] * (n - 1)
    release.set()
    assert results.get(timeout=10) == "v2"
    for t in threads:
        t.join(10)
    assert len(calls) == 1
    assert metrics.value("likes_l1_stale_served_total", cache="t-stale") - before == n - 1
    assert l1.get("hot", lambda: pytest.fail("fresh again: no load")) == "v2"


def test_l1_concurrent_misses_of_a_cold_key_make_one_load():
    waited = threading.Semaphore(0)
    l1 = L1Cache("t-cold", ttl_s=1.0, max_entries=10, wait_s=30, clock=FakeClock(),
                 on_wait=lambda key: waited.release())
    calls, entered, release = [], threading.Event(), threading.Event()

    def loader():
        calls.append(1)
        entered.set()
        assert release.wait(10)
        return 42

    n = 6
    results: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=lambda: results.put(l1.get("cold", loader))) for _ in range(n)]
    for t in threads:
        t.start()
    assert entered.wait(10)
    for _ in range(n - 1):
        assert waited.acquire(timeout=10)  # the others wait for the one load instead of loading
    release.set()
    assert sorted(results.get(timeout=10) for _ in range(n)) == [42] * n
    for t in threads:
        t.join(10)
    assert len(calls) == 1


def test_l1_is_bounded_and_evicts_the_least_recently_used():
    l1 = L1Cache("t-lru", ttl_s=100.0, max_entries=3, clock=FakeClock())
    for key in "abc":
        l1.get(key, lambda key=key: key.upper())
    assert l1.get("a", lambda: pytest.fail("a is cached")) == "A"  # a is now the most recent
    l1.get("d", lambda: "D")
    assert len(l1) == 3
    loads = []
    assert l1.get("b", lambda: loads.append("b") or "B2") == "B2"  # b was the least recent: evicted
    assert l1.get("a", lambda: loads.append("a") or "A2") == "A"
    assert loads == ["b"]


def test_l1_ttl_logical_expiry_and_physical_drop_with_an_injected_clock():
    clock = FakeClock()
    l1 = L1Cache("t-ttl", ttl_s=1.0, max_entries=10, stale_s=5.0, clock=clock)
    assert l1.get("k", lambda: 1) == 1
    clock.t = 0.999
    assert l1.get("k", lambda: 2) == 1  # still fresh
    refreshes = metrics.value("likes_l1_refreshes_total", cache="t-ttl")
    clock.t = 1.0
    assert l1.get("k", lambda: 2) == 2  # expired: the only caller refreshes it and gets the new value
    assert metrics.value("likes_l1_refreshes_total", cache="t-ttl") == refreshes + 1
    misses = metrics.value("likes_l1_misses_total", cache="t-ttl")
    clock.t = 1.0 + 1.0 + 5.0  # past the stale window: gone, a plain miss
    assert l1.get("k", lambda: 3) == 3
    assert metrics.value("likes_l1_misses_total", cache="t-ttl") == misses + 1


def test_l1_a_failed_load_releases_the_key_and_a_zero_ttl_disables_the_cache():
    l1 = L1Cache("t-fail", ttl_s=1.0, max_entries=10, clock=FakeClock())
    with pytest.raises(RuntimeError):
        l1.get("x", lambda: (_ for _ in ()).throw(RuntimeError("db down")))
    assert l1.get("x", lambda: 5) == 5
    off = L1Cache("t-off", ttl_s=0, max_entries=10)
    loads = []
    for _ in range(3):
        off.get("x", lambda: loads.append(1) or 1)
    assert len(loads) == 3 and len(off) == 0
