"""manage.py bucket_migration_resume MIGRATION_ID [--actor USER] [--json]

Starts a new job for an approved migration that stopped before its end (a worker died, a cutover had to
wait); the protocol goes on from the ledger's cursor. Exit 1 when there is nothing to resume."""

from __future__ import annotations

from counting.services.migration.ledger import LEDGER
from likes_project.ledgers.cli import LedgerResumeCommand


class Command(LedgerResumeCommand):
    help = "Resume a bucket migration from its ledger's state and cursor (a new job on the workers)."
    ledger = LEDGER
    id_dest, id_metavar = "migration_id", "MIGRATION_ID"
