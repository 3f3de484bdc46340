"""Rebuild the Redis count cache into a new generation from the durable vbuckets (CCACHE-3), as an ops job."""

from counting.services.count_cache.layers import REBUILD_JOB
from counting.services.count_cache.rebuild import REBUILD_PERMISSION, CountCacheRebuildReport
from likes_project.cli import RebuildCommand


class Command(RebuildCommand):
    help = ("Create count cache generation G+1 pinned to the active route manifest, copy every routed vbucket "
            "and display snapshot into it, catch up, sample-verify and CAS-activate it. Never writes the "
            "durable store. A failure leaves G+1 FAILED and the reads where they were.")
    job_kind, permission, report = REBUILD_JOB, REBUILD_PERMISSION, CountCacheRebuildReport
    size_options = {"batch": "Rows per read (default COUNT_CACHE_REBUILD_BATCH).",
                    "sample": "Videos to verify (default COUNT_CACHE_REBUILD_SAMPLE)."}

    def summary(self, report):
        rows = ", ".join(f"{alias} {n}" for alias, n in report.rows.items())
        return (f"count cache {super().summary(report)} (manifest {report.manifest_id}; rows {rows}; "
                f"{report.views_written} views; {report.caught_up_rows} caught up; {report.sampled} sampled, "
                f"{report.mismatches} mismatches)")

    def failure(self, report):
        return (f"rebuild of count cache generation {report.generation} failed: {report.failure}; "
                f"reads stay on generation {report.previous} and the durable snapshot")
