"""manage.py bucket_migration_abort MIGRATION_ID --reason TEXT [--actor USER] [--json]

Aborts a migration before its cutover's CAS: the source stays (or becomes again) the only writer, the
target's copy is removed. After the CAS it is refused (migration_past_cutover): plan a reverse migration."""

from __future__ import annotations

from counting.services.migration.ledger import LEDGER
from likes_project.ledgers.cli import LedgerAbortCommand


class Command(LedgerAbortCommand):
    help = "Abort a bucket migration before its cutover (after it, plan a reverse migration)."
    ledger = LEDGER
    id_dest, id_metavar = "migration_id", "MIGRATION_ID"
