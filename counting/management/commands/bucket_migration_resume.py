"""manage.py bucket_migration_resume MIGRATION_ID [--actor USER] [--json]

Starts a new job for an approved migration that stopped before its end (a worker died, a cutover had to
wait); the protocol goes on from the ledger's cursor. Exit 1 when there is nothing to resume."""

from __future__ import annotations

from counting.services.migration import ledger
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


class Command(DomainCommand):
    help = "Resume a bucket migration from its ledger's state and cursor (a new job on the workers)."

    def add_arguments(self, parser):
        parser.add_argument("migration_id", metavar="MIGRATION_ID")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options.get("actor"), permission=ledger.APPROVE_PERMISSION)
            m = ledger.migration_resume(migration_id=options["migration_id"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, {"migrationId": m.pk, "status": m.state, "jobId": m.job_id},
             f"migration {m.pk}: {m.state}; resumed by job {m.job_id}")
