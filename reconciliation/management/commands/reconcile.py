"""manage.py reconcile --mode identity|coverage|exact [--video ID]... [--all] [--actor USER] [--json]

Runs one check as an ops job in the foreground (a progress bar on stderr), prints the report and exits
0 PASSED, 1 FAILED, 2 REFUSED (issue 11 §5), or 3 when no run was made (bad arguments, an actor without
the permission)."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.cli import JobCommand
from likes_project.errors import DomainError
from reconciliation.management.output import add_json_argument, emit, refuse
from reconciliation.models import CheckRun, RunMode, RunStatus
from reconciliation.services import checks
from reconciliation.services.checks import RUN_PERMISSION

EXIT = {RunStatus.PASSED: 0, RunStatus.FAILED: 1, RunStatus.REFUSED: 2}
NOT_RUN = 3  # no run was made: bad arguments, an unknown actor or one without the permission


class Command(JobCommand):
    help = ("Prove the counts for some videos or all of them: identity (projection rows = buckets), coverage "
            "(every relation fact is in the projection, by version, online) or exact (equality under a "
            "coordinated barrier). Exit 0 PASSED, 1 FAILED, 2 REFUSED, 3 not run (bad arguments or actor).")
    permission = RUN_PERMISSION

    def create_parser(self, prog_name, subcommand, **kwargs):
        """Usage errors exit 3 (argparse's 2 is REFUSED here)."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        plain_error = parser.error

        def error(message):
            if not parser.called_from_command_line:
                plain_error(message)  # call_command: a CommandError, as for every command
            parser.print_usage(self.stderr._out)
            parser.exit(NOT_RUN, f"{parser.prog}: error: {message}\n")

        parser.error = error
        return parser

    def add_arguments(self, parser):
        parser.add_argument("--mode", required=True, choices=RunMode.values)
        parser.add_argument("--video", action="append", default=[], metavar="ID", help="A video to check (repeatable).")
        parser.add_argument("--all", action="store_true", help="Check every video.")
        add_json_argument(parser)
        self.add_job_arguments(parser)

    def run(self, *args, **options):
        from reconciliation.jobs import job_for_mode

        try:
            scope = checks.scope_normalize(videos=options["video"], all_videos=options["all"], known_only=True)
        except DomainError as exc:
            raise refuse(self, options, exc, returncode=NOT_RUN) from exc
        self.job_kind = job_for_mode(options["mode"])
        try:  # an unknown --actor, or one without the permission: the --json envelope too
            job = self.job_run(options=options, params={"mode": options["mode"], "scope": scope},
                               target=f"{options['mode']} check")
        except DomainError as exc:
            raise refuse(self, options, exc, returncode=NOT_RUN) from exc
        run = CheckRun.objects.filter(pk=(job.params or {}).get("runId")).first()
        if run is None or not run.finished:
            raise CommandError(f"job {job.pk} ended {job.status} without a verdict: {job.last_error or job.message}")
        report = checks.check_run_report(run)
        lines = [f"run {run.pk} ({run.mode}): {run.status}, {run.checked} checked, {run.diffs_found} diffs"]
        lines += [f"  {d['videoId']}{' vb ' + str(d['virtualBucket']) if 'virtualBucket' in d else ''} "
                  f"{d['layer']}: expected {d['expected']}, actual {d['actual']} (diff {d['diffId']})"
                  for d in report["diffs"][:200]]
        if run.barrier_held_ms is not None:
            lines.append(f"  barrier held {run.barrier_held_ms:.1f} ms")
        if run.refused_because:
            lines.append(f"  refused: {run.refused_because}")
        emit(self, options, report, "\n".join(lines))
        if EXIT[run.status]:
            raise CommandError(f"reconciliation run {run.pk}: {run.status}", returncode=EXIT[run.status])
