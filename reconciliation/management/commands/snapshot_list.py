"""manage.py snapshot_list [--limit N] [--json]

The recovery snapshots, newest first: status, generation, offset vector, artifacts, dispatch pause."""

from __future__ import annotations

import json

from likes_project.cli import DomainCommand
from likes_project.errors import InvalidInput
from reconciliation.management.output import add_json_argument
from reconciliation.models import RecoverySnapshot
from reconciliation.services.recovery import snapshot


class Command(DomainCommand):
    help = "List the recovery snapshots, newest first (with --json, one JSON object: {\"snapshots\": [...]})."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=20, help="How many (default 20).")
        add_json_argument(parser)

    def run(self, *args, **options):
        if options["limit"] < 1:
            raise InvalidInput("--limit is at least 1.", code="invalid_limit")
        snaps = list(RecoverySnapshot.objects.order_by("-id")[:options["limit"]])
        if options["json"]:
            self.stdout.write(json.dumps({"snapshots": [snapshot.snapshot_report(s) for s in snaps]}, sort_keys=True,
                                         default=str))
            return
        if not snaps:
            self.stdout.write("no recovery snapshots yet (manage.py snapshot_create)")
        for s in snaps:
            rows = sum(a.get("rows", 0) for a in s.artifacts if a.get("kind") == "projection")
            tested = f", test-restore {'ok' if s.test_result.get('ok') else 'FAILED'}" if s.test_result else ""
            self.stdout.write(f"{s.pk:>6}  {s.status:<8} {s.created_at:%Y-%m-%d %H:%M:%S}  generation {s.generation}  "
                              f"{rows} projection rows  paused {s.dispatch_paused_ms} ms{tested}"
                              + (f"  ({s.failure[:120]})" if s.failure else ""))
