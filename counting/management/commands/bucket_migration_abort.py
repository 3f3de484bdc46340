"""manage.py bucket_migration_abort MIGRATION_ID --reason TEXT [--actor USER] [--json]

Aborts a migration before its cutover's CAS: the source stays (or becomes again) the only writer, the
target's copy is removed. After the CAS it is refused (migration_past_cutover): plan a reverse migration."""

from __future__ import annotations

from counting.services.migration import ledger
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


class Command(DomainCommand):
    help = "Abort a bucket migration before its cutover (after it, plan a reverse migration)."

    def add_arguments(self, parser):
        parser.add_argument("migration_id", metavar="MIGRATION_ID")
        parser.add_argument("--reason", required=True, help="Why (recorded in the ledger and the audit log).")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options.get("actor"), permission=ledger.APPROVE_PERMISSION)
            m = ledger.migration_abort(migration_id=options["migration_id"], actor=actor, reason=options["reason"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, {"migrationId": m.pk, "status": m.state}, f"migration {m.pk}: {m.state}")
