"""The Redis count cache (CCACHE-1 … CCACHE-4): durable generations, the Redis registry mirror, the
writes of the view and bucket layers, and the rebuild of a whole generation from the durable
vbuckets without touching them (CCACHE-3).

The durable store (LIKE_COUNT_PROJECTION, VIDEO_LIKE_COUNT_VBUCKET, VideoDisplayCount and the
consumer checkpoints) is the truth and is only ever read here (CCACHE-4): losing Redis loses a copy,
never a count, and no history is re-consumed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from counting import cache, routing
from counting.models import (
    CountCacheGeneration,
    CountCacheStatus,
    CountProjectionGeneration,
    CountRouteManifest,
    DirtyVideo,
    GenerationStatus,
    VideoDisplayCount,
    VideoLikeCountVbucket,
)
from counting.selectors import count_cache_generations_get, reset_generation_cache
from counting.services.bootstrap import ManifestInvalid, manifest_verify
from likes_project import metrics
from likes_project.errors import Conflict
from likes_project.eventlog.leases import LeaseLost, lease_acquire, lease_release, lease_renew
from likes_project.eventlog.models import ConsumerCheckpoint
from opsconsole.services import Actor, audit_record

logger = logging.getLogger(__name__)

REBUILD_LEASE = "counting.count_cache_rebuild"
REGISTRY_SIZE = 50
SYSTEM = Actor(name="count-cache", channel="system")


def _iso(value) -> str:
    return value.isoformat().replace("+00:00", "Z")


# --- generations and the registry mirror -------------------------------------------------------


def count_cache_generations_mirror() -> dict[int, str]:
    """Copy the durable statuses (the latest REGISTRY_SIZE generations) into the Redis registry that
    BUCKET_WRITE_LUA reads: it writes only to ACTIVE and REBUILDING ones, and names the status of a
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
        proj = CountProjectionGeneration.objects.filter(status=GenerationStatus.ACTIVE).first()
        if proj is None or proj.active_manifest_id is None:
            return None
        now = timezone.now()
        try:
            with transaction.atomic(using="default", durable=True):
                existing = CountCacheGeneration.objects.create(
                    generation=1, status=CountCacheStatus.ACTIVE, projection_generation=proj.generation,
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
    REBUILDING one. Read from the table (not the per-process cache), so a writer that committed a
    durable change before reading this either writes the new generation itself or committed before
    the rebuild started, where the rebuild's scan reads it. Bootstraps generation 1 if none exists."""
    gens = count_cache_generations_get(fresh=True)
    if gens.active is None and gens.rebuilding is None and not CountCacheGeneration.objects.exists():
        count_cache_generation_bootstrap()
        gens = count_cache_generations_get(fresh=True)
    return [g for g in (gens.active, gens.rebuilding) if g is not None]


# --- writes of the two layers -------------------------------------------------------------------


def count_cache_views_write(*, rows: list[tuple[str, int, int, str]]) -> int:
    """(video id, display count, snapshot id, generatedAt) from the durable snapshot -> the view of
    every write target. Called after the snapshot's commit; raises RedisError to the caller."""
    written = 0
    for generation in count_cache_write_targets():
        written += cache.views_write(generation, rows)
    return written


def _write_buckets(generation: int, rows: list[tuple[str, int, int, int, int]]) -> Counter:
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
    (generation, route epoch, bucket version): the script refuses a generation that is not ACTIVE or
    REBUILDING, an older route epoch and a lower bucket version (CCACHE-3 step 3).
    Idempotency: rewriting the same rows is a no-op; any interleaving of refreshes converges."""
    report = BucketRefreshReport()
    targets = [generation] if generation is not None else count_cache_write_targets()
    if not video_ids or not targets:
        return report
    gen = routing.active()
    rows = []
    for alias in settings.COUNT_PARTITION_ALIASES:
        found = VideoLikeCountVbucket.objects.using(alias).filter(
            generation=gen.generation, video_id__in=sorted(set(video_ids)), virtual_bucket__in=gen.buckets_on(alias)
        ).values_list("video_id", "virtual_bucket", "active_count", "bucket_version")
        rows += [(v, vb, c, ver, gen.routes[vb].epoch) for v, vb, c, ver in found]
    report.rows = len(rows)
    for target in targets:
        report.verdicts[target] = dict(_write_buckets(target, rows))
    return report


# --- rebuild (CCACHE-3) --------------------------------------------------------------------------


class CountCacheRebuildRunning(Conflict):
    code = "count_cache_rebuild_running"
    default_message = "A count cache rebuild is already running."


class CountCacheRebuildRefused(Conflict):
    code = "count_cache_rebuild_refused"
    default_message = "The count cache cannot be rebuilt now."


class RebuildFailed(Exception):
    """The rebuild cannot finish correctly; its generation becomes FAILED."""


class ManifestMoved(RebuildFailed):
    """The pinned route manifest is no longer the active one (a route cutover happened meanwhile)."""


@dataclass
class CountCacheRebuildReport:
    generation: int
    previous: int | None
    projection_generation: int
    manifest_id: int
    status: str = CountCacheStatus.REBUILDING
    rows: dict[str, int] = field(default_factory=dict)  # partition -> bucket rows written in the scan
    rows_written: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # script verdict -> n (concurrent newer writes)
    views_written: int = 0
    caught_up_rows: int = 0
    caught_up_views: int = 0
    sampled: int = 0
    mismatches: int = 0
    failure: str = ""


@dataclass(frozen=True)
class _Pin:
    generation: int
    projection_generation: int
    manifest_id: int
    routes: dict[int, tuple[str, int]]  # bucket -> (partition, epoch) of the pinned manifest

    def buckets_on(self, alias: str) -> list[int]:
        return sorted(vb for vb, (p, _e) in self.routes.items() if p == alias)


def count_cache_rebuild(*, actor: Actor, progress: Callable[[str], None] | None = None, batch: int | None = None,
                        sample: int | None = None) -> CountCacheRebuildReport:
    """Rebuild the count cache into generation G+1 (CCACHE-3):

    1. create G+1 REBUILDING, pinning the active route manifest, with the start point (time and the
       count consumer checkpoints); the display snapshot job writes G+1's views from now on too;
    2. for each partition, read the vbuckets the pinned manifest routes to it (one authoritative
       replica per bucket, never source plus target, ROUTE-6) and write G+1's bucket layer;
    3. write G+1's view layer from the durable display snapshots;
    4. catch up the buckets and snapshots changed since the start point;
    5. sample-verify (hot and random videos): G+1 buckets = durable buckets, their sum = the
       snapshot's raw count (unless the video has pending changes), views present and current;
    6. in one `default` transaction, with the pinned manifest still active and the old generation
       still ACTIVE, CAS G+1 -> ACTIVE and the old one -> RETIRED.

    Any failure (including the manifest pointer moving) leaves G+1 FAILED and the old generation as
    it was; reads never used G+1. Only reads the durable store. A database lease makes it a
    singleton; a REBUILDING generation left by a crashed run is marked FAILED by the next run.
    Transaction: one on `default` per state change, each with its audit record.
    """
    say = progress or (lambda msg: None)
    batch = batch or getattr(settings, "COUNT_CACHE_REBUILD_BATCH", 2000)
    lease_ttl = getattr(settings, "COUNT_CACHE_REBUILD_LEASE_S", 120.0)
    holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    grant = lease_acquire(resource=REBUILD_LEASE, holder=holder, ttl_s=lease_ttl)
    if grant is None:
        raise CountCacheRebuildRunning()
    try:
        pin, report = _start(actor)
        say(f"count cache generation {pin.generation}: REBUILDING (previous {report.previous}), projection "
            f"generation {pin.projection_generation}, pinned manifest {pin.manifest_id}")
        try:
            count_cache_generations_mirror()
            renew = lambda: lease_renew(grant, ttl_s=lease_ttl)  # noqa: E731
            _scan_buckets(pin, report, batch=batch, say=say, renew=renew)
            _write_views(pin, report, batch=batch, say=say, renew=renew)
            _catch_up(pin, report, batch=batch, say=say, renew=renew)
            _verify(pin, report, sample=sample or getattr(settings, "COUNT_CACHE_REBUILD_SAMPLE", 200), say=say)
            _activate(pin, report, actor)
            say(f"count cache generation {pin.generation}: ACTIVE ({report.rows_written} bucket rows, "
                f"{report.views_written} views)")
        except (RebuildFailed, ManifestInvalid, DatabaseError, RedisError, LeaseLost) as exc:
            _fail(pin, report, actor, exc, say)
        except BaseException as exc:
            _fail(pin, report, actor, exc, say)
            raise
        return report
    finally:
        with contextlib.suppress(DatabaseError):
            lease_release(grant)


def _start(actor: Actor) -> tuple[_Pin, CountCacheRebuildReport]:
    try:
        proj = routing.load_generation()  # from the table, not the per-process cache
        manifest = CountRouteManifest.objects.get(pk=proj.manifest_id)
        items = manifest_verify(manifest, proj.space.virtual_buckets)
    except (routing.NoActiveGeneration, CountRouteManifest.DoesNotExist, ManifestInvalid) as exc:
        raise CountCacheRebuildRefused(f"no usable active route manifest to pin: {exc}") from exc
    checkpoints = {str(p): last for p, last in ConsumerCheckpoint.objects.filter(consumer="count")
                   .values_list("partition", "last_done_id")}
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        # We hold the lease, so a REBUILDING generation here belongs to a run that died.
        for stale in CountCacheGeneration.objects.select_for_update().filter(status=CountCacheStatus.REBUILDING):
            stale.status, stale.finished_at = CountCacheStatus.FAILED, now
            stale.failure_reason = "abandoned: its rebuild stopped without finishing"
            stale.save(update_fields=["status", "finished_at", "failure_reason"])
            audit_record(actor=actor, action="count_cache.rebuild_abandoned", target_type="count_cache_generation",
                         target_id=str(stale.generation), params={}, outcome="failed")
        top = CountCacheGeneration.objects.select_for_update().order_by("-generation").first()
        active = CountCacheGeneration.objects.filter(status=CountCacheStatus.ACTIVE).first()
        new = CountCacheGeneration.objects.create(
            generation=(top.generation + 1) if top else 1, status=CountCacheStatus.REBUILDING,
            projection_generation=proj.generation, route_manifest_id=proj.manifest_id,
            previous_generation=active.generation if active else None, build_from=now,
            start_checkpoints=checkpoints, started_by=actor.name, started_at=now,
        )
        audit_record(actor=actor, action="count_cache.rebuild_start", target_type="count_cache_generation",
                     target_id=str(new.generation),
                     params={"previous": new.previous_generation, "manifest_id": proj.manifest_id,
                             "projection_generation": proj.generation, "checkpoints": checkpoints})
    reset_generation_cache()
    pin = _Pin(new.generation, proj.generation, proj.manifest_id, {vb: (p, e) for vb, p, e in items})
    report = CountCacheRebuildReport(new.generation, new.previous_generation, proj.generation, proj.manifest_id)
    return pin, report


def _check_pin(pin: _Pin) -> None:
    row = CountProjectionGeneration.objects.filter(generation=pin.projection_generation).values_list(
        "status", "active_manifest_id").first()
    if row != (GenerationStatus.ACTIVE, pin.manifest_id):
        raise ManifestMoved(f"the active route manifest moved from {pin.manifest_id} to "
                            f"{row[1] if row else None} during the rebuild")


def _write_rows(pin: _Pin, report: CountCacheRebuildReport, rows: list) -> None:
    tally = _write_buckets(pin.generation, [(v, vb, c, ver, pin.routes[vb][1]) for v, vb, c, ver in rows])
    lost = {k: n for k, n in tally.items() if k.startswith("GEN_") or k == "NO_REGISTRY"}
    if lost:
        raise RebuildFailed(f"generation {pin.generation} is no longer writable: {lost}")
    report.rows_written += tally.get("OK", 0)
    for verdict, n in tally.items():
        if verdict != "OK":
            report.refused[verdict] = report.refused.get(verdict, 0) + n


def _bucket_pages(pin: _Pin, alias: str, batch: int, extra: Q | None = None):
    """Keyset pages of (video, bucket, count, version) of the buckets the pinned manifest routes to
    `alias`, in (video_id, virtual_bucket) order (the unique index)."""
    buckets = pin.buckets_on(alias)
    if not buckets:
        return
    last_video, last_vb = "", -1
    while True:
        qs = VideoLikeCountVbucket.objects.using(alias).filter(generation=pin.projection_generation,
                                                               virtual_bucket__in=buckets)
        if extra is not None:
            qs = qs.filter(extra)
        qs = qs.filter(Q(video_id__gt=last_video) | Q(video_id=last_video, virtual_bucket__gt=last_vb))
        rows = list(qs.order_by("video_id", "virtual_bucket").values_list(
            "video_id", "virtual_bucket", "active_count", "bucket_version")[:batch])
        if not rows:
            return
        last_video, last_vb = rows[-1][0], rows[-1][1]
        yield rows


def _scan_buckets(pin: _Pin, report: CountCacheRebuildReport, *, batch: int, say, renew) -> None:
    for alias in settings.COUNT_PARTITION_ALIASES:
        say(f"  {alias}: {len(pin.buckets_on(alias))} buckets routed here by manifest {pin.manifest_id}")
        done = 0
        for rows in _bucket_pages(pin, alias, batch):
            _write_rows(pin, report, rows)
            done += len(rows)
            renew()
            say(f"  {alias}: {done} rows")
        report.rows[alias] = done
        say(f"  {alias}: done, {done} rows")
        _check_pin(pin)  # fail early if a cutover moved the route meanwhile


def _snapshot_pages(batch: int, since=None):
    last = ""
    while True:
        qs = VideoDisplayCount.objects.filter(video_id__gt=last)
        if since is not None:
            qs = qs.filter(generated_at__gte=since)
        rows = list(qs.order_by("video_id").values_list("video_id", "display_count", "snapshot_id",
                                                        "generated_at")[:batch])
        if not rows:
            return
        last = rows[-1][0]
        yield [(v, d, sid, _iso(at)) for v, d, sid, at in rows]


def _write_views(pin: _Pin, report: CountCacheRebuildReport, *, batch: int, say, renew) -> None:
    done = 0
    for rows in _snapshot_pages(batch):
        report.views_written += cache.views_write(pin.generation, rows)
        done += len(rows)
        renew()
        say(f"  views: {done} videos")
    say(f"  views: done, {done} videos")


def _catch_up(pin: _Pin, report: CountCacheRebuildReport, *, batch: int, say, renew) -> None:
    # The slack covers writers whose transaction took its timestamp before the start point but
    # committed after the scan read the row; rewriting a row twice is harmless.
    start = CountCacheGeneration.objects.values_list("build_from", flat=True).get(generation=pin.generation)
    since = start - dt.timedelta(seconds=getattr(settings, "COUNT_CACHE_REBUILD_CATCHUP_SLACK_S", 60.0))
    for alias in settings.COUNT_PARTITION_ALIASES:
        for rows in _bucket_pages(pin, alias, batch, extra=Q(updated_at__gte=since)):
            _write_rows(pin, report, rows)
            report.caught_up_rows += len(rows)
            renew()
    for rows in _snapshot_pages(batch, since=since):
        cache.views_write(pin.generation, rows)
        report.caught_up_views += len(rows)
        renew()
    say(f"  caught up {report.caught_up_rows} bucket rows and {report.caught_up_views} views changed since "
        f"{_iso(since)}")
    _check_pin(pin)


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


def _verify(pin: _Pin, report: CountCacheRebuildReport, *, sample: int, say) -> None:
    hot = list(VideoDisplayCount.objects.order_by("-raw_active_count", "video_id")
               .values_list("video_id", flat=True)[:max(1, sample // 10)])
    rand = list(VideoDisplayCount.objects.order_by("?").values_list("video_id", flat=True)[:sample])
    videos = list(dict.fromkeys(hot + rand))
    bad = _mismatched(pin, videos)
    if bad:
        # One more pass over the disagreeing videos: a change may have landed between our reads.
        rows = [(v, vb, c, ver) for (v, vb), (c, ver, _at) in sorted(_durable_buckets(pin, sorted(bad)).items())]
        _write_rows(pin, report, rows)
        snaps = VideoDisplayCount.objects.filter(video_id__in=sorted(bad)).values_list(
            "video_id", "display_count", "snapshot_id", "generated_at")
        cache.views_write(pin.generation, [(v, d, sid, _iso(at)) for v, d, sid, at in snaps])
        bad = _mismatched(pin, sorted(bad))
    report.sampled, report.mismatches = len(videos), len(bad)
    say(f"  sample check: {len(videos)} videos ({len(hot)} hottest), {len(bad)} mismatches")
    if bad:
        raise RebuildFailed(f"{len(bad)} of {len(videos)} sampled videos disagree with the durable store, "
                            f"e.g. {sorted(bad)[:5]}")


def _activate(pin: _Pin, report: CountCacheRebuildReport, actor: Actor) -> None:
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        # Lock the projection row: a route cutover's CAS of active_manifest_id waits for us or wins first.
        proj = CountProjectionGeneration.objects.select_for_update().filter(
            generation=pin.projection_generation).first()
        if proj is None or proj.status != GenerationStatus.ACTIVE or proj.active_manifest_id != pin.manifest_id:
            raise ManifestMoved(f"the active route manifest moved from {pin.manifest_id} to "
                                f"{proj.active_manifest_id if proj else None} during the rebuild")
        rows = list(CountCacheGeneration.objects.select_for_update().filter(
            Q(generation=pin.generation) | Q(status=CountCacheStatus.ACTIVE)).order_by("generation"))
        new = next((r for r in rows if r.generation == pin.generation), None)
        old = next((r for r in rows if r.status == CountCacheStatus.ACTIVE), None)
        if new is None or new.status != CountCacheStatus.REBUILDING:
            raise RebuildFailed(f"generation {pin.generation} is no longer REBUILDING")
        if (old.generation if old else None) != report.previous:
            raise RebuildFailed(f"the ACTIVE generation changed from {report.previous} during the rebuild")
        if old is not None:
            old.status, old.finished_at = CountCacheStatus.RETIRED, now
            old.save(update_fields=["status", "finished_at"])
        new.status, new.activated_at, new.rows_written = CountCacheStatus.ACTIVE, now, report.rows_written
        new.save(update_fields=["status", "activated_at", "rows_written"])
        audit_record(actor=actor, action="count_cache.rebuild_activate", target_type="count_cache_generation",
                     target_id=str(pin.generation),
                     params={"retired": report.previous, "rows": report.rows, "rows_written": report.rows_written,
                             "views_written": report.views_written, "caught_up_rows": report.caught_up_rows,
                             "sampled": report.sampled, "refused": report.refused})
    report.status = CountCacheStatus.ACTIVE
    reset_generation_cache()
    try:
        cache.sentinel_set(pin.generation)
        count_cache_generations_mirror()
    except RedisError as exc:
        # The durable switch stands; until the registry is restored the old generation's late writes
        # still land, in its own (unread) namespace.
        logger.warning("count cache registry not updated after activation (Redis: %s)", exc.__class__.__name__)
    metrics.inc("likes_count_cache_rebuilds_total", outcome="activated")


def _fail(pin: _Pin, report: CountCacheRebuildReport, actor: Actor, exc: BaseException, say) -> None:
    report.status = CountCacheStatus.FAILED
    report.failure = f"{exc.__class__.__name__}: {exc}"[:512]
    metrics.inc("likes_count_cache_rebuilds_total", outcome="failed")
    logger.error("ALERT count cache rebuild of generation %s failed: %s", pin.generation, report.failure)
    try:
        with transaction.atomic(using="default", durable=True):
            CountCacheGeneration.objects.filter(generation=pin.generation, status=CountCacheStatus.REBUILDING).update(
                status=CountCacheStatus.FAILED, failure_reason=report.failure, finished_at=timezone.now(),
                rows_written=report.rows_written)
            audit_record(actor=actor, action="count_cache.rebuild_failed", target_type="count_cache_generation",
                         target_id=str(pin.generation), outcome="failed",
                         params={"failure": report.failure, "rows_written": report.rows_written})
    except DatabaseError as db_exc:
        logger.error("could not mark count cache generation %s FAILED (%s); the next rebuild will",
                     pin.generation, db_exc.__class__.__name__)
    reset_generation_cache()
    with contextlib.suppress(RedisError, DatabaseError):
        count_cache_generations_mirror()
    say(f"count cache generation {pin.generation}: FAILED ({report.failure}); reads stay on generation "
        f"{report.previous} and the durable snapshot")


def count_cache_check_loss() -> str:
    """Detect a flushed count cache (the ACTIVE generation's sentinel is gone) and rebuild it from the
    durable buckets and snapshots (CCACHE-3). Reads stay correct meanwhile: a view miss reads the
    durable snapshot. Returns ok | rebuilt | rebuild_failed | busy | no_active."""
    active = CountCacheGeneration.objects.filter(status=CountCacheStatus.ACTIVE).first()
    if active is None:
        return "no_active"
    if cache.sentinel_present(active.generation):
        return "ok"
    metrics.inc("likes_count_cache_loss_detected_total")
    logger.error("ALERT count cache generation %s lost its sentinel: starting a rebuild", active.generation)
    try:
        report = count_cache_rebuild(actor=SYSTEM)
    except (CountCacheRebuildRunning, CountCacheRebuildRefused):
        return "busy"
    return "rebuilt" if report.status == CountCacheStatus.ACTIVE else "rebuild_failed"
