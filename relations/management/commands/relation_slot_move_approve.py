"""manage.py relation_slot_move_approve MOVE_ID --actor USER [--wait] [--json]

Approves another operator's relation slot move; the workers run it (issue 16 §3). Prints {"moveId", "status",
"writePauseMs", "copiedRows", "capturedApplied", "error"}. Exit 1 when refused (self_approval, ...), when the
move FAILED, or when --wait ran out before it was RETIRED."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from relations.models import SlotMoveState
from relations.services.slot_moves import ledger


def result(m) -> dict:
    return {"moveId": m.pk, "status": m.state, "writePauseMs": m.write_pause_ms, "copiedRows": m.copied_rows,
            "capturedApplied": m.captured_applied, "error": m.error or None}


class Command(DomainCommand):
    help = ("Approve a relation slot move another operator planned (never your own). The workers run it; with "
            "--wait this command follows it until it is RETIRED.")

    def add_arguments(self, parser):
        parser.add_argument("move_id", type=int, metavar="MOVE_ID")
        parser.add_argument("--actor", required=True, help="The approving operator's username.")
        parser.add_argument("--wait", action="store_true", help="Follow the move until it is RETIRED.")
        parser.add_argument("--wait-timeout", type=float, default=1800.0, help="Seconds --wait follows it at most.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=ledger.APPROVE_PERMISSION)
            m = ledger.move_approve(move_id=options["move_id"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        if options["wait"]:
            self.stderr.write(f"slot move {m.pk} approved; the workers run it (job {m.job_id}); following it")
            m = ledger.move_wait(m.pk, timeout_s=options["wait_timeout"],
                                 on_change=lambda x: self.stderr.write(f"  {x.state}"))
        emit(self, options, result(m), f"slot move {m.pk}: {m.state}" + (f" ({m.error})" if m.error else "")
             + (f"; write pause {m.write_pause_ms} ms" if m.write_pause_ms is not None else ""))
        if m.state in (SlotMoveState.FAILED, SlotMoveState.ABORTED):
            raise CommandError(f"slot move {m.pk} {m.state}: {m.error or m.abort_reason}")
        if options["wait"] and m.state != SlotMoveState.RETIRED:
            raise CommandError(f"slot move {m.pk} is {m.state} after --wait" + (f": {m.error}" if m.error else ""))
