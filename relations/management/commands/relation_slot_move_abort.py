"""manage.py relation_slot_move_abort MOVE_ID --reason TEXT [--actor USER] [--json]

Aborts a relation slot move before its switch: the source stays the only owner, the target's copy is
removed. After the switch it is refused (slot_move_past_switch): plan a move back."""

from __future__ import annotations

from likes_project.ledgers.cli import LedgerAbortCommand
from relations.services.slot_moves.ledger import LEDGER


class Command(LedgerAbortCommand):
    help = "Abort a relation slot move before its switch (after it, plan a move back)."
    ledger = LEDGER
    id_dest, id_metavar = "move_id", "MOVE_ID"
