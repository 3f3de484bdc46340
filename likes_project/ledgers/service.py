"""`ApprovedLedger`: the lifecycle every approved, job-run ledger goes through (a virtual-bucket migration, a
relation slot move). A subclass names its model, its refusal codes and job, and says what it moves (the field
`units_name`) from where to where (`ends`), what else an approval or an abort must check, and how an abort is
undone; the rest is here, once:

- `transition`: the one audited compare-and-set through the table of allowed transitions;
- `approve`: PREPARE by a second person (the two-person approval kit, `likes_project.approvals`: the service and
  the database refuse the requester), then the system's job; `resume`: a new job from the ledger; `abort`:
  before the switch only, with a reason;
- `plan_transaction`: plans and approvals serialised, so two overlapping ones cannot both pass `refuse_overlap`;
- `wait`: following the job; `report`: the fields every ledger prints.
"""

from __future__ import annotations

import contextlib
import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from likes_project import metrics
from likes_project.approvals import Approval
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, DomainError, InvalidInput, NotFound
from likes_project.ledgers.model import TERMINAL, TRANSITIONS, ApprovedLedgerModel, LedgerState
from likes_project.ranges import ranges_label

S = LedgerState


def ledger_transition(row: ApprovedLedgerModel, to: str, *, refused: type[Conflict], what: str, target_type: str,
                      actor: Actor, params: dict | None = None, **fields) -> ApprovedLedgerModel:
    """Move `row` to `to` if the table allows it and the row is still in the state it was read in (a CAS: two
    runners cannot both move it), audited as "<target_type>.<to>" in the same transaction (the caller's on
    `default`, if any). `refused` is raised otherwise; `what` names the row in its message ("migration 3")."""
    if to not in TRANSITIONS[row.state]:
        raise refused(f"{what}: {row.state} -> {to} is not a transition of the protocol")
    now = timezone.now()
    if to in TERMINAL:
        fields.setdefault("finished_at", now)
    with transaction.atomic(using="default"):
        moved = type(row).objects.filter(pk=row.pk, state=row.state).update(state=to, state_changed_at=now, **fields)
        if not moved:
            raise refused(f"{what} is no longer {row.state}")
        audit_record(actor=actor, action=f"{target_type}.{to.lower()}", target_type=target_type,
                     target_id=str(row.pk), params={"from": row.state, **(params or {})})
    row.refresh_from_db()
    return row


def ledger_errors(kind: type) -> tuple[type, ...]:
    """The five refusal classes of a kind of ledger, named and coded from its `code` ("slot_move" -> SlotMoveNotFound,
    `slot_move_not_found`), in the kind's module."""
    prefix = "".join(part.title() for part in kind.code.split("_"))

    def error(base: type, name: str, code: str, message: str = "") -> type:
        body = {"code": f"{kind.code}_{code}", "__module__": kind.__module__}
        if message:
            body["default_message"] = message
        return type(f"{prefix}{name}", (base,), body)

    return (error(NotFound, "NotFound", "not_found", f"No such {kind.job_target}."),
            error(Conflict, "Overlap", "overlap", f"Another {kind.noun} that is not finished moves some of these "
                                                  f"{kind.units_name}."),
            error(Conflict, "StateConflict", "state"), error(Conflict, "Waiting", "waiting"),
            error(Conflict, "TransitionRefused", "transition_refused"))


def iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


class ApprovedLedger(ABC):
    """One kind of approved ledger. Subclasses set the attributes and implement the abstract hooks (a ledger that
    misses one cannot be instantiated); the other hooks default to nothing."""

    model: type[ApprovedLedgerModel]
    noun: str  # in messages: "slot move 3 is COPYING"
    code: str  # refusal codes: "slot_move_running", "slot_move_not_resumable"
    target_type: str  # the audit's target type and action prefix: "relation_slot_move.approve"
    id_param: str  # the ledger id's JSON field and job parameter: "moveId"
    job_kind: str
    job_target: str  # the job's target: "relation slot move 3"
    executor: str  # the system actor the job runs as
    # The model's own permissions (its Meta declares them): "<app>.plan_<model>" and "<app>.approve_<model>", the
    # latter for approve, resume and abort.
    plan_permission: str
    approve_permission: str
    plan_lock: int  # the advisory lock that serialises plans and approvals
    units_name: str  # the model's field of what it moves, and their name in messages: "buckets", "slots"
    # The refusals, one class each, made for every subclass from its `code` (`ledger_errors`): SlotMoveNotFound
    # (`slot_move_not_found`), SlotMoveOverlap, SlotMoveStateConflict (`slot_move_state`, or a finer code given
    # where it is raised), SlotMoveWaiting (a step cannot go on now: the job ends, the ledger waits to be resumed)
    # and SlotMoveTransitionRefused (a transition the table or the row's current state refuses).
    not_found: type[NotFound]
    overlap: type[Conflict]
    state_conflict: type[Conflict]
    waiting: type[Conflict]
    refused: type[Conflict]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        meta = cls.model._meta
        cls.plan_permission = f"{meta.app_label}.plan_{meta.model_name}"
        cls.approve_permission = f"{meta.app_label}.approve_{meta.model_name}"
        cls.not_found, cls.overlap, cls.state_conflict, cls.waiting, cls.refused = ledger_errors(cls)

    # --- hooks --------------------------------------------------------------------------------------------

    @abstractmethod
    def ends(self, m: ApprovedLedgerModel) -> tuple[str, str]:
        """Where `m` moves its units from and to, as its summary names them: ("rel_01", "rel_02")."""

    def units(self, m: ApprovedLedgerModel) -> list[int]:
        """What `m` moves (sorted); two unfinished ledgers never share one."""
        return getattr(m, self.units_name)

    def summary(self, m: ApprovedLedgerModel) -> str:
        """What `m` moves where, in a line ("slots 1,3 (2) rel_01 -> rel_02")."""
        units = self.units(m)
        source, target = self.ends(m)
        return f"{self.units_name} {ranges_label(units)} ({len(units)}) {source} -> {target}"

    def approval_checks(self, m: ApprovedLedgerModel) -> None:
        """Refusals of an approval besides the state, the second person and overlap."""
        return None  # by default, none

    def approval_guard(self, m: ApprovedLedgerModel):
        """Held around the approval's transaction (a context manager)."""
        return contextlib.nullcontext()

    @abstractmethod
    def abort_refusal(self, m: ApprovedLedgerModel) -> DomainError | None:
        """Why `m` cannot be aborted now (past its switch, or finished), or None."""

    @abstractmethod
    def undo_before_switch(self, m: ApprovedLedgerModel) -> None:
        """Give the units back to their source and remove the target's copy (an abort)."""

    def after_abort(self) -> None:
        """What a process must reload after an abort (its routing cache)."""
        return None  # by default, nothing

    def report_fields(self, m: ApprovedLedgerModel) -> dict:
        """The report's fields of this kind of ledger (what moves where, its own cursors)."""
        return {}

    def progress_fields(self, m: ApprovedLedgerModel) -> dict[str, int]:
        """What this kind of ledger counts besides the copied rows (replayed events, captured changes applied):
        in the approve command's and the job's results, and in the job's progress."""
        return {}

    # --- the lifecycle ------------------------------------------------------------------------------------

    def get(self, ledger_id) -> ApprovedLedgerModel:
        try:
            return self.model.objects.get(pk=int(ledger_id))
        except (self.model.DoesNotExist, ValueError, TypeError):
            raise self.not_found(f"No {self.job_target} {ledger_id!r}.") from None

    def transition(self, m: ApprovedLedgerModel, to: str, *, actor: Actor, params: dict | None = None,
                   **fields) -> ApprovedLedgerModel:
        """Move `m` to `to` through the table, a compare-and-set audited in the caller's transaction, if any. The time
        it spent in the state it leaves is observed (M13: `likes_ledger_state_seconds{ledger, state}`)."""
        was, since = m.state, m.state_changed_at
        moved = ledger_transition(m, to, refused=self.refused, what=f"{self.noun} {m.pk}",
                                  target_type=self.target_type, actor=actor, params=params, **fields)
        if since is not None:
            metrics.observe("likes_ledger_state_seconds", (timezone.now() - since).total_seconds(),
                            ledger=self.target_type, state=was)
        return moved

    def catch_up_observed(self, rows: int) -> None:
        """One catch-up pass replayed `rows` changed rows: the source/target gap it closed (M13)."""
        metrics.inc("likes_ledger_catchup_passes_total", ledger=self.target_type)
        metrics.inc("likes_ledger_catchup_rows_total", rows, ledger=self.target_type)

    @contextlib.contextmanager
    def plan_transaction(self):
        """A durable transaction on `default` holding the plan lock (plans and approvals one at a time)."""
        with transaction.atomic(using="default", durable=True):
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [self.plan_lock])
            yield

    def plan_reason(self, reason: str | None, actor: Actor) -> str:
        """A plan's first refusals, before anything is read: no reason, or an operator the CLI did not name (an
        `os:` user); the reason, stripped."""
        reason = (reason or "").strip()
        if not reason:
            raise InvalidInput(f"A {self.noun} needs a reason.", code="reason_required")
        if actor.channel == "cli" and actor.name.startswith("os:"):
            raise InvalidInput(f"A {self.noun} plan names its operator: --actor USER.", code="actor_required")
        return reason

    def units_in_flight(self) -> set[int]:
        """Every unit an unfinished ledger of this kind moves."""
        return {u for m in self.model.objects.exclude(state__in=TERMINAL) for u in self.units(m)}

    def refuse_overlap(self, units: list[int], *, besides: int | None = None) -> None:
        """Inside `plan_transaction`: no unfinished ledger of this kind moves any of `units`."""
        wanted = set(units)
        for other in self.model.objects.exclude(state__in=TERMINAL).exclude(pk=besides):
            common = wanted & set(self.units(other))
            if common:
                raise self.overlap(f"{self.noun} {other.pk} ({other.state}) also moves {self.units_name} "
                                   f"{ranges_label(sorted(common))}; finish or abort it first.")

    @functools.cached_property
    def approval(self) -> Approval:
        return Approval(model=self.model, code=self.code, label=self.job_target, noun=self.noun,
                        target_type=self.target_type, action=f"{self.target_type}.approve",
                        job_kind=self.job_kind, executor=self.executor, id_param=self.id_param,
                        job_target=self.job_target)

    def approve(self, ledger_id, *, actor: Actor) -> ApprovedLedgerModel:
        """PREPARE, approved by `actor` (never the requester); then the system's job runs the protocol."""
        m = self.get(ledger_id)
        if m.state != S.AWAITING_APPROVAL:
            raise self.state_conflict(f"{self.noun} {m.pk} is {m.state}; only AWAITING_APPROVAL can be approved.",
                                      code=f"{self.code}_not_awaiting_approval")
        refused = self.approval.refuse_self(m, actor)
        if refused is not None:
            raise refused
        self.approval_checks(m)
        try:
            with self.approval_guard(m), self.plan_transaction():
                self.refuse_overlap(self.units(m), besides=m.pk)
                m = self.transition(m, S.PREPARE, actor=actor, approved_by=actor.name, approved_at=timezone.now())
        except IntegrityError:  # the database's own refusal (the check that the approver is not the requester)
            raise self.approval.self_approval() from None
        return self._start_job(m)

    def resume(self, ledger_id, *, actor: Actor) -> ApprovedLedgerModel:
        """A new job for an approved ledger that is not finished (its worker died, or a step must wait); the
        protocol goes on from the ledger. A RETIRED one whose source copy is kept is cleaned up once its
        retention has passed."""
        from likes_project.opsjobs.models import JobStatus, OpsJob

        m = self.get(ledger_id)
        if not m.resumable:
            raise self.state_conflict(f"{self.noun} {m.pk} is {m.state}; there is nothing to resume.",
                                      code=f"{self.code}_not_resumable")
        running = OpsJob.objects.filter(pk=m.job_id, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).first()
        if running is not None:
            raise self.state_conflict(f"{self.noun} {m.pk} is being run by job {running.pk}.",
                                      code=f"{self.code}_running")
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action=f"{self.target_type}.resume", target_type=self.target_type,
                         target_id=str(m.pk), params={"state": m.state})
        return self._start_job(m, error="")

    def _start_job(self, m: ApprovedLedgerModel, **fields) -> ApprovedLedgerModel:
        self.approval.job_start(m)
        if fields:
            self.model.objects.filter(pk=m.pk).update(**fields)
        return self.get(m.pk)

    def abort(self, ledger_id, *, actor: Actor, reason: str) -> ApprovedLedgerModel:
        """ABORTED, from any state before the switch: `undo_before_switch`, then the audited transition."""
        reason = (reason or "").strip()
        if not reason:
            raise InvalidInput("An abort needs a reason.", code="reason_required")
        m = self.get(ledger_id)
        refusal = self.abort_refusal(m)
        if refusal is not None:
            raise refusal
        self.undo_before_switch(m)
        m = self.transition(self.get(m.pk), S.ABORTED, actor=actor, params={"reason": reason}, abort_reason=reason)
        self.after_abort()
        return m

    def wait(self, ledger_id, *, timeout_s: float, on_change: Callable | None = None) -> ApprovedLedgerModel:
        """Until the ledger is RETIRED, ABORTED or FAILED, or its job ended with it waiting; bounded."""
        from likes_project.opsjobs.models import OpsJob

        deadline, seen = time.monotonic() + timeout_s, None
        while True:
            m = self.get(ledger_id)
            if m.state != seen and on_change is not None:
                on_change(m)
            seen = m.state
            job = OpsJob.objects.filter(pk=m.job_id).first()
            if m.finished or time.monotonic() >= deadline or (job is not None and job.finished):
                return m
            time.sleep(0.5)  # following a job on the workers: poll its ledger row, bounded by timeout_s

    def report(self, m: ApprovedLedgerModel) -> dict:
        """The ledger as the show command prints it (`--json`) and the console shows it."""
        return {
            self.id_param: m.pk, "status": m.state, **self.report_fields(m),
            "rowsToCopy": m.rows_to_copy, "copiedRows": m.copied_rows, "catchupPasses": m.catchup_passes,
            "copyCursor": m.copy_cursor, "writePauseMs": m.write_pause_ms, "verify": m.verify_result,
            "reason": m.reason, "requestedBy": m.requested_by, "approvedBy": m.approved_by or None,
            "abortReason": m.abort_reason or None, "error": m.error or None, "jobId": m.job_id,
            "createdAt": iso(m.created_at), "approvedAt": iso(m.approved_at), "cutoverAt": iso(m.cutover_at),
            "verifiedAt": iso(m.verified_at), "finishedAt": iso(m.finished_at),
            "sourceCleanupAfter": iso(m.source_cleanup_after), "sourceCleanedAt": iso(m.source_cleaned_at),
        }
