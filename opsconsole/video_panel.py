"""One video's whole count machinery on one page (issue 14 §2, OPS-3): what the console's video panel
shows, read from every layer that holds a part of it, each read on its own so one store that does not
answer is named on the page instead of failing it.

Reads: the video's snapshot and the display snapshot on `default`; its vbucket rows from every count
partition (`counting.selectors.video_vbuckets_get`); the count cache's generations (`default`) and the
video's view in Redis; the count consumer's lag per stream partition from the stored gauges (a video's
events are spread over every stream partition: the aggregate is the (user, video) pair); the check
runs, open diffs, repairs and unfinished migrations from their ledgers on `default`. Nothing here
writes: the page's actions are links to the audited forms that do (a check, a repair, the refresh
switch), each checking its own permission.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from counting import cache, routing, selectors
from counting.models import CountRefreshSwitch, VideoDisplayCount
from likes_project.observability import scrape_families
from reconciliation.models import FINISHED_REPAIR_STATUSES, CheckDiff, CheckRun, DiffStatus, RepairRequest
from relations.selectors import VideoRecord, video_record_get

COUNT_CONSUMER = "count"
LIST_LIMIT = 20


@dataclass
class BucketLine:
    virtual_bucket: int
    partition: str  # where the row was read
    routed_partition: str  # where the active manifest routes the bucket
    epoch: int | None
    active_count: int
    frozen: bool
    routed: bool
    migration_id: int | None  # the unfinished migration moving this bucket, if any


@dataclass
class VideoPanel:
    video_id: str
    video: VideoRecord | None
    display: VideoDisplayCount | None
    snapshot_age_s: float | None
    generation: int | None = None
    manifest_id: int | None = None
    bucket_space_version: int | None = None
    virtual_buckets: int | None = None
    buckets: list[BucketLine] = field(default_factory=list)
    routed_sum: int = 0
    unrouted_rows: int = 0
    dirty_marks: int = 0
    cache_active: int | None = None
    cache_building: int | None = None
    cache_view: tuple[int, int, str] | None = None  # (count, version, as-of) of the ACTIVE generation
    lag: list[tuple[str, float, float]] = field(default_factory=list)  # (stream partition, entries, seconds)
    last_run: CheckRun | None = None
    migrations: list[tuple[object, list[int]]] = field(default_factory=list)
    diffs: list[CheckDiff] = field(default_factory=list)
    repairs: list[RepairRequest] = field(default_factory=list)
    refresh_switch: CountRefreshSwitch | None = None
    unreadable: list[str] = field(default_factory=list)  # the stores that did not answer

    @property
    def refresh_paused(self) -> bool:
        return bool(self.refresh_switch and self.refresh_switch.paused)

    @property
    def known(self) -> bool:
        """The service knows the video: a stored video row, a displayed count or a count bucket. An unknown one (a
        typo) is shown as such, with nothing to reconcile or repair."""
        return self.video is not None or self.display is not None or bool(self.buckets)

    @property
    def display_identity_holds(self) -> bool | None:
        """display = raw − risk_hidden − policy_hidden (REC-2), on the stored display row."""
        if self.display is None:
            return None
        d = self.display
        return d.display_count == max(0, d.raw_active_count - d.risk_hidden_count - d.policy_hidden_count)

    @property
    def raw_matches_buckets(self) -> bool | None:
        if self.display is None or self.unreadable:
            return None
        return self.display.raw_active_count == self.routed_sum


def _buckets(panel: VideoPanel) -> None:
    try:
        result = selectors.video_vbuckets_get(video_id=panel.video_id)
        gen = routing.active()
    except (routing.NoActiveGeneration, DatabaseError) as exc:
        panel.unreadable.append(f"routes ({exc.__class__.__name__})")
        return
    panel.generation, panel.manifest_id = gen.generation, gen.manifest_id
    panel.bucket_space_version, panel.virtual_buckets = gen.space.version, gen.space.virtual_buckets
    panel.unreadable += result.unreadable
    panel.routed_sum, panel.unrouted_rows, panel.dirty_marks = result.routed_sum, result.unrouted_rows, \
        result.dirty_marks
    panel.migrations = selectors.migrations_moving({r.virtual_bucket for r in result.rows})
    moving = {vb: m.pk for m, common in panel.migrations for vb in common}
    for r in result.rows:
        route = gen.routes[r.virtual_bucket] if r.virtual_bucket < len(gen.routes) else None
        panel.buckets.append(BucketLine(r.virtual_bucket, r.alias, r.routed_partition,
                                        route.epoch if route else None, r.active_count, r.frozen, r.routed,
                                        moving.get(r.virtual_bucket)))


def _count_cache(panel: VideoPanel) -> None:
    try:
        gens = selectors.count_cache_generations_get(fresh=True)
    except DatabaseError:
        panel.unreadable.append("count cache generations")
        return
    panel.cache_active, panel.cache_building = gens.active, gens.building
    if gens.active is None:
        return
    try:
        panel.cache_view = cache.view_read(gens.active, panel.video_id)
    except RedisError:
        panel.unreadable.append("count cache (Redis)")


def _lag(panel: VideoPanel) -> None:
    families = {name: samples for name, _h, samples in scrape_families()}
    seconds = {lb["partition"]: v for lb, v in families.get("likes_consumer_lag_seconds", [])
               if lb.get("consumer") == COUNT_CONSUMER}
    panel.lag = sorted(((lb["partition"], float(v or 0), float(seconds.get(lb["partition"]) or 0))
                        for lb, v in families.get("likes_consumer_lag_entries", [])
                        if lb.get("consumer") == COUNT_CONSUMER), key=lambda t: int(t[0]))


def _ledgers(panel: VideoPanel) -> None:
    v = panel.video_id
    panel.last_run = (CheckRun.objects.filter(Q(scope__videos__contains=[v]) | Q(scope__all=True))
                      .order_by("-id").first())
    panel.diffs = list(CheckDiff.objects.filter(video_id=v, status__in=(DiffStatus.NEW, DiffStatus.FIXING))
                       .order_by("-id")[:LIST_LIMIT])
    # A repair of this video, or a restore of the whole projection (no video list: it touches every video).
    panel.repairs = list(RepairRequest.objects.filter(Q(params__videos__contains=[v]) | ~Q(params__has_key="videos"))
                         .exclude(status__in=FINISHED_REPAIR_STATUSES).order_by("-id")[:LIST_LIMIT])
    panel.refresh_switch = CountRefreshSwitch.objects.filter(video_id=v).first()


def video_panel_get(*, video_id: str, now: dt.datetime | None = None) -> VideoPanel:
    """Everything the console shows about one video's count (OPS-3). Reads only."""
    now = now or timezone.now()
    display = VideoDisplayCount.objects.filter(video_id=video_id).first()
    panel = VideoPanel(video_id, video_record_get(video_id=video_id), display,
                       None if display is None else max(0.0, (now - display.generated_at).total_seconds()))
    _buckets(panel)
    _count_cache(panel)
    _lag(panel)
    _ledgers(panel)
    return panel
