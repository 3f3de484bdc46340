"""Rebuild the Redis count cache into a new generation from the durable vbuckets (CCACHE-3)."""

from django.core.management.base import CommandError

from counting.services.count_cache import count_cache_rebuild
from opsconsole.cli import DomainCommand
from opsconsole.services import cli_actor_resolve

PERMISSION = "counting.rebuild_count_cache"


class Command(DomainCommand):
    help = ("Create count cache generation G+1 pinned to the active route manifest, copy every routed vbucket "
            "and display snapshot into it, catch up, sample-verify and CAS-activate it. Never writes the "
            "durable store. A failure leaves G+1 FAILED and the reads where they were.")

    def add_arguments(self, parser):
        self.add_actor_argument(parser)
        parser.add_argument("--batch", type=int, default=None,
                            help="Rows per read (default COUNT_CACHE_REBUILD_BATCH).")
        parser.add_argument("--sample", type=int, default=None,
                            help="Videos to verify (default COUNT_CACHE_REBUILD_SAMPLE).")

    def run(self, *args, **options):
        actor = cli_actor_resolve(username=options.get("actor"), permission=PERMISSION)
        report = count_cache_rebuild(actor=actor, progress=lambda msg: self.stderr.write(msg),
                                     batch=options.get("batch"), sample=options.get("sample"))
        rows = ", ".join(f"{alias} {n}" for alias, n in report.rows.items())
        self.stdout.write(f"count cache generation {report.generation}: {report.status} (manifest "
                          f"{report.manifest_id}; rows {rows}; {report.views_written} views; "
                          f"{report.caught_up_rows} caught up; {report.sampled} sampled, "
                          f"{report.mismatches} mismatches)")
        if report.status != "ACTIVE":
            raise CommandError(f"rebuild of count cache generation {report.generation} failed: {report.failure}; "
                               f"reads stay on generation {report.previous} and the durable snapshot")
