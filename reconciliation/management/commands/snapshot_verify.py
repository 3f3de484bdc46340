"""manage.py snapshot_verify SNAPSHOT_ID [--actor USER] [--json]

Reads a recovery snapshot's artifacts back and checks what a restore needs (SNAP-10, SNAP-11). Prints
{"snapshotId", "usable", "problems"}; exit 0 usable, 1 unusable, 3 not run (no such snapshot, actor)."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand
from likes_project.errors import DomainError
from reconciliation.jobs import SNAPSHOT_PERMISSION
from reconciliation.management.output import add_json_argument, emit, refuse
from reconciliation.services.recovery import snapshot

NOT_RUN = 3


class Command(DomainCommand):
    help = ("Verify a recovery snapshot: its artifacts' rows and SHA-256 read back, the offset vector against the "
            "topic's partitions and the stream's retention, the route manifest. Exit 0 usable, 1 unusable, 3 not "
            "run.")

    def add_arguments(self, parser):
        parser.add_argument("snapshot_id", metavar="SNAPSHOT_ID", help="The snapshot's number.")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options.get("actor"), permission=SNAPSHOT_PERMISSION)
            result = snapshot.snapshot_verify(options["snapshot_id"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc, returncode=NOT_RUN) from exc
        text = f"snapshot {result['snapshotId']}: " + ("usable" if result["usable"] else "UNUSABLE")
        text += "".join(f"\n  {p}" for p in result["problems"])
        emit(self, options, result, text)
        if not result["usable"]:
            raise CommandError(f"snapshot {result['snapshotId']} is unusable", returncode=1)
