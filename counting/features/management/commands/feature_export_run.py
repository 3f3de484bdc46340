"""manage.py feature_export_run [--actor USER] [--json]

One pass of the offline feature export now (docs/exports.md): the pending account erasures, then every closed
period. Prints each file written and rewritten. Exit 1 when another run holds the lease or a file could not be
erased (its notices wait for the next run)."""

from __future__ import annotations

from django.core.management.base import CommandError

from counting.features.services import feature_export_run
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.subscriptions.services import PERMISSION


class Command(DomainCommand):
    help = ("Run one pass of the offline feature export now: rewrite the files that hold deleted accounts, then "
            "write every closed period's file and manifest.")

    def add_arguments(self, parser):
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options.get("actor"), permission=PERMISSION)
            report = feature_export_run(actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        lines = [f"wrote {f['file']}: {f['rows']} rows, {f['periodStart']} .. {f['periodEnd']}" for f in report.files]
        lines += [f"rewrote {r['replaces']} as {r['file']}: {r['rowsRemoved']} rows of deleted accounts removed"
                  for r in report.rewrites]
        lines += [f"PROBLEM {p}" for p in report.problems]
        summary = (f"feature export: subscription {report.skipped}, nothing exported" if report.skipped else
                   f"feature export: {len(report.files)} files, {sum(f['rows'] for f in report.files)} rows, "
                   f"{len(report.rewrites)} rewrites, {report.notices} deletion notices"
                   + (" (more periods are due: run again)" if report.more else ""))
        emit(self, options, report.as_dict(), "\n".join([*lines, summary]))
        if report.problems:
            raise CommandError(f"{len(report.problems)} export files could not be erased; their notices wait")
