"""manage.py bucket_migration_show MIGRATION_ID [--json]

The ledger of one bucket migration: state, buckets, source and target, manifests and epochs, cursors and
watermarks, the measured write pause, the verification. Exit 1 when there is no such migration."""

from __future__ import annotations

from counting.services.migration import ledger
from likes_project.cli import add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.ledgers.cli import LedgerCommand


class Command(LedgerCommand):
    help = "Show a bucket migration's ledger (state, progress, manifests, epochs, watermarks, write pause)."

    def add_arguments(self, parser):
        parser.add_argument("migration_id", metavar="MIGRATION_ID")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            m = ledger.migration_get(options["migration_id"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        report = ledger.migration_report(m)
        lines = [f"migration {m.pk}: {m.state}  buckets {report['bucketRange']} ({len(m.buckets)}) "
                 f"{', '.join(report['sources'])} -> {m.target_partition}",
                 f"  manifests {m.source_manifest_id} -> {m.target_manifest_id or '-'}; epochs "
                 f"{report['sourceEpochs']} -> {report['targetEpochs']}",
                 f"  copied {m.copied_rows} of {m.rows_to_copy} rows; replayed {m.replayed_events} in "
                 f"{m.catchup_passes} passes; write pause "
                 f"{m.write_pause_ms if m.write_pause_ms is not None else '-'} ms",
                 f"  requested by {m.requested_by}" + (f", approved by {m.approved_by}" if m.approved_by else "")
                 + f"; reason: {m.reason}"]
        lines += self.tail_lines(m)
        emit(self, options, report, "\n".join(lines))
