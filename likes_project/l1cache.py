"""Small in-process (per worker) caches: the L1 in front of Redis (consistency-techniques §9), and
`RefreshedValue`, one value re-read every few seconds (generation and route tables).

The L1:

For non-personal, read-hot, staleness-tolerant values only (display counts, snapshots, manifest
ids). Never for a user's own state: a worker process cannot see another worker's write, so an L1
copy of "my like" would break read-your-writes (§9 L1).

- Bounded: at most `max_entries`, least recently used evicted first.
- Short TTL with logical expiry: a value is fresh for `ttl_s`; after that it is kept up to `stale_s`
  more and, while one caller refreshes it, everybody else is served that stale value at once.
- Single-flight: per key, exactly one caller runs the loader (a refresh of an expired key or the
  first load of a missing one). Callers that find a missing key being loaded wait for it (bounded by
  `wait_s`, after which they load it themselves rather than hang).
- Thread-safe; the loader runs outside the lock. The clock is injectable so tests need no sleeps.
- Counted in `likes_project.metrics`: `likes_l1_{hits,stale_served,misses,refreshes,waits,evictions}_total`
  with the label `cache=<name>`, and `likes_l1_load_seconds`.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from likes_project import metrics

_registry: weakref.WeakSet[L1Cache] = weakref.WeakSet()
_registry_lock = threading.Lock()


@dataclass
class _Entry:
    value: Any
    fresh_until: float
    keep_until: float


class L1Cache:
    def __init__(self, name: str, *, ttl_s: float, max_entries: int, stale_s: float | None = None,
                 wait_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 on_wait: Callable[[Hashable], None] | None = None):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.name = name
        self.ttl_s = float(ttl_s)
        self.stale_s = float(stale_s if stale_s is not None else max(5.0, 5 * self.ttl_s))
        self.max_entries = int(max_entries)
        self.wait_s = float(wait_s)
        self.clock = clock
        self.on_wait = on_wait  # test hook: called when a caller starts waiting for another's load
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._flights: dict[Hashable, threading.Event] = {}
        with _registry_lock:
            _registry.add(self)

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def invalidate(self, keys: Iterable[Hashable]) -> None:
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)

    def fresh(self, keys: Iterable[Hashable]) -> set:
        """Which of `keys` a get would answer now without loading (a caller that prefetches the
        others in a round trip it makes anyway). Counts nothing and claims nothing."""
        if not self.enabled:
            return set()
        now = self.clock()
        with self._lock:
            return {k for k in keys if (e := self._entries.get(k)) is not None and now < e.fresh_until}

    def get(self, key: Hashable, loader: Callable[[], Any]) -> Any:
        """One key; `loader()` returns its value."""
        return self.get_many([key], lambda keys: {key: loader()})[key]

    def get_many(self, keys: Iterable[Hashable], loader: Callable[[list], dict]) -> dict:
        """Values for `keys`. `loader(keys)` is called at most twice (the keys this caller owns, then
        any whose owner did not finish within `wait_s`) and returns {key: value} for the keys it
        could resolve; keys it leaves out are not cached and are absent from the answer. An exception
        of the loader releases this caller's claims and propagates."""
        wanted = list(dict.fromkeys(keys))
        if not self.enabled:
            return loader(wanted) if wanted else {}
        out: dict = {}
        mine: list = []
        waiting: list[tuple[Hashable, threading.Event]] = []
        hits = stale = misses = refreshes = 0
        now = self.clock()
        with self._lock:
            for key in wanted:
                entry = self._entries.get(key)
                if entry is not None and now >= entry.keep_until:
                    del self._entries[key]
                    entry = None
                if entry is not None and now < entry.fresh_until:
                    self._entries.move_to_end(key)
                    out[key] = entry.value
                    hits += 1
                    continue
                flight = self._flights.get(key)
                if flight is None:
                    self._flights[key] = threading.Event()
                    mine.append(key)
                    if entry is None:
                        misses += 1
                    else:
                        refreshes += 1
                elif entry is not None:
                    out[key] = entry.value  # logical expiry: someone else is refreshing it
                    stale += 1
                else:
                    waiting.append((key, flight))
        self._count(hits=hits, stale_served=stale, misses=misses, refreshes=refreshes, waits=len(waiting))
        if mine:
            out.update(self._load(mine, loader, owned=True))
        leftover = []
        deadline = time.monotonic() + self.wait_s
        for key, flight in waiting:
            if self.on_wait is not None:
                self.on_wait(key)
            flight.wait(max(0.0, deadline - time.monotonic()))
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None:
                    out[key] = entry.value
                else:
                    leftover.append(key)
        if leftover:
            out.update(self._load(leftover, loader, owned=False))
        return out

    def _load(self, keys: list, loader: Callable[[list], dict], *, owned: bool) -> dict:
        started = time.monotonic()
        try:
            loaded = loader(keys)
        except BaseException:
            if owned:
                self._release(keys)
            raise
        metrics.observe("likes_l1_load_seconds", time.monotonic() - started, cache=self.name)
        now = self.clock()
        evicted = 0
        with self._lock:
            for key in keys:
                if key in loaded:
                    self._entries[key] = _Entry(loaded[key], now + self.ttl_s, now + self.ttl_s + self.stale_s)
                    self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                evicted += 1
            if owned:
                for key in keys:
                    self._flights.pop(key).set()
        if evicted:
            metrics.inc("likes_l1_evictions_total", evicted, cache=self.name)
        return {k: loaded[k] for k in keys if k in loaded}

    def _release(self, keys: list) -> None:
        with self._lock:
            for key in keys:
                flight = self._flights.pop(key, None)
                if flight is not None:
                    flight.set()

    def _count(self, **counts: int) -> None:
        for what, n in counts.items():
            if n:
                metrics.inc(f"likes_l1_{what}_total", n, cache=self.name)




class RefreshedValue:
    """One value per process, loaded by `loader()` and kept for `refresh_s` seconds (a callable is
    read on every get, so a setting can change it): the generation or route tables every request
    consults. `get(fresh=True)` reloads now (a writer that must not act on a stale answer); `reset()`
    forgets the value (after this process changed the table). Thread-safe; `clear_all()` resets it."""

    def __init__(self, name: str, loader: Callable[[], Any], *, refresh_s: float | Callable[[], float],
                 clock: Callable[[], float] = time.monotonic):
        self.name = name
        self.loader = loader
        self.refresh_s = refresh_s
        self.clock = clock
        self._lock = threading.Lock()
        self._value: tuple[float, Any] | None = None
        with _registry_lock:
            _refreshed.add(self)

    def get(self, *, fresh: bool = False) -> Any:
        refresh = self.refresh_s() if callable(self.refresh_s) else self.refresh_s
        now = self.clock()
        if not fresh:
            with self._lock:
                if self._value is not None and now - self._value[0] < refresh:
                    return self._value[1]
        value = self.loader()
        with self._lock:
            self._value = (now, value)
        return value

    def reset(self) -> None:
        with self._lock:
            self._value = None

    # cleared with the L1s
    def clear(self) -> None:
        self.reset()


_refreshed: weakref.WeakSet[RefreshedValue] = weakref.WeakSet()


def clear_all() -> None:
    """Empty every L1 and refreshed value of this process (tests; an operator-triggered reset)."""
    with _registry_lock:
        caches = [*_registry, *_refreshed]
    for cache in caches:
        cache.clear()
