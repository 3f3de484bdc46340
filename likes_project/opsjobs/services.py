"""Ops jobs: start one, run it slice by slice, follow it, reclaim it when its worker died.

A job kind is registered by the app that owns the action (`job_kind_register` in its AppConfig.ready):
how to create its work (inside the transaction that creates the job, e.g. a new generation), how to
run one slice, and how to clean up when the worker running it died. Every slice:

  lease (the kind's resource) -> RUNNING, holder = this slice -> the kind's run_slice(ctx) until done or
  the budget is spent -> SUCCEEDED, or parked (holder empty; the runner task re-enqueues itself and the
  sweeper re-nudges a parked job nobody picked up) -> the lease is released.

A slice that raises ends the job FAILED with the error; one whose worker vanished (SIGKILL, a lost node)
is found by the sweeper once its lease expired, and its kind's `abandon` runs. Every audit record a
slice writes carries the job's id (`likes_project.audit.services.job_context`), and the job's own start
and end are audited too.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections, transaction
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from likes_project import leases, metrics
from likes_project.audit.services import Actor, audit_record, job_context
from likes_project.errors import Conflict, InvalidInput
from likes_project.eventlog.consumer import holder_id
from likes_project.nudge import nudge
from likes_project.opsjobs.models import JobStatus, OpsJob

logger = logging.getLogger(__name__)

# A store refusing or gone for a moment (a partition restarting, a failover, a paused server): what a job's
# slice may wait out and run again (`SliceContext.transient_wait`) rather than fail for an operator to restart.
TRANSIENT = (OperationalError, InterfaceError, RedisConnectionError, RedisTimeoutError)

RUN_TASK = "opsjobs.run"
RUN_LONG_TASK = "opsjobs.run_long"


@dataclass
class SliceContext:
    """What a kind's `run_slice` works with. `state` is its resumable cursor (saved with `save()` and
    at the end of the slice); `progress` and `say` show how far it got; `time_left()` says how much of
    the slice's budget remains (None: no limit, the foreground)."""

    job: OpsJob
    grant: leases.LeaseGrant
    actor: Actor
    deadline: float | None
    max_chunks: int | None
    on_say: Callable[[str], None] | None = None
    on_progress: Callable[[OpsJob], None] | None = None
    result: dict = field(default_factory=dict)

    @property
    def state(self) -> dict:
        return self.job.state

    @property
    def params(self) -> dict:
        return self.job.params

    def time_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def say(self, message: str) -> None:
        self.job.message = message[:512]
        if self.on_say is not None:
            self.on_say(message)

    def progress(self, *, done: int | None = None, total: int | None = None, add: int = 0) -> None:
        if done is not None:
            self.job.done = done
        self.job.done += add
        if total is not None:
            self.job.total = total
        self.save()

    def transient_wait(self, exc: BaseException, *, what: str,
                       waiting: Callable[[int], None] | None = None) -> bool:
        """`exc` (one of TRANSIENT) stopped `what`: say so (and `waiting(try)`), wait LEDGER_TRANSIENT_WAIT_S, then
        True (the caller runs its step again, from where it stands); False once LEDGER_TRANSIENT_RETRIES waits of
        this job are spent (the caller fails as for any error). A back-off, not a wait for an event: the store gives no
        signal when it is back, and a parked slice is re-queued at once, so the worker itself waits."""
        tries = int(self.state.get("transientTries", 0)) + 1
        if tries > settings.LEDGER_TRANSIENT_RETRIES:
            return False
        self.state["transientTries"] = tries
        self.say(f"{what}: a store did not answer ({exc.__class__.__name__}); trying again in "
                 f"{settings.LEDGER_TRANSIENT_WAIT_S:g} s ({tries} of {settings.LEDGER_TRANSIENT_RETRIES})")
        self.save()
        if waiting is not None:
            waiting(tries)
        metrics.inc("likes_ops_jobs_transient_waits_total", kind=self.job.kind)
        time.sleep(settings.LEDGER_TRANSIENT_WAIT_S)  # a back-off: a refusing store sends no event to wait for
        for conn in connections.all(initialized_only=True):
            if conn.errors_occurred and not conn.in_atomic_block:
                conn.close_if_unusable_or_obsolete()  # a session the server ended: the retry connects again
        return True

    def save(self) -> None:
        """Persist state and progress (only while this slice still owns the job)."""
        _job_update(self.job, done=self.job.done, total=self.job.total, message=self.job.message, state=self.job.state)
        leases.lease_renew(self.grant, ttl_s=_lease_s())
        if self.on_progress is not None:
            self.on_progress(self.job)


@dataclass(frozen=True)
class JobKind:
    kind: str
    permission: str
    run_slice: Callable[[SliceContext], bool]  # True when the job is finished
    create: Callable[[OpsJob, Actor], None] | None = None  # inside job_start's transaction on default
    abandon: Callable[[OpsJob, Actor, str], None] | None = None  # its worker died
    lease_resource: Callable[[OpsJob], str] = lambda job: f"opsjob:{job.pk}"
    unit: str = "items"
    single_slice: bool = False  # cannot be cut (one snapshot transaction): runs to the end in one slice


_KINDS: dict[str, JobKind] = {}


def job_kind_register(kind: JobKind) -> JobKind:
    _KINDS[kind.kind] = kind
    return kind


def job_kind_get(kind: str) -> JobKind:
    try:
        return _KINDS[kind]
    except KeyError:
        raise InvalidInput(f"unknown job kind {kind!r}", code="unknown_job_kind") from None


def job_files_dir() -> Path:
    """Where jobs write the files they produce (OPS_JOB_FILES_DIR), created on first use."""
    path = Path(settings.OPS_JOB_FILES_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def job_file_path(job: OpsJob) -> Path | None:
    """The file a finished job produced (`result["file"]`, a bare name inside the files directory)."""
    name = (job.result or {}).get("file")
    if job.status != JobStatus.SUCCEEDED or not isinstance(name, str) or "/" in name or name.startswith("."):
        return None
    path = job_files_dir() / name
    return path if path.is_file() else None


def job_file_download_record(job: OpsJob, *, actor: Actor, size: int) -> None:
    """Record that `actor` downloads the file of `job` (an export of people's data: OPS-9 wants every
    download audited, not only the export). Transaction: the audit record on `default`, before a byte
    is sent."""
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action="job.file_download", target_type="ops_job", target_id=str(job.pk),
                     params={"kind": job.kind, "file": (job.result or {}).get("file", ""), "bytes": size,
                             "target": job.target})


def run_task_of(spec: JobKind) -> str:
    """The Celery task that runs slices of this kind of job (one long slice for the uncuttable)."""
    return RUN_LONG_TASK if spec.single_slice else RUN_TASK


def job_kinds() -> list[JobKind]:
    return list(_KINDS.values())


def _lease_s() -> float:
    return float(getattr(settings, "OPS_JOB_LEASE_S", 60.0))


def _job_update(job: OpsJob, **fields) -> bool:
    """Update the job only while `job.holder` still runs it (a zombie slice changes nothing)."""
    updated = OpsJob.objects.filter(pk=job.pk, holder=job.holder, status=JobStatus.RUNNING).update(
        updated_at=timezone.now(), **fields)
    return updated == 1


def job_start(*, kind: str, actor: Actor, params: dict | None = None, target: str = "") -> OpsJob:
    """Create a job (QUEUED) and the work it will do, audited ("job.start"), and nudge a worker after
    the commit. A DomainError from the kind's `create` (e.g. a rebuild already running) refuses the
    job: nothing is written.

    Transaction: one durable transaction on `default` (job row, the kind's rows, audit records)."""
    spec = job_kind_get(kind)
    with transaction.atomic(using="default", durable=True):
        job = OpsJob.objects.create(kind=kind, params=dict(params or {}), actor=actor.name, channel=actor.channel,
                                    target=target[:128], unit=spec.unit)
        with job_context(job.pk):
            if spec.create is not None:
                spec.create(job, actor)
            audit_record(actor=actor, action="job.start", target_type="ops_job", target_id=str(job.pk),
                         params={"kind": kind, "params": job.params, "target": job.target})
        # What the kind's `create` settled: its cursor, its target, its normalized params, its total.
        OpsJob.objects.filter(pk=job.pk).update(state=job.state, target=job.target, params=job.params,
                                                total=job.total)
    nudge(run_task_of(spec), job.pk, debounce_s=0.0)  # after the commit; the sweeper starts it if this is lost
    metrics.inc("likes_ops_jobs_started_total", kind=kind)
    return job


def _finish(job: OpsJob, *, status: str, actor: Actor, error: str = "", result: dict | None = None) -> None:
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        if not _job_update(job, status=status, finished_at=now, last_error=error[:4000], result=result or {},
                           holder="", done=job.done, total=job.total, message=job.message, state=job.state):
            return
        with job_context(job.pk):
            audit_record(actor=actor, action="job.finish", target_type="ops_job", target_id=str(job.pk),
                         outcome=status.lower(), params={"kind": job.kind, "done": job.done, "error": error[:500]})
    metrics.inc("likes_ops_jobs_finished_total", kind=job.kind, status=status)


def _job_actor(job: OpsJob) -> Actor:
    return Actor(name=job.actor, channel=job.channel)


def job_run_slice(job_id: int, *, budget_s: float | None = None, max_chunks: int | None = None,
                  on_say: Callable[[str], None] | None = None,
                  on_progress: Callable[[OpsJob], None] | None = None) -> tuple[OpsJob, str]:
    """Run one slice of a job. Returns the job as it stands and what happened: `finished`, `parked`
    (more to do: run another slice), `busy` (another slice holds the lease) or `failed`.

    Idempotency: a finished job is returned untouched; a duplicate task finds the lease taken."""
    job = OpsJob.objects.get(pk=job_id)
    if job.finished:
        return job, "finished"
    spec = job_kind_get(job.kind)
    holder = holder_id()
    grant = leases.lease_acquire(resource=spec.lease_resource(job), holder=holder, ttl_s=_lease_s())
    if grant is None:
        return job, "busy"
    actor = _job_actor(job)
    try:
        now = timezone.now()
        claimed = OpsJob.objects.filter(pk=job.pk, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).update(
            status=JobStatus.RUNNING, holder=holder, started_at=job.started_at or now, slices=job.slices + 1,
            updated_at=now)
        if not claimed:
            job.refresh_from_db()
            return job, "finished"
        job.refresh_from_db()
        budget = None if spec.single_slice else budget_s
        ctx = SliceContext(job, grant, actor, None if budget is None else time.monotonic() + budget,
                           None if spec.single_slice else max_chunks, on_say, on_progress)
        try:
            with job_context(job.pk):
                finished = spec.run_slice(ctx)
        except Exception as exc:
            logger.exception("job %s (%s) failed", job.pk, job.kind)
            _finish(job, status=JobStatus.FAILED, actor=actor,
                    error="".join(traceback.format_exception_only(exc)).strip())
            job.refresh_from_db()
            return job, "failed"
        except BaseException as exc:  # a worker shutdown or Ctrl-C: the job ends, it is not silently parked
            _finish(job, status=JobStatus.FAILED, actor=actor, error=f"interrupted: {exc.__class__.__name__}")
            raise
        if finished:
            _finish(job, status=JobStatus.SUCCEEDED, actor=actor, result=ctx.result)
            outcome = "finished"
        else:
            _job_update(job, holder="", done=job.done, total=job.total, message=job.message, state=job.state)
            outcome = "parked"
    finally:
        leases.lease_release(grant)
    job.refresh_from_db()
    return job, outcome


def job_run_inline(job_id: int, *, on_say: Callable[[str], None] | None = None,
                   on_progress: Callable[[OpsJob], None] | None = None, wait_s: float = 30.0) -> OpsJob:
    """Run a job to its end in this process (a management command's foreground): slices without a
    budget, back to back. A job another process is running is waited for up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        job, outcome = job_run_slice(job_id, on_say=on_say, on_progress=on_progress)
        if outcome in ("finished", "failed"):
            return job
        if outcome == "busy":
            if time.monotonic() > deadline:
                raise Conflict(f"job {job_id} is being run by another process", code="job_busy")
            time.sleep(0.2)  # another process holds the slice lease; retry until wait_s (bounded above)


def job_abandon(job: OpsJob, *, reason: str) -> bool:
    """The worker running a slice of `job` died (its lease expired with the holder still set): FAILED,
    audited, and the kind cleans up after it (a building generation becomes FAILED)."""
    spec = job_kind_get(job.kind)
    actor = _job_actor(job)
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        updated = OpsJob.objects.filter(pk=job.pk, holder=job.holder, status=JobStatus.RUNNING).update(
            status=JobStatus.FAILED, holder="", finished_at=now, updated_at=now, last_error=reason[:4000])
        if not updated:
            return False
        with job_context(job.pk):
            audit_record(actor=actor, action="job.finish", target_type="ops_job", target_id=str(job.pk),
                         outcome="abandoned", params={"kind": job.kind, "reason": reason})
    metrics.inc("likes_ops_jobs_finished_total", kind=job.kind, status="ABANDONED")
    logger.error("ALERT job %s (%s) abandoned: %s", job.pk, job.kind, reason)
    if spec.abandon is not None:
        with job_context(job.pk):
            spec.abandon(job, actor, reason)
    return True


@dataclass
class SweepReport:
    abandoned: list[int] = field(default_factory=list)
    nudged: list[int] = field(default_factory=list)


def jobs_sweep(*, stale_s: float | None = None) -> SweepReport:
    """Beat job: fail the jobs whose slice holder died, and re-nudge the jobs waiting for a slice
    (queued, or parked between slices) that no worker picked up within `stale_s`."""
    stale_s = float(getattr(settings, "OPS_JOB_RENUDGE_S", 5.0) if stale_s is None else stale_s)
    report = SweepReport()
    now = timezone.now()
    for job in OpsJob.objects.filter(status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).order_by("pk"):
        if job.holder:
            alive = leases.lease_holder_alive(job_kind_get(job.kind).lease_resource(job), job.holder)
            if not alive and job_abandon(job, reason=f"the worker running slice {job.slices} ({job.holder}) "
                                                     f"stopped without finishing (its lease expired)"):
                report.abandoned.append(job.pk)
        elif (now - job.updated_at).total_seconds() >= stale_s:
            nudge(run_task_of(job_kind_get(job.kind)), job.pk, debounce_s=0.0)
            report.nudged.append(job.pk)
    return report
