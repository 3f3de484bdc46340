"""manage.py relation_slot_move_abort MOVE_ID --reason TEXT [--actor USER] [--json]

Aborts a relation slot move before its switch: the source stays the only owner, the target's copy is
removed. After the switch it is refused (slot_move_past_switch): plan a move back."""

from __future__ import annotations

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from relations.services.slot_moves import ledger


class Command(DomainCommand):
    help = "Abort a relation slot move before its switch (after it, plan a move back)."

    def add_arguments(self, parser):
        parser.add_argument("move_id", metavar="MOVE_ID")
        parser.add_argument("--reason", required=True, help="Why (recorded in the ledger and the audit log).")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options.get("actor"), permission=ledger.APPROVE_PERMISSION)
            m = ledger.move_abort(move_id=options["move_id"], actor=actor, reason=options["reason"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, {"moveId": m.pk, "status": m.state}, f"slot move {m.pk}: {m.state}")
