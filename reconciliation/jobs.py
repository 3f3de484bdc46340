"""The ops-job kinds of reconciliation (registered in ReconciliationConfig.ready): a check run (identity
and coverage in slices, resumable by the run's checkpoint; exact in one slice, since its snapshots
cannot outlive it) and the system's execution of an approved repair. Thin adapters over the services."""

from __future__ import annotations

from likes_project.audit.services import Actor
from likes_project.opsjobs.services import TRANSIENT, JobKind, SliceContext
from reconciliation.models import CheckRun, RunMode
from reconciliation.services import checks, repair
from reconciliation.services.checks import RUN_PERMISSION
from reconciliation.services.recovery.snapshot import PERMISSION as SNAPSHOT_PERMISSION

CHECK_JOB = "reconcile.check"
EXACT_JOB = "reconcile.exact"


def _check_create(job, actor: Actor) -> None:
    run = checks.check_run_create(mode=job.params["mode"], scope=job.params["scope"], actor=actor,
                                  kind=job.params.get("kind", "manual"), schedule=job.params.get("schedule", ""),
                                  job_id=job.pk)
    job.params = {**job.params, "runId": run.pk}
    job.target = f"{run.mode} run {run.pk}"
    job.total = run.total


def _check_slice(ctx: SliceContext) -> bool:
    run = CheckRun.objects.get(pk=ctx.params["runId"])
    if run.finished:
        return True
    try:
        return _check_chunks(ctx, run)
    except TRANSIENT as exc:
        # A shard or partition refusing for a moment: the next slice goes on from the run's checkpoint (a chunk
        # saves its diffs and checkpoint in one transaction, so nothing is counted twice).
        if ctx.transient_wait(exc, what=f"{run.mode} run {run.pk}"):
            return False
        checks.check_run_refuse_unfinished(run, f"its job failed: {exc.__class__.__name__}: {exc}")
        raise
    except Exception as exc:
        # The job fails; its run must not stay RUNNING (nothing was proven, and a schedule would wait
        # for it forever).
        checks.check_run_refuse_unfinished(run, f"its job failed: {exc.__class__.__name__}: {exc}")
        raise


def _check_chunks(ctx: SliceContext, run: CheckRun) -> bool:
    gen = checks.check_run_begin(run)
    while True:
        if checks.check_run_chunk(run, gen):
            run = checks.check_run_finish(run)
            ctx.result = checks.check_run_report(run) | {"diffs": run.diffs_found}
            ctx.job.message = f"{run.mode} run {run.pk}: {run.status}, {run.checked} checked, {run.diffs_found} diffs"
            return True
        ctx.say(f"{run.mode} run {run.pk}: {run.checkpoint.get('videos', 0)} videos, {run.diffs_found} diffs so far")
        ctx.progress(done=run.checkpoint.get("videos", 0))
        left = ctx.time_left()
        if left is not None and left <= 0:
            return False


def _exact_slice(ctx: SliceContext) -> bool:
    from reconciliation.services.exact import exact_run_execute

    run = CheckRun.objects.get(pk=ctx.params["runId"])
    if not run.finished:
        try:
            run = exact_run_execute(run, on_chunk=lambda n: ctx.progress(done=n))
        except TRANSIENT as exc:
            # The cut ended with the error and nothing of it was saved: the same run is cut again after the wait.
            if ctx.transient_wait(exc, what=f"exact run {run.pk}"):
                return False
            checks.check_run_refuse_unfinished(run, f"its job failed: {exc.__class__.__name__}: {exc}")
            raise
        except Exception as exc:
            checks.check_run_refuse_unfinished(run, f"its job failed: {exc.__class__.__name__}: {exc}")
            raise
    ctx.result = {"runId": run.pk, "status": run.status, "diffs": run.diffs_found}
    ctx.job.message = f"exact run {run.pk}: {run.status}" + (f" ({run.refused_because})" if run.refused_because else "")
    return True


def _check_abandon(job, actor: Actor, reason: str) -> None:
    run = CheckRun.objects.filter(pk=job.params.get("runId")).first()
    if run is not None and not run.finished:
        checks.check_run_finish(run, status="REFUSED", refused_because=f"its job stopped: {reason}"[:512], actor=actor)


def _repair_slice(ctx: SliceContext) -> bool:
    from reconciliation.services.recovery import restore

    try:
        with restore.in_job(ctx):  # a repair from a snapshot is a restore: it renews this job's lease as it goes
            done = repair.repair_execute(int(ctx.params["repairId"]), say=ctx.say, wait=ctx.transient_wait)
    except Exception as exc:
        # The job fails; its repair must not stay RUNNING (nobody will go on with it: it is requested again).
        _repair_abandon(ctx.job, ctx.actor, f"{exc.__class__.__name__}: {exc}")
        raise
    ctx.result = {"repairId": done.pk, "status": done.status}
    ctx.job.message = f"repair {done.pk}: {done.status}"
    return True


def _repair_abandon(job, actor: Actor, reason: str) -> None:
    from django.utils import timezone

    from reconciliation.models import RepairRequest, RepairStatus

    RepairRequest.objects.filter(pk=job.params.get("repairId"), status=RepairStatus.RUNNING).update(
        status=RepairStatus.FAILED, error=f"its job stopped: {reason}"[:4000], finished_at=timezone.now())
    _restore_abandon(job, actor, reason)


def _restore_abandon(job, actor: Actor, reason: str) -> None:
    """The restore a dead job was running (a repair's, a test-restore's) is reclaimed with it."""
    from reconciliation.services.recovery import restore

    restore.restores_of_job_abandon(job.pk, actor=actor, reason=reason)


# --- recovery snapshots (issue 12) -------------------------------------------------------------------

SNAPSHOT_JOB = "recovery.snapshot"
SNAPSHOT_VERIFY_JOB = "recovery.verify"
SNAPSHOT_TEST_JOB = "recovery.test_restore"


def _snapshot_create(job, actor: Actor) -> None:
    from reconciliation.services.recovery import snapshot

    snap = snapshot.snapshot_create(actor=actor, reason=job.params.get("reason", ""), job_id=job.pk)
    job.params = {**job.params, "snapshotId": snap.pk}
    job.target = f"snapshot {snap.pk}"


def _snapshot_slice(ctx: SliceContext) -> bool:
    """Build the job's snapshot. A cut that aborted (a partition changed hands, a receipt beyond the
    boundary: SNAP-6 step 4) is never enlarged or reused: a new snapshot is taken once the consumer's
    partitions are whole again, up to SNAPSHOT_ABORT_RETRIES times; the job names the last one. A build a store
    refused (OperationalError, a Redis timeout) is taken again the same way after LEDGER_TRANSIENT_WAIT_S, up to
    LEDGER_TRANSIENT_RETRIES waits."""
    from django.conf import settings

    from likes_project.opsjobs.models import OpsJob
    from reconciliation.services.recovery import snapshot

    def build(snapshot_id: int):
        try:
            return snapshot.snapshot_build(snapshot_id, say=ctx.say), False
        except TRANSIENT as exc:
            # A store refused during the build: the snapshot is FAILED with the error, and after the wait a new
            # one is taken, as after an abort (a failed cut is never resumed).
            if not ctx.transient_wait(exc, what=f"snapshot {snapshot_id}"):
                raise
            return snapshot.snapshot_get(snapshot_id), True

    snap, refused = build(int(ctx.params["snapshotId"]))
    aborted = list(ctx.params.get("aborted", []))
    while snap.status == "FAILED" and (refused or (snap.failure.startswith("aborted:") and
                                       len(aborted) < settings.SNAPSHOT_ABORT_RETRIES)):
        aborted.append(snap.pk)
        reason = f"{ctx.params.get('reason', '')} (again after snapshot {snap.pk} " \
                 f"{'met a store refusing' if refused else 'aborted'})".strip()
        snap = snapshot.snapshot_create(actor=ctx.actor, reason=reason, job_id=ctx.job.pk)
        ctx.job.params = {**ctx.job.params, "snapshotId": snap.pk, "aborted": aborted}
        OpsJob.objects.filter(pk=ctx.job.pk).update(params=ctx.job.params)  # the commands read the last one
        ctx.say(f"snapshot {aborted[-1]} failed; taking snapshot {snap.pk} instead")
        snap, refused = build(snap.pk)
    if snap.status == "SEALED":
        expired = snapshot.snapshots_expire()
        if expired:
            ctx.say(f"retention: snapshots {expired} expired")
    ctx.result = snapshot.snapshot_report(snap) | {"aborted": aborted}
    ctx.job.message = f"snapshot {snap.pk}: {snap.status}" + (f" ({snap.failure[:200]})" if snap.failure else "")
    return True


def _snapshot_abandon(job, actor: Actor, reason: str) -> None:
    from django.utils import timezone

    from reconciliation.models import RecoverySnapshot, SnapshotStatus

    RecoverySnapshot.objects.filter(pk=job.params.get("snapshotId"), status=SnapshotStatus.BUILDING).update(
        status=SnapshotStatus.FAILED, failure=f"its job stopped: {reason}"[:1024], finished_at=timezone.now())


def _verify_slice(ctx: SliceContext) -> bool:
    from reconciliation.services.recovery import snapshot

    ctx.result = snapshot.snapshot_verify(ctx.params["snapshotId"], actor=ctx.actor)
    ctx.job.message = (f"snapshot {ctx.params['snapshotId']}: " + ("usable" if ctx.result["usable"] else
                       "UNUSABLE: " + "; ".join(ctx.result["problems"])[:400]))
    return True


def _test_restore_slice(ctx: SliceContext) -> bool:
    from reconciliation.services.recovery import restore

    with restore.in_job(ctx):
        ctx.result = restore.test_restore(int(ctx.params["snapshotId"]), actor=ctx.actor, say=ctx.say)
    why = str(ctx.result.get("problems") or ctx.result.get("identityDiffs"))[:300]
    ctx.job.message = f"test-restore of snapshot {ctx.params['snapshotId']}: " + ("ok" if ctx.result["ok"] else
                                                                                 f"FAILED {why}")
    return True


# --- a bucket-space change (issue 13 §5) ----------------------------------------------------------------

BUCKET_SPACE_JOB = "recovery.bucket_space"


def _bucket_space_create(job, actor: Actor) -> None:
    from reconciliation.services.recovery import bucket_space

    bucket_space.change_check(virtual_buckets=job.params.get("virtualBuckets"), seed=job.params.get("seed"))


def _bucket_space_slice(ctx: SliceContext) -> bool:
    from reconciliation.services.recovery import bucket_space

    ctx.result = bucket_space.bucket_space_change(virtual_buckets=int(ctx.params["virtualBuckets"]),
                                                  seed=ctx.params.get("seed"), actor=ctx.actor, say=ctx.say)
    ctx.job.message = (f"bucket space v{ctx.result['bucketSpaceVersion']} active (generation "
                       f"{ctx.result['generation']}); exact run {ctx.result['exactRun']['status']}")
    return True


def job_for_mode(mode: str) -> str:
    return EXACT_JOB if mode == RunMode.EXACT else CHECK_JOB


JOB_KINDS = [
    JobKind(CHECK_JOB, RUN_PERMISSION, _check_slice, create=_check_create, abandon=_check_abandon, unit="videos"),
    JobKind(EXACT_JOB, RUN_PERMISSION, _exact_slice, create=_check_create, abandon=_check_abandon, unit="relations",
            single_slice=True),
    JobKind(repair.REPAIR_JOB, repair.APPROVE_PERMISSION, _repair_slice, abandon=_repair_abandon, unit="videos",
            single_slice=True),
    JobKind(SNAPSHOT_JOB, SNAPSHOT_PERMISSION, _snapshot_slice, create=_snapshot_create, abandon=_snapshot_abandon,
            unit="rows", single_slice=True),
    JobKind(SNAPSHOT_VERIFY_JOB, SNAPSHOT_PERMISSION, _verify_slice, unit="artifacts", single_slice=True),
    JobKind(SNAPSHOT_TEST_JOB, SNAPSHOT_PERMISSION, _test_restore_slice, abandon=_restore_abandon, unit="rows",
            single_slice=True),
    JobKind(BUCKET_SPACE_JOB, "counting.approve_bucketmigration", _bucket_space_slice, create=_bucket_space_create,
            unit="relations", single_slice=True),
]
