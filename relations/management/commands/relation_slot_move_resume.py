"""manage.py relation_slot_move_resume MOVE_ID [--actor USER] [--json]

Starts a new job for an approved relation slot move that stopped before its end (a worker died, a cutover had
to wait); the protocol goes on from the ledger. Exit 1 when there is nothing to resume."""

from __future__ import annotations

from likes_project.ledgers.cli import LedgerResumeCommand
from relations.services.slot_moves.ledger import LEDGER


class Command(LedgerResumeCommand):
    help = "Resume a relation slot move from its ledger's state (a new job on the workers)."
    ledger = LEDGER
    id_dest, id_metavar = "move_id", "MOVE_ID"
