"""manage.py relation_slot_move_resume MOVE_ID [--actor USER] [--json]

Starts a new job for an approved relation slot move that stopped before its end (a worker died, a cutover had
to wait); the protocol goes on from the ledger. Exit 1 when there is nothing to resume."""

from __future__ import annotations

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from relations.services.slot_moves import ledger


class Command(DomainCommand):
    help = "Resume a relation slot move from its ledger's state (a new job on the workers)."

    def add_arguments(self, parser):
        parser.add_argument("move_id", metavar="MOVE_ID")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options.get("actor"), permission=ledger.APPROVE_PERMISSION)
            m = ledger.move_resume(move_id=options["move_id"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, {"moveId": m.pk, "status": m.state, "jobId": m.job_id},
             f"slot move {m.pk}: {m.state}; resumed by job {m.job_id}")
