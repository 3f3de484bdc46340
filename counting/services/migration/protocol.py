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

import datetime as dt
import logging
import time

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from counting import routing
from counting.models import (
    BucketMigration,
    CountCacheGeneration,
    CountProjectionGeneration,
    CountRouteManifest,
    FenceState,
    ManifestStatus,
    MigrationState,
)
from counting.services import manifests, route_switch
from counting.services.migration import changelog
from counting.services.migration.fences import (
    by_source,
    source_fences_reopen,
    source_fences_retire,
    target_fences_set,
    undo_before_cas,
)
from counting.services.migration.ledger import LEDGER, RUNNER
from counting.services.projection import COUNT_CONSUMER
from likes_project import metrics
from likes_project.audit.services import audit_record
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.ledgers.runner import Say, beat, cleanup_due, save

__all__ = ["RUNNER", "migration_run", "migrations_cleanup_due", "undo_before_cas"]
logger = logging.getLogger(__name__)
S = MigrationState
transition = LEDGER.transition  # a CAS through the kit's table, audited


def migration_run(migration_id: int, *, say: Say = lambda _m: None, tick=None) -> BucketMigration:
    """Run the protocol from the ledger's state to RETIRED (or to where it must wait), on the kit's runner: one
    runner per migration (a session advisory lock), idempotent. The steps are looked up on every call (the
    migration benchmark times them by wrapping this module's functions)."""
    steps = {S.PREPARE: _prepare, S.COPYING: _copy, S.CATCHING_UP: _catch_up, S.CUTOVER: _cutover, S.VERIFY: _verify,
             S.RETIRED: _cleanup}
    return RUNNER.run(migration_id, steps, say=say, tick=tick)


def migrations_cleanup_due() -> list[int]:
    """Beat: clean the source copies whose retention passed."""
    return RUNNER.cleanup_due_run(_cleanup)


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
        transition(m, S.FAILED, actor=RUNNER.actor(), params={"problems": problems}, error="; ".join(problems)[:4000])
        return
    cleared = changelog.rows_delete(m.target_partition, generation=m.generation, buckets=m.buckets,
                                    on_batch=lambda: beat(m))
    target_fences_set(m.target_partition, m, state=FenceState.RETIRED, epoch_offset=1, only_missing=False)
    say(f"prepare: {len(m.buckets)} buckets -> {m.target_partition}; {cleared} stale target rows cleared")
    RUNNER.hook(m, "prepare")
    baseline = {alias: changelog.horizon(alias, space_version=m.bucket_space_version, buckets=vbs)
                for alias, vbs in by_source(m).items()}
    transition(m, S.COPYING, actor=RUNNER.actor(), params={"baseline": baseline, "cleared": cleared}, baseline=baseline,
               replay_next_position=baseline, copy_cursor={})


# --- COPYING ------------------------------------------------------------------------------------------


def _copy(m: BucketMigration, say: Say) -> None:
    """Every row of the buckets, per (source, table), in (bucket, change) keyset order from the ledger's
    cursor; a chunk applied is a chunk recorded, so a crash resumes after the last one."""
    chunk = settings.BUCKET_MIGRATION_COPY_CHUNK
    cursor = dict(m.copy_cursor)
    copied = m.copied_rows
    for alias, vbs in sorted(by_source(m).items()):
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
                save(m, copy_cursor=cursor, copied_rows=copied)
                RUNNER.hook(m, "copy")
            say(f"copy: {table.kind} of {alias} done ({copied} rows so far)")
    transition(m, S.CATCHING_UP, actor=RUNNER.actor(), params={"copiedRows": copied})


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
    save(m, replay_next_position={**m.replay_next_position, alias: max(after, through)},
          replayed_events=m.replayed_events + n)
    return n


def _catch_up(m: BucketMigration, say: Say) -> None:
    for _ in range(settings.BUCKET_MIGRATION_CATCHUP_PASSES):
        n = 0
        for alias, vbs in sorted(by_source(m).items()):
            through = changelog.horizon(alias, space_version=m.bucket_space_version, buckets=vbs)
            n += _replay(m, alias, vbs, through)
        save(m, catchup_passes=m.catchup_passes + 1)
        LEDGER.catch_up_observed(n)
        RUNNER.hook(m, "catch_up")
        say(f"catch-up pass {m.catchup_passes}: {n} changed rows replayed")
        if n <= settings.BUCKET_MIGRATION_CUTOVER_LAG:
            break
    transition(m, S.CUTOVER, actor=RUNNER.actor(), params={"replayedEvents": m.replayed_events,
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
    save(m, target_manifest_id=manifest.pk)
    return manifest, items


def _cutover(m: BucketMigration, say: Say) -> None:
    pinned = _pinned_by()
    if pinned:
        save(m, error=f"cutover waits: {pinned}")
        raise RUNNER.waiting(f"migration {m.pk}: cutover waits: {pinned}")
    problems = _contract_problems(m)
    if problems:
        undo_before_cas(m)
        transition(m, S.FAILED, actor=RUNNER.actor(), params={"problems": problems}, error="; ".join(problems)[:4000])
        return
    sources = by_source(m)
    # The route table is held for the whole cutover (a snapshot or a repair that holds it first makes this
    # wait, then refuses: nothing has been drained yet, the job is resumed later).
    with route_switch.switch_exclusive(f"bucket migration {m.pk}", timeout_s=5.0):
        # Before the pause, with the route table held (so the routes cannot move under it): the candidate
        # manifest, and the target's fences at E+1 ACTIVE (no route names the target at E+1 before the CAS).
        routing.reset_cache()
        gen = routing.active()
        manifest, items = _candidate(m, gen)
        target_fences_set(m.target_partition, m, state=FenceState.ACTIVE, epoch_offset=1, only_missing=False)
        started = time.monotonic()
        try:
            h = {alias: changelog.horizon(alias, space_version=m.bucket_space_version, buckets=vbs,
                                          state=FenceState.DRAINING) for alias, vbs in sorted(sources.items())}
            replaced, pause_ms = _drained_cutover(m, sources, h, started, gen, manifest, items)
        except Exception:
            source_fences_reopen(m)  # before the CAS the source is still the authority: writes go on there
            raise
    routing.reset_cache()
    metrics.observe("likes_bucket_migration_write_pause_seconds", pause_ms / 1000.0)
    source_fences_retire(m)
    say(f"cutover: manifest {replaced} -> {manifest.pk}; write pause {pause_ms:.1f} ms; H = {h}")


def _drained_cutover(m: BucketMigration, sources: dict[str, list[int]], h: dict[str, int], started: float,
                     gen: routing.GenerationRoutes, manifest: CountRouteManifest,
                     items: list[tuple[int, str, int]]) -> tuple[int, float]:
    """The write pause: from DRAINING, replay to H, then one transaction (CAS, routes, the ledger)."""
    save(m, final_watermark=h)
    RUNNER.hook(m, "cutover_draining")
    for alias, vbs in sorted(sources.items()):
        _replay(m, alias, vbs, h[alias])
    target_watermark = changelog.position(m.target_partition)
    RUNNER.hook(m, "cutover_sealed")
    offsets = {str(p): off for p, off in checkpoints_get(COUNT_CONSUMER).items()}
    with transaction.atomic(using="default", durable=True):
        replaced = gen.manifest_id
        moved = CountProjectionGeneration.objects.filter(generation=m.generation, active_manifest_id=replaced).update(
            active_manifest_id=manifest.pk)
        if not moved:
            raise RUNNER.waiting(f"migration {m.pk}: the active manifest changed under the cutover; resume")
        changed = manifests.routes_materialize(bucket_space_version=m.bucket_space_version, items=items)
        pause_ms = round((time.monotonic() - started) * 1000.0, 3)
        transition(m, S.VERIFY, actor=RUNNER.actor(),
                   params={"manifestId": manifest.pk, "replacedManifestId": replaced, "routesChanged": changed,
                           "finalWatermark": h, "writePauseMs": pause_ms},
                   source_manifest_id=replaced, target_manifest_id=manifest.pk, cutover_checkpoint_ref=h,
                   cutover_stream_offsets=offsets, target_watermark=target_watermark, write_pause_ms=pause_ms,
                   cutover_at=timezone.now(), error="")
    return replaced, pause_ms


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
    RUNNER.hook(m, "verify")
    mismatches: list[dict] = []
    rows = 0
    for alias, vbs in sorted(by_source(m).items()):
        for i in range(0, len(vbs), _VERIFY_GROUP):
            group = vbs[i:i + _VERIFY_GROUP]
            for table in changelog.TABLES:
                src = changelog.bucket_rows(alias, table, generation=m.generation, buckets=group)
                tgt = changelog.bucket_rows(m.target_partition, table, generation=m.generation, buckets=group)
                rows += len(src)
                found = _compare(table, src, tgt)
                mismatches += found[: max(0, 20 - len(mismatches))]
                beat(m)
    identity = changelog.identity_problems(m.target_partition, generation=m.generation, buckets=m.buckets)
    ok = not mismatches and not identity
    result = {"ok": ok, "buckets": len(m.buckets), "rowsCompared": rows, "mismatches": mismatches,
              "identityProblems": identity, "at": timezone.now().isoformat().replace("+00:00", "Z")}
    if not ok:
        with transaction.atomic(using="default", durable=True):
            save(m, verify_result=result, error="verify found differences at H: repair the target by a versioned "
                                                 "repair, then resume to verify again")
            audit_record(actor=RUNNER.actor(), action="bucket_migration.verify", target_type="bucket_migration",
                         target_id=str(m.pk), outcome="failed", params={"mismatches": len(mismatches),
                                                                        "identity": len(identity)})
        say(f"verify FAILED: {len(mismatches)} rows differ, {len(identity)} buckets off their projection")
        return
    now = timezone.now()
    transition(m, S.RETIRED, actor=RUNNER.actor(), params={"rowsCompared": rows}, verify_result=result, verified_at=now,
               source_cleanup_after=now + dt.timedelta(seconds=settings.BUCKET_MIGRATION_RETENTION_S), error="")
    say(f"verify: {rows} source rows at H match the target; the source copy is kept until the retention passes")


# --- RETIRED: the source copy's cleanup (MIG-5) ------------------------------------------------------


def _cleanup(m: BucketMigration, say: Say) -> None:
    if not cleanup_due(m):
        return
    routing.reset_cache()
    gen = routing.active()
    deleted = 0
    for alias, vbs in sorted(by_source(m).items()):
        # A bucket a later migration routed back here is live again: never delete it.
        gone = [vb for vb in vbs if gen.generation != m.generation or gen.routes[vb].partition != alias]
        if gone:
            deleted += changelog.rows_delete(alias, generation=m.generation, buckets=gone, on_batch=lambda: beat(m))
    with transaction.atomic(using="default", durable=True):
        save(m, source_cleaned_at=timezone.now())
        audit_record(actor=RUNNER.actor(), action="bucket_migration.cleanup", target_type="bucket_migration",
                     target_id=str(m.pk), params={"rowsDeleted": deleted})
    say(f"cleanup: {deleted} rows of the source copy deleted")
