"""manage.py relation_slot_move_show [MOVE_ID] [--json]

The ledger of one relation slot move (state, slots, source and target, contract versions, copy cursor, captured
changes applied, write pause, verification), or every move, newest first, without MOVE_ID. Exit 1 when there
is no such move."""

from __future__ import annotations

from likes_project.cli import add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.ledgers.cli import LedgerCommand
from relations.models import RelationSlotMove
from relations.services.slot_moves import ledger


def _line(r: dict) -> str:
    return (f"slot move {r['moveId']}: {r['status']}  slots {r['slotRange']} ({r['slots']}) {r['source']} -> "
            f"{r['target']}; copied {r['copiedRows']} of {r['rowsToCopy']} rows, {r['capturedApplied']} captured "
            f"changes applied; write pause {r['writePauseMs'] if r['writePauseMs'] is not None else '-'} ms")


class Command(LedgerCommand):
    help = "Show a relation slot move's ledger (state, progress, contract versions, write pause), or every move."

    def add_arguments(self, parser):
        parser.add_argument("move_id", nargs="?", metavar="MOVE_ID")
        add_json_argument(parser)

    def run(self, *args, **options):
        if options["move_id"] is None:
            reports = [ledger.move_report(m) for m in RelationSlotMove.objects.all()[:100]]
            emit(self, options, {"moves": reports}, "\n".join(_line(r) for r in reports) or "no slot move")
            return
        try:
            m = ledger.move_get(options["move_id"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        r = ledger.move_report(m)
        lines = [_line(r), f"  contract v{m.contract_version} -> v{m.new_contract_version or '-'}; requested by "
                 f"{m.requested_by}" + (f", approved by {m.approved_by}" if m.approved_by else "")
                 + f"; reason: {m.reason}"]
        lines += self.tail_lines(m)
        emit(self, options, r, "\n".join(lines))
