"""Reads of display counts: in-process L1 -> the Redis view of the ACTIVE count-cache generation ->
the durable display snapshot. Never COUNT(*), never a write.

`display_counts_get` costs at most one Redis round trip (the L1 misses) and one query on `default`
(the Redis misses), whatever the number of ids.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError

from counting import cache, routing
from counting.models import CountCacheGeneration, DirtyVideo, VideoDisplayCount, VideoLikeCountVbucket
from counting.models.migration import TERMINAL, BucketMigration
from likes_project import metrics
from likes_project.fallback import FallbackLimiter
from likes_project.generations import BUILDING, LIVE, GenerationStatus
from likes_project.l1cache import L1Cache, RefreshedValue
from likes_project.redis_client import Flow, run_flows
from relations import selectors as relation_selectors

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
    building: int | None  # the generation a rebuild is writing (SHADOW ... VERIFYING)


def _load_generations() -> CacheGenerations:
    rows = dict(CountCacheGeneration.objects.filter(status__in=LIVE).values_list("status", "generation"))
    building = next((rows[s] for s in BUILDING if s in rows), None)
    return CacheGenerations(rows.get(GenerationStatus.ACTIVE), building)


_GENERATIONS = RefreshedValue("count_cache_generations", _load_generations,
                              refresh_s=lambda: getattr(settings, "COUNT_CACHE_GENERATION_REFRESH_S", 2.0))


def count_cache_generations_get(*, fresh: bool = False) -> CacheGenerations:
    """The ACTIVE and the building count-cache generations. Cached per process for
    COUNT_CACHE_GENERATION_REFRESH_S; `fresh=True` reads the table (writers that must not act on a
    stale answer, e.g. the display snapshot job deciding which views to write)."""
    return _GENERATIONS.get(fresh=fresh)


def reset_generation_cache() -> None:
    _GENERATIONS.reset()


def count_cache_rebuild_running() -> bool:
    """True while a count-cache rebuild holds a pinned manifest (route cutover must wait, CCACHE-3 step 2)."""
    return CountCacheGeneration.objects.filter(status__in=BUILDING).exists()


# --- L1 and the database fallback limiter --------------------------------------------------------


_l1_lock = threading.Lock()
_l1: L1Cache | None = None


def display_l1() -> L1Cache:
    """The process's L1 of display counts, keyed (count-cache generation, video id): a generation
    switch starts from an empty namespace."""
    global _l1
    with _l1_lock:
        if _l1 is None:
            _l1 = L1Cache("count_display", ttl_s=getattr(settings, "COUNT_L1_TTL_S", 0.25),
                          max_entries=getattr(settings, "COUNT_L1_MAX_ENTRIES", 10_000),
                          stale_s=getattr(settings, "COUNT_L1_STALE_S", 5.0))
        return _l1


# With Redis down every count read lands on `default`: a burst queues briefly, then fails with 503.
SNAPSHOT_FALLBACK = FallbackLimiter("count_snapshot", wait_s=lambda: getattr(settings, "COUNT_DB_FALLBACK_WAIT_S", 0.5))


# --- reads -------------------------------------------------------------------------------------


def _iso(value) -> str:
    return value.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class ViewsPrefetch:
    """Count views read ahead, in a round trip the request made anyway (`display_views_prefetch_flow`):
    the views of `asked` in `generation`; `hits` None when that read failed."""

    generation: int | None
    asked: frozenset[str] = frozenset()
    hits: dict[str, tuple[int, int, str]] | None = None


def display_views_prefetch_flow(video_ids: list[str]) -> Flow[ViewsPrefetch]:
    """Read the count views of those of `video_ids` the L1 does not hold fresh, as one read of a round
    trip shared with other flows; `display_counts_get(prefetched=...)` then loads them without one of
    its own. Ids read here but never asked for (a video the caller may not see) are dropped unused."""
    generation = count_cache_generations_get().active
    if generation is None:
        return ViewsPrefetch(None)
    wanted = list(dict.fromkeys(video_ids))
    fresh = display_l1().fresh((generation, v) for v in wanted)
    asked = [v for v in wanted if (generation, v) not in fresh]
    try:
        hits = yield cache.views_read_plan(generation, asked)
    except RedisError:
        hits = None
    return ViewsPrefetch(generation, frozenset(asked), hits)


def _views_read(generation: int, video_ids: list[str], prefetched: ViewsPrefetch | None) -> dict:
    """The views of `video_ids`: those prefetched for this generation from the prefetch, the rest in
    one round trip."""
    if prefetched is None or prefetched.generation != generation:
        return cache.views_read(generation, video_ids)
    if prefetched.hits is None and any(v in prefetched.asked for v in video_ids):
        raise RedisError("the prefetch of the count views failed")
    rest = [v for v in video_ids if v not in prefetched.asked]
    hits = {v: prefetched.hits[v] for v in video_ids if v in prefetched.asked and v in prefetched.hits}
    return {**hits, **(cache.views_read(generation, rest) if rest else {})}


def _load(generation: int | None, video_ids: list[str], prefetched: ViewsPrefetch | None = None
          ) -> dict[str, DisplayCount]:
    """Redis view of `generation` (one round trip, none for the prefetched ids), then the durable
    snapshot (one query)."""
    out: dict[str, DisplayCount] = {}
    if generation is None:
        metrics.inc("likes_count_cache_fallback_total", len(video_ids), reason="no_active_generation")
    else:
        try:
            hits = _views_read(generation, video_ids, prefetched)
        except RedisError as exc:
            metrics.inc("likes_cache_errors_total", cache="count_view")
            metrics.inc("likes_count_cache_fallback_total", len(video_ids), reason="redis_error")
            logger.warning("count view read failed: %s (the durable snapshot answers)", exc.__class__.__name__)
            hits = {}
        for video_id, (display, snapshot_id, generated_at) in hits.items():
            out[video_id] = DisplayCount(video_id, display, generated_at, "redis", snapshot_id)
        if hits:
            metrics.inc("likes_cache_hits_total", len(hits), cache="count_view")  # M15: count cache hit rate
    missing = [v for v in video_ids if v not in out]
    if missing:
        if generation is not None:
            metrics.inc("likes_cache_misses_total", len(missing), cache="count_view")  # M15
        with SNAPSHOT_FALLBACK.slot():
            rows = VideoDisplayCount.objects.filter(video_id__in=missing).values_list(
                "video_id", "display_count", "generated_at", "snapshot_id")
            for video_id, display, generated_at, snapshot_id in rows:
                out[video_id] = DisplayCount(video_id, display, _iso(generated_at), "snapshot", snapshot_id)
    for video_id in missing:
        if video_id not in out:
            out[video_id] = DisplayCount(video_id, 0, None, "none")
    return out


def display_counts_get(*, video_ids: list[str], prefetched: ViewsPrefetch | None = None) -> dict[str, DisplayCount]:
    """Display counts of `video_ids` (deduplicated; every id gets an entry, 0/None before its first
    snapshot): L1, then the view of the ACTIVE count-cache generation in one Redis round trip (none
    for what `prefetched` read), then the durable snapshot in one query. Without an ACTIVE generation
    (only a REBUILDING one) or with Redis down the durable snapshot answers (counted in
    `likes_count_cache_fallback_total`)."""
    wanted = list(dict.fromkeys(video_ids))
    if not wanted:
        return {}
    generation = count_cache_generations_get().active
    namespace = generation if generation is not None else NO_CACHE

    def loader(keys: list[tuple[int, str]]) -> dict[tuple[int, str], DisplayCount]:
        loaded = _load(generation, [v for _, v in keys], prefetched)
        return {(namespace, v): loaded[v] for _, v in keys}

    got = display_l1().get_many([(namespace, v) for v in wanted], loader)
    return {v: got[(namespace, v)] for v in wanted}


def feed_page_read(*, user_id: int, video_ids: list[str], min_versions: dict[str, int]) -> tuple[dict, dict, dict]:
    """Visibility, the caller's relations and the display counts of a feed page: the snapshots, the
    edges of known authors, the relation hashes and the count views in ONE Redis round trip (a second
    only for authors this process has not seen), then the database for what Redis missed."""
    visible, relations, views = run_flows(
        relation_selectors.videos_visible_flow(user_id, video_ids),
        relation_selectors.relation_states_flow(user_id, video_ids, min_versions),
        display_views_prefetch_flow(video_ids),
    )
    counts = display_counts_get(video_ids=[v for v in video_ids if visible[v]], prefetched=views)
    return visible, relations, counts


def display_count_get(*, video_id: str) -> DisplayCount:
    return display_counts_get(video_ids=[video_id])[video_id]


# --- vbuckets per video (the console's page) --------------------------------------------------------


@dataclass(frozen=True)
class VbucketRow:
    alias: str
    virtual_bucket: int
    bucket_space_version: int
    active_count: int
    bucket_version: int
    frozen: bool
    updated_at: object
    routed_partition: str
    routed: bool  # this partition is the one the active manifest routes the bucket to


@dataclass
class VideoVbuckets:
    video_id: str
    generation: int
    manifest_id: int
    rows: list[VbucketRow] = field(default_factory=list)
    routed_sum: int = 0  # what a display snapshot sums: routed buckets only (ROUTE-6)
    unrouted_rows: int = 0
    unrouted_sum: int = 0
    dirty_marks: int = 0
    unreadable: list[str] = field(default_factory=list)  # partitions that did not answer
    snapshot: VideoDisplayCount | None = None

    @property
    def snapshot_matches(self) -> bool | None:
        if self.snapshot is None or self.unreadable:
            return None
        return self.snapshot.raw_active_count == self.routed_sum


def video_vbuckets_get(*, video_id: str) -> VideoVbuckets:
    """Every vbucket row of `video_id` in the active generation, from every count partition, with
    the route the active manifest gives its bucket. Reads only."""
    gen = routing.active()
    out = VideoVbuckets(video_id, gen.generation, gen.manifest_id)
    for alias in settings.COUNT_PARTITION_ALIASES:
        try:
            rows = list(VideoLikeCountVbucket.objects.using(alias)
                        .filter(generation=gen.generation, video_id=video_id).order_by("virtual_bucket"))
            out.dirty_marks += DirtyVideo.objects.using(alias).filter(generation=gen.generation,
                                                                      video_id=video_id).count()
        except DatabaseError:
            out.unreadable.append(alias)
            continue
        for r in rows:
            routed_to = gen.routes[r.virtual_bucket].partition if r.virtual_bucket < len(gen.routes) else "?"
            out.rows.append(VbucketRow(alias, r.virtual_bucket, r.bucket_space_version, r.active_count,
                                       r.bucket_version, r.frozen, r.updated_at, routed_to, routed_to == alias))
    out.rows.sort(key=lambda r: (r.virtual_bucket, r.alias))
    for r in out.rows:
        if r.routed:
            out.routed_sum += r.active_count
        else:
            out.unrouted_rows += 1
            out.unrouted_sum += r.active_count
    out.snapshot = VideoDisplayCount.objects.filter(video_id=video_id).first()
    return out


def migrations_moving(buckets: set[int]) -> list[tuple[BucketMigration, list[int]]]:
    """The unfinished bucket migrations that move any of `buckets`, oldest first, each with the buckets
    of the set it moves (sorted). Reads the ledger on `default` only."""
    out = []
    for m in BucketMigration.objects.exclude(state__in=TERMINAL).order_by("pk"):
        common = sorted(buckets & set(m.buckets))
        if common:
            out.append((m, common))
    return out
