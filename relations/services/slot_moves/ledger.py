"""The relation slot move ledger's lifecycle (issue 16 §3, docs/slot-moves.md): plan, approve, abort, resume,
and the one table of allowed transitions every state change goes through.

  plan (operator) -> AWAITING_APPROVAL -> approve (another operator; the database refuses the requester)
  -> PREPARE -> COPYING -> CATCHING_UP -> CUTOVER -> VERIFY -> RETIRED
  ABORTED: by an operator, from any state before the switch (never after: a move back is another move)
  FAILED: the protocol found the frozen plan broken (the slots no longer on the source)

Every transition is audited in the transaction that makes it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, Forbidden, InvalidInput, NotFound
from likes_project.ledgers import ledger_transition, ledger_wait
from likes_project.ranges import parse_ranges, ranges_label
from relations import routing
from relations.models import SLOT_MOVE_TERMINAL, RelationSlotMove, SlotMoveState

S = SlotMoveState
PLAN_PERMISSION = "relations.plan_relationslotmove"
APPROVE_PERMISSION = "relations.approve_relationslotmove"
MOVE_JOB = "relations.slot_move"
EXECUTOR = "relation-slot-move"
_PLAN_LOCK = 0x4C4B534D  # "LKSM": plans are serialised, so two overlapping ones cannot both pass the check

TRANSITIONS: dict[str, frozenset[str]] = {
    S.AWAITING_APPROVAL: frozenset({S.PREPARE, S.ABORTED}),
    S.PREPARE: frozenset({S.COPYING, S.ABORTED, S.FAILED}),
    S.COPYING: frozenset({S.CATCHING_UP, S.ABORTED, S.FAILED}),
    S.CATCHING_UP: frozenset({S.CUTOVER, S.ABORTED, S.FAILED}),
    S.CUTOVER: frozenset({S.VERIFY, S.ABORTED, S.FAILED}),  # VERIFY only with the switch, in its transaction
    S.VERIFY: frozenset({S.RETIRED}),
    S.RETIRED: frozenset(),
    S.ABORTED: frozenset(),
    S.FAILED: frozenset(),
}
BEFORE_SWITCH = frozenset({S.AWAITING_APPROVAL, S.PREPARE, S.COPYING, S.CATCHING_UP, S.CUTOVER})


class SlotMoveNotFound(NotFound):
    code = "slot_move_not_found"
    default_message = "No such relation slot move."


class SlotMoveOverlap(Conflict):
    code = "slot_move_overlap"
    default_message = "Another slot move that is not finished moves some of these slots."


class SlotMoveStateConflict(Conflict):
    code = "slot_move_state"


class SelfApproval(Forbidden):
    code = "self_approval"
    default_message = "The requester of a slot move cannot approve it; another operator must."


class TransitionRefused(Conflict):
    code = "slot_move_transition_refused"


def move_get(move_id) -> RelationSlotMove:
    try:
        return RelationSlotMove.objects.get(pk=int(move_id))
    except (RelationSlotMove.DoesNotExist, ValueError, TypeError):
        raise SlotMoveNotFound(f"No relation slot move {move_id!r}.") from None


def transition(m: RelationSlotMove, to: str, *, actor: Actor, params: dict | None = None,
               **fields) -> RelationSlotMove:
    """Move `m` to `to` if the table allows it and the row is still in the state `m` was read in (a CAS: two
    runners cannot both move it). In the caller's transaction on `default`, if any; audited in it."""
    return ledger_transition(m, to, transitions=TRANSITIONS, terminal=SLOT_MOVE_TERMINAL, refused=TransitionRefused,
                             what=f"slot move {m.pk}", target_type="relation_slot_move", actor=actor, params=params,
                             **fields)


def move_plan(*, slots: str | list[int], target: str, reason: str, actor: Actor) -> RelationSlotMove:
    """AWAITING_APPROVAL: move `slots` (all on one source shard under the active contract) onto `target`.
    Transaction: the ledger row and its audit record on `default`."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("A slot move needs a reason.", code="reason_required")
    if actor.channel == "cli" and actor.name.startswith("os:"):
        raise InvalidInput("A slot move plan names its operator: --actor USER.", code="actor_required")
    if target not in settings.RELATION_SHARD_ALIASES:
        raise InvalidInput(f"The target {target!r} is not a configured relation shard "
                           f"({', '.join(settings.RELATION_SHARD_ALIASES)}).", code="unknown_shard")
    routing.reset_cache()
    contract = routing.active_contract()
    wanted = slots if isinstance(slots, list) else parse_ranges(slots, contract.logical_slots, what="slots",
                                                                 code="invalid_slots")
    sources = sorted({contract.slot_aliases[s] for s in wanted})
    if len(sources) != 1:
        raise InvalidInput(f"A move takes slots from one shard; these are on {', '.join(sources)}.",
                           code="several_sources")
    if target in sources:
        raise InvalidInput(f"slots {ranges_label(wanted)} are already on {target}.", code="already_on_target")
    from relations.services.slot_moves import protocol

    rows = protocol.rows_count(sources[0], contract, wanted)
    with transaction.atomic(using="default", durable=True):
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PLAN_LOCK])
        _refuse_overlap(wanted)
        m = RelationSlotMove.objects.create(
            slots=wanted, source_alias=sources[0], target_alias=target, contract_version=contract.version,
            rows_to_copy=rows, reason=reason, requested_by=actor.name, requested_channel=actor.channel,
            state_changed_at=timezone.now())
        audit_record(actor=actor, action="relation_slot_move.plan", target_type="relation_slot_move",
                     target_id=str(m.pk), params={"slots": ranges_label(wanted), "from": sources[0], "to": target,
                                                  "rowsToCopy": rows, "reason": reason,
                                                  "contractVersion": contract.version})
    return m


def _refuse_overlap(slots: list[int], *, besides: int | None = None) -> None:
    wanted = set(slots)
    for other in RelationSlotMove.objects.exclude(state__in=SLOT_MOVE_TERMINAL).exclude(pk=besides):
        common = wanted & set(other.slots)
        if common:
            raise SlotMoveOverlap(f"slot move {other.pk} ({other.state}) also moves slots "
                                  f"{ranges_label(sorted(common))}; finish or abort it first.")


def move_approve(*, move_id, actor: Actor) -> RelationSlotMove:
    """PREPARE, approved by `actor` (never the requester); then the system's job runs the protocol."""
    from likes_project.audit.services import system_actor
    from likes_project.opsjobs.services import job_start

    m = move_get(move_id)
    if m.state != S.AWAITING_APPROVAL:
        raise SlotMoveStateConflict(f"slot move {m.pk} is {m.state}; only AWAITING_APPROVAL can be approved.",
                                    code="slot_move_not_awaiting_approval")
    if actor.name == m.requested_by:
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="relation_slot_move.approve", target_type="relation_slot_move",
                         target_id=str(m.pk), outcome="refused", params={"reason": "self_approval"})
        raise SelfApproval()
    try:
        with transaction.atomic(using="default", durable=True):
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PLAN_LOCK])
            _refuse_overlap(m.slots, besides=m.pk)
            m = transition(m, S.PREPARE, actor=actor, approved_by=actor.name, approved_at=timezone.now())
    except IntegrityError:  # the database's own refusal (slot_move_not_approved_by_requester)
        raise SelfApproval() from None
    job = job_start(kind=MOVE_JOB, actor=system_actor(EXECUTOR), params={"moveId": m.pk},
                    target=f"relation slot move {m.pk}")
    RelationSlotMove.objects.filter(pk=m.pk).update(job_id=job.pk)
    return move_get(m.pk)


def move_resume(*, move_id, actor: Actor) -> RelationSlotMove:
    """A new job for an approved move that is not finished (its worker died, or a step must wait); the protocol
    goes on from the ledger. A RETIRED move whose source rows are kept is cleaned up once its retention passed."""
    from likes_project.audit.services import system_actor
    from likes_project.opsjobs.models import JobStatus, OpsJob
    from likes_project.opsjobs.services import job_start

    m = move_get(move_id)
    if m.state in (S.AWAITING_APPROVAL, S.ABORTED, S.FAILED) or (m.state == S.RETIRED and m.source_cleaned_at):
        raise SlotMoveStateConflict(f"slot move {m.pk} is {m.state}; there is nothing to resume.",
                                    code="slot_move_not_resumable")
    running = OpsJob.objects.filter(pk=m.job_id, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).first()
    if running is not None:
        raise SlotMoveStateConflict(f"slot move {m.pk} is being run by job {running.pk}.", code="slot_move_running")
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action="relation_slot_move.resume", target_type="relation_slot_move",
                     target_id=str(m.pk), params={"state": m.state})
    job = job_start(kind=MOVE_JOB, actor=system_actor(EXECUTOR), params={"moveId": m.pk},
                    target=f"relation slot move {m.pk}")
    RelationSlotMove.objects.filter(pk=m.pk).update(job_id=job.pk, error="")
    return move_get(m.pk)


def move_abort(*, move_id, actor: Actor, reason: str) -> RelationSlotMove:
    """ABORTED, from any state before the switch: the source's slot states are removed (it owns the slots and
    was never fenced for good), the target's copy and slot states too. After the switch the target is the
    owner: moving back is another move."""
    from relations.services.slot_moves import protocol

    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("An abort needs a reason.", code="reason_required")
    m = move_get(move_id)
    if m.state not in BEFORE_SWITCH or m.new_contract_version:
        raise SlotMoveStateConflict(f"slot move {m.pk} is {m.state}: past its switch (or finished), it cannot be "
                                    "aborted; plan a move back instead.", code="slot_move_past_switch")
    protocol.undo_before_switch(m)
    m = transition(move_get(m.pk), S.ABORTED, actor=actor, params={"reason": reason}, abort_reason=reason)
    routing.reset_cache()
    return m


def move_report(m: RelationSlotMove) -> dict:
    """The ledger as the commands print it (`relation_slot_move_show --json`)."""
    def iso(value):
        return value.isoformat().replace("+00:00", "Z") if value else None

    return {
        "moveId": m.pk, "status": m.state, "slots": len(m.slots), "slotRange": ranges_label(m.slots),
        "slotList": m.slots, "source": m.source_alias, "target": m.target_alias,
        "contractVersion": m.contract_version, "newContractVersion": m.new_contract_version,
        "rowsToCopy": m.rows_to_copy, "copiedRows": m.copied_rows, "capturedApplied": m.captured_applied,
        "catchupPasses": m.catchup_passes, "copyCursor": m.copy_cursor, "writePauseMs": m.write_pause_ms,
        "verify": m.verify_result, "reason": m.reason, "requestedBy": m.requested_by,
        "approvedBy": m.approved_by or None, "abortReason": m.abort_reason or None, "error": m.error or None,
        "jobId": m.job_id, "createdAt": iso(m.created_at), "approvedAt": iso(m.approved_at),
        "cutoverAt": iso(m.cutover_at), "verifiedAt": iso(m.verified_at), "finishedAt": iso(m.finished_at),
        "sourceCleanupAfter": iso(m.source_cleanup_after), "sourceCleanedAt": iso(m.source_cleaned_at),
    }


def move_wait(move_id: int, *, timeout_s: float, on_change=None) -> RelationSlotMove:
    """Until the move is RETIRED, ABORTED or FAILED, or its job ended with it waiting; bounded."""
    return ledger_wait(lambda: move_get(move_id), timeout_s=timeout_s, on_change=on_change)
