"""manage.py feature_export_verify [--json]

Reads every stored export file back against its manifest (rows, SHA-256, fields within the policy) and the
manifests against each other (no gap or overlap of offsets per partition). One line per file and a summary; exit 0
when every file verifies, 1 when any does not."""

from __future__ import annotations

from django.core.management.base import CommandError

from counting.features.selectors import feature_export_verify
from likes_project.cli import DomainCommand, add_json_argument, emit


class Command(DomainCommand):
    help = ("Verify the offline feature export: every file against its manifest (rows, SHA-256, allowed fields) and "
            "the manifests' offsets against each other (no gap, no overlap). Exit 0 all verify, 1 otherwise.")

    def add_arguments(self, parser):
        add_json_argument(parser)

    def run(self, *args, **options):
        result = feature_export_verify()
        lines = [f"{'ok  ' if c.ok else 'FAIL'} {c.file or c.manifest}: {c.rows} rows"
                 + "".join(f"\n     {p}" for p in c.problems) for c in result.checks]
        lines += [f"FAIL {p}" for p in result.problems]
        failed = sum(not c.ok for c in result.checks)
        rows = sum(c.rows for c in result.checks)
        summary = (f"{len(result.checks)} files, {rows} rows: all verify" if result.ok else
                   f"{len(result.checks)} files, {rows} rows: {failed} do not verify"
                   + (f", {len(result.problems)} other problems" if result.problems else ""))
        emit(self, options, result.as_dict(), "\n".join([*lines, summary]))
        if not result.ok:
            raise CommandError(f"the feature export does not verify: {summary}", returncode=1)
