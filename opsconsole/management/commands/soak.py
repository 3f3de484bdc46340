"""`manage.py soak`: a seeded random fault schedule under the four traffic groups, and the history checker."""

import os
from pathlib import Path

from django.core.management.base import CommandError

from opsconsole.management.commands._verdict import VerdictCommand
from opsconsole.soak.schedule import FAULTS, TRAFFIC


class Command(VerdictCommand):
    help = ("Soak the service at --base-url with spec TEST-2's four traffic groups over HTTP (the soak's own "
            "drill-<run>-… users and videos) while faults drawn from --seed start, hold and overlap; then heal and "
            "check the history: no acknowledged command lost, no version backwards, one version per "
            "Idempotency-Key, no batch below its minRelationVersions, no 500 and no 5xx without a code, and every "
            "projection exact with a PASSED exact reconciliation. The same seed replays the same schedule and "
            "decisions. Exits non-zero on FAIL. Refused unless LIKES_DRILLS_ENABLED=true; only 127.0.0.1.")
    what = "soak"

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, required=True, help="The seed of the schedule and the decisions.")
        parser.add_argument("--duration", type=float, required=True, help="Seconds of traffic (10 to 7200).")
        parser.add_argument("--base-url", default=None,
                            help="The service to drive (default: http://127.0.0.1:$PORT, PORT defaulting to 8000).")
        parser.add_argument("--faults", help="Comma-separated faults (default: all): " + ", ".join(FAULTS) + ".")
        parser.add_argument("--traffic", help="Comma-separated groups (default: all): " + ", ".join(TRAFFIC) + ".")
        parser.add_argument("--history", help="The JSON Lines history file (default: a file in the temp directory).")
        parser.add_argument("--heal-timeout", type=float, default=180.0,
                            help="Seconds after the traffic within which every projection must equal the facts.")
        parser.add_argument("--json", action="store_true", help="Print the verdict as JSON.")

    def run(self, *args, **options):
        from opsconsole.soak.runner import soak_run

        if not 10 <= options["duration"] <= 7200:
            raise CommandError("invalid_duration: --duration must be between 10 and 7200 seconds")
        base_url = options["base_url"] or f"http://127.0.0.1:{os.environ.get('PORT', '8000')}"
        with self.refusals():
            verdict = soak_run(seed=options["seed"], duration_s=options["duration"], base_url=base_url,
                               faults=options["faults"], traffic=options["traffic"],
                               history_path=Path(options["history"]) if options["history"] else None,
                               heal_timeout_s=options["heal_timeout"], say=self.stderr.write)
        self.verdict_print(verdict, options)

    def failure(self, verdict):
        return f"soak seed {verdict.seed} FAILED: {len(verdict.violations)} violations"
