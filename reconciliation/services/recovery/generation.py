"""A count projection generation built from a recovery snapshot (SNAP-5 … SNAP-9; issue 12, issue 29 §6): its
artifacts loaded, the stream replayed onto it, its identity and coverage checked, the switch that makes it
ACTIVE, and the rows of replaced generations dropped. The restore (`restore`) and the bucket-space change
(`bucket_space`) build generations with these steps."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from counting import routing
from counting.models import (
    CountEventReceipt,
    CountGenerationFence,
    CountProjectionGeneration,
    DirtyVideo,
    LikeCountProjection,
    ProjectionGenerationStatus,
    VideoLikeCountVbucket,
)
from counting.services import route_switch
from counting.services.projection import COUNT_CONSUMER, apply_entries
from likes_project import leases
from likes_project.audit.services import Actor, audit_record
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.eventlog.retry import NonRetryable
from reconciliation.services import checks, evidence
from reconciliation.services.cut import count_leases_take
from reconciliation.services.recovery import artifacts
from reconciliation.services.recovery.snapshot import KINDS
from relations.events import validate_event

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)
REPLAY_CONSUMER = "count-restore"  # the consumer fence name of a restore's replay on the count partitions
_REPLAY_BATCH = 500
_REPLAY_ATTEMPTS = 20
Tick = Callable[[], None] | None


class RestoreFailed(Exception):
    """The restored generation is not right (an identity or coverage diff, a replay that cannot finish,
    an active generation that moved, the time limit): it is not switched in."""


# --- load --------------------------------------------------------------------------------------------


def _load_artifact(alias: str, record: dict, generation: int, *, tick: Tick = None) -> int:
    """Stream one artifact into `generation` on `alias` in one transaction; refuse (roll back) when its
    SHA-256 is not the recorded one by the end of the stream. Idempotent: the generation's rows of that
    table on `alias` (only ever this artifact's) are replaced."""
    model, columns, _order = KINDS[record["kind"]]
    table, cols = model._meta.db_table, ", ".join(columns)
    header, chunks, hashing = artifacts.artifact_stream(record["uri"])
    if header.get("columns") != list(columns):
        raise artifacts.ArtifactInvalid(f"artifact {record['uri']} has columns {header.get('columns')}")
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 0")  # a whole table's rows in one COPY and one INSERT
        cursor.execute(f"CREATE TEMP TABLE restore_rows ON COMMIT DROP AS SELECT {cols} FROM {table} WITH NO DATA")
        with cursor.cursor.copy(f"COPY restore_rows ({cols}) FROM STDIN") as copy:
            for chunk in chunks:
                copy.write(chunk)
                if tick is not None:
                    tick()
        if hashing.sha.hexdigest() != record["sha256"]:
            raise artifacts.ArtifactInvalid(f"checksum_mismatch: {record['uri']} changed while it was loaded")
        cursor.execute(f"DELETE FROM {table} WHERE generation = %s", [generation])
        cursor.execute(f"INSERT INTO {table} (generation, {cols}) SELECT %s, {cols} FROM restore_rows",
                       [generation])
        loaded = cursor.rowcount
        if loaded != record["rows"]:
            raise artifacts.ArtifactInvalid(f"row_count_mismatch: {record['uri']} loaded {loaded} rows, recorded "
                                            f"{record['rows']}")
        if record["kind"] == "vbuckets":
            now = timezone.now()
            cursor.execute(
                f"INSERT INTO {DirtyVideo._meta.db_table} (generation, video_id, source_partition, dirty_seq, "
                "first_dirty_at, last_dirty_at) SELECT DISTINCT %s, video_id, 0, 1, %s, %s FROM "
                f"{VideoLikeCountVbucket._meta.db_table} WHERE generation = %s ON CONFLICT DO NOTHING",
                [generation, now, now, generation])
    return loaded


def _analyze() -> None:
    # A whole generation arrived in bulk: without fresh statistics the replay's row locks are planned as
    # scans of it (bench/snapshot: 193 ms against 0.5 ms a lock at 10,000 rows), whatever autovacuum does.
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute("SET statement_timeout = 0")
            for model in (LikeCountProjection, VideoLikeCountVbucket):
                cursor.execute(f"ANALYZE {model._meta.db_table}")
            cursor.execute("RESET statement_timeout")


# --- replay ------------------------------------------------------------------------------------------


def _replay_partition(gen: routing.GenerationRoutes, p: int, after: str, *, until: str | None,
                      token: int, tick: Tick = None) -> tuple[str, int]:
    """Apply partition p's entries after `after` (up to `until` included, else to the head) to `gen`;
    returns the new position and how many entries were applied. Poison entries are passed over, as the
    live consumer dead-letters them."""
    applied = 0
    end = streams.entry_id_key(until) if until is not None else None
    while True:
        if tick is not None:
            tick()
        entries = streams.read_after(p, after, _REPLAY_BATCH)
        if end is not None:
            entries = [e for e in entries if streams.entry_id_key(e.entry_id) <= end]
        if not entries:
            return after, applied
        valid = []
        for e in entries:
            try:
                validate_event(e.event)
                valid.append(e)
            except NonRetryable:
                continue
        for attempt in range(_REPLAY_ATTEMPTS):
            result = apply_entries(gen, valid, consumer=REPLAY_CONSUMER, partition=p, token=token, live=False)
            if not result.failed:
                break
            poison = {i for i, exc in result.failed.items() if isinstance(exc, NonRetryable)}
            valid = [e for e in valid if e.entry_id not in result.done and e.entry_id not in poison]
            if not valid:
                break
            time.sleep(min(2.0, 0.1 * (attempt + 1)))  # a store hiccup: retry the group, bounded attempts
        else:
            raise RestoreFailed(f"the replay of partition {p} could not apply entries after {after}")
        applied += result.applied
        after = entries[-1].entry_id


def _replay(gen: routing.GenerationRoutes, positions: dict[int, str], *, until: dict[int, str] | None,
            token: int, tick: Tick = None) -> int:
    applied = 0
    for p in sorted(positions):
        positions[p], n = _replay_partition(gen, p, positions[p], until=None if until is None else until[p],
                                            token=token, tick=tick)
        applied += n
    return applied


def _behind(positions: dict[int, str]) -> int:
    """Entries the stream heads are ahead of `positions`, summed (the replay's lag)."""
    total = 0
    for p, pos in positions.items():
        total += len(streams.read_after(p, pos, settings.SNAPSHOT_REPLAY_FENCE_LAG + 1))
    return total


def live_checkpoints(partitions) -> dict[int, str]:
    """The live count consumer's checkpoint of each partition (how far the ACTIVE generation has consumed)."""
    done = checkpoints_get(COUNT_CONSUMER)
    return {p: done.get(p, "0-0") for p in partitions}


# --- checks ------------------------------------------------------------------------------------------


def identity_problems(gen: routing.GenerationRoutes, *, limit: int = 50, tick: Tick = None) -> list[dict]:
    """REC-1 over a whole generation: buckets whose count is not the number of LIKED projection rows of
    that bucket, or frozen; one statement per partition."""
    out = []
    p_t, b_t = LikeCountProjection._meta.db_table, VideoLikeCountVbucket._meta.db_table
    for alias in settings.COUNT_PARTITION_ALIASES:
        if tick is not None:
            tick()
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 0")  # one aggregate over the whole generation
            cursor.execute(
                f"WITH p AS (SELECT video_id, virtual_bucket, count(*) AS n FROM {p_t} WHERE generation = %s AND "
                f"virtual_bucket = ANY(%s) AND projected_state = 'LIKED' GROUP BY video_id, virtual_bucket), b AS "
                f"(SELECT video_id, virtual_bucket, active_count, frozen FROM {b_t} WHERE generation = %s AND "
                "virtual_bucket = ANY(%s)) SELECT COALESCE(p.video_id, b.video_id), "
                "COALESCE(p.virtual_bucket, b.virtual_bucket), COALESCE(p.n, 0), COALESCE(b.active_count, 0), "
                "COALESCE(b.frozen, false) FROM p FULL JOIN b ON p.video_id = b.video_id AND p.virtual_bucket = "
                "b.virtual_bucket WHERE COALESCE(p.n, 0) <> COALESCE(b.active_count, 0) OR COALESCE(b.frozen, false) "
                "LIMIT %s", [gen.generation, gen.buckets_on(alias), gen.generation, gen.buckets_on(alias), limit])
            out += [{"partition": alias, "videoId": v, "virtualBucket": vb, "projected": n, "bucket": c, "frozen": f}
                    for v, vb, n, c, f in cursor.fetchall()]
    return out[:limit]


def coverage_problems(gen: routing.GenerationRoutes, positions: dict[int, str], say,
                      tick: Tick = None) -> tuple[list[dict], int]:
    """Online coverage (REC-4) of every video of `gen` against the facts, judged by the replay's
    positions. Returns (diffs, relations checked)."""
    found, checked, after = [], 0, ""
    while True:
        if tick is not None:
            tick()
        videos = evidence.videos_after(after, settings.RECONCILE_BATCH_VIDEOS, gen=gen)
        if not videos:
            return found, checked
        chunk = checks.coverage_chunk(gen, videos, settle_s=0.0, consumed_through=positions)
        checked += chunk.checked
        found += [{"videoId": f.video_id, "layer": f.layer, "expected": f.expected, "actual": f.actual}
                  for f in chunk.found]
        after = videos[-1]
        if len(found) > 50:
            return found, checked


def generation_totals(generation: int) -> dict:
    """LIKED projection rows and Σ buckets of a generation (before / after of a restore), each bucket read
    on the partition the generation's manifest routes it to (a migration's other copy is not counted)."""
    liked = buckets = 0
    routes = routing.load_generation(generation)
    for alias in settings.COUNT_PARTITION_ALIASES:
        mine = routes.buckets_on(alias)
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 0")  # counts over a whole generation
            cursor.execute(f"SELECT count(*) FROM {LikeCountProjection._meta.db_table} WHERE generation = %s AND "
                           "virtual_bucket = ANY(%s) AND projected_state = 'LIKED'", [generation, mine])
            liked += cursor.fetchone()[0]
            cursor.execute(f"SELECT COALESCE(sum(active_count), 0) FROM {VideoLikeCountVbucket._meta.db_table} "
                           "WHERE generation = %s AND virtual_bucket = ANY(%s)", [generation, mine])
            buckets += int(cursor.fetchone()[0])
    return {"generation": generation, "likedRelations": liked, "bucketSum": buckets}


# --- switch ------------------------------------------------------------------------------------------


def _fences_write(generation: int) -> None:
    now = timezone.now()
    for alias in settings.COUNT_PARTITION_ALIASES:
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {CountGenerationFence._meta.db_table} (key, generation, updated_at) VALUES "
                "('active', %s, %s) ON CONFLICT (key) DO UPDATE SET generation = EXCLUDED.generation, "
                "updated_at = EXCLUDED.updated_at", [generation, now])


def generation_switch(old: routing.GenerationRoutes, new: routing.GenerationRoutes, positions: dict[int, str], *,
                      token: int, say, what: str, actor: Actor | None = None, audit_action: str | None = None,
                      audit_params: dict | None = None, at_barrier=None,
                      on_switch: Callable[[dict[int, str]], None] | None = None, tick: Tick = None) -> dict:
    """Switch the active count generation from `old` to `new` (a restore, a bucket-space change): the live
    consumer's leases taken, `new` replayed to exactly the live checkpoints T[p], `at_barrier(positions)`
    (a check that may refuse, with both generations at T), then ONE transaction: `old` RETIRED, `new`
    ACTIVE (refused if the active generation or its manifest moved), audited as `audit_action` when given,
    and `on_switch(T)`, the caller's own writes of the switch (a restore's lifecycle CAS and its audit
    record); then the partitions' generation fences moved."""
    started = time.monotonic()
    # Held while the last entries are replayed (up to SNAPSHOT_REPLAY_FENCE_LAG of them): a TTL that covers it.
    grants = count_leases_take(time.monotonic() + settings.RECONCILE_DRAIN_MAX_S, holder_prefix="restore",
                               ttl_s=120.0)
    try:
        target = live_checkpoints(positions)
        ahead = sorted(p for p in positions if streams.entry_id_key(positions[p]) > streams.entry_id_key(target[p]))
        if ahead and at_barrier is not None:  # the caller replayed past T: the barrier would compare two positions
            raise RestoreFailed(f"the new generation is past the live consumer on partitions {ahead}: its barrier "
                                "needs both at the live checkpoints")
        short = {p: t for p, t in target.items() if streams.entry_id_key(positions[p]) < streams.entry_id_key(t)}
        final = _replay(new, {p: positions[p] for p in short}, until=short, token=token, tick=tick) if short else 0
        positions.update({p: max(positions[p], target[p], key=streams.entry_id_key) for p in positions})
        lost = [g.resource for g in grants if not leases.lease_is_current(g)]
        if lost:
            raise RestoreFailed(f"a lease changed hands during the switch: {', '.join(lost)}")
        barrier = at_barrier(positions) if at_barrier is not None else {}
        with route_switch.switch_exclusive(what), transaction.atomic(using="default", durable=True):
            active = CountProjectionGeneration.objects.select_for_update().filter(
                status=ProjectionGenerationStatus.ACTIVE).first()
            if active is None or active.generation != old.generation or active.active_manifest_id != old.manifest_id:
                raise RestoreFailed(f"the active generation moved from {old.generation} during the {what}")
            now = timezone.now()
            CountProjectionGeneration.objects.filter(pk=old.generation).update(
                status=ProjectionGenerationStatus.RETIRED, retired_at=now)
            CountProjectionGeneration.objects.filter(pk=new.generation).update(
                status=ProjectionGenerationStatus.ACTIVE, activated_at=now)
            if audit_action is not None:
                audit_record(actor=actor, action=audit_action, target_type="count_generation",
                             target_id=str(new.generation), params={**(audit_params or {}), "previous": old.generation,
                                                                    "consumptionBarrier": target})
            if on_switch is not None:
                on_switch(target)
        _fences_write(new.generation)
    finally:
        for g in grants:
            leases.lease_release(g)
        fence_ms = round((time.monotonic() - started) * 1000.0, 3)
    routing.reset_cache()
    say(f"switched generation {old.generation} -> {new.generation} at T = {target}; dispatch fenced {fence_ms:.1f} ms")
    return {"consumptionBarrier": target, "finalReplayed": final, "fenceMs": fence_ms, **barrier}


# --- replaced generations --------------------------------------------------------------------------------

_DROP_TABLES = (LikeCountProjection, VideoLikeCountVbucket, CountEventReceipt, DirtyVideo)
_DROP_BATCH = 20000


def generation_rows_drop(generation: int) -> int:
    """Delete every count-partition row of a non-active generation, in batches. Returns rows deleted."""
    if CountProjectionGeneration.objects.filter(pk=generation, status=ProjectionGenerationStatus.ACTIVE).exists():
        raise RestoreFailed(f"generation {generation} is ACTIVE; its rows are never dropped")
    total = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        for model in _DROP_TABLES:
            t = model._meta.db_table
            while True:
                with connections[alias].cursor() as cursor:
                    cursor.execute(f"DELETE FROM {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {t} WHERE generation = %s "
                                   "LIMIT %s))", [generation, _DROP_BATCH])
                    n = cursor.rowcount
                total += n
                if n < _DROP_BATCH:
                    break
    CountProjectionGeneration.objects.filter(pk=generation).update(rows_dropped_at=timezone.now())
    return total


def _observation() -> dt.timedelta:
    """How long a replaced generation stays readable before its rows are dropped."""
    return dt.timedelta(seconds=settings.COUNT_GENERATION_OBSERVATION_S)


def generations_drop_retired(*, actor: Actor) -> dict[int, int]:
    """The beat: drop the rows of every RETIRED generation whose observation period has passed."""
    cutoff = timezone.now() - _observation()
    out = {}
    for g in CountProjectionGeneration.objects.filter(status=ProjectionGenerationStatus.RETIRED,
                                                      retired_at__lte=cutoff, rows_dropped_at__isnull=True):
        out[g.generation] = generation_rows_drop(g.generation)
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="generation.rows_drop", target_type="count_generation",
                         target_id=str(g.generation), params={"rows": out[g.generation]})
    return out
