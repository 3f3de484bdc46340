"""Retiring what counting serves for deleted videos (issue 5 §3): their display counts, and (through
`counting.services.reverse.retire`) their reverse-index rows; tracked per video (issue 9 §4), so a run
only works on a bounded batch of deleted videos it has not retired yet.

A video's rows can come back after a pass deleted them: the count and reverse projectors apply the
events of a deleted video like any other (REV-6: serving filters at read time), and its events may
still be unpublished (outbox lag) or accepted shortly after the deletion (the visibility cache's TTL).
So a deleted video is PENDING until (1) RETIRE_SETTLE_S after its deletion no outbox row older than
that is left unpublished, at which point the stream heads become its fence (every event that can
concern it is at or below them); (2) both projectors' checkpoints, read before a pass, are past the
fence; (3) that pass left none of its rows. Then it is RETIRED and never loaded again, unless it is
deleted again (a higher snapshot version) or a newer reverse-index generation, whose backfill
replays the facts of deleted videos too, becomes ACTIVE.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from counting import cache
from counting.models import (
    CountCacheGeneration,
    DirtyVideo,
    RetirementStatus,
    ReverseIndexGeneration,
    VideoDisplayCount,
    VideoRetirement,
    VideoRetirementScan,
)
from counting.services.projection import COUNT_CONSUMER
from counting.services.reverse.projector import REVERSE_CONSUMER
from counting.services.reverse.retire import reverse_index_retire_deleted
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.generations import LIVE, GenerationStatus
from relations.selectors.retire import DeletedVideo, deleted_videos_list, outbox_oldest_unpublished_at

logger = logging.getLogger(__name__)


def count_display_retire(*, video_ids: list[str]) -> dict[str, int]:
    """Stop serving the counts of deleted videos: delete their display snapshots, their Redis views in
    every live count-cache generation, and their pending dirty marks, so no refresh brings them back.

    The durable vbuckets and LIKE_COUNT_PROJECTION rows stay: they are the projection's evidence for
    reconciliation and would be needed if a deletion were ever reverted. Idempotent; a job, never a
    request. Transaction: one on `default` for the snapshots, one per partition for the dirty marks.
    """
    if not video_ids:
        return {"snapshots": 0, "views": 0, "dirty": 0}
    with transaction.atomic(using="default", durable=True):
        snapshots = VideoDisplayCount.objects.filter(video_id__in=video_ids).delete()[0]
    dirty = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with transaction.atomic(using=alias, durable=True):
            dirty += DirtyVideo.objects.using(alias).filter(video_id__in=video_ids).delete()[0]
    views = 0
    generations = list(CountCacheGeneration.objects.filter(status__in=LIVE)
                       .values_list("generation", flat=True))
    try:
        views = cache.views_delete(generations, video_ids)
    except RedisError as exc:
        logger.warning("count views of retired videos not deleted (Redis: %s); they expire by TTL",
                       exc.__class__.__name__)
    return {"snapshots": snapshots, "views": views, "dirty": dirty}


@dataclass
class RetireRunReport:
    discovered: int = 0  # deletions newly tracked (or tracked again: deleted again) by this run
    reopened: int = 0  # retired videos made PENDING again by a newer ACTIVE reverse-index generation
    videos: int = 0  # deleted videos whose rows this run deleted (at most RETIRE_BATCH_VIDEOS)
    revived: int = 0  # tracked videos found undeleted: left alone
    fenced: int = 0
    retired: int = 0
    pending: int = 0  # still PENDING after this run
    deleted: dict[str, dict[str, int]] = field(default_factory=dict)  # alias -> table -> rows
    more: bool = False  # a chunk was full: rows may remain, run again
    counts: dict[str, int] = field(default_factory=lambda: {"snapshots": 0, "views": 0, "dirty": 0})


def _active_reverse_generation() -> int | None:
    return (ReverseIndexGeneration.objects.filter(status=GenerationStatus.ACTIVE)
            .values_list("generation", flat=True).first())


def _reopen_for_new_generation(*, active: int | None, batch: int) -> int:
    """PENDING again: retired videos whose retirement predates the ACTIVE reverse-index generation."""
    if active is None:
        return 0
    with transaction.atomic(using="default", durable=True):
        ids = list(VideoRetirement.objects.select_for_update(skip_locked=True)
                   .filter(status=RetirementStatus.RETIRED)
                   .filter(Q(reverse_generation__lt=active) | Q(reverse_generation__isnull=True))
                   .order_by("video_id").values_list("video_id", flat=True)[:batch])
        return VideoRetirement.objects.filter(video_id__in=ids).update(
            status=RetirementStatus.PENDING, retired_at=None, updated_at=timezone.now())


def _discover(*, batch: int, settle: dt.timedelta) -> int:
    """Track the next deletions after the scan cursor (at most `batch`) and move the cursor.

    The cursor is never moved past `now - settle`: a snapshot's updated_at is its transaction's start,
    so a deletion committing late may carry a time just behind what an earlier scan reached; the rows
    re-read inside that window are already tracked at their version and skipped.
    Transaction: one on `default`, the scan row locked (two runs discover one after the other)."""
    VideoRetirementScan.objects.get_or_create(id=1)
    with transaction.atomic(using="default", durable=True):
        scan = VideoRetirementScan.objects.select_for_update().get(id=1)
        now = timezone.now()
        found = deleted_videos_list(after=(scan.after_at, scan.after_video_id), limit=batch)
        tracked = {r.video_id: r for r in VideoRetirement.objects.select_for_update()
                   .filter(video_id__in=[d.video_id for d in found]).order_by("video_id")}
        fresh, changed = [], 0
        for d in found:
            row = tracked.get(d.video_id)
            if row is None:
                fresh.append(VideoRetirement(video_id=d.video_id, version=d.version, deleted_at=d.deleted_at,
                                             updated_at=now))
            elif row.version < d.version:  # deleted again after an undelete: retire again, fence anew
                changed += VideoRetirement.objects.filter(video_id=d.video_id).update(
                    version=d.version, deleted_at=d.deleted_at, status=RetirementStatus.PENDING, fence=None,
                    reverse_generation=None, retired_at=None, updated_at=now)
        VideoRetirement.objects.bulk_create(fresh)
        settled = (now - settle, "")
        position = (found[-1].deleted_at, found[-1].video_id) if len(found) >= batch else settled
        position = min(position, settled)
        if scan.after_at is None or position > (scan.after_at, scan.after_video_id):
            scan.after_at, scan.after_video_id = position
        scan.scanned_at = now
        scan.save()
    return len(fresh) + changed


def _restart(rows: list[tuple[VideoRetirement, DeletedVideo]], now) -> None:
    """A tracked deletion whose snapshot moved to a higher version (undeleted and deleted again before
    the cursor reached it): track the new deletion, with a new fence."""
    with transaction.atomic(using="default", durable=True):
        for row, d in sorted(rows, key=lambda pair: pair[0].video_id):
            VideoRetirement.objects.filter(video_id=row.video_id, version=row.version).update(
                version=d.version, deleted_at=d.deleted_at, fence=None, updated_at=now)


def _set_status(rows: list[VideoRetirement], now, **fields) -> int:
    """Compare-and-set on (video, version, PENDING): a concurrent run or rediscovery wins."""
    n = 0
    with transaction.atomic(using="default", durable=True):
        for row in sorted(rows, key=lambda r: r.video_id):
            n += VideoRetirement.objects.filter(video_id=row.video_id, version=row.version,
                                                status=RetirementStatus.PENDING).update(updated_at=now, **fields)
    return n


def _fence_passed(fence: dict[str, str], done: dict[str, dict[int, str]]) -> bool:
    for partition, head in fence.items():
        if streams.entry_id_key(head) <= (0, 0):
            continue
        for checkpoints in done.values():
            last = checkpoints.get(int(partition))
            if last is None or streams.entry_id_key(last) < streams.entry_id_key(head):
                return False
    return True


def _fences_set(rows: list[VideoRetirement], *, settle: dt.timedelta, now) -> list[VideoRetirement]:
    """Give a fence (the stream heads now) to each row whose deletion has settled: RETIRE_SETTLE_S
    passed and no outbox row created up to then is still unpublished, so every event that may
    concern the video is in the log, at or below the heads."""
    oldest = outbox_oldest_unpublished_at()
    ready = [r for r in rows if r.fence is None and now >= r.deleted_at + settle
             and (oldest is None or oldest > r.deleted_at + settle)]
    if not ready:
        return []
    try:
        heads = {str(p): streams.last_generated_id(p) for p in streams.all_partitions()}
    except RedisError as exc:
        logger.warning("retirement fences not taken (Redis: %s); the next run tries again", exc.__class__.__name__)
        return []
    _set_status(ready, now, fence=heads)
    for r in ready:
        r.fence = heads
    return ready


def deleted_videos_retire(*, limit: int = 1000, rounds: int = 20, batch: int | None = None) -> RetireRunReport:
    """Retire a bounded batch (RETIRE_BATCH_VIDEOS) of deleted videos not retired yet: track new
    deletions, delete the batch's reverse rows (a bounded chunk per partition and table per round,
    until none is left or `rounds` ran) and display counts, and mark RETIRED those whose fence both
    projectors had passed before the pass. A beat job.

    Transaction: the tracking rows change in short transactions on `default`; each deletion is its
    own service's. Idempotency: deleting what is gone deletes nothing; the status changes are
    compare-and-set on (video, version), so a duplicate or overlapping run is harmless."""
    batch = max(1, int(batch or settings.RETIRE_BATCH_VIDEOS))
    settle = dt.timedelta(seconds=float(settings.RETIRE_SETTLE_S))
    report = RetireRunReport()
    active = _active_reverse_generation()
    report.reopened = _reopen_for_new_generation(active=active, batch=batch)
    report.discovered = _discover(batch=batch, settle=settle)
    pending = list(VideoRetirement.objects.filter(status=RetirementStatus.PENDING)
                   .order_by("deleted_at", "video_id")[:batch])
    if pending:
        _retire_batch(pending, report, active=active, limit=limit, rounds=rounds, settle=settle)
    report.pending = VideoRetirement.objects.filter(status=RetirementStatus.PENDING).count()
    return report


def _retire_batch(pending: list[VideoRetirement], report: RetireRunReport, *, active: int | None, limit: int,
                  rounds: int, settle: dt.timedelta) -> None:
    now = timezone.now()
    current = {d.video_id: d for d in deleted_videos_list(video_ids=[r.video_id for r in pending],
                                                          limit=len(pending))}
    report.revived = _set_status([r for r in pending if r.video_id not in current], now,
                                 status=RetirementStatus.REVIVED)
    moved = [(r, current[r.video_id]) for r in pending
             if r.video_id in current and current[r.video_id].version != r.version]
    if moved:
        _restart(moved, now)
    live = [r for r in pending if r.video_id in current and current[r.video_id].version == r.version]
    report.fenced = len(_fences_set(live, settle=settle, now=now))
    # Read before the pass: every event at or below these checkpoints was applied before it deleted.
    done = {c: checkpoints_get(c) for c in (REVERSE_CONSUMER, COUNT_CONSUMER)}
    ids = [r.video_id for r in live] + [r.video_id for r, _d in moved]  # a moved video is still deleted
    report.videos = len(ids)
    for _ in range(max(1, rounds)):
        chunk = reverse_index_retire_deleted(video_ids=ids, limit=limit)
        for alias, counts in chunk.deleted.items():
            for table_name, n in counts.items():
                report.deleted.setdefault(alias, {}).setdefault(table_name, 0)
                report.deleted[alias][table_name] += n
        report.more = chunk.more
        if not chunk.more:
            break
    report.counts = count_display_retire(video_ids=ids)
    if report.more:
        return  # rows may remain: nothing is retired on this run
    done_rows = [r for r in live if r.fence is not None and _fence_passed(r.fence, done)]
    report.retired = _set_status(done_rows, timezone.now(), status=RetirementStatus.RETIRED,
                                 retired_at=timezone.now(), reverse_generation=active)
