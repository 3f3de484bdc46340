"""manage.py bucket_migration_show MIGRATION_ID [--json]

The ledger of one bucket migration: state, buckets, source and target, manifests and epochs, cursors and
watermarks, the measured write pause, the verification. Exit 1 when there is no such migration."""

from __future__ import annotations

from counting.services.migration.ledger import LEDGER
from likes_project.ledgers.cli import LedgerShowCommand


class Command(LedgerShowCommand):
    help = "Show a bucket migration's ledger (state, progress, manifests, epochs, watermarks, write pause)."
    ledger = LEDGER
    id_dest, id_metavar = "migration_id", "MIGRATION_ID"

    def show_lines(self, m, report: dict) -> list[str]:
        pause = m.write_pause_ms if m.write_pause_ms is not None else "-"
        return [f"migration {m.pk}: {m.state}  buckets {report['bucketRange']} ({len(m.buckets)}) "
                f"{', '.join(report['sources'])} -> {m.target_partition}",
                f"  manifests {m.source_manifest_id} -> {m.target_manifest_id or '-'}; epochs "
                f"{report['sourceEpochs']} -> {report['targetEpochs']}",
                f"  copied {m.copied_rows} of {m.rows_to_copy} rows; replayed {m.replayed_events} in "
                f"{m.catchup_passes} passes; write pause {pause} ms",
                f"  {self.who_line(m)}"]
