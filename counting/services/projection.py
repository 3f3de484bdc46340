"""The count projector (PROJ-1 … PROJ-13, BKT-1 … BKT-5, ROUTE-5) on the shared consumer framework.

For a batch of events read from one stream partition:
  virtual bucket from the generation's bucket space -> route from the active manifest -> one group
  per physical count partition -> per group ONE local transaction that checks the consumer fence and
  the route fence, skips receipted positions, applies the versioned absolute-state rule, adds the net
  deltas to the sparse vbuckets, writes the receipts and the dirty marks.
The framework advances the checkpoint only over entries whose group committed. What this shares with
the reverse-index projector (fences, receipts, the fold, the rows created first) is `group_kit`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from counting import hotspots, routing
from counting.models import (
    CountEventReceipt,
    CountGenerationFence,
    CountRouteFence,
    DirtyVideo,
    LikeCountProjection,
    VideoLikeCountVbucket,
)
from counting.services import group_kit as kit
from likes_project import metrics
from likes_project.dbraw import raw_cursor
from likes_project.eventlog.consumer import NonRetryable, Retryable
from likes_project.eventlog.retry import retryable_from
from likes_project.eventlog.streams import StreamEntry
from relations import routing as relation_routing
from relations.events import LIKED, validate_event

logger = logging.getLogger(__name__)

COUNT_CONSUMER = "count"


class RouteEpochMismatch(Retryable):
    """ROUTE_EPOCH_MISMATCH: the partition's fence refuses this bucket at this epoch (ROUTE-5)."""

    retry_reason = "route_epoch"


class GenerationMoved(Retryable):
    """The partition's generation fence names another generation: the active one was switched (a
    restore, issue 12) and this pass still routes to the old one. Refreshed and retried."""

    retry_reason = "generation_moved"


class NegativeBucket(NonRetryable):
    """Applying the event would take a bucket below zero: an invariant violation (PROJ-12)."""


class BucketFrozen(NonRetryable):
    """The bucket stopped propagating after a negative attempt; it waits for a repair."""


@dataclass(frozen=True)
class Event:
    entry: StreamEntry
    user_id: int
    video_id: str
    version: int
    state: str
    event_id: str
    changed_at: str
    vb: int
    route: routing.Route


def _check_route_fence(cursor, gen: routing.GenerationRoutes, events: list[Event]) -> None:
    wanted = {e.vb: e.route.epoch for e in events}
    cursor.execute(
        f"SELECT virtual_bucket, route_epoch, state FROM {kit.table(CountRouteFence)} "
        # In bucket order: a migration's horizon locks the same rows in the same order (no deadlock).
        "WHERE bucket_space_version = %s AND virtual_bucket = ANY(%s) ORDER BY virtual_bucket FOR SHARE",
        [gen.space.version, sorted(wanted)],
    )
    found = {vb: (epoch, state) for vb, epoch, state in cursor.fetchall()}
    for vb, epoch in wanted.items():
        if found.get(vb) != (epoch, "ACTIVE"):
            metrics.inc("likes_route_epoch_mismatch_total")
            raise RouteEpochMismatch(f"ROUTE_EPOCH_MISMATCH bucket {vb}: fence {found.get(vb)}, wanted e{epoch}")


def _check_generation_fence(cursor, generation: int) -> None:
    cursor.execute(f"SELECT generation FROM {kit.table(CountGenerationFence)} WHERE key = 'active'")
    row = cursor.fetchone()
    if row is not None and row[0] != generation:  # no row: a partition not yet fenced accepts the active one
        raise GenerationMoved(f"this partition accepts generation {row[0]}, not {generation}")


@dataclass
class Fold:
    """The versioned absolute-state rule (PROJ-1, PROJ-2) applied in stream order, in memory."""

    verdicts: dict[str, str] = field(default_factory=dict)  # entry id -> applied | duplicate | stale
    version_jumps: int = 0  # applied events more than one version above the relation's (M8: one in between is late)
    delta: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))  # (video, vb) -> net
    relations: dict[tuple[int, str], tuple[str, int, int]] = field(default_factory=dict)  # -> (state, v, vb)


def fold_events(events: list[Event], before: dict[tuple[int, str], tuple[str, int]]) -> Fold:
    """Unknown relations start as UNLIKED v0; a version not above the current one changes nothing;
    a higher one moves the state and contributes +1/-1 only when the state really flips."""
    fold = Fold()

    def apply(e: Event, current):
        was_liked = current is not None and current[0] == LIKED
        if e.version > (current[1] if current is not None else 0) + 1:
            fold.version_jumps += 1
        if (e.state == LIKED) != was_liked:
            fold.delta[(e.video_id, e.vb)] += 1 if e.state == LIKED else -1
        fold.relations[(e.user_id, e.video_id)] = (e.state, e.version, e.vb)
        return (e.state, e.version)

    _state, verdicts = kit.fold_versions(events, before, key=lambda e: (e.user_id, e.video_id),
                                     version=lambda e: e.version, stored_version=lambda cur: cur[1], apply=apply)
    fold.verdicts = {e.entry.entry_id: verdict for e, verdict in verdicts}
    return fold


def _ensure_bucket_rows(alias: str, gen: routing.GenerationRoutes, events: list[Event], now) -> None:
    """Create the group's missing bucket rows (count 0) before the group transaction (D31): without
    it, one transaction's ordered SELECT ... FOR UPDATE and another's INSERT of a row it found missing
    lock in different orders and deadlock whenever several partitions write a newly hot video."""
    kit.rows_ensure(alias, VideoLikeCountVbucket, columns=[("video_id", "text"), ("virtual_bucket", "int")],
                rows=[(e.video_id, e.vb) for e in events],
                defaults={"generation": "%s", "bucket_space_version": "%s", "active_count": "0",
                          "bucket_version": "0", "frozen": "false", "updated_at": "%s"},
                params=[gen.generation, gen.space.version, now], conflict=("generation", "video_id", "virtual_bucket"))


def _isolate_bad_buckets(cursor, alias: str, gen: routing.GenerationRoutes, buckets, stored: dict, fold: Fold,
                         now) -> dict[tuple[str, int], Exception]:
    """Anomaly isolation (PROJ-12): a frozen bucket, or one that would go negative (which it then
    freezes), stops here; its events are set aside while the rest of the group goes on."""
    bad: dict[tuple[str, int], Exception] = {}
    for key in buckets:
        count, frozen = stored.get(key, (0, False))
        if frozen:
            bad[key] = BucketFrozen(f"bucket {key} is frozen after an earlier negative attempt")
        elif count + fold.delta.get(key, 0) < 0:
            bad[key] = NegativeBucket(f"bucket {key} would go to {count + fold.delta[key]}")
            metrics.inc("likes_negative_bucket_rejections_total")
            logger.error("ALERT negative bucket %s on %s: bucket frozen, events dead-lettered", key, alias)
            cursor.execute(
                f"INSERT INTO {kit.table(VideoLikeCountVbucket)} AS b (generation, video_id, virtual_bucket, "
                "bucket_space_version, active_count, bucket_version, frozen, updated_at) "
                "VALUES (%s, %s, %s, %s, 0, 0, true, %s) ON CONFLICT (generation, video_id, virtual_bucket) "
                "DO UPDATE SET frozen = true, updated_at = EXCLUDED.updated_at",
                [gen.generation, key[0], key[1], gen.space.version, now],
            )
    return bad


def _apply_group(alias: str, gen: routing.GenerationRoutes, events: list[Event], *, consumer: str,
                 partition: int, token: int, live: bool = True) -> kit.GroupOutcome:
    """One local transaction on count partition `alias` (PROJ-3, PROJ-7 step 3). `live`: the live
    consumer, which writes only the generation the partition's generation fence accepts (a restore's
    replay into its SHADOW generation passes False)."""
    out = kit.GroupOutcome()
    g = gen.generation
    now = timezone.now()
    _ensure_bucket_rows(alias, gen, events, now)
    with transaction.atomic(using=alias, durable=True), raw_cursor(alias) as cursor:
        kit.consumer_fence_check(cursor, consumer, partition, token)
        if live:
            _check_generation_fence(cursor, g)
        _check_route_fence(cursor, gen, events)
        receipted = kit.receipts_seen(cursor, CountEventReceipt, generations=[g], partition=partition,
                                  refs=[e.entry.entry_id for e in events])
        fresh = []
        for e in events:
            if (g, e.entry.entry_id) in receipted:  # PROJ-4: a replay after a crash past the commit
                out.add(e.entry.entry_id, kit.DUPLICATE)
            else:
                fresh.append(e)
        if not fresh:
            return out
        before = kit.rows_lock(cursor, LikeCountProjection, keys=[(e.user_id, e.video_id) for e in fresh],
                               columns=[("user_id", "bigint"), ("video_id", "text")],
                               values=["projected_state", "projected_version"], generation=g)
        buckets = sorted({(e.video_id, e.vb) for e in fresh})
        stored = kit.rows_lock(cursor, VideoLikeCountVbucket, keys=buckets, values=["active_count", "frozen"],
                               columns=[("video_id", "text"), ("virtual_bucket", "int")], generation=g)
        fold = fold_events(fresh, before)
        bad = _isolate_bad_buckets(cursor, alias, gen, buckets, stored, fold, now)
        if bad:
            for e in fresh:
                if (e.video_id, e.vb) in bad:
                    out.failed[e.entry.entry_id] = bad[(e.video_id, e.vb)]
            # Fold again without the isolated buckets' events (a relation never changes bucket).
            fresh = [e for e in fresh if (e.video_id, e.vb) not in bad]
            fold = fold_events(fresh, before)
        _write(cursor, gen, fresh, stored, fold, partition, now)
        for e in fresh:
            out.add(e.entry.entry_id, fold.verdicts[e.entry.entry_id])
    if live:  # a restore's replay applies old events: their age is not the pipeline's lag
        _observe_lag(fresh, fold, now)
        _observe_jumps(fold, consumer)
    return out


# Every write of a group is ONE set-based statement over arrays (issue 15 §3): a batch of 500 events
# was ~1,800 single-row statements through executemany, each parsed, bound and executed on its own.
# The keys within each statement are distinct (one row per relation, bucket, video, entry), which
# ON CONFLICT DO UPDATE requires, and sorted, so concurrent groups lock rows in one order.
PROJECTION_UPSERT_SQL = (
    f"INSERT INTO {kit.table(LikeCountProjection)} AS p (generation, user_id, video_id, projected_state, "
    "projected_version, bucket_space_version, virtual_bucket, updated_at) "
    "SELECT %s, u, v, s, ver, %s, vb, %s FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[], "
    "%s::int[]) AS t(u, v, s, ver, vb) ORDER BY u, v "
    "ON CONFLICT (generation, user_id, video_id) DO UPDATE SET projected_state = EXCLUDED.projected_state, "
    "projected_version = EXCLUDED.projected_version, updated_at = EXCLUDED.updated_at "
    "WHERE p.projected_version < EXCLUDED.projected_version"
)
BUCKET_ADD_SQL = (
    f"UPDATE {kit.table(VideoLikeCountVbucket)} AS b SET active_count = b.active_count + d.delta, "
    "bucket_version = b.bucket_version + 1, updated_at = %s "
    "FROM unnest(%s::text[], %s::int[], %s::bigint[]) AS d(v, vb, delta) "
    "WHERE b.generation = %s AND b.video_id = d.v AND b.virtual_bucket = d.vb"
)
# Rows we do not hold can only start positive (a negative one was isolated) and may race with another
# group's insert, hence ON CONFLICT. A CHECK constraint is evaluated on the proposed INSERT row, so a
# negative delta must never travel as an insert.
BUCKET_INSERT_SQL = (
    f"INSERT INTO {kit.table(VideoLikeCountVbucket)} AS b (generation, video_id, virtual_bucket, "
    "bucket_space_version, active_count, bucket_version, frozen, updated_at) "
    "SELECT %s, v, vb, %s, delta, 1, false, %s FROM unnest(%s::text[], %s::int[], %s::bigint[]) AS d(v, vb, delta) "
    "ORDER BY v, vb ON CONFLICT (generation, video_id, virtual_bucket) DO UPDATE SET active_count = "
    "b.active_count + EXCLUDED.active_count, bucket_version = b.bucket_version + 1, updated_at = EXCLUDED.updated_at"
)
DIRTY_MARK_SQL = (
    f"INSERT INTO {kit.table(DirtyVideo)} AS d (generation, video_id, source_partition, dirty_seq, "
    "first_dirty_at, last_dirty_at) SELECT %s, v, %s, 1, %s, %s FROM unnest(%s::text[]) AS t(v) ORDER BY v "
    "ON CONFLICT (generation, video_id, source_partition) "
    "DO UPDATE SET dirty_seq = d.dirty_seq + 1, last_dirty_at = EXCLUDED.last_dirty_at"
)


def _write(cursor, gen: routing.GenerationRoutes, fresh: list[Event], stored: dict, fold: Fold, partition: int,
           now) -> None:
    g = gen.generation
    if fold.relations:
        rows = sorted(fold.relations.items())
        cursor.execute(PROJECTION_UPSERT_SQL, [g, gen.space.version, now, [u for (u, _v), _ in rows],
                                               [v for (_u, v), _ in rows], [r[0] for _k, r in rows],
                                               [r[1] for _k, r in rows], [r[2] for _k, r in rows]])
    nonzero = sorted((k, d) for k, d in fold.delta.items() if d != 0)
    existing = [(v, vb, d) for (v, vb), d in nonzero if (v, vb) in stored]
    new = [(v, vb, d) for (v, vb), d in nonzero if (v, vb) not in stored]
    if existing:
        cursor.execute(BUCKET_ADD_SQL, [now, *map(list, zip(*existing, strict=True)), g])
    if new:
        cursor.execute(BUCKET_INSERT_SQL, [g, gen.space.version, now, *map(list, zip(*new, strict=True))])
    if nonzero:
        cursor.execute(DIRTY_MARK_SQL, [g, partition, now, now, sorted({v for (v, _), _ in nonzero})])
    kit.receipts_write(cursor, CountEventReceipt, partition=partition, now=now,
                   rows=[(g, e.entry.entry_id, e.event_id, fold.verdicts[e.entry.entry_id]) for e in fresh])


def _observe_lag(fresh: list[Event], fold: Fold, now) -> None:
    lags = [(now - t).total_seconds() for e in fresh if fold.verdicts.get(e.entry.entry_id) == kit.APPLIED
            and (t := parse_datetime(e.changed_at)) is not None]
    for lag in lags:
        metrics.observe("likes_projection_lag_seconds", lag)
    slow = [lag for lag in lags if lag > settings.COUNT_CONVERGENCE_TARGET_S]
    if slow:
        # Beyond the convergence target (issue 3 §4): counted, and logged once per group.
        metrics.inc("likes_projection_over_target_total", len(slow))
        logger.warning("projection lag %.2fs exceeds the %.1fs target on %s events", max(slow),
                       settings.COUNT_CONVERGENCE_TARGET_S, len(slow))


def _observe_jumps(fold: Fold, consumer: str) -> None:
    """M8 and M12: versions that skipped one (an event in between arrives late, or never), and buckets that moved by
    BUCKET_JUMP_ALERT or more in one group (a replay storm, a bulk script: worth a look, never refused)."""
    if fold.version_jumps:
        metrics.inc("likes_version_jumps_total", fold.version_jumps, consumer=consumer)
    jumps = sum(1 for d in fold.delta.values() if abs(d) >= settings.BUCKET_JUMP_ALERT)
    if jumps:
        metrics.inc("likes_bucket_jumps_total", jumps, consumer=consumer)


class CountProjector:
    """The count projection consumer (`counting.project_partition` runs it per stream partition)."""

    name = COUNT_CONSUMER

    def validate(self, entry: StreamEntry) -> None:
        validate_event(entry.event)

    def apply(self, entries: list[StreamEntry], *, consumer: str, partition: int, token: int):
        return apply_entries(routing.active(), entries, consumer=consumer, partition=partition, token=token)


def apply_entries(gen: routing.GenerationRoutes, entries: list[StreamEntry], *, consumer: str, partition: int,
                  token: int, live: bool = True):
    """Apply stream entries of one partition to generation `gen`: one group per physical count partition,
    each one local transaction. The live projector applies to the active generation; a restore's replay
    (issue 12) to its SHADOW one, with `live=False`."""
    groups: dict[str, list[Event]] = defaultdict(list)
    for entry in entries:
        ev = entry.event
        vb = routing.virtual_bucket(gen.space, ev["videoId"], ev["userId"])
        route = gen.routes[vb]
        groups[route.partition].append(Event(entry, ev["userId"], ev["videoId"], ev["relationVersion"],
                                             ev["absoluteState"], ev["eventId"], ev["stateChangedAt"], vb,
                                             route))
    outcome = kit.GroupOutcome()
    for alias, events in sorted(groups.items()):
        try:
            outcome.merge(_apply_group(alias, gen, events, consumer=consumer, partition=partition, token=token,
                                       live=live))
        except (RouteEpochMismatch, GenerationMoved) as exc:
            routing.reset_cache()  # refresh the route; the entries are retried, never acked (PROJ-4)
            outcome.failed.update({e.entry.entry_id: exc for e in events})
        except (Retryable, DatabaseError) as exc:
            logger.warning("count group on %s failed (%s); it will be replayed", alias, exc.__class__.__name__)
            outcome.failed.update({e.entry.entry_id: retryable_from(exc) for e in events})
    if live:  # where the writes went (M4, M11), after the commits; a restore's replay is not traffic
        hotspots.record((alias, e.video_id, e.vb, e.user_id, relation_routing.alias_for_user(e.user_id))
                        for alias, events in groups.items() for e in events
                        if outcome.verdicts.get(e.entry.entry_id) == kit.APPLIED)
    return kit.apply_result(entries, outcome)
