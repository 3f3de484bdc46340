"""The virtual-bucket migration protocol (MIG-1 … MIG-5, ROUTE-2 … ROUTE-7, INV-11, INV-12; issue 13 §3).

  PREPARE     the frozen contract still holds (bucket space, generation, each bucket still on its source at
              its epoch E); the target's namespace for the buckets is cleared.
  COPYING     C = each source's change-log horizon; every row of the buckets copied onto the target by
              the per-(source, table) cursor {bucket, seq}, overwriting by version.
  CATCHING_UP passes of "rows changed in (replay_next_position, horizon]" until a pass is small.
  CUTOVER     source fences DRAINING (in-flight writers drained: the fence update waits for them) and H
              read in that transaction; the target replays to H; the target fences at E+1 ACTIVE; a
              candidate manifest covering every bucket sealed; then ONE `default` transaction: CAS of
              `active_manifest_id`, the materialised routes, and the ledger's move to VERIFY. The source
              fences go RETIRED after it. The write pause is DRAINING -> that commit.
  VERIFY      every source row at H against the target (a target version is never lower; an equal one
              holds the same state, count and freeze), and the target's buckets against its projection
              rows (REC-1) in one snapshot. Repeatable.
  RETIRED     the source's read-only copy is deleted after BUCKET_MIGRATION_RETENTION_S (MIG-5), unless a
              later migration routed a bucket back to it.

Every step is idempotent and reads its position from the ledger, so a crash anywhere resumes (`resume`).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from counting import routing
from counting.models import (
    BucketMigration,
    CountCacheGeneration,
    CountProjectionGeneration,
    CountRouteFence,
    CountRouteManifest,
    FenceState,
    ManifestStatus,
    MigrationState,
)
from counting.services import manifests, route_switch
from counting.services.migration import changelog
from counting.services.migration.ledger import migration_get, transition
from counting.services.projection import COUNT_CONSUMER
from likes_project import metrics
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import Conflict
from likes_project.eventlog.checkpoints import checkpoints_get

logger = logging.getLogger(__name__)
S = MigrationState
Say = Callable[[str], None]

# A test's crash injection: called with (migration, step name) at each step's points of no return.
step_hook: Callable[[BucketMigration, str], None] | None = None


class MigrationWaiting(Conflict):
    """A step cannot go on now (a snapshot or a count-cache rebuild pins the routes, a repair runs): the job
    ends and the migration stays where it is, to be resumed."""

    code = "migration_waiting"


def _hook(m: BucketMigration, point: str) -> None:
    if step_hook is not None:
        step_hook(m, point)


def _actor() -> Actor:
    return system_actor("bucket-migration")


def _by_source(m: BucketMigration) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for vb in m.buckets:
        out[m.source_partitions[str(vb)]].append(vb)
    return dict(out)


# Called after every ledger save with the migration (the job renews its lease and shows progress there).
_tick: contextvars.ContextVar[Callable[[BucketMigration], None] | None] = contextvars.ContextVar(
    "bucket_migration_tick", default=None)
RUNNER_LOCK = 0x4C4B4D52  # "LKMR", with the migration id: one runner per migration, whatever the job leases say


def _beat(m: BucketMigration) -> None:
    """Long work that saves nothing to the ledger (verify, deletes) still tells the job it is alive."""
    tick = _tick.get()
    if tick is not None:
        tick(m)


def _save(m: BucketMigration, **fields) -> None:
    BucketMigration.objects.filter(pk=m.pk).update(**fields)
    for k, v in fields.items():
        setattr(m, k, v)
    tick = _tick.get()
    if tick is not None:
        tick(m)


# --- the runner ---------------------------------------------------------------------------------------


def migration_run(migration_id: int, *, say: Say = lambda _m: None,
                  tick: Callable[[BucketMigration], None] | None = None) -> BucketMigration:
    """Run the protocol from the ledger's state to RETIRED (or to where it must wait). Idempotent. One
    runner per migration: a session advisory lock held for the run (released if the process dies)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [RUNNER_LOCK, int(migration_id)])
        if not cursor.fetchone()[0]:
            raise MigrationWaiting(f"migration {migration_id} is being run by another process")
    token = _tick.set(tick)
    try:
        return _run(migration_id, say)
    finally:
        _tick.reset(token)
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [RUNNER_LOCK, int(migration_id)])


def _run(migration_id: int, say: Say) -> BucketMigration:
    steps = {S.PREPARE: _prepare, S.COPYING: _copy, S.CATCHING_UP: _catch_up, S.CUTOVER: _cutover, S.VERIFY: _verify,
             S.RETIRED: _cleanup}
    while True:
        m = migration_get(migration_id)
        step = steps.get(m.state)
        if step is None or (m.state == S.RETIRED and m.source_cleaned_at) or \
                (m.state == S.VERIFY and m.verify_result.get("ok") is False and m.error):
            return m
        before = m.state
        step(m, say)
        m = migration_get(migration_id)
        if m.state == before:  # the step decided to wait (retention, a failed verify): stop here
            return m


# --- PREPARE ------------------------------------------------------------------------------------------


def _contract_problems(m: BucketMigration) -> list[str]:
    routing.reset_cache()
    gen = routing.active()
    problems = []
    if gen.generation != m.generation:
        problems.append(f"the active generation is {gen.generation}, not {m.generation}")
    elif gen.space.version != m.bucket_space_version:
        problems.append(f"the bucket space is v{gen.space.version}, not v{m.bucket_space_version}")
    else:
        moved = [vb for vb in m.buckets if (gen.routes[vb].partition, gen.routes[vb].epoch) !=
                 (m.source_partitions[str(vb)], m.source_epochs[str(vb)])]
        if moved:
            problems.append(f"{len(moved)} buckets no longer route to their source at their epoch (first {moved[0]})")
    return problems


def _prepare(m: BucketMigration, say: Say) -> None:
    problems = _contract_problems(m)
    if problems:
        transition(m, S.FAILED, actor=_actor(), params={"problems": problems}, error="; ".join(problems)[:4000])
        return
    cleared = changelog.rows_delete(m.target_partition, generation=m.generation, buckets=m.buckets,
                                    on_batch=lambda: _beat(m))
    _fences_set(m.target_partition, m, state=FenceState.RETIRED, epoch_offset=1, only_missing=False)
    say(f"prepare: {len(m.buckets)} buckets -> {m.target_partition}; {cleared} stale target rows cleared")
    _hook(m, "prepare")
    baseline = {alias: changelog.horizon(alias, space_version=m.bucket_space_version, buckets=vbs)
                for alias, vbs in _by_source(m).items()}
    transition(m, S.COPYING, actor=_actor(), params={"baseline": baseline, "cleared": cleared}, baseline=baseline,
               replay_next_position=baseline, copy_cursor={})


def _fences_set(alias: str, m: BucketMigration, *, state: str, epoch_offset: int, only_missing: bool) -> None:
    """The target's fence rows of the buckets at E + `epoch_offset` in `state` (RETIRED while it is being
    filled: nothing is routed there yet; ACTIVE at the cutover)."""
    t = CountRouteFence._meta.db_table
    rows = [(m.bucket_space_version, vb, m.source_epochs[str(vb)] + epoch_offset, state) for vb in m.buckets]
    conflict = ("DO NOTHING" if only_missing else
                "DO UPDATE SET route_epoch = EXCLUDED.route_epoch, state = EXCLUDED.state")
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.executemany(f"INSERT INTO {t} (bucket_space_version, virtual_bucket, route_epoch, state) VALUES "
                           f"(%s, %s, %s, %s) ON CONFLICT (bucket_space_version, virtual_bucket) {conflict}", rows)


# --- COPYING ------------------------------------------------------------------------------------------


def _copy(m: BucketMigration, say: Say) -> None:
    """Every row of the buckets, per (source, table), in (bucket, change) keyset order from the ledger's
    cursor; a chunk applied is a chunk recorded, so a crash resumes after the last one."""
    chunk = settings.BUCKET_MIGRATION_COPY_CHUNK
    cursor = dict(m.copy_cursor)
    copied = m.copied_rows
    for alias, vbs in sorted(_by_source(m).items()):
        for table in changelog.TABLES:
            key = f"{alias}:{table.kind}"
            while not cursor.get(key, {}).get("done"):
                pos = cursor.get(key, {"bucket": -1, "seq": 0})
                rows = changelog.rows_after(alias, table, generation=m.generation, buckets=vbs,
                                            after=(pos["bucket"], pos["seq"]), limit=chunk)
                changelog.rows_apply(m.target_partition, table, generation=m.generation, rows=rows)
                copied += len(rows)
                cursor[key] = ({"bucket": rows[-1][-2], "seq": rows[-1][-1]} if len(rows) == chunk else
                               {"done": True})
                _save(m, copy_cursor=cursor, copied_rows=copied)
                _hook(m, "copy")
            say(f"copy: {table.kind} of {alias} done ({copied} rows so far)")
    transition(m, S.CATCHING_UP, actor=_actor(), params={"copiedRows": copied})


# --- CATCHING_UP --------------------------------------------------------------------------------------


def _replay(m: BucketMigration, alias: str, vbs: list[int], through: int) -> int:
    """Replay `alias`'s changes of `vbs` after the ledger's position up to `through`; saves the position."""
    after = int(m.replay_next_position.get(alias, 0))
    n = 0
    if through > after:
        for table in changelog.TABLES:
            for rows in changelog.changes_between(alias, table, generation=m.generation, buckets=vbs, after=after,
                                                  through=through, limit=settings.BUCKET_MIGRATION_COPY_CHUNK):
                changelog.rows_apply(m.target_partition, table, generation=m.generation, rows=rows)
                n += len(rows)
    _save(m, replay_next_position={**m.replay_next_position, alias: max(after, through)},
          replayed_events=m.replayed_events + n)
    return n


def _catch_up(m: BucketMigration, say: Say) -> None:
    for _ in range(settings.BUCKET_MIGRATION_CATCHUP_PASSES):
        n = 0
        for alias, vbs in sorted(_by_source(m).items()):
            through = changelog.horizon(alias, space_version=m.bucket_space_version, buckets=vbs)
            n += _replay(m, alias, vbs, through)
        _save(m, catchup_passes=m.catchup_passes + 1)
        _hook(m, "catch_up")
        say(f"catch-up pass {m.catchup_passes}: {n} changed rows replayed")
        if n <= settings.BUCKET_MIGRATION_CUTOVER_LAG:
            break
    transition(m, S.CUTOVER, actor=_actor(), params={"replayedEvents": m.replayed_events,
                                                     "passes": m.catchup_passes})


# --- CUTOVER ------------------------------------------------------------------------------------------


def _pinned_by() -> str | None:
    """ROUTE-7: a count-cache rebuild pins its manifest for its whole run. (A recovery snapshot and a
    repair hold `route_switch.switching_paused` while they run, which the cutover's exclusive hold waits
    for.)"""
    building = CountCacheGeneration.objects.filter(status="BUILDING").values_list("generation", flat=True).first()
    if building is not None:
        return f"count-cache generation {building} is being rebuilt on the pinned manifest"
    return None


def _candidate(m: BucketMigration, gen: routing.GenerationRoutes) -> tuple[CountRouteManifest,
                                                                         list[tuple[int, str, int]]]:
    """The sealed manifest of the active routes with the buckets on the target at E+1, and its items (a
    resumed cutover reuses the one it sealed, if the other buckets' routes have not moved since)."""
    moving = {vb: (m.target_partition, m.source_epochs[str(vb)] + 1) for vb in m.buckets}
    items = [(vb, *moving.get(vb, (r.partition, r.epoch))) for vb, r in enumerate(gen.routes)]
    if m.target_manifest_id:
        found = CountRouteManifest.objects.filter(pk=m.target_manifest_id, status=ManifestStatus.SEALED).first()
        if found is not None and manifests.manifest_items(found.pk) == items:
            return found, items
    manifest = manifests.manifest_seal(bucket_space_version=gen.space.version,
                                       virtual_buckets=gen.space.virtual_buckets, items=items)
    _save(m, target_manifest_id=manifest.pk)
    return manifest, items


def _cutover(m: BucketMigration, say: Say) -> None:
    pinned = _pinned_by()
    if pinned:
        _save(m, error=f"cutover waits: {pinned}")
        raise MigrationWaiting(f"migration {m.pk}: cutover waits: {pinned}")
    problems = _contract_problems(m)
    if problems:
        undo_before_cas(m)
        transition(m, S.FAILED, actor=_actor(), params={"problems": problems}, error="; ".join(problems)[:4000])
        return
    sources = _by_source(m)
    # The route table is held for the whole cutover (a snapshot or a repair that holds it first makes this
    # wait, then refuses: nothing has been drained yet, the job is resumed later).
    with route_switch.switch_exclusive(f"bucket migration {m.pk}", timeout_s=5.0):
        # Before the pause, with the route table held (so the routes cannot move under it): the candidate
        # manifest, and the target's fences at E+1 ACTIVE (no route names the target at E+1 before the CAS).
        routing.reset_cache()
        gen = routing.active()
        manifest, items = _candidate(m, gen)
        _fences_set(m.target_partition, m, state=FenceState.ACTIVE, epoch_offset=1, only_missing=False)
        started = time.monotonic()
        try:
            h = {alias: changelog.horizon(alias, space_version=m.bucket_space_version, buckets=vbs,
                                          state=FenceState.DRAINING) for alias, vbs in sorted(sources.items())}
            replaced, pause_ms = _drained_cutover(m, sources, h, started, gen, manifest, items)
        except Exception:
            _source_fences_reopen(m)  # before the CAS the source is still the authority: writes go on there
            raise
    routing.reset_cache()
    metrics.observe("likes_bucket_migration_write_pause_seconds", pause_ms / 1000.0)
    _source_fences_retire(m)
    say(f"cutover: manifest {replaced} -> {manifest.pk}; write pause {pause_ms} ms; H = {h}")


def _drained_cutover(m: BucketMigration, sources: dict[str, list[int]], h: dict[str, int], started: float,
                     gen: routing.GenerationRoutes, manifest: CountRouteManifest,
                     items: list[tuple[int, str, int]]) -> tuple[int, float]:
    """The write pause: from DRAINING, replay to H, then one transaction (CAS, routes, the ledger)."""
    _save(m, final_watermark=h)
    _hook(m, "cutover_draining")
    for alias, vbs in sorted(sources.items()):
        _replay(m, alias, vbs, h[alias])
    target_watermark = changelog.position(m.target_partition)
    _hook(m, "cutover_sealed")
    offsets = {str(p): off for p, off in checkpoints_get(COUNT_CONSUMER).items()}
    with transaction.atomic(using="default", durable=True):
        replaced = gen.manifest_id
        moved = CountProjectionGeneration.objects.filter(generation=m.generation, active_manifest_id=replaced).update(
            active_manifest_id=manifest.pk)
        if not moved:
            raise MigrationWaiting(f"migration {m.pk}: the active manifest changed under the cutover; resume")
        changed = manifests.routes_materialize(bucket_space_version=m.bucket_space_version, items=items)
        pause_ms = round((time.monotonic() - started) * 1000.0, 3)
        transition(m, S.VERIFY, actor=_actor(),
                   params={"manifestId": manifest.pk, "replacedManifestId": replaced, "routesChanged": changed,
                           "finalWatermark": h, "writePauseMs": pause_ms},
                   source_manifest_id=replaced, target_manifest_id=manifest.pk, cutover_checkpoint_ref=h,
                   cutover_stream_offsets=offsets, target_watermark=target_watermark, write_pause_ms=pause_ms,
                   cutover_at=timezone.now(), error="")
    return replaced, pause_ms


def _source_fences_set(m: BucketMigration, state: str, *, only_from: str | None = None) -> None:
    """The source fences of the buckets (at their epoch E) to `state`, per source partition."""
    t = CountRouteFence._meta.db_table
    extra = " AND state = %s" if only_from else ""
    for alias, vbs in _by_source(m).items():
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.executemany(f"UPDATE {t} SET state = %s WHERE bucket_space_version = %s AND virtual_bucket = %s "
                               f"AND route_epoch = %s{extra}",
                               [(state, m.bucket_space_version, vb, m.source_epochs[str(vb)],
                                 *([only_from] if only_from else [])) for vb in vbs])


def _source_fences_reopen(m: BucketMigration) -> None:
    """DRAINING source fences back to ACTIVE (before the CAS only: the source is still the authority)."""
    _source_fences_set(m, FenceState.ACTIVE, only_from=FenceState.DRAINING)


def _source_fences_retire(m: BucketMigration) -> None:
    """After the CAS: the source never accepts these buckets at E again."""
    _source_fences_set(m, FenceState.RETIRED)


def undo_before_cas(m: BucketMigration) -> None:
    """Before the CAS the source is still the authority: lift its fences back to ACTIVE, and remove the
    target's copy and fences of the buckets (an abort, or a contract found broken). Idempotent."""
    gen = CountProjectionGeneration.objects.get(generation=m.generation)
    if m.target_manifest_id and gen.active_manifest_id == m.target_manifest_id:
        raise Conflict(f"migration {m.pk} is past its CAS; it cannot be undone", code="migration_past_cutover")
    _source_fences_reopen(m)
    _fences_set(m.target_partition, m, state=FenceState.RETIRED, epoch_offset=1, only_missing=False)
    changelog.rows_delete(m.target_partition, generation=m.generation, buckets=m.buckets)


# --- VERIFY -------------------------------------------------------------------------------------------


def _compare(table: changelog.Table, source: dict, target: dict) -> list[dict]:
    """Source rows at H against the target's: never lower; equal versions hold the same values."""
    out = []
    for key, src in source.items():
        if table is changelog.VBUCKETS:
            _space, count, version, frozen, _at = src
            if count == 0 and version == 0 and not frozen and key not in target:
                continue  # a row created ahead of a group that never committed: nothing to carry
            tgt = target.get(key)
            ok = tgt is not None and (tgt[2] > version or (tgt[2] == version and (tgt[1], tgt[3]) == (count, frozen)))
        else:
            state, version = src[0], src[1]
            tgt = target.get(key)
            ok = tgt is not None and (tgt[1] > version or (tgt[1] == version and tgt[0] == state))
        if not ok:
            out.append({"table": table.kind, "key": [str(k) for k in key], "source": [str(v) for v in src[:4]],
                        "target": None if tgt is None else [str(v) for v in tgt[:4]]})
    return out


_VERIFY_GROUP = 32  # buckets compared per statement pair


def _verify(m: BucketMigration, say: Say) -> None:
    _hook(m, "verify")
    mismatches: list[dict] = []
    rows = 0
    for alias, vbs in sorted(_by_source(m).items()):
        for i in range(0, len(vbs), _VERIFY_GROUP):
            group = vbs[i:i + _VERIFY_GROUP]
            for table in changelog.TABLES:
                src = changelog.bucket_rows(alias, table, generation=m.generation, buckets=group)
                tgt = changelog.bucket_rows(m.target_partition, table, generation=m.generation, buckets=group)
                rows += len(src)
                found = _compare(table, src, tgt)
                mismatches += found[: max(0, 20 - len(mismatches))]
                _beat(m)
    identity = changelog.identity_problems(m.target_partition, generation=m.generation, buckets=m.buckets)
    ok = not mismatches and not identity
    result = {"ok": ok, "buckets": len(m.buckets), "rowsCompared": rows, "mismatches": mismatches,
              "identityProblems": identity, "at": timezone.now().isoformat().replace("+00:00", "Z")}
    if not ok:
        with transaction.atomic(using="default", durable=True):
            _save(m, verify_result=result, error="verify found differences at H: repair the target by a versioned "
                                                 "repair, then resume to verify again")
            audit_record(actor=_actor(), action="bucket_migration.verify", target_type="bucket_migration",
                         target_id=str(m.pk), outcome="failed", params={"mismatches": len(mismatches),
                                                                        "identity": len(identity)})
        say(f"verify FAILED: {len(mismatches)} rows differ, {len(identity)} buckets off their projection")
        return
    now = timezone.now()
    transition(m, S.RETIRED, actor=_actor(), params={"rowsCompared": rows}, verify_result=result, verified_at=now,
               source_cleanup_after=now + dt.timedelta(seconds=settings.BUCKET_MIGRATION_RETENTION_S), error="")
    say(f"verify: {rows} source rows at H match the target; the source copy is kept until the retention passes")


# --- RETIRED: the source copy's cleanup (MIG-5) ------------------------------------------------------


def _cleanup(m: BucketMigration, say: Say) -> None:
    if m.source_cleaned_at or (m.source_cleanup_after and m.source_cleanup_after > timezone.now()):
        return
    routing.reset_cache()
    gen = routing.active()
    deleted = 0
    for alias, vbs in sorted(_by_source(m).items()):
        # A bucket a later migration routed back here is live again: never delete it.
        gone = [vb for vb in vbs if gen.generation != m.generation or gen.routes[vb].partition != alias]
        if gone:
            deleted += changelog.rows_delete(alias, generation=m.generation, buckets=gone, on_batch=lambda: _beat(m))
    with transaction.atomic(using="default", durable=True):
        _save(m, source_cleaned_at=timezone.now())
        audit_record(actor=_actor(), action="bucket_migration.cleanup", target_type="bucket_migration",
                     target_id=str(m.pk), params={"rowsDeleted": deleted})
    say(f"cleanup: {deleted} rows of the source copy deleted")


def migrations_cleanup_due() -> list[int]:
    """Beat: clean the source copies whose retention passed."""
    done = []
    for m in BucketMigration.objects.filter(state=S.RETIRED, source_cleaned_at__isnull=True,
                                            source_cleanup_after__lte=timezone.now()):
        _cleanup(m, lambda _m: None)
        done.append(m.pk)
    return done

