"""Rebuild the Redis count cache into a new generation from the durable vbuckets (CCACHE-3), as an ops job."""

from django.core.management.base import CommandError

from counting.models import CountCacheGeneration
from counting.services.count_cache.layers import REBUILD_JOB
from counting.services.count_cache.rebuild import REBUILD_PERMISSION, CountCacheRebuildReport
from likes_project.cli import JobCommand


class Command(JobCommand):
    help = ("Create count cache generation G+1 pinned to the active route manifest, copy every routed vbucket "
            "and display snapshot into it, catch up, sample-verify and CAS-activate it. Never writes the "
            "durable store. A failure leaves G+1 FAILED and the reads where they were.")
    job_kind, permission = REBUILD_JOB, REBUILD_PERMISSION

    def add_arguments(self, parser):
        self.add_job_arguments(parser)
        parser.add_argument("--batch", type=int, default=None,
                            help="Rows per read (default COUNT_CACHE_REBUILD_BATCH).")
        parser.add_argument("--sample", type=int, default=None,
                            help="Videos to verify (default COUNT_CACHE_REBUILD_SAMPLE).")

    def run(self, *args, **options):
        params = {k: options[k] for k in ("batch", "sample") if options[k]}
        job = self.job_run(options=options, params=params)
        report = CountCacheRebuildReport.of(CountCacheGeneration.objects.get(pk=job.state["generation"]))
        rows = ", ".join(f"{alias} {n}" for alias, n in report.rows.items())
        self.stdout.write(f"count cache generation {report.generation}: {report.status} (manifest "
                          f"{report.manifest_id}; rows {rows}; {report.views_written} views; "
                          f"{report.caught_up_rows} caught up; {report.sampled} sampled, "
                          f"{report.mismatches} mismatches)")
        if report.status != "ACTIVE":
            raise CommandError(f"rebuild of count cache generation {report.generation} failed: {report.failure}; "
                               f"reads stay on generation {report.previous} and the durable snapshot")
