"""Rebuild the whole relation cache into a new generation (RCACHE-7) as an ops job, with progress."""

from likes_project.cli import RebuildCommand
from relations.services.relation_cache import REBUILD_JOB
from relations.services.relation_cache_rebuild import REBUILD_PERMISSION, RebuildReport


class Command(RebuildCommand):
    help = ("Create relation cache generation G+1, bypass Redis for reads, scan the relation facts, catch up, "
            "sample-verify and CAS-activate it. A failure leaves G+1 FAILED and the reads on the database.")
    job_kind, permission, report = REBUILD_JOB, REBUILD_PERMISSION, RebuildReport
    size_options = {"chunk": "Relations per chunk (default 2000)."}

    def summary(self, report):
        return f"{super().summary(report)} ({report.scanned} scanned)"

    def failure(self, report):
        return f"{super().failure(report)}; reads stay on the database"
