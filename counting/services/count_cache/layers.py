"""The Redis count cache's layers (CCACHE-1 … CCACHE-4): durable generations, the Redis registry
mirror, the writes of the view and bucket layers, and loss detection. The rebuild of a whole
generation is `counting.services.count_cache.rebuild`.

The durable store (LIKE_COUNT_PROJECTION, VIDEO_LIKE_COUNT_VBUCKET, VideoDisplayCount and the
consumer checkpoints) is the truth and is only ever read here (CCACHE-4): losing Redis loses a copy,
never a count, and no history is re-consumed.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from counting import cache, routing
from counting.models import (
    CountCacheGeneration,
    CountProjectionGeneration,
    ProjectionGenerationStatus,
    VideoLikeCountVbucket,
)
from counting.selectors import count_cache_generations_get, reset_generation_cache
from likes_project import metrics
from likes_project.audit.services import system_actor
from likes_project.errors import Conflict
from likes_project.generations import GenerationStatus, RebuildRunning

logger = logging.getLogger(__name__)

REBUILD_JOB = "count_cache.rebuild"
REGISTRY_SIZE = 50
SYSTEM = system_actor("count-cache")


class CountCacheRebuildRefused(Conflict):
    code = "count_cache_rebuild_refused"
    default_message = "The count cache cannot be rebuilt now."


# --- generations and the registry mirror -------------------------------------------------------


def count_cache_generations_mirror() -> dict[int, str]:
    """Copy the durable statuses (the latest REGISTRY_SIZE generations) into the Redis registry that
    BUCKET_WRITE_LUA reads: it writes only to live ones (ACTIVE, building), and names the status of a
    refused one (GEN_RETIRED, GEN_FAILED). Call after every commit that changes a status; raises
    RedisError to the caller."""
    statuses = dict(CountCacheGeneration.objects.order_by("-generation").values_list("generation", "status")
                    [:REGISTRY_SIZE])
    cache.gens_mirror_write(statuses)
    return statuses


def count_cache_generation_bootstrap() -> CountCacheGeneration | None:
    """Count-cache generation 1, ACTIVE, when no generation exists yet (an empty cache is a valid
    start: every view miss reads the durable snapshot). Needs the count projection bootstrap first;
    returns None without it. Idempotent; `migrate_all` runs it.

    Transaction: one on `default`. The registry mirror is written after the commit (best effort: a
    missing registry is rebuilt by the first bucket write that finds it gone)."""
    existing = CountCacheGeneration.objects.order_by("-generation").first()
    if existing is None:
        proj = CountProjectionGeneration.objects.filter(status=ProjectionGenerationStatus.ACTIVE).first()
        if proj is None or proj.active_manifest_id is None:
            return None
        now = timezone.now()
        try:
            with transaction.atomic(using="default", durable=True):
                existing = CountCacheGeneration.objects.create(
                    generation=1, status=GenerationStatus.ACTIVE, projection_generation=proj.generation,
                    route_manifest_id=proj.active_manifest_id, build_from=now, started_by=SYSTEM.name,
                    started_at=now, activated_at=now,
                )
        except IntegrityError:
            existing = CountCacheGeneration.objects.get(generation=1)  # a concurrent bootstrap won
        reset_generation_cache()
        try:
            cache.sentinel_set(existing.generation)  # an empty new cache is whole by definition
        except RedisError:
            logger.warning("count cache sentinel not written; the loss detector will rebuild")
    try:
        count_cache_generations_mirror()
    except RedisError as exc:
        logger.warning("count cache registry not mirrored (Redis: %s); the next bucket write restores it",
                       exc.__class__.__name__)
    return existing


def count_cache_write_targets() -> list[int]:
    """Generations whose keys the writers keep current: the ACTIVE one and, during a rebuild, the
    building one. Read from the table (not the per-process cache), so a writer that committed a
    durable change before reading this either writes the new generation itself or committed before
    the rebuild started, where the rebuild's scan reads it. Bootstraps generation 1 if none exists."""
    gens = count_cache_generations_get(fresh=True)
    if gens.active is None and gens.building is None and not CountCacheGeneration.objects.exists():
        count_cache_generation_bootstrap()
        gens = count_cache_generations_get(fresh=True)
    return [g for g in (gens.active, gens.building) if g is not None]


# --- writes of the two layers -------------------------------------------------------------------


def count_cache_views_write(*, rows: list[tuple[str, int, int, str]]) -> int:
    """(video id, display count, snapshot id, generatedAt) from the durable snapshot -> the view of
    every write target. Called after the snapshot's commit; raises RedisError to the caller."""
    written = 0
    for generation in count_cache_write_targets():
        written += cache.views_write(generation, rows)
    return written


def write_buckets(generation: int, rows: list[tuple[str, int, int, int, int]]) -> Counter:
    verdicts = cache.buckets_write(generation, rows)
    if "NO_REGISTRY" in verdicts:  # Redis lost the registry (flush, eviction): restore it once
        count_cache_generations_mirror()
        retry = [row for row, v in zip(rows, verdicts, strict=True) if v == "NO_REGISTRY"]
        again = iter(cache.buckets_write(generation, retry))
        verdicts = [next(again) if v == "NO_REGISTRY" else v for v in verdicts]
    tally = Counter(verdicts)
    for verdict, n in tally.items():
        if verdict != "OK":
            metrics.inc("likes_count_cache_bucket_refused_total", n, reason=verdict)
    return tally


@dataclass
class BucketRefreshReport:
    rows: int = 0
    verdicts: dict[int, dict[str, int]] = field(default_factory=dict)  # generation -> verdict -> n


def count_cache_buckets_refresh(*, video_ids: list[str], generation: int | None = None) -> BucketRefreshReport:
    """Re-read the durable vbuckets of `video_ids` from the partitions the active manifest routes them
    to and write them to the bucket layer of `generation` (default: every write target), each carrying
    (generation, route epoch, bucket version): the script refuses a generation that is not live, an
    older route epoch and a lower bucket version (CCACHE-3 step 3).
    Idempotency: rewriting the same rows is a no-op; any interleaving of refreshes converges."""
    report = BucketRefreshReport()
    targets = [generation] if generation is not None else count_cache_write_targets()
    if not video_ids or not targets:
        return report
    gen = routing.active()
    rows = []
    videos, table = sorted(set(video_ids)), VideoLikeCountVbucket._meta.db_table
    for alias in settings.COUNT_PARTITION_ALIASES:
        # Array parameters, not IN lists: the partition's share of the 1,024 buckets is hundreds of ids, which the
        # ORM compiled and adapted one by one on every snapshot run (half of its CPU, issue 34 §2); the buckets as
        # one array literal, not a list psycopg adapts id by id (`buckets_array`).
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT video_id, virtual_bucket, active_count, bucket_version FROM {table} "
                           "WHERE generation = %s AND video_id = ANY(%s) AND virtual_bucket = ANY(%s::int[])",
                           [gen.generation, videos, gen.buckets_array(alias)])
            rows += [(v, vb, c, ver, gen.routes[vb].epoch) for v, vb, c, ver in cursor.fetchall()]
    report.rows = len(rows)
    for target in targets:
        report.verdicts[target] = dict(write_buckets(target, rows))
    return report


# --- loss detection -------------------------------------------------------------------------------


def count_cache_check_loss() -> str:
    """Detect a flushed count cache (the ACTIVE generation's sentinel is gone) and rebuild it from the
    durable buckets and snapshots (CCACHE-3) as an ops job. Reads stay correct meanwhile: a view miss
    reads the durable snapshot. Returns ok | rebuild_started | busy | no_active."""
    active = CountCacheGeneration.objects.filter(status=GenerationStatus.ACTIVE).first()
    if active is None:
        return "no_active"
    if cache.sentinel_present(active.generation):
        return "ok"
    metrics.inc("likes_count_cache_loss_detected_total")
    logger.error("ALERT count cache generation %s lost its sentinel: starting a rebuild", active.generation)
    from likes_project.opsjobs.services import job_start

    try:
        job_start(kind=REBUILD_JOB, actor=SYSTEM)
    except (RebuildRunning, CountCacheRebuildRefused):
        return "busy"
    return "rebuild_started"
