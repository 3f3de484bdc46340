"""manage.py relation_slot_move_show [MOVE_ID] [--json]

The ledger of one relation slot move (state, slots, source and target, contract versions, copy cursor, captured
changes applied, write pause, verification), or every move, newest first, without MOVE_ID. Exit 1 when there
is no such move."""

from __future__ import annotations

from likes_project.ledgers.cli import LedgerShowCommand
from relations.services.slot_moves.ledger import LEDGER


class Command(LedgerShowCommand):
    help = "Show a relation slot move's ledger (state, progress, contract versions, write pause), or every move."
    ledger = LEDGER
    id_dest, id_metavar = "move_id", "MOVE_ID"
    listed, list_field = True, "moves"

    def list_line(self, r: dict) -> str:
        return (f"slot move {r['moveId']}: {r['status']}  slots {r['slotRange']} ({r['slots']}) {r['source']} -> "
                f"{r['target']}; copied {r['copiedRows']} of {r['rowsToCopy']} rows, {r['capturedApplied']} captured "
                f"changes applied; write pause {r['writePauseMs'] if r['writePauseMs'] is not None else '-'} ms")

    def show_lines(self, m, report: dict) -> list[str]:
        return [self.list_line(report),
                f"  contract v{m.contract_version} -> v{m.new_contract_version or '-'}; {self.who_line(m)}"]
