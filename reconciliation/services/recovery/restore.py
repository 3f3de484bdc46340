"""Restore a sealed recovery snapshot into a new generation and switch it in (REPAIR-2, REPAIR-5; issue 12
§4), the daily test-restore into a scratch generation (§5), and the drop of replaced generations.

A restore is a run of the one generation lifecycle (`likes_project.generations`; issue 29 §6), its row a
`RecoveryRestore`: the lifecycle's lease (`recovery:restore`, shared with a bucket-space change) is renewed
at every chunk and tick, a restore whose worker died is reclaimed FAILED (by the next start, or by the sweeper
through the job that ran it), one older than RESTORE_TIME_LIMIT_S is FAILED, and it is audited once when it
starts (`restore.rebuild_start`) and once when it ends (`restore.rebuild_activate`, `_failed`, `_abandoned`,
or a test-restore's `_verified`). It runs inside the job that asked for it (the repair's, the test-restore's:
`in_job`), whose lease each of its chunks and ticks renews too. Its steps:

  before: the artifacts (URIs, rows, SHA-256), the vector (every partition, none trimmed past: SNAP-11),
          the manifest (still the active one's) verified -> refused with the reasons, naming the fallback
  start:  a new SHADOW count generation bound to the snapshot's bucket space and manifest (with the run's row)
  load    (backfill, one artifact a chunk): both artifacts of every partition streamed back into it (the
          SHA-256 checked again on the way), every video marked dirty for its display snapshot
  replay  (catch-up, one pass to the heads a chunk): each stream partition from its own nextOffset[p], through
          the count projector's own group transaction (versions and receipts; `live=False`), online while the
          live consumer goes on, until within SNAPSHOT_REPLAY_FENCE_LAG of the heads
  check   (verify): identity (Σ LIKED projection = the bucket, per bucket) and online coverage against the
          facts, judged by how far the replay has gone, not by the live checkpoint
  switch: the live consumer's leases taken (dispatch stops), the replay brought to exactly the live
          checkpoints T[p], then in one transaction the old count generation RETIRED and the new one ACTIVE
          with the restore's own row (the lifecycle's CAS and its audit record), and the partitions'
          generation fences moved to it (a pass still routing to the old one is refused and retried); the
          leases released. The old generation's rows stay readable for COUNT_GENERATION_OBSERVATION_S, then
          `generations_drop_retired` deletes them. A restore that does not switch in retires its count
          generation in the transaction that ends it.
The test-restore is the same run as a dry run into a scratch generation, identity checked only, never switched.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from counting import routing
from counting.models import (
    CountProjectionGeneration,
    ProjectionGenerationStatus,
)
from likes_project import leases, metrics
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict
from likes_project.eventlog.consumer import holder_id
from likes_project.generations import (
    BUILDING,
    GenerationStatus,
    Lifecycle,
    RebuildFailed,
    RebuildRunning,
    StepContext,
    StepResult,
    generation_abandon,
    generation_slice,
    generation_start,
    lifecycle_register,
)
from reconciliation.models import RecoveryRestore, RecoverySnapshot
from reconciliation.services.recovery import artifacts
from reconciliation.services.recovery.generation import (  # noqa: F401 - the restore's API names them too
    REPLAY_CONSUMER,
    RestoreFailed,
    Tick,
    _analyze,
    _behind,
    _load_artifact,
    _observation,
    _replay,
    coverage_problems,
    generation_rows_drop,
    generation_switch,
    generation_totals,
    generations_drop_retired,
    identity_problems,
)
from reconciliation.services.recovery.snapshot import snapshot_get, snapshot_problems

if TYPE_CHECKING:
    from likes_project.opsjobs.services import SliceContext

logger = logging.getLogger(__name__)
RESTORE_LEASE = "recovery:restore"


class SnapshotUnusable(Conflict):
    code = "snapshot_unusable"
    default_message = "The snapshot cannot be used for recovery; repair from the facts (--source facts)."


# --- the restore's lifecycle -------------------------------------------------------------------------


def _positions(ctx: StepContext) -> dict[int, str]:
    return {int(p): pos for p, pos in ctx.state["positions"].items()}


def _retire_now(generation: int) -> None:
    """A count generation that will never be switched in: RETIRED, already past its observation period, so
    the beat drops its rows (a test-restore drops them itself at once)."""
    CountProjectionGeneration.objects.filter(pk=generation, status=ProjectionGenerationStatus.SHADOW).update(
        status=ProjectionGenerationStatus.RETIRED, retired_at=timezone.now() - _observation())


class RestoreLifecycle(Lifecycle):
    """A restore (or a test-restore: a dry run) of one sealed snapshot, its steps the load, the replay and
    the check; its switch the count generation's, with the lifecycle's CAS inside it."""

    kind, model, target_type = "restore", RecoveryRestore, "recovery_restore"
    label = "restore"
    # The name the restore's lease always had: a bucket-space change takes it too (one generation replacement
    # at a time), and its fencing tokens keep rising above the ones the replay's consumer fence has seen.
    lease_resource = RESTORE_LEASE

    @property
    def time_limit_s(self) -> float:
        return float(settings.RESTORE_TIME_LIMIT_S)

    def create_fields(self, *, params, previous, state):
        snap = snapshot_get(params["snapshotId"])
        old = routing.load_generation()  # the active count generation, from the table
        top = CountProjectionGeneration.objects.select_for_update().aggregate(m=Max("generation"))["m"] or 0
        scratch = bool(params.get("dry_run"))
        CountProjectionGeneration.objects.create(
            generation=top + 1, bucket_space_version=snap.bucket_space_version, active_manifest_id=snap.manifest_id,
            status=ProjectionGenerationStatus.SHADOW, restored_from_snapshot=snap.pk, scratch=scratch)
        # The replay's position per stream partition (from the snapshot's offsets on), and the manifest the
        # switch requires the active generation still to have.
        state["positions"] = {str(int(o["partition"])): o["through"] for o in snap.offsets}
        state["replacedManifest"] = old.manifest_id
        return {"snapshot_id": snap.pk, "count_generation": top + 1, "replaced_generation": old.generation,
                "scratch": scratch}

    def describe(self, row):
        return f"snapshot {row.snapshot_id} into count generation {row.count_generation}"

    def backfill(self, ctx, cursor):
        """One artifact a chunk, then the statistics of the loaded tables."""
        row = ctx.row
        records = sorted(snapshot_get(row.snapshot_id).artifacts, key=lambda a: (a["partition"], a["kind"]))
        i = (cursor or {}).get("artifact", 0)
        if cursor is None:
            ctx.say(f"restoring snapshot {row.snapshot_id} into {'scratch ' if row.scratch else ''}generation "
                    f"{row.count_generation}")
        started = time.monotonic()
        if i == len(records):
            _analyze()
            ctx.stats["loadMs"] = round(ctx.stats.get("loadMs", 0.0) + (time.monotonic() - started) * 1000, 3)
            return StepResult(None)
        record = records[i]
        n = _load_artifact(record["partition"], record, row.count_generation, tick=ctx.tick)
        elapsed = time.monotonic() - started
        ctx.stats.setdefault("loaded", {})[f"{record['kind']}:{record['partition']}"] = n
        ctx.stats["loadMs"] = round(ctx.stats.get("loadMs", 0.0) + elapsed * 1000, 3)
        ctx.say(f"loaded {record['kind']} of {record['partition']}: {n} rows in {elapsed:.2f} s")
        return StepResult({"artifact": i + 1}, done=n, total=sum(r["rows"] for r in records))

    def catch_up(self, ctx, cursor):
        """One pass of the replay to the stream heads a chunk, until it is within the fence lag of them."""
        gen = routing.load_generation(ctx.row.count_generation)
        positions = _positions(ctx)
        started = time.monotonic()
        n = _replay(gen, positions, until=None, token=ctx.row.fencing_token, tick=ctx.tick)
        ctx.state["positions"] = {str(p): pos for p, pos in positions.items()}
        ctx.count("replayed", n)
        ctx.stats["replayMs"] = round(ctx.stats.get("replayMs", 0.0) + (time.monotonic() - started) * 1000, 3)
        if _behind(positions) > settings.SNAPSHOT_REPLAY_FENCE_LAG:
            return StepResult({"pass": (cursor or {}).get("pass", 0) + 1}, done=n)
        ctx.say(f"replayed {ctx.stats['replayed']} entries from the snapshot's offsets in "
                f"{ctx.stats['replayMs'] / 1000:.2f} s")
        return StepResult(None, done=n)

    def verify(self, ctx):
        """Identity over the whole generation and (not for a test-restore, which judges identity alone)
        coverage against the facts at the replay's positions."""
        gen = routing.load_generation(ctx.row.count_generation)
        started = time.monotonic()
        identity = identity_problems(gen, tick=ctx.tick)
        ctx.stats["identityDiffs"] = identity
        coverage: list[dict] = []
        if not ctx.row.scratch:
            coverage, checked = coverage_problems(gen, _positions(ctx), ctx.say, tick=ctx.tick)
            ctx.stats["coverageDiffs"], ctx.stats["coverageChecked"] = coverage, checked
            ctx.say(f"checked the restored generation: {len(identity)} identity and {len(coverage)} coverage diffs "
                    f"over {checked} relations")
        ctx.stats["checkMs"] = round((time.monotonic() - started) * 1000, 3)
        if identity or coverage:
            raise RestoreFailed(f"the restored generation disagrees: {len(identity)} identity diffs, "
                                f"{len(coverage)} coverage diffs")

    def switch(self, ctx, activate):
        """The count generation's switch under the count consumer's leases, the lifecycle's CAS (this row
        ACTIVE, the last restore RETIRED, audited) inside its transaction."""
        row = ctx.row
        old = dataclasses.replace(routing.load_generation(row.replaced_generation),
                                  manifest_id=ctx.state["replacedManifest"])
        positions = _positions(ctx)

        def activate_at(barrier: dict[int, str]) -> None:
            ctx.stats["consumptionBarrier"] = barrier
            activate()

        figures = generation_switch(old, routing.load_generation(row.count_generation), positions,
                                    token=row.fencing_token, say=ctx.say, what=f"restore of snapshot {row.snapshot_id}",
                                    on_switch=activate_at, tick=ctx.tick)
        # What the fence cost is known once it is lifted, after the commit: added to the switched row's report.
        ctx.state["positions"] = {str(p): pos for p, pos in positions.items()}
        ctx.stats.update(finalReplayed=figures["finalReplayed"], fenceMs=figures["fenceMs"],
                         previousGeneration=old.generation)
        row.progress["state"], row.progress["stats"] = ctx.state, ctx.stats
        RecoveryRestore.objects.filter(pk=row.pk, status=GenerationStatus.ACTIVE).update(progress=row.progress)

    def release(self, row):
        _retire_now(row.count_generation)


LIFECYCLE = lifecycle_register(RestoreLifecycle())

# The ops job a restore runs inside (a repair's, a test-restore's), set by its job slice (`in_job`).
_job: contextvars.ContextVar[SliceContext | None] = contextvars.ContextVar("recovery_restore_job", default=None)


@contextlib.contextmanager
def in_job(ctx: SliceContext):
    """Restores started in this block run inside the ops job of `ctx`: the restore's row names that job (the
    sweeper that finds the job dead reclaims the restore with it: `restores_of_job_abandon`), and every chunk
    and tick of the restore saves the job's progress and renews its lease, so a restore longer than
    OPS_JOB_LEASE_S never looks dead while it works."""
    token = _job.set(ctx)
    try:
        yield
    finally:
        _job.reset(token)


def restores_of_job_abandon(job_id: int, *, actor: Actor, reason: str) -> None:
    """The job a restore ran inside died (its lease expired): the restore is FAILED and its count generation
    retired, audited (`restore.rebuild_abandoned`). Idempotency: a restore that ended is left as it is."""
    for generation in RecoveryRestore.objects.filter(job_id=job_id, status__in=BUILDING).values_list(
            "generation", flat=True):
        generation_abandon(LIFECYCLE, generation, actor=actor, reason=f"abandoned: {reason}")


def _lease_s() -> float:
    return float(getattr(settings, "OPS_JOB_LEASE_S", 60.0))


def _run(snap: RecoverySnapshot, *, actor: Actor, say, dry_run: bool,
         busy: str) -> tuple[RecoveryRestore, RestoreFailed | None]:
    """One restore of `snap` on the lifecycle, run to its end in this process under the lifecycle's lease,
    taken here before the start so that no other start can take this run for a dead one. Returns its row as
    it ended (ACTIVE, RETIRED for a dry run, FAILED) and, when it failed, why. Raises RestoreFailed(`busy`)
    when another restore (or a bucket-space change) holds the lease; anything else unexpected propagates
    (the run is FAILED by then)."""
    grant = leases.lease_acquire(resource=LIFECYCLE.lease_resource, holder=holder_id(), ttl_s=_lease_s())
    if grant is None:
        raise RestoreFailed(busy)
    job = _job.get()
    params = {"snapshotId": snap.pk, **({"dry_run": True} if dry_run else {})}
    try:
        try:
            with transaction.atomic(using="default", durable=True):
                row = generation_start(LIFECYCLE, actor=actor, params=params, grant=grant,
                                       job_id=job.job.pk if job is not None else None)
        except RebuildRunning as exc:
            raise RestoreFailed(busy) from exc
        error = None
        # The engine makes the run FAILED on any of these (its count generation released), with the reason.
        try:
            generation_slice(LIFECYCLE, row.generation, grant=grant, actor=actor, say=say,
                             on_chunk=(lambda _row: job.save()) if job is not None else None)
        except RestoreFailed as exc:
            error = exc
        except (RebuildFailed, artifacts.ArtifactInvalid) as exc:  # a lost fence, the time limit, a bad artifact
            error = RestoreFailed(str(exc))
            error.__cause__ = exc
        except leases.LeaseLost as exc:
            error = RestoreFailed(f"the lease {exc} was taken over while the restore worked")
            error.__cause__ = exc
    finally:
        leases.lease_release(grant)
    return RecoveryRestore.objects.get(pk=row.generation), error


def _usable(snap: RecoverySnapshot) -> None:
    problems = snapshot_problems(snap)
    if problems:
        raise SnapshotUnusable(f"Snapshot {snap.pk} is unusable: {'; '.join(problems)}. Repair from the facts "
                               "instead (--source facts).", problems=problems)


def _report(row: RecoveryRestore) -> dict:
    """The restore's figures (the repair's result): its count generation, the load, replay, check and fence
    figures from the run's stats."""
    report = {"generation": row.count_generation, "restore": row.generation, **row.stats}
    if "consumptionBarrier" in report:
        report["consumptionBarrier"] = {int(p): t for p, t in report["consumptionBarrier"].items()}
    return report


def restore_execute(snapshot_id: int, *, actor: Actor, say=lambda _m: None) -> dict:
    """REPAIR-2 / REPAIR-5 from snapshot `snapshot_id` (an approved repair's job runs this), a run of the
    restore's lifecycle. Returns the report; raises SnapshotUnusable before anything is written, RestoreFailed
    when it did not switch in (another restore running, a diff, the time limit, a lost lease).

    Transaction: the lifecycle's, one per chunk; the switch one on `default` with the run's CAS.
    Idempotency: none; a second restore of the same snapshot is a new generation."""
    snap = snapshot_get(snapshot_id)
    _usable(snap)
    row, error = _run(snap, actor=actor, say=say, dry_run=False, busy="another restore is running")
    if error is not None:
        raise error
    metrics.inc("likes_snapshot_restores_total", outcome="activated")
    return _report(row)


def _abandon(generation: int, *, actor: Actor) -> None:
    """A bucket-space change that did not switch in: its SHADOW generation is retired at once (dropped by the
    beat)."""
    with transaction.atomic(using="default", durable=True):
        _retire_now(generation)
        audit_record(actor=actor, action="generation.restore_abandon", target_type="count_generation",
                     target_id=str(generation), params={}, outcome="abandoned")


def test_restore(snapshot_id: int, *, actor: Actor, say=lambda _m: None) -> dict:
    """The drill: restore `snapshot_id` into a scratch generation (a dry run of the restore's lifecycle),
    replay it to the stream heads, check its identity, record the verdict on the snapshot, and drop the
    scratch rows. Never switches anything."""
    snap = snapshot_get(snapshot_id)
    started = time.monotonic()
    result: dict = {"snapshotId": snap.pk}
    row = None
    try:
        _usable(snap)
        row, error = _run(snap, actor=actor, say=say, dry_run=True,
                          busy="a restore is running; the test-restore waits for the next day")
        report = _report(row)
        result |= {k: v for k, v in report.items() if k in _TEST_REPORT}
        result["ok"] = error is None
        if "identityDiffs" in report:
            result |= {"identityDiffs": report["identityDiffs"], "totals": generation_totals(row.count_generation)}
        if error is not None and not report.get("identityDiffs"):
            result["problems"] = [str(error)]
    except SnapshotUnusable as exc:
        result |= {"ok": False, "problems": exc.extra.get("problems", [str(exc)])}
    except RestoreFailed as exc:
        result |= {"ok": False, "problems": [str(exc)]}
    finally:
        if row is not None:
            generation_rows_drop(row.count_generation)
    result["ms"] = round((time.monotonic() - started) * 1000, 3)
    with transaction.atomic(using="default", durable=True):
        RecoverySnapshot.objects.filter(pk=snap.pk).update(tested_at=timezone.now(), test_result=result)
        audit_record(actor=actor, action="snapshot.test_restore", target_type="recovery_snapshot",
                     target_id=str(snap.pk), outcome="ok" if result["ok"] else "failed",
                     params={k: v for k, v in result.items() if k != "identityDiffs"})
    metrics.inc("likes_snapshot_test_restores_total", outcome="ok" if result["ok"] else "failed")
    return result


_TEST_REPORT = ("generation", "restore", "loaded", "loadMs", "replayed", "replayMs")
