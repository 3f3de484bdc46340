"""Rebuild the Redis count cache into generation G+1 (CCACHE-3) on the one generation lifecycle:

  SHADOW      G+1 pins the active route manifest and records its start point (time and the count
              consumer checkpoints); from its commit on the display snapshot job writes G+1's views too;
  BACKFILLING for each partition, the vbuckets the pinned manifest routes to it (one authoritative
              replica per bucket, never source plus target, ROUTE-6) into G+1's bucket layer, then
              G+1's view layer from the durable display snapshots;
  CATCHING_UP the buckets and snapshots changed since the start point;
  VERIFYING   hot and random videos: G+1 buckets = durable buckets, their sum = the snapshot's raw
              count (unless the video has pending changes), views present and current;
  ACTIVE      with the pinned manifest still active, CAS G+1 -> ACTIVE and the old one -> RETIRED.

Only ever reads the durable store (CCACHE-4). Any failure, the manifest pointer moving included,
leaves G+1 FAILED and the old generation as it was; reads never used G+1.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from counting import cache, routing
from counting.models import (
    CountCacheGeneration,
    CountProjectionGeneration,
    CountRouteManifest,
    DirtyVideo,
    ProjectionGenerationStatus,
    VideoDisplayCount,
    VideoLikeCountVbucket,
)
from counting.selectors import reset_generation_cache
from counting.services.count_cache.layers import (
    REBUILD_JOB,
    CountCacheRebuildRefused,
    count_cache_generations_mirror,
    write_buckets,
)
from counting.services.manifests import ManifestInvalid, manifest_verify
from counting.services.projection import COUNT_CONSUMER
from likes_project import metrics
from likes_project.audit.services import Actor
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.generations import (
    Lifecycle,
    RebuildFailed,
    RebuildRunning,
    RunReport,
    StepContext,
    StepResult,
    lifecycle_job_kind,
    rebuild_inline,
)

REBUILD_LEASE = "counting.count_cache_rebuild"
REBUILD_PERMISSION = "counting.rebuild_count_cache"
CountCacheRebuildRunning = RebuildRunning  # raised with code count_cache_rebuild_running


class ManifestMoved(RebuildFailed):
    """The pinned route manifest is no longer the active one (a route cutover happened meanwhile)."""


def _iso(value) -> str:
    return value.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class _Pin:
    generation: int
    projection_generation: int
    manifest_id: int
    routes: dict[int, tuple[str, int]]  # bucket -> (partition, epoch) of the pinned manifest

    def buckets_on(self, alias: str) -> list[int]:
        return sorted(vb for vb, (p, _e) in self.routes.items() if p == alias)


@functools.lru_cache(maxsize=8)
def _manifest_routes(manifest_id: int, virtual_buckets: int) -> dict[int, tuple[str, int]]:
    # A sealed manifest never changes, so its verified items can be kept for the process's life.
    items = manifest_verify(CountRouteManifest.objects.get(pk=manifest_id), virtual_buckets)
    return {vb: (p, e) for vb, p, e in items}


def _pin(row: CountCacheGeneration) -> _Pin:
    space = routing.load_generation(row.projection_generation).space
    return _Pin(row.generation, row.projection_generation, row.route_manifest_id,
                _manifest_routes(row.route_manifest_id, space.virtual_buckets))


def _check_pin(pin: _Pin) -> None:
    row = CountProjectionGeneration.objects.filter(generation=pin.projection_generation).values_list(
        "status", "active_manifest_id").first()
    if row != (ProjectionGenerationStatus.ACTIVE, pin.manifest_id):
        raise ManifestMoved(f"the active route manifest moved from {pin.manifest_id} to "
                            f"{row[1] if row else None} during the rebuild")


def _write_rows(pin: _Pin, ctx: StepContext, rows: list) -> None:
    tally = write_buckets(pin.generation, [(v, vb, c, ver, pin.routes[vb][1]) for v, vb, c, ver in rows])
    lost = {k: n for k, n in tally.items() if k.startswith("GEN_") or k == "NO_REGISTRY"}
    if lost:
        raise RebuildFailed(f"generation {pin.generation} is no longer writable: {lost}")
    ctx.count("rows_written", tally.get("OK", 0))
    refused = ctx.stats.setdefault("refused", {})
    for verdict, n in tally.items():
        if verdict != "OK":
            refused[verdict] = refused.get(verdict, 0) + n


def _bucket_page(pin: _Pin, alias: str, batch: int, last: list, extra: Q | None = None) -> list:
    """A keyset page of (video, bucket, count, version) of the buckets the pinned manifest routes to
    `alias`, after `last` in (video_id, virtual_bucket) order (the unique index)."""
    buckets = pin.buckets_on(alias)
    if not buckets:
        return []
    qs = VideoLikeCountVbucket.objects.using(alias).filter(generation=pin.projection_generation,
                                                           virtual_bucket__in=buckets)
    if extra is not None:
        qs = qs.filter(extra)
    last_video, last_vb = last
    qs = qs.filter(Q(video_id__gt=last_video) | Q(video_id=last_video, virtual_bucket__gt=last_vb))
    return list(qs.order_by("video_id", "virtual_bucket").values_list(
        "video_id", "virtual_bucket", "active_count", "bucket_version")[:batch])


def _snapshot_page(batch: int, last: str, since=None) -> list:
    qs = VideoDisplayCount.objects.filter(video_id__gt=last)
    if since is not None:
        qs = qs.filter(generated_at__gte=since)
    rows = qs.order_by("video_id").values_list("video_id", "display_count", "snapshot_id", "generated_at")[:batch]
    return [(v, d, sid, _iso(at)) for v, d, sid, at in rows]


def _copy_chunk(ctx: StepContext, cursor: dict | None, *, since=None) -> StepResult:
    """One page of the backfill (`since` None) or the catch-up: the routed buckets of each partition
    in turn, then the views. The cursor is (phase, partition, last key, rows done there)."""
    pin = _pin(ctx.row)
    aliases = list(settings.COUNT_PARTITION_ALIASES)
    batch = int(ctx.params.get("batch") or getattr(settings, "COUNT_CACHE_REBUILD_BATCH", 2000))
    catching_up = since is not None
    cursor = cursor or {"phase": "buckets", "alias": 0, "last": ["", -1], "done": 0}
    if cursor["phase"] == "buckets":
        if cursor["alias"] >= len(aliases):
            return StepResult({"phase": "views", "last": "", "done": 0})
        alias = aliases[cursor["alias"]]
        if not catching_up and cursor["done"] == 0 and cursor["last"] == ["", -1]:
            ctx.say(f"  {alias}: {len(pin.buckets_on(alias))} buckets routed here by manifest {pin.manifest_id}")
        rows = _bucket_page(pin, alias, batch, cursor["last"], Q(updated_at__gte=since) if catching_up else None)
        if rows:
            _write_rows(pin, ctx, rows)
            done = cursor["done"] + len(rows)
            if catching_up:
                ctx.count("caught_up_rows", len(rows))
            else:
                ctx.say(f"  {alias}: {done} rows")
            return StepResult({**cursor, "last": [rows[-1][0], rows[-1][1]], "done": done}, done=len(rows))
        if not catching_up:
            ctx.stats.setdefault("rows", {})[alias] = cursor["done"]
            ctx.say(f"  {alias}: done, {cursor['done']} rows")
            _check_pin(pin)  # fail early if a cutover moved the route meanwhile
        return StepResult({"phase": "buckets", "alias": cursor["alias"] + 1, "last": ["", -1], "done": 0})
    rows = _snapshot_page(batch, cursor["last"], since)
    if rows:
        written = cache.views_write(pin.generation, rows)
        done = cursor["done"] + len(rows)
        if catching_up:
            ctx.count("caught_up_views", len(rows))
        else:
            ctx.count("views_written", written)
            ctx.say(f"  views: {done} videos")
        return StepResult({**cursor, "last": rows[-1][0], "done": done}, done=len(rows))
    if catching_up:
        ctx.say(f"  caught up {ctx.stats.get('caught_up_rows', 0)} bucket rows and "
                f"{ctx.stats.get('caught_up_views', 0)} views changed since {_iso(since)}")
        _check_pin(pin)
    else:
        ctx.say(f"  views: done, {cursor['done']} videos")
    return StepResult(None)


def _durable_buckets(pin: _Pin, video_ids: list[str]) -> dict[tuple[str, int], tuple[int, int, object]]:
    """(video, bucket) -> (active count, bucket version, updated_at), routed partitions only."""
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        buckets = pin.buckets_on(alias)
        if not buckets:
            continue
        rows = VideoLikeCountVbucket.objects.using(alias).filter(
            generation=pin.projection_generation, video_id__in=video_ids, virtual_bucket__in=buckets,
        ).values_list("video_id", "virtual_bucket", "active_count", "bucket_version", "updated_at")
        out.update({(v, vb): (c, ver, at) for v, vb, c, ver, at in rows})
    return out


def _mismatched(pin: _Pin, video_ids: list[str]) -> set[str]:
    """Sampled videos whose G+1 keys disagree with the durable store: a bucket key missing or not
    holding the durable (count, version) (a newer version written meanwhile is fine); a view missing
    or older than the durable snapshot; the routed buckets' sum differing from the snapshot's raw
    count while the video has no pending change. A video changed in the last few seconds is only
    checked for its view (COUNT_CACHE_VERIFY_IN_FLIGHT_S: such a change may not have reached Redis)."""
    recent = timezone.now() - dt.timedelta(seconds=getattr(settings, "COUNT_CACHE_VERIFY_IN_FLIGHT_S", 2.0))
    snaps = {v: (raw, sid) for v, raw, sid in VideoDisplayCount.objects.filter(video_id__in=video_ids)
             .values_list("video_id", "raw_active_count", "snapshot_id")}
    pending = set()
    for alias in settings.COUNT_PARTITION_ALIASES:
        pending |= set(DirtyVideo.objects.using(alias).filter(generation=pin.projection_generation,
                                                              video_id__in=video_ids)
                       .values_list("video_id", flat=True))
    durable = _durable_buckets(pin, video_ids)
    cached = cache.buckets_read(pin.generation, sorted(durable))
    views = cache.views_read(pin.generation, sorted(snaps))
    in_flight = {v for (v, _vb), (_c, _ver, at) in durable.items() if at >= recent}
    bad = set()
    sums: dict[str, int] = defaultdict(int)
    for (video_id, vb), (count, version, _at) in durable.items():
        sums[video_id] += count
        got = cached.get((video_id, vb))
        if video_id in in_flight or (got is not None and got[1] > version):
            continue
        if got is None or (got[0], got[1]) != (count, version):
            bad.add(video_id)
    for video_id, (raw, snapshot_id) in snaps.items():
        if video_id not in pending and video_id not in in_flight and sums.get(video_id, 0) != raw:
            bad.add(video_id)  # the buckets' sum must be the snapshot's raw count
        view = views.get(video_id)
        if view is None or view[1] < snapshot_id:
            bad.add(video_id)
    return bad


class CountCacheLifecycle(Lifecycle):
    kind, model, target_type = "count_cache", CountCacheGeneration, "count_cache_generation"
    label = "count cache generation"
    lease_resource = REBUILD_LEASE  # the name it had before the lifecycle (operators may watch it)
    size_params = ("batch", "sample")

    def create_fields(self, *, params, previous, state):
        try:
            proj = routing.load_generation()  # from the table, not the per-process cache
            manifest = CountRouteManifest.objects.get(pk=proj.manifest_id)
            manifest_verify(manifest, proj.space.virtual_buckets)
        except (routing.NoActiveGeneration, CountRouteManifest.DoesNotExist, ManifestInvalid) as exc:
            raise CountCacheRebuildRefused(f"no usable active route manifest to pin: {exc}") from exc
        now = timezone.now()
        checkpoints = {str(p): last for p, last in checkpoints_get(COUNT_CONSUMER).items()}
        return {"projection_generation": proj.generation, "route_manifest_id": proj.manifest_id, "build_from": now,
                "start_checkpoints": checkpoints, "started_at": now}

    def describe(self, row):
        return f"projection generation {row.projection_generation}, pinned manifest {row.route_manifest_id}"

    def backfill(self, ctx, cursor):
        return _copy_chunk(ctx, cursor)

    def catch_up(self, ctx, cursor):
        # The slack covers writers whose transaction took its timestamp before the start point but
        # committed after the scan read the row; rewriting a row twice is harmless.
        since = ctx.row.build_from - dt.timedelta(seconds=getattr(settings, "COUNT_CACHE_REBUILD_CATCHUP_SLACK_S",
                                                                  60.0))
        return _copy_chunk(ctx, cursor, since=since)

    def verify(self, ctx):
        pin = _pin(ctx.row)
        sample = int(ctx.params.get("sample") or getattr(settings, "COUNT_CACHE_REBUILD_SAMPLE", 200))
        hot = list(VideoDisplayCount.objects.order_by("-raw_active_count", "video_id")
                   .values_list("video_id", flat=True)[:max(1, sample // 10)])
        rand = list(VideoDisplayCount.objects.order_by("?").values_list("video_id", flat=True)[:sample])
        videos = list(dict.fromkeys(hot + rand))
        bad = _mismatched(pin, videos)
        if bad:
            # One more pass over the disagreeing videos: a change may have landed between our reads.
            rows = [(v, vb, c, ver) for (v, vb), (c, ver, _at) in sorted(_durable_buckets(pin, sorted(bad)).items())]
            _write_rows(pin, ctx, rows)
            snaps = VideoDisplayCount.objects.filter(video_id__in=sorted(bad)).values_list(
                "video_id", "display_count", "snapshot_id", "generated_at")
            cache.views_write(pin.generation, [(v, d, sid, _iso(at)) for v, d, sid, at in snaps])
            bad = _mismatched(pin, sorted(bad))
        ctx.stats.update(sampled=len(videos), mismatches=len(bad))
        ctx.say(f"  sample check: {len(videos)} videos ({len(hot)} hottest), {len(bad)} mismatches")
        if bad:
            raise RebuildFailed(f"{len(bad)} of {len(videos)} sampled videos disagree with the durable store, "
                                f"e.g. {sorted(bad)[:5]}")

    def before_activate(self, row, stats):
        # Lock the projection row: a route cutover's CAS of active_manifest_id waits for us or wins first.
        proj = CountProjectionGeneration.objects.select_for_update().filter(
            generation=row.projection_generation).first()
        if (proj is None or proj.status != ProjectionGenerationStatus.ACTIVE
                or proj.active_manifest_id != row.route_manifest_id):
            raise ManifestMoved(f"the active route manifest moved from {row.route_manifest_id} to "
                                f"{proj.active_manifest_id if proj else None} during the rebuild")
        CountCacheGeneration.objects.filter(pk=row.pk).update(rows_written=stats.get("rows_written", 0))

    def after_change(self, row):
        reset_generation_cache()
        count_cache_generations_mirror()

    def after_activate(self, row):
        reset_generation_cache()
        try:
            cache.sentinel_set(row.generation)
        except RedisError:
            # The durable switch stands; the loss detector notices the missing sentinel and rebuilds.
            metrics.inc("likes_cache_errors_total", cache="count_sentinel")


LIFECYCLE = CountCacheLifecycle()
JOB_KIND = lifecycle_job_kind(LIFECYCLE, job_kind=REBUILD_JOB, permission=REBUILD_PERMISSION)


@dataclass(kw_only=True)
class CountCacheRebuildReport(RunReport):
    ALIASES = {**RunReport.ALIASES, "manifest_id": "route_manifest_id"}

    projection_generation: int
    manifest_id: int
    rows: dict[str, int] = field(default_factory=dict)  # partition -> bucket rows written in the scan
    rows_written: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # script verdict -> n (concurrent newer writes)
    views_written: int = 0
    caught_up_rows: int = 0
    caught_up_views: int = 0


def count_cache_rebuild(*, actor: Actor, progress=None, batch: int | None = None,
                        sample: int | None = None) -> CountCacheRebuildReport:
    """Rebuild the count cache into G+1 in this process (the command's foreground; the admin and the
    loss detector start the same job on the workers). Raises CountCacheRebuildRunning while another
    rebuild runs and CountCacheRebuildRefused without a usable manifest to pin."""
    params = {k: v for k, v in (("batch", batch), ("sample", sample)) if v}
    row = rebuild_inline(REBUILD_JOB, actor=actor, params=params, say=progress)
    return CountCacheRebuildReport.of(row)
