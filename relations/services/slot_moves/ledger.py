"""The relation slot move ledger's lifecycle (issue 16 §3, docs/slot-moves.md): plan, approve, abort, resume. The
lifecycle and its one table of allowed transitions are the approved-ledger kit's (`likes_project.ledgers`); this
module says what a move moves and checks.

  plan (operator) -> AWAITING_APPROVAL -> approve (another operator; the database refuses the requester)
  -> PREPARE -> COPYING -> CATCHING_UP -> CUTOVER -> VERIFY -> RETIRED
  ABORTED: by an operator, from any state before the switch (never after: a move back is another move)
  FAILED: the protocol found the frozen plan broken (the slots no longer on the source)

Every transition is audited in the transaction that makes it.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from likes_project.approvals import SelfApproval as SelfApproval  # the kit's one class
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import InvalidInput
from likes_project.ledgers.model import BEFORE_SWITCH
from likes_project.ledgers.model import TRANSITIONS as TRANSITIONS  # the protocol's table, walked by the tests
from likes_project.ledgers.runner import LedgerRunner
from likes_project.ledgers.service import ApprovedLedger
from likes_project.ranges import parse_ranges, ranges_label
from relations import routing
from relations.models import RelationSlotMove
from relations.services.slot_moves import rows

MOVE_JOB = "relations.slot_move"
EXECUTOR = "relation-slot-move"


class SlotMoves(ApprovedLedger):
    model = RelationSlotMove
    noun, code, target_type, id_param = "slot move", "slot_move", "relation_slot_move", "moveId"
    job_kind, job_target, executor = MOVE_JOB, "relation slot move", EXECUTOR
    plan_lock = 0x4C4B534D  # "LKSM"
    units_name = "slots"

    def ends(self, m: RelationSlotMove) -> tuple[str, str]:
        return m.source_alias, m.target_alias

    def abort_refusal(self, m: RelationSlotMove):
        if m.state in BEFORE_SWITCH and not m.new_contract_version:
            return None
        return self.state_conflict(f"slot move {m.pk} is {m.state}: past its switch (or finished), it cannot be "
                                     "aborted; plan a move back instead.", code="slot_move_past_switch")

    def undo_before_switch(self, m: RelationSlotMove) -> None:
        """The source's slot states are removed (it owns the slots and was never fenced for good), the target's
        copy and slot states too. After the switch the target is the owner: moving back is another move."""
        rows.undo_before_switch(m)

    def after_abort(self) -> None:
        routing.reset_cache()

    def report_fields(self, m: RelationSlotMove) -> dict:
        return {"slots": len(m.slots), "slotRange": ranges_label(m.slots), "slotList": m.slots,
                "source": m.source_alias, "target": m.target_alias, "contractVersion": m.contract_version,
                "newContractVersion": m.new_contract_version, "capturedApplied": m.captured_applied}

    def progress_fields(self, m: RelationSlotMove) -> dict[str, int]:
        return {"capturedApplied": m.captured_applied}


LEDGER = SlotMoves()
RUNNER = LedgerRunner(LEDGER, lock=0x4C4B5352)  # "LKSR", with the move id
move_get = LEDGER.get
transition = LEDGER.transition  # the protocol's steps: a CAS through the table, audited
move_report = LEDGER.report


def move_plan(*, slots: str | list[int], target: str, reason: str, actor: Actor) -> RelationSlotMove:
    """AWAITING_APPROVAL: move `slots` (all on one source shard under the active contract) onto `target`.
    Transaction: the ledger row and its audit record on `default`."""
    reason = LEDGER.plan_reason(reason, actor)
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
    to_copy = rows.rows_count(sources[0], contract, wanted)
    with LEDGER.plan_transaction():
        LEDGER.refuse_overlap(wanted)
        m = RelationSlotMove.objects.create(
            slots=wanted, source_alias=sources[0], target_alias=target, contract_version=contract.version,
            rows_to_copy=to_copy, reason=reason, requested_by=actor.name, requested_channel=actor.channel,
            state_changed_at=timezone.now())
        audit_record(actor=actor, action="relation_slot_move.plan", target_type="relation_slot_move",
                     target_id=str(m.pk), params={"slots": ranges_label(wanted), "from": sources[0], "to": target,
                                                  "rowsToCopy": to_copy, "reason": reason,
                                                  "contractVersion": contract.version})
    return m


def move_approve(*, move_id, actor: Actor) -> RelationSlotMove:
    """PREPARE, approved by `actor` (never the requester); then the system's job runs the protocol."""
    return LEDGER.approve(move_id, actor=actor)


def move_resume(*, move_id, actor: Actor) -> RelationSlotMove:
    """A new job for an approved move that is not finished (its worker died, or a step must wait); the protocol
    goes on from the ledger. A RETIRED move whose source rows are kept is cleaned up once its retention passed."""
    return LEDGER.resume(move_id, actor=actor)


def move_abort(*, move_id, actor: Actor, reason: str) -> RelationSlotMove:
    """ABORTED, from any state before the switch (`SlotMoves.undo_before_switch`)."""
    return LEDGER.abort(move_id, actor=actor, reason=reason)


def move_wait(move_id: int, *, timeout_s: float, on_change=None) -> RelationSlotMove:
    """Until the move is RETIRED, ABORTED or FAILED, or its job ended with it waiting; bounded."""
    return LEDGER.wait(move_id, timeout_s=timeout_s, on_change=on_change)
