"""Rebuild the reverse "who liked" index into a new generation and CAS-switch it (REV-4), as an ops job."""

from django.core.management.base import CommandError

from counting.models import ReverseIndexGeneration
from counting.services.reverse.rebuild import REBUILD_JOB, REBUILD_PERMISSION, ReverseRebuildReport
from likes_project.cli import JobCommand


class Command(JobCommand):
    help = ("Create reverse index generation G+1 with R shards, replay the relation facts into it while the "
            "projector writes both generations, sample-verify, then CAS-switch G+1 ACTIVE and G RETIRED. "
            "A failure leaves G+1 FAILED and G ACTIVE.")
    job_kind, permission = REBUILD_JOB, REBUILD_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("--shards", type=int, required=True, help="R, the number of reverse shards of G+1.")
        parser.add_argument("--sample", type=int, default=None, help="Relations to sample-verify (all shards).")
        parser.add_argument("--chunk", type=int, default=None, help="Relations per chunk (default 2000).")
        self.add_job_arguments(parser)

    def run(self, *args, **options):
        params = {"shards": options["shards"], **{k: options[k] for k in ("sample", "chunk") if options[k]}}
        job = self.job_run(options=options, params=params)
        report = ReverseRebuildReport.of(ReverseIndexGeneration.objects.get(pk=job.state["generation"]))
        self.stdout.write(f"generation {report.generation}: {report.status} (R={report.shards}, "
                          f"{report.scanned} replayed)")
        if report.status != "ACTIVE":
            raise CommandError(f"rebuild of reverse generation {report.generation} failed ({report.failure}); "
                               f"generation {report.previous} stays ACTIVE")
