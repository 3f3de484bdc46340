"""manage.py relation_slot_move_approve MOVE_ID --actor USER [--wait] [--json]

Approves another operator's relation slot move; the workers run it (issue 16 §3). Prints {"moveId", "status",
"writePauseMs", "copiedRows", "capturedApplied", "error"}. Exit 1 when refused (self_approval, ...), when the
move FAILED, or when --wait ran out before it was RETIRED."""

from __future__ import annotations

from likes_project.ledgers.cli import LedgerApproveCommand
from relations.services.slot_moves.ledger import LEDGER


class Command(LedgerApproveCommand):
    help = ("Approve a relation slot move another operator planned (never your own). The workers run it; with "
            "--wait this command follows it until it is RETIRED.")
    ledger = LEDGER
    id_dest, id_metavar = "move_id", "MOVE_ID"
