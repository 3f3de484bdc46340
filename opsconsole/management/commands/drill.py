"""`manage.py drill <name>`: run one fault drill against this deployment and print its verdict."""

from opsconsole.drills import DRILLS, DrillRefused, drill_run
from opsconsole.drills.faults import databases_restore
from opsconsole.drills.registry import SPEC_DRILLS
from opsconsole.management.commands._verdict import VerdictCommand


class Command(VerdictCommand):
    help = ("Run a fault drill (" + ", ".join(DRILLS) + ") with the drill's own synthetic users and videos, and "
            "print what was injected, what was seen during the fault, how long healing took and the exact "
            "comparison of projections with facts. Exits non-zero on FAIL. Refused unless "
            "LIKES_DRILLS_ENABLED=true. Assumes the worker and beat are running; worker-kill SIGKILLs the "
            "local Celery workers and expects their process supervisor to restart them.")
    what = "drill"

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="The drill: " + ", ".join(DRILLS) + ".")
        parser.add_argument("--list", action="store_true",
                            help="List spec §7's fault drills by number with the drills that run each, then the "
                                 "drills beyond that list, and exit (no LIKES_DRILLS_ENABLED needed).")
        parser.add_argument("--alias", help="The relation shard / count partition to take down, or the Redis Cluster "
                                 "node (host:port) cluster-node-restart restarts (default: the last).")
        parser.add_argument("--fault-seconds", type=float, default=None,
                            help="How long the fault holds (default: 20; eventlog-flush 10; worker-kill 5).")
        parser.add_argument("--heal-timeout", type=float, default=120.0,
                            help="Seconds after the fault's end within which everything must converge.")
        parser.add_argument("--json", action="store_true", help="Print the verdict as JSON.")
        parser.add_argument("--restore-databases", action="store_true",
                            help="Only set ALLOW_CONNECTIONS true on every shard and partition, once a private "
                                 "server a soak's pg-hang stopped is continued (after a drill or soak process that "
                                 "was itself killed mid-fault), then exit.")

    def run(self, *args, **options):
        from opsconsole.drills.runner import drills_enabled_check

        if options["list"]:
            self.stdout.write(drills_listed())
            return
        with self.refusals():
            drills_enabled_check()
            if options["restore_databases"]:
                self.stdout.write("ALLOW_CONNECTIONS true on " + ", ".join(databases_restore()))
                return
            if not options["name"]:
                raise DrillRefused("name a drill: " + ", ".join(DRILLS))
            verdict = drill_run(options["name"], alias=options["alias"], fault_s=options["fault_seconds"],
                                heal_timeout_s=options["heal_timeout"], say=self.stderr.write)
        self.verdict_print(verdict, options)

    def failure(self, verdict):
        return f"drill {verdict.drill} FAILED: {'; '.join(verdict.failures)}"


def drills_listed() -> str:
    """Spec §7's drills 1-15, each with the drills that run it, then the drills beyond that list."""
    lines = []
    for number, title in SPEC_DRILLS.items():
        runs = [name for name, drill in DRILLS.items() if number in drill.spec_numbers]
        lines.append(f"{number:>2}. {title}\n      " + (", ".join(runs) or "not runnable by an operator yet"))
    beyond = [f"    {name}: {drill.summary}" for name, drill in DRILLS.items() if not drill.spec_numbers]
    return "\n".join([*lines, "beyond spec §7:", *beyond])
