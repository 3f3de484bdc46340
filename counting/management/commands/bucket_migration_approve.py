"""manage.py bucket_migration_approve MIGRATION_ID --actor USER [--wait] [--json]

Approves another operator's bucket migration; the workers run it (issue 13 §6). Prints {"migrationId",
"status", "writePauseMs", "copiedRows", "replayedEvents"}. Exit 1 when refused (self_approval, ...), when
the migration FAILED, or when --wait ran out before it was RETIRED."""

from __future__ import annotations

from django.core.management.base import CommandError

from counting.models import MigrationState
from counting.services.migration import ledger
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


def result(m) -> dict:
    return {"migrationId": m.pk, "status": m.state, "writePauseMs": m.write_pause_ms, "copiedRows": m.copied_rows,
            "replayedEvents": m.replayed_events, "error": m.error or None}


class Command(DomainCommand):
    help = ("Approve a bucket migration another operator planned (never your own). The workers run it; with --wait "
            "this command follows it until it is RETIRED.")

    def add_arguments(self, parser):
        parser.add_argument("migration_id", type=int, metavar="MIGRATION_ID")
        parser.add_argument("--actor", required=True, help="The approving operator's username.")
        parser.add_argument("--wait", action="store_true", help="Follow the migration until it is RETIRED.")
        parser.add_argument("--wait-timeout", type=float, default=1800.0, help="Seconds --wait follows it at most.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=ledger.APPROVE_PERMISSION)
            m = ledger.migration_approve(migration_id=options["migration_id"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        if options["wait"]:
            self.stderr.write(f"migration {m.pk} approved; the workers run it (job {m.job_id}); following it")
            m = ledger.migration_wait(m.pk, timeout_s=options["wait_timeout"],
                                      on_change=lambda x: self.stderr.write(f"  {x.state}"))
        emit(self, options, result(m), f"migration {m.pk}: {m.state}" + (f" ({m.error})" if m.error else "")
             + (f"; write pause {m.write_pause_ms} ms" if m.write_pause_ms is not None else ""))
        if m.state in (MigrationState.FAILED, MigrationState.ABORTED):
            raise CommandError(f"migration {m.pk} {m.state}: {m.error or m.abort_reason}")
        if options["wait"] and m.state != MigrationState.RETIRED:
            raise CommandError(f"migration {m.pk} is {m.state} after --wait" + (f": {m.error}" if m.error else ""))
