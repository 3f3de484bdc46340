"""manage.py relation_slot_move_plan --slots RANGES --to SHARD --reason TEXT --actor USER [--json]

Plans moving logical relation slots (all on one shard under the active contract) onto another relation shard
(issue 16 §3). Prints {"moveId", "status": "AWAITING_APPROVAL", "slots", "slotRange", "source", "target",
"rowsToCopy"}; another operator approves it with relation_slot_move_approve. Exit 1 when refused (overlap,
unknown shard, slots already there or on several shards, ...)."""

from __future__ import annotations

from likes_project.ledgers.cli import LedgerPlanCommand
from likes_project.ranges import ranges_label
from relations.services.slot_moves import ledger


class Command(LedgerPlanCommand):
    help = ("Plan a relation slot move onto another relation shard (scale-out). It waits for another operator's "
            "approval (relation_slot_move_approve).")
    ledger = ledger.LEDGER

    def add_plan_arguments(self, parser):
        parser.add_argument("--slots", required=True, metavar="RANGES", help="Logical slots to move: 128-191.")
        parser.add_argument("--to", required=True, metavar="SHARD", help="The target relation shard (rel_02).")

    def plan(self, options, actor):
        return ledger.move_plan(slots=options["slots"], target=options["to"], reason=options["reason"], actor=actor)

    def plan_result(self, m):
        return {"slots": len(m.slots), "slotRange": ranges_label(m.slots), "source": m.source_alias,
                "target": m.target_alias, "rowsToCopy": m.rows_to_copy}
