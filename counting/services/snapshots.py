"""Display snapshots (SNAP-1 … SNAP-3, spec §8.4, §8.6): aggregate dirty videos' buckets per the
active manifest into the durable VideoDisplayCount and the Redis view."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from counting import hotspots, routing
from counting.models import (
    CountRefreshSwitch,
    DirtyVideo,
    LikeCountProjection,
    VideoDisplayCount,
    VideoLikeCountVbucket,
)
from counting.risk import selectors as risk_selectors
from counting.services.count_cache import layers as count_cache
from counting.services.projection import COUNT_CONSUMER
from likes_project import leases, metrics
from likes_project.audit.services import Actor
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.eventlog.consumer import holder_id
from likes_project.switches import pause_switch_set
from relations.selectors import privacy

logger = logging.getLogger(__name__)


SNAPSHOT_LEASE = "counting:display_snapshot"


@dataclass
class SnapshotReport:
    videos: int = 0
    skipped_hot: int = 0
    skipped_paused: int = 0
    snapshot_id: int = 0
    status: str = "ok"  # ok | busy (another run holds the lease) | lease_lost | views_failed


def _rows(alias: str, sql: str, params: list) -> list[tuple]:
    """One plain statement's rows: the snapshot's fixed reads, a run every few hundred milliseconds under load, cost
    more as ORM querysets than the sums they prepare (issue 34 §2)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _next_snapshot_id() -> int:
    # A time-ordered id is enough: snapshots are per video and only compared for recency.
    return int(timezone.now().timestamp() * 1_000_000)


def display_snapshot_refresh(*, limit: int | None = None, holder: str | None = None) -> SnapshotReport:
    """Refresh the display snapshot of up to `limit` dirty videos, as the one holder of the snapshot
    lease: runs are serialized and a run whose lease moved writes nothing (issue 9 §3). Without it an
    older run committing last overwrote a newer sum after the newer run had cleared the dirty marks,
    and the video stayed behind for good. Returns `busy` when another run holds the lease; the marks
    it leaves are the next run's. With no dirty mark on any partition (of any generation) it returns at once,
    without the lease: an idle beat's run every second cost two commits for nothing (D139).
    """
    if not any(_rows(alias, f"SELECT EXISTS (SELECT FROM {DirtyVideo._meta.db_table})", [])[0][0]
               for alias in settings.COUNT_PARTITION_ALIASES):
        return SnapshotReport()  # nothing to refresh: no lease taken, no commit (D139)
    grant = leases.lease_acquire(resource=SNAPSHOT_LEASE, holder=holder or holder_id(),
                                 ttl_s=settings.COUNT_SNAPSHOT_LEASE_S)
    if grant is None:
        return SnapshotReport(status="busy")
    try:
        return _refresh(grant, limit=limit)
    finally:
        leases.lease_release(grant)


def _refresh(grant: leases.LeaseGrant, *, limit: int | None) -> SnapshotReport:
    """Refresh the display snapshot of up to `limit` dirty videos.

    Reads each video's buckets from the partition the active manifest routes them to (one
    authoritative replica per bucket, ROUTE-6), sums them (no COUNT(*) anywhere), writes the durable
    snapshot, then the Redis view and bucket layers of every count-cache generation being written
    (the ACTIVE one, and the building one during a rebuild), then clears the dirty marks that were not
    re-dirtied meanwhile, and only when the views were written: a view write that failed keeps its
    marks (moved to the back of the queue), so the next run writes the view again.
    Each video's snapshot id only grows (the greater of this run's and the stored one plus one), and
    the views carry the stored id, so a count-cache rebuild copying an older snapshot cannot replace
    a newer view.
    Hot videos (dirty at least COUNT_HOT_DIRTY_THRESHOLD times, or past COUNT_HOT_WRITES_PER_MINUTE in the
    hot-spot figures) are refreshed at most every COUNT_HOT_REFRESH_S; a paused video keeps its marks until
    resumed.
    Transaction: one on `default` for the snapshots; one per count partition for clearing marks.
    Idempotency: a rerun recomputes the same sums.
    """
    limit = limit or settings.COUNT_SNAPSHOT_BATCH
    gen = routing.active_checked()  # a cutover moved buckets: never read their old copy
    report = SnapshotReport(snapshot_id=_next_snapshot_id())
    marks: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    seq_total: dict[str, int] = defaultdict(int)
    first_dirty: dict[str, dt.datetime] = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        rows = _rows(alias, f"SELECT video_id, source_partition, dirty_seq, first_dirty_at FROM "
                            f"{DirtyVideo._meta.db_table} WHERE generation = %s ORDER BY first_dirty_at LIMIT %s",
                     [gen.generation, limit])
        for video_id, source_partition, seq, dirty_at in rows:
            marks[video_id][alias].append((source_partition, seq))
            seq_total[video_id] += seq
            first_dirty[video_id] = min(dirty_at, first_dirty.get(video_id, dirty_at))
    if not marks:
        return report
    now = timezone.now()
    paused = {v for (v,) in _rows("default", f"SELECT video_id FROM {CountRefreshSwitch._meta.db_table} "
                                             "WHERE video_id = ANY(%s) AND paused", [list(marks)])}
    last = dict(_rows("default", f"SELECT video_id, generated_at FROM {VideoDisplayCount._meta.db_table} "
                                 "WHERE video_id = ANY(%s)", [list(marks)]))
    chosen, busiest = [], _hot_videos()
    for video_id in itertools.islice(marks, limit):
        if video_id in paused:
            report.skipped_paused += 1
            continue
        hot = seq_total[video_id] >= settings.COUNT_HOT_DIRTY_THRESHOLD or video_id in busiest
        if hot and video_id in last and (now - last[video_id]).total_seconds() < settings.COUNT_HOT_REFRESH_S:
            report.skipped_hot += 1
            continue
        chosen.append(video_id)
    if not chosen:
        return report

    raw: dict[str, int] = defaultdict(int)
    risk: dict[str, int] = defaultdict(int)
    policy: dict[str, int] = defaultdict(int)
    # REC-2: the risk-hidden relations (the risk ledger's projection, on default) that are LIKED in the
    # projection, counted in the same statement as the buckets, so one snapshot of the partition gives both; and
    # the LIKED relations of accounts banned, down-weighted or frozen (issue 32 §1), the risk-hidden ones left out
    # (a relation is subtracted once).
    hidden_users, hidden_videos = risk_selectors.hidden_keys(risk_selectors.risk_hidden_sets(chosen))
    policy_users = privacy.policy_hidden_user_ids()
    projection = LikeCountProjection._meta.db_table
    for alias in settings.COUNT_PARTITION_ALIASES:
        buckets = gen.buckets_array(alias)
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"WITH b AS (SELECT video_id, SUM(active_count) AS n FROM {VideoLikeCountVbucket._meta.db_table} "
                "WHERE generation = %s AND video_id = ANY(%s) AND virtual_bucket = ANY(%s::int[]) GROUP BY video_id), "
                "risk AS (SELECT * FROM unnest(%s::bigint[], %s::text[]) AS r(user_id, video_id)), "
                f"h AS (SELECT video_id, count(*) AS n FROM {projection} "
                "WHERE generation = %s AND (user_id, video_id) IN (SELECT user_id, video_id FROM risk) "
                "AND projected_state = 'LIKED' AND virtual_bucket + 0 = ANY(%s::int[]) GROUP BY video_id), "
                f"p AS (SELECT video_id, count(*) AS n FROM {projection} "
                "WHERE generation = %s AND video_id = ANY(%s) AND user_id = ANY(%s::bigint[]) "
                "AND (user_id, video_id) NOT IN (SELECT user_id, video_id FROM risk) "
                "AND projected_state = 'LIKED' AND virtual_bucket + 0 = ANY(%s::int[]) GROUP BY video_id) "
                "SELECT video_id, COALESCE(b.n, 0), COALESCE(h.n, 0), COALESCE(p.n, 0) "
                "FROM b FULL JOIN h USING (video_id) FULL JOIN p USING (video_id)",
                [gen.generation, chosen, buckets, hidden_users, hidden_videos, gen.generation, buckets,
                 gen.generation, chosen, policy_users, buckets],
            )
            for video_id, total, hidden, policy_hidden in cursor.fetchall():
                raw[video_id] += int(total)
                risk[video_id] += int(hidden)
                policy[video_id] += int(policy_hidden)
    watermark = {str(p): last_done for p, last_done in checkpoints_get(COUNT_CONSUMER).items()}
    # One statement for all chosen videos; the risk-hidden and policy-hidden counts are taken above; both are
    # subtracted from the new raw count.
    table = VideoDisplayCount._meta.db_table
    with transaction.atomic(using="default", durable=True), connections["default"].cursor() as cursor:
        if not leases.lease_hold(grant):
            report.status = "lease_lost"  # a newer run owns the snapshots now; its marks are its own
            return report
        cursor.executemany(
            f"INSERT INTO {table} AS d (video_id, generation, manifest_id, raw_active_count, risk_hidden_count, "
            "policy_hidden_count, display_count, snapshot_id, generated_at, watermark) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) ON CONFLICT (video_id) DO UPDATE SET "
            "generation = EXCLUDED.generation, manifest_id = EXCLUDED.manifest_id, "
            "raw_active_count = EXCLUDED.raw_active_count, risk_hidden_count = EXCLUDED.risk_hidden_count, "
            "policy_hidden_count = EXCLUDED.policy_hidden_count, display_count = EXCLUDED.display_count, "
            "snapshot_id = GREATEST(EXCLUDED.snapshot_id, d.snapshot_id + 1), generated_at = EXCLUDED.generated_at, "
            "watermark = EXCLUDED.watermark",
            [(v, gen.generation, gen.manifest_id, raw[v], risk[v], policy[v], max(0, raw[v] - risk[v] - policy[v]),
              report.snapshot_id, now, json.dumps(watermark)) for v in sorted(chosen)],
        )
    try:
        # After the commit: the views (and buckets) of every count-cache generation being written,
        # the ACTIVE one and the building one (CCACHE-3); read fresh, so a rebuild misses nothing.
        rows = VideoDisplayCount.objects.filter(video_id__in=chosen).values_list(
            "video_id", "display_count", "snapshot_id", "generated_at")
        count_cache.count_cache_views_write(rows=[(v, d, sid, at.isoformat().replace("+00:00", "Z"))
                                                  for v, d, sid, at in rows])
        count_cache.count_cache_buckets_refresh(video_ids=chosen)
    except RedisError as exc:
        metrics.inc("likes_cache_errors_total", cache="count_view")
        logger.warning("count view write failed: %s (the durable snapshot is served; the marks stay)",
                       exc.__class__.__name__)
        _marks_to_back(gen.generation, chosen, marks)
        report.status = "views_failed"
        report.videos = len(chosen)
        return report
    for alias in settings.COUNT_PARTITION_ALIASES:
        params = [(gen.generation, v, sp, seq) for v in chosen for sp, seq in marks[v].get(alias, [])]
        if params:
            with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
                cursor.executemany(
                    f"DELETE FROM {DirtyVideo._meta.db_table} WHERE generation = %s AND video_id = %s "
                    "AND source_partition = %s AND dirty_seq = %s",
                    params,
                )
    report.videos = len(chosen)
    metrics.inc("likes_display_snapshots_total", len(chosen))
    # The new display counts are readable now (views written). How long the oldest change each one
    # folds in waited since the projector applied it (its first dirty mark): applied -> displayCount.
    # Commit -> applied is likes_projection_lag_seconds; the marks carry no commit time. A mark moved to
    # the back after a failed view write restarts its clock, so this under-reports such outages.
    published_at = timezone.now()
    for video_id in chosen:
        metrics.observe("likes_display_snapshot_lag_seconds",  # M10: event -> count snapshot
                        (published_at - first_dirty[video_id]).total_seconds())
    return report


def _hot_videos() -> set[str]:
    """The videos the hot-spot figures of the last minute call hot (DEG-2): the dirty marks alone count projector
    batches, which a busy projector and frequent runs keep below the threshold however hot a video is. Redis down:
    none (every video refreshed as usual), counted."""
    try:
        return hotspots.hot_videos(60, settings.COUNT_HOT_WRITES_PER_MINUTE)
    except RedisError:
        metrics.inc("likes_hotspot_errors_total", step="throttle")
        return set()


def _marks_to_back(generation: int, chosen: list[str], marks) -> None:
    """Keep the marks of videos whose views were not written, behind every other dirty video (so a
    long cache outage does not hold newer videos' durable snapshots back)."""
    now = timezone.now()
    for alias in settings.COUNT_PARTITION_ALIASES:
        keys = [(v, sp) for v in chosen for sp, _seq in marks[v].get(alias, [])]
        if keys:
            with transaction.atomic(using=alias, durable=True):
                for video_id, source_partition in keys:
                    DirtyVideo.objects.using(alias).filter(generation=generation, video_id=video_id,
                                                           source_partition=source_partition).update(first_dirty_at=now)


def count_refresh_switch_set(*, video_id: str, paused: bool, reason: str, actor: Actor) -> CountRefreshSwitch:
    """Pause or resume one video's display refreshes (spec §8.6). A paused video keeps its dirty
    marks, so nothing is lost; its count resumes from the buckets when the switch is lifted.
    Transaction: switch row + audit record on `default`."""
    return pause_switch_set(CountRefreshSwitch, key=video_id, paused=paused, reason=reason, actor=actor,
                            action_prefix="count.refresh", target_type="video")
