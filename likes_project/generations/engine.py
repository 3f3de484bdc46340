"""The engine of the generation lifecycle: start a run, run it slice by slice under its lease, switch
it in, fail or reclaim it. See the package docstring for the whole protocol."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from likes_project import leases, metrics
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import InvalidInput
from likes_project.generations.lifecycle import (
    FenceLost,
    Lifecycle,
    RebuildFailed,
    RebuildRunning,
    RebuildTimedOut,
    StepContext,
)
from likes_project.generations.models import _STATUS_OF_STEP, BUILDING, STEPS, GenerationModel
from likes_project.generations.models import GenerationStatus as S

logger = logging.getLogger(__name__)


def _default(setting: str, fallback: float) -> float:
    return float(getattr(settings, setting, fallback))


def building_row(lc: Lifecycle, *, lock: bool = False) -> GenerationModel | None:
    qs = lc.model.objects.filter(status__in=BUILDING)
    return (qs.select_for_update() if lock else qs).first()


def _run_is_alive(lc: Lifecycle, row: GenerationModel, *, ours: bool = False) -> bool:
    """A building generation is alive when a slice holds the lease now, or its job is waiting for
    its next slice (queued, or parked between slices). A job whose slice holder is set but whose lease
    ran out died with that holder. `ours`: the caller holds the lease itself, so no slice of that run
    does."""
    from likes_project.opsjobs.models import JobStatus, OpsJob

    if not ours and leases.lease_is_held(lc.lease_resource):
        return True
    if row.job_id is None:
        return False
    job = OpsJob.objects.filter(pk=row.job_id).values_list("status", "holder").first()
    if job is None:
        return False
    status, holder = job
    return status == JobStatus.QUEUED or (status == JobStatus.RUNNING and not holder)


def generation_start(lc: Lifecycle, *, actor: Actor, params: dict | None = None,
                     job_id: int | None = None, grant: leases.LeaseGrant | None = None) -> GenerationModel:
    """Create generation G+1 SHADOW (previous = the ACTIVE one), reclaiming a building generation
    whose run died. Must run inside the caller's transaction on `default` (the ops job that will run
    it is created in the same one). From its commit on, the live writers write G+1 too.

    `grant`: the caller already holds the lifecycle's lease and runs the generation itself, with no ops
    job of its own (a step of a bigger job, like a repair's restore); the lease then stays held from
    before the start to the run's end, so no other start can take the new generation for a dead one.

    Raises RebuildRunning (code `lc.running_code`) while another run is alive."""
    if not transaction.get_connection("default").in_atomic_block:
        raise RuntimeError("generation_start must run inside a transaction on default")
    params = dict(params or {})
    _size_params_check(lc, params)
    ours = grant is not None
    if ours and (grant.resource != lc.lease_resource or not leases.lease_is_current(grant)):
        raise RebuildRunning(f"the lease {lc.lease_resource} is not held by this run", code=lc.running_code)
    top = lc.model.objects.select_for_update().order_by("-generation").first()
    current = building_row(lc, lock=True)
    if current is not None:
        if _run_is_alive(lc, current, ours=ours):
            raise RebuildRunning(f"generation {current.generation} is {current.status}; a rebuild is already "
                                 f"running.", code=lc.running_code)
        _abandon_locked(lc, current, actor=actor, reason="abandoned: its rebuild stopped without finishing")
    elif not ours and leases.lease_is_held(lc.lease_resource):
        raise RebuildRunning("a rebuild is already running", code=lc.running_code)
    active = lc.model.objects.filter(status=S.ACTIVE).first()
    state: dict = {}
    fields = lc.create_fields(params=params, previous=active, state=state)
    now = timezone.now()
    row = lc.model.objects.create(
        generation=(top.generation + 1) if top else 1, status=S.SHADOW,
        previous_generation=active.generation if active else None, job_id=job_id, started_by=actor.name,
        progress={"step": "backfill", "cursor": None, "state": state, "stats": {}, "steps": {}, "started_at":
                  now.isoformat(), "params": params},
        **fields,
    )
    audit_record(actor=actor, action=f"{lc.audit_prefix}.rebuild_start", target_type=lc.target_type,
                 target_id=str(row.generation),
                 params={"previous": row.previous_generation, **_run_params(params), **_audit_fields(fields)})
    transaction.on_commit(lambda: _after_change_quietly(lc, row), using="default")
    return row


def _size_params_check(lc: Lifecycle, params: dict) -> None:
    for name in lc.size_params:
        value = params.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidInput(f"{name} must be a whole number of at least 1 (got {value!r}).",
                               code="invalid_parameter")


def _run_params(params: dict) -> dict:
    return {k: v for k, v in params.items() if k != "fail_after"}  # the test hook is not an operator's choice


def _audit_fields(fields: dict) -> dict:
    return {k: v for k, v in fields.items() if isinstance(v, (int, str, list, dict)) and k != "progress"}


def _after_change_quietly(lc: Lifecycle, row: GenerationModel | None) -> None:
    try:
        lc.after_change(row)
    except Exception as exc:  # noqa: BLE001 - best effort; every slice and the detectors mirror again
        logger.warning("%s generation mirror not written (%s); the next slice retries", lc.kind,
                       exc.__class__.__name__)


def _abandon_locked(lc: Lifecycle, row: GenerationModel, *, actor: Actor, reason: str) -> None:
    """Mark a dead run's generation FAILED (inside the caller's transaction, row locked)."""
    now = timezone.now()
    lc.model.objects.filter(pk=row.pk, status__in=BUILDING).update(
        status=S.FAILED, failure_reason=reason[:512], finished_at=now)
    lc.release(row)
    audit_record(actor=actor, action=f"{lc.audit_prefix}.rebuild_abandoned", target_type=lc.target_type,
                 target_id=str(row.generation), params={"status": row.status, "step": row.step}, outcome="failed")
    metrics.inc("likes_generation_rebuilds_total", kind=lc.kind, outcome="abandoned")
    logger.error("ALERT %s rebuild of generation %s abandoned: %s", lc.kind, row.generation, reason)
    transaction.on_commit(lambda: _after_change_quietly(lc, None), using="default")


def generation_abandon(lc: Lifecycle, generation: int, *, actor: Actor, reason: str) -> bool:
    """Reclaim: the run of `generation` died (its holder's lease expired). FAILED, audited; readers
    go back to (stay on) the ACTIVE generation. False when it was no longer building."""
    with transaction.atomic(using="default", durable=True):
        row = lc.model.objects.select_for_update().filter(pk=generation, status__in=BUILDING).first()
        if row is None:
            return False
        _abandon_locked(lc, row, actor=actor, reason=reason)
    return True


def failure_reason(error: BaseException) -> str:
    """What failed, first: the exception that started it (a time limit that interrupted a query is often followed
    by the driver's own error while the block unwinds), then the one that reached the run."""
    root, seen = error, {id(error)}
    while True:
        before = root.__cause__ or (None if root.__suppress_context__ else root.__context__)
        if before is None or id(before) in seen:
            break
        root = before
        seen.add(id(root))
    text = f"{root.__class__.__name__}: {root}"
    if root is not error:
        text += f" (then {error.__class__.__name__}: {error})"
    return text[:512]


def generation_fail(lc: Lifecycle, generation: int, *, actor: Actor, error: BaseException, token: int,
                    progress: dict | None = None) -> None:
    """The run of `generation` raised: FAILED with the reason (and the run's progress as it stood),
    audited. A no-op when a newer lease token owns the row (this slice was fenced out) or it is no
    longer building."""
    reason = failure_reason(error)
    extra = {} if progress is None else {"progress": progress}
    if not connections["default"].in_atomic_block:
        # A time limit that interrupted a query leaves the connection mid-statement: start on a fresh one.
        connections["default"].close_if_unusable_or_obsolete()
    with transaction.atomic(using="default", durable=True):
        updated = lc.model.objects.filter(pk=generation, status__in=BUILDING, fencing_token__lte=token).update(
            status=S.FAILED, failure_reason=reason, finished_at=timezone.now(), **extra)
        if updated:
            row = lc.model.objects.get(pk=generation)
            lc.release(row)
            audit_record(actor=actor, action=f"{lc.audit_prefix}.rebuild_failed", target_type=lc.target_type,
                         target_id=str(generation), outcome="failed",
                         params={"failure": reason, "step": row.step, "stats": row.stats})
    if updated:
        metrics.inc("likes_generation_rebuilds_total", kind=lc.kind, outcome="failed")
        logger.error("ALERT %s rebuild of generation %s failed: %s", lc.kind, generation, reason)
        _after_change_quietly(lc, None)


@dataclass
class _Slice:
    lc: Lifecycle
    grant: leases.LeaseGrant
    row: GenerationModel
    ctx: StepContext
    deadline: float | None
    chunks_left: int | None
    chunks: int = 0
    on_chunk: Callable[[GenerationModel], None] | None = None
    renewed: float = field(default_factory=time.monotonic)  # when the lease was last renewed

    def spent(self) -> bool:
        if self.chunks_left is not None and self.chunks >= self.chunks_left:
            return True
        return self.deadline is not None and time.monotonic() >= self.deadline


def _time_limit_check(sl: _Slice) -> None:
    """RebuildTimedOut once the run is older than its lifecycle's time limit (from its start, every
    slice counted: a run resumed later does not start its clock again)."""
    limit = sl.lc.time_limit_s
    started = sl.row.progress.get("started_at")
    if limit is None or not started:
        return
    age = (timezone.now() - dt.datetime.fromisoformat(started)).total_seconds()
    if age > limit:
        raise RebuildTimedOut(f"{sl.lc.label} {sl.row.generation} has run for {age:.1f} s, beyond its time limit "
                              f"of {limit:g} s")


def _renew(sl: _Slice) -> None:
    leases.lease_renew(sl.grant, ttl_s=_default("OPS_JOB_LEASE_S", 60.0))
    sl.renewed = time.monotonic()


def _tick(sl: _Slice) -> None:
    """A step's long chunk says it is alive (`StepContext.tick`): at most once a second (and four times a
    lease), the time limit checked, the lease renewed (FenceLost once it is someone else's), the job's
    progress saved. Between two ticks the step's own writes are what it is doing; nothing else runs."""
    if time.monotonic() - sl.renewed < min(1.0, _default("OPS_JOB_LEASE_S", 60.0) / 4):
        return
    _time_limit_check(sl)
    try:
        _renew(sl)
    except leases.LeaseLost as exc:
        raise FenceLost(f"{sl.lc.label} {sl.row.generation} lost its lease {exc} while it worked") from exc
    if sl.on_chunk is not None:
        sl.on_chunk(sl.row)


def _claim(lc: Lifecycle, generation: int, grant: leases.LeaseGrant) -> GenerationModel | None:
    """Fence the row with this slice's token and move SHADOW to BACKFILLING. None when the row is no
    longer building (finished, reclaimed)."""
    with transaction.atomic(using="default", durable=True):
        row = lc.model.objects.select_for_update().filter(pk=generation).first()
        if row is None or row.status not in BUILDING:
            return None
        if row.fencing_token > grant.token:
            raise FenceLost(f"generation {generation} is fenced by token {row.fencing_token} > {grant.token}")
        row.fencing_token = grant.token
        if row.status == S.SHADOW:
            row.status = S.BACKFILLING
        row.progress["slices"] = row.progress.get("slices", 0) + 1
        row.save(update_fields=["fencing_token", "status", "progress"])
    return row


def _save(sl: _Slice, **extra) -> None:
    """Persist the row's progress (and any status change) fenced by the slice's token."""
    row = sl.row
    row.progress["state"], row.progress["stats"] = sl.ctx.state, sl.ctx.stats
    updated = sl.lc.model.objects.filter(pk=row.pk, fencing_token=sl.grant.token, status__in=BUILDING).update(
        progress=row.progress, status=row.status, **extra)
    if updated != 1:
        raise FenceLost(f"generation {row.generation} was reclaimed or finished by someone else")
    _renew(sl)
    if sl.on_chunk is not None:
        sl.on_chunk(row)
    _time_limit_check(sl)


def _run_step(sl: _Slice, step: str) -> bool:
    """Chunks of a cursor step until it is done (True) or the slice's budget is spent (False)."""
    row, fn = sl.row, getattr(sl.lc, step)
    throttle = _default("GENERATION_THROTTLE_S", 0.0)
    if step == STEPS[0] and row.progress.get("cursor") is None:
        shape = sl.lc.describe(row)
        sl.ctx.say(f"{sl.lc.label} {row.generation}: {row.status} (previous {row.previous_generation})"
                   + (f", {shape}" if shape else ""))
    while True:
        result = fn(sl.ctx, row.progress.get("cursor"))  # a StepResult
        counts = row.progress.setdefault("steps", {}).setdefault(step, {"done": 0, "total": None})
        counts["done"] += result.done
        if result.total is not None:
            counts["total"] = result.total
        row.progress["cursor"] = result.cursor
        sl.chunks += 1
        _save(sl)
        if result.cursor is None:
            return True
        if throttle > 0:
            time.sleep(throttle)  # GENERATION_THROTTLE_S: an operator-set pause between chunks to spare the stores
        if sl.spent():
            return False


def _advance(sl: _Slice, step: str) -> None:
    nxt = STEPS[STEPS.index(step) + 1]
    if sl.ctx.params.get("fail_after") == step:  # test hook: a failure right after this step
        raise RebuildFailed(f"injected failure after the {step.replace('_', '-')}")
    sl.row.progress["step"], sl.row.progress["cursor"] = nxt, None
    sl.row.status = _STATUS_OF_STEP[nxt]
    _save(sl)


def _activate(sl: _Slice, actor: Actor) -> None:
    """The CAS switch: the building generation -> ACTIVE and the ACTIVE one it started from -> RETIRED,
    in one transaction with its audit record; refused if either moved. The lifecycle's `switch` decides
    in which transaction (its own, when it switches something of its own in with it)."""
    lc, row = sl.lc, sl.row

    def activate() -> None:
        now = timezone.now()
        outer = transaction.get_connection("default").in_atomic_block  # inside the lifecycle's own switch
        with transaction.atomic(using="default", durable=not outer):
            rows = list(lc.model.objects.select_for_update().filter(Q(pk=row.pk) | Q(status=S.ACTIVE))
                        .order_by("generation"))
            new = next((r for r in rows if r.pk == row.pk), None)
            old = next((r for r in rows if r.status == S.ACTIVE), None)
            if new is None or new.status not in BUILDING or new.fencing_token != sl.grant.token:
                raise FenceLost(f"generation {row.generation} is no longer this run's")
            if (old.generation if old else None) != row.previous_generation:
                raise RebuildFailed(f"the ACTIVE generation changed from {row.previous_generation} to "
                                    f"{old.generation if old else None} during the rebuild")
            lc.before_activate(new, sl.ctx.stats)
            if old is not None:
                lc.model.objects.filter(pk=old.pk).update(status=S.RETIRED, finished_at=now)
            row.progress["state"], row.progress["stats"] = sl.ctx.state, sl.ctx.stats
            lc.model.objects.filter(pk=row.pk).update(status=S.ACTIVE, activated_at=now, progress=row.progress)
            audit_record(actor=actor, action=f"{lc.audit_prefix}.rebuild_activate", target_type=lc.target_type,
                         target_id=str(row.generation), outcome="active",
                         params={"retired": row.previous_generation, **_run_params(sl.ctx.params),
                                 "stats": sl.ctx.stats})

    _time_limit_check(sl)  # a run past its time limit is never switched in
    lc.switch(sl.ctx, activate)
    row.refresh_from_db()
    if row.status != S.ACTIVE:  # committed, or the switch must have raised
        raise RebuildFailed(f"{lc.label} {row.generation}: its switch returned without activating it")
    metrics.inc("likes_generation_rebuilds_total", kind=lc.kind, outcome="activated")
    lc.after_activate(row)
    _after_change_quietly(lc, row)


def _retire_verified(sl: _Slice, actor: Actor) -> None:
    """The end of a dry run (`params["dry_run"]`: a drill that builds and verifies a generation but
    never switches it in): RETIRED at once, audited as `<prefix>.rebuild_verified`; the ACTIVE one is
    untouched."""
    lc, row = sl.lc, sl.row
    row.progress["state"], row.progress["stats"] = sl.ctx.state, sl.ctx.stats
    with transaction.atomic(using="default", durable=True):
        updated = lc.model.objects.filter(pk=row.pk, status__in=BUILDING, fencing_token=sl.grant.token).update(
            status=S.RETIRED, finished_at=timezone.now(), progress=row.progress)
        if updated != 1:
            raise FenceLost(f"generation {row.generation} is no longer this run's")
        lc.release(row)
        audit_record(actor=actor, action=f"{lc.audit_prefix}.rebuild_verified", target_type=lc.target_type,
                     target_id=str(row.generation), outcome="verified",
                     params={**_run_params(sl.ctx.params), "stats": sl.ctx.stats})
    metrics.inc("likes_generation_rebuilds_total", kind=lc.kind, outcome="verified")
    row.refresh_from_db()
    _after_change_quietly(lc, None)


def generation_slice(lc: Lifecycle, generation: int, *, grant: leases.LeaseGrant, actor: Actor,
                     say: Callable[[str], None] | None = None, budget_s: float | None = None,
                     max_chunks: int | None = None, on_chunk: Callable[[GenerationModel], None] | None = None
                     ) -> bool:
    """Run one slice of the rebuild of `generation` under `grant` (the lease on `lc.lease_resource`,
    taken by the caller). Returns True when the run has ended (ACTIVE, or already finished), False when
    the budget ran out first (the next slice resumes from the persisted cursor).

    Any exception marks the generation FAILED (unless a newer token owns it) and propagates."""
    row = _claim(lc, generation, grant)
    if row is None:
        return True
    progress = row.progress
    ctx = StepContext(lc, row, progress.get("params", {}), progress.setdefault("state", {}),
                      progress.setdefault("stats", {}), say or (lambda msg: None))
    deadline = None if budget_s is None else time.monotonic() + budget_s
    sl = _Slice(lc, grant, row, ctx, deadline, max_chunks, on_chunk=on_chunk)
    ctx.tick = lambda: _tick(sl)
    try:
        _after_change_quietly(lc, row)
        while True:
            step = row.progress["step"]
            if step == "verify":
                lc.verify(ctx)
                if ctx.params.get("dry_run"):
                    _retire_verified(sl, actor)
                    ctx.say(f"{lc.label} {generation}: RETIRED (a dry run: verified, never switched in)")
                    return True
                _activate(sl, actor)
                retired = f"; {lc.label} {row.previous_generation}: RETIRED" if row.previous_generation else ""
                ctx.say(f"{lc.label} {generation}: ACTIVE{retired}")
                return True
            if not _run_step(sl, step):
                return False
            _advance(sl, step)
            if sl.spent():
                return False
    except BaseException as exc:
        row.progress["state"], row.progress["stats"] = ctx.state, ctx.stats
        generation_fail(lc, generation, actor=actor, error=exc, token=grant.token, progress=row.progress)
        ctx.say(f"{lc.label} {generation}: FAILED ({exc.__class__.__name__}: {exc}); readers stay on "
                f"{lc.label} {row.previous_generation}")
        raise
