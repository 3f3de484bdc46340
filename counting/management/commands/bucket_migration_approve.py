"""manage.py bucket_migration_approve MIGRATION_ID --actor USER [--wait] [--json]

Approves another operator's bucket migration; the workers run it (issue 13 §6). Prints {"migrationId",
"status", "writePauseMs", "copiedRows", "replayedEvents"}. Exit 1 when refused (self_approval, ...), when
the migration FAILED, or when --wait ran out before it was RETIRED."""

from __future__ import annotations

from counting.services.migration.ledger import LEDGER
from likes_project.ledgers.cli import LedgerApproveCommand


class Command(LedgerApproveCommand):
    help = ("Approve a bucket migration another operator planned (never your own). The workers run it; with --wait "
            "this command follows it until it is RETIRED.")
    ledger = LEDGER
    id_dest, id_metavar = "migration_id", "MIGRATION_ID"
