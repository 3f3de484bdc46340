"""manage.py snapshot_create [--reason TEXT] [--actor USER] [--async] [--json]

Takes a recovery snapshot of the count projection at an exact cut of the event log (issue 12), as an ops
job in the foreground (progress on stderr). Exit 0 SEALED, 1 FAILED (the reason is printed), 3 not run."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.cli import JobCommand
from likes_project.errors import DomainError
from reconciliation.jobs import SNAPSHOT_JOB, SNAPSHOT_PERMISSION
from reconciliation.management.output import add_json_argument, emit, refuse
from reconciliation.services.recovery import snapshot

NOT_RUN = 3


class Command(JobCommand):
    help = ("Take a recovery snapshot: the full count projection and vbucket tables at an exact cut of the event "
            "log, with the offset vector of every partition, written to the snapshot storage and read back. Exit 0 "
            "SEALED, 1 FAILED, 3 not run.")
    job_kind = SNAPSHOT_JOB
    permission = SNAPSHOT_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("--reason", default="", help="Why the snapshot is taken (kept on it and audited).")
        add_json_argument(parser)
        self.add_job_arguments(parser)

    def run(self, *args, **options):
        try:
            job = self.job_run(options=options, params={"reason": options["reason"]}, target="snapshot")
        except DomainError as exc:
            raise refuse(self, options, exc, returncode=NOT_RUN) from exc
        snap_id = (job.params or {}).get("snapshotId")
        if snap_id is None:
            raise CommandError(f"job {job.pk} ended {job.status} without a snapshot: {job.last_error or job.message}")
        snap = snapshot.snapshot_get(snap_id)
        report = snapshot.snapshot_report(snap)
        lines = [f"snapshot {snap.pk}: {snap.status} (generation {snap.generation}, manifest {snap.manifest_id}, "
                 f"dispatch paused {snap.dispatch_paused_ms} ms)"]
        lines += [f"  partition {o['partition']}: nextOffset {o['nextOffset']}" for o in snap.offsets]
        lines += [f"  {a['kind']} of {a['partition']}: {a['rows']} rows, sha256 {a['sha256'][:16]}…, {a['uri']}"
                  for a in snap.artifacts]
        if snap.failure:
            lines.append(f"  failed: {snap.failure}")
        emit(self, options, report, "\n".join(lines))
        if snap.status != "SEALED":
            raise CommandError(f"snapshot {snap.pk}: {snap.status}", returncode=1)
