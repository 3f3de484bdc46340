"""Rebuild the reverse "who liked" index into a new generation and CAS-switch it (REV-4), as an ops job."""

from counting.services.reverse.rebuild import REBUILD_JOB, REBUILD_PERMISSION, ReverseRebuildReport
from likes_project.cli import RebuildCommand


class Command(RebuildCommand):
    help = ("Create reverse index generation G+1 with R shards, replay the relation facts into it while the "
            "projector writes both generations, sample-verify, then CAS-switch G+1 ACTIVE and G RETIRED. "
            "A failure leaves G+1 FAILED and G ACTIVE.")
    job_kind, permission, report = REBUILD_JOB, REBUILD_PERMISSION, ReverseRebuildReport
    size_options = {"sample": "Relations to sample-verify (all shards).",
                    "chunk": "Relations per chunk (default 2000)."}

    def add_rebuild_arguments(self, parser):
        parser.add_argument("--shards", type=int, required=True, help="R, the number of reverse shards of G+1.")

    def params(self, options):
        return {"shards": options["shards"], **super().params(options)}

    def summary(self, report):
        return f"{super().summary(report)} (R={report.shards}, {report.scanned} replayed)"

    def failure(self, report):
        return (f"rebuild of reverse generation {report.generation} failed ({report.failure}); "
                f"generation {report.previous} stays ACTIVE")
