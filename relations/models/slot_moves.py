"""Relation slot moves (issue 16 §3; docs/slot-moves.md): the ledger, the slot states and the captured changes."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.db_routers import RELATION_SHARD
from likes_project.ledgers.model import TERMINAL, ApprovedLedgerModel, LedgerState
from likes_project.model_kit import requester_not_approver

SlotMoveState = LedgerState  # the approved-ledger kit's states (likes_project.ledgers.model)


class RelationSlotMove(ApprovedLedgerModel):
    """The ledger of one move of logical relation slots from one shard to another (control plane): the kit's
    fields (state, who and why, the job, progress, the timeline), the slots, source and contract frozen at the
    plan, and what the catch-up applied. The copy's keyset (the kit's copy_cursor) is {"relations": last id,
    "commands": last id, "relations_end": .., ...}; write_pause_ms is the slots' exclusive locks taken -> released."""

    slots = models.JSONField(default=list)  # sorted logical slots
    source_alias = models.CharField(max_length=32)
    target_alias = models.CharField(max_length=32)
    contract_version = models.PositiveIntegerField()  # the active contract the plan froze
    new_contract_version = models.PositiveIntegerField(null=True, blank=True)  # created by the cutover
    captured_applied = models.BigIntegerField(default=0)  # capture ids the catch-up applied

    class Meta(ApprovedLedgerModel.Meta):
        permissions = [
            ("plan_relationslotmove", "Can plan a relation slot move"),
            ("approve_relationslotmove", "Can approve, resume or abort a relation slot move"),
        ]
        constraints = [
            requester_not_approver("slot_move"),
            models.CheckConstraint(condition=~Q(source_alias=models.F("target_alias")),
                                   name="slot_move_source_not_target"),
        ]

    def __str__(self) -> str:
        return f"slot move {self.pk}: {len(self.slots)} slots {self.source_alias} -> {self.target_alias} ({self.state})"


SLOT_MOVE_TERMINAL = TERMINAL


class SlotFenceState(models.TextChoices):
    CAPTURING = "CAPTURING"  # source, before the switch: writes go on and are captured
    INCOMING = "INCOMING"  # target, before the switch: not the owner, writes refused (`moved`)
    MOVED_OUT = "MOVED_OUT"  # source, after the switch: not the owner any more, writes refused for good


class RelationSlotState(models.Model):
    """On a relation shard: a logical slot a move is taking through this shard. No row: the shard is what the
    active contract says it is for the slot. Read by `likes_relation_apply` and the capture trigger
    (relations migration 0014)."""

    db_family = RELATION_SHARD

    slot = models.IntegerField(primary_key=True)
    state = models.CharField(max_length=12, choices=SlotFenceState.choices)
    move_id = models.BigIntegerField()
    hash_seed = models.CharField(max_length=64)
    logical_slots = models.IntegerField()
    changed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"slot {self.slot}: {self.state} (move {self.move_id})"


class RelationSlotChange(models.Model):
    """On a source relation shard: the key of a relation or command row of a CAPTURING slot written since the
    capture began (the trigger of relations migration 0014). The catch-up re-copies the row and deletes this."""

    db_family = RELATION_SHARD

    id = models.BigAutoField(primary_key=True)
    move_id = models.BigIntegerField()
    kind = models.CharField(max_length=3)  # "rel" (key: video_id) or "cmd" (key: operation_id)
    user_id = models.BigIntegerField()
    key = models.CharField(max_length=128)

    class Meta:
        indexes = [models.Index(fields=["move_id", "id"], name="slotchange_move_idx")]

    def __str__(self) -> str:
        return f"move {self.move_id}: {self.kind} {self.user_id}/{self.key}"
