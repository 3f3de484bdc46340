"""Reads of display counts: in-process L1 -> the Redis view of the ACTIVE count-cache generation ->
the durable display snapshot. Never COUNT(*), never a write.

`display_counts_get` costs at most one Redis round trip (the L1 misses) and one query on `default`
(the Redis misses), whatever the number of ids.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import RedisError

from counting import cache
from counting.models import CountCacheGeneration, CountCacheStatus, VideoDisplayCount
from likes_project import metrics
from likes_project.errors import DegradedOverloaded
from likes_project.l1cache import L1Cache

logger = logging.getLogger(__name__)

NO_CACHE = 0  # the L1 namespace of values read while no generation is ACTIVE


@dataclass(frozen=True)
class DisplayCount:
    video_id: str
    display_count: int
    snapshot_at: str | None  # ISO-8601 UTC "Z", None before the first snapshot
    source: str  # redis | snapshot | none
    snapshot_id: int | None = None


# --- count-cache generations (in-process, re-read every few seconds) ----------------------------


@dataclass(frozen=True)
class CacheGenerations:
    active: int | None
    rebuilding: int | None


_gen_lock = threading.Lock()
_gen_cached: tuple[float, CacheGenerations] | None = None


def count_cache_generations_get(*, fresh: bool = False) -> CacheGenerations:
    """The ACTIVE and REBUILDING count-cache generations. Cached per process for
    COUNT_CACHE_GENERATION_REFRESH_S; `fresh=True` reads the table (writers that must not act on a
    stale answer, e.g. the display snapshot job deciding which views to write)."""
    global _gen_cached
    refresh = getattr(settings, "COUNT_CACHE_GENERATION_REFRESH_S", 2.0)
    now = time.monotonic()
    if not fresh:
        with _gen_lock:
            if _gen_cached is not None and now - _gen_cached[0] < refresh:
                return _gen_cached[1]
    rows = dict(CountCacheGeneration.objects.filter(
        status__in=[CountCacheStatus.ACTIVE, CountCacheStatus.REBUILDING]).values_list("status", "generation"))
    gens = CacheGenerations(rows.get(CountCacheStatus.ACTIVE), rows.get(CountCacheStatus.REBUILDING))
    with _gen_lock:
        _gen_cached = (now, gens)
    return gens


def reset_generation_cache() -> None:
    global _gen_cached
    with _gen_lock:
        _gen_cached = None


def count_cache_rebuild_running() -> bool:
    """True while a count-cache rebuild holds a pinned manifest (route cutover must wait, CCACHE-3 step 2)."""
    return CountCacheGeneration.objects.filter(status=CountCacheStatus.REBUILDING).exists()


# --- L1 and the database fallback limiter --------------------------------------------------------


_l1_lock = threading.Lock()
_l1: L1Cache | None = None


def display_l1() -> L1Cache:
    """The process's L1 of display counts, keyed (count-cache generation, video id): a generation
    switch starts from an empty namespace."""
    global _l1
    with _l1_lock:
        if _l1 is None:
            _l1 = L1Cache("count_display", ttl_s=getattr(settings, "COUNT_L1_TTL_S", 1.0),
                          max_entries=getattr(settings, "COUNT_L1_MAX_ENTRIES", 10_000),
                          stale_s=getattr(settings, "COUNT_L1_STALE_S", 5.0))
        return _l1


_fallback_lock = threading.Lock()
_fallback_sem: threading.BoundedSemaphore | None = None


@contextlib.contextmanager
def _snapshot_read_slot():
    """Bound the durable snapshot reads this process runs at once: with Redis down every count read
    lands on `default`, and a burst must queue briefly, then fail with 503, not drain the pool."""
    global _fallback_sem
    with _fallback_lock:
        if _fallback_sem is None:
            _fallback_sem = threading.BoundedSemaphore(getattr(settings, "DB_FALLBACK_CONCURRENCY", 32))
        sem = _fallback_sem
    if not sem.acquire(timeout=getattr(settings, "COUNT_DB_FALLBACK_WAIT_S", 0.5)):
        metrics.inc("likes_db_fallback_rejected_total", store="count_snapshot")
        raise DegradedOverloaded(headers={"Retry-After": "1"})
    try:
        yield
    finally:
        sem.release()


# --- reads -------------------------------------------------------------------------------------


def _iso(value) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _load(generation: int | None, video_ids: list[str]) -> dict[str, DisplayCount]:
    """Redis view of `generation` (one round trip), then the durable snapshot (one query)."""
    out: dict[str, DisplayCount] = {}
    if generation is None:
        metrics.inc("likes_count_cache_fallback_total", len(video_ids), reason="no_active_generation")
    else:
        try:
            hits = cache.views_read(generation, video_ids)
        except RedisError as exc:
            metrics.inc("likes_cache_errors_total", cache="count_view")
            metrics.inc("likes_count_cache_fallback_total", len(video_ids), reason="redis_error")
            logger.warning("count view read failed: %s (the durable snapshot answers)", exc.__class__.__name__)
            hits = {}
        for video_id, (display, snapshot_id, generated_at) in hits.items():
            out[video_id] = DisplayCount(video_id, display, generated_at, "redis", snapshot_id)
        if hits:
            metrics.inc("likes_cache_hits_total", len(hits), cache="count_view")
    missing = [v for v in video_ids if v not in out]
    if missing:
        if generation is not None:
            metrics.inc("likes_cache_misses_total", len(missing), cache="count_view")
        with _snapshot_read_slot():
            rows = VideoDisplayCount.objects.filter(video_id__in=missing).values_list(
                "video_id", "display_count", "generated_at", "snapshot_id")
            for video_id, display, generated_at, snapshot_id in rows:
                out[video_id] = DisplayCount(video_id, display, _iso(generated_at), "snapshot", snapshot_id)
    for video_id in missing:
        if video_id not in out:
            out[video_id] = DisplayCount(video_id, 0, None, "none")
    return out


def display_counts_get(*, video_ids: list[str]) -> dict[str, DisplayCount]:
    """Display counts of `video_ids` (deduplicated; every id gets an entry, 0/None before its first
    snapshot): L1, then the view of the ACTIVE count-cache generation in one Redis round trip, then
    the durable snapshot in one query. Without an ACTIVE generation (only a REBUILDING one) or with
    Redis down the durable snapshot answers (counted in `likes_count_cache_fallback_total`)."""
    wanted = list(dict.fromkeys(video_ids))
    if not wanted:
        return {}
    generation = count_cache_generations_get().active
    namespace = generation if generation is not None else NO_CACHE

    def loader(keys: list[tuple[int, str]]) -> dict[tuple[int, str], DisplayCount]:
        loaded = _load(generation, [v for _, v in keys])
        return {(namespace, v): loaded[v] for _, v in keys}

    got = display_l1().get_many([(namespace, v) for v in wanted], loader)
    return {v: got[(namespace, v)] for v in wanted}


def display_count_get(*, video_id: str) -> DisplayCount:
    return display_counts_get(video_ids=[video_id])[video_id]
