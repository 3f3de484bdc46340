"""Rebuild the whole relation cache into a new generation (RCACHE-7) as an ops job, with progress."""

from django.core.management.base import CommandError

from likes_project.cli import JobCommand
from relations.models import RelationCacheGeneration
from relations.services.relation_cache import REBUILD_JOB
from relations.services.relation_cache_rebuild import REBUILD_PERMISSION, RebuildReport


class Command(JobCommand):
    help = ("Create relation cache generation G+1, bypass Redis for reads, scan the relation facts, catch up, "
            "sample-verify and CAS-activate it. A failure leaves G+1 FAILED and the reads on the database.")
    job_kind, permission = REBUILD_JOB, REBUILD_PERMISSION

    def add_arguments(self, parser):
        self.add_job_arguments(parser)
        parser.add_argument("--chunk", type=int, default=None, help="Relations per chunk (default 2000).")

    def run(self, *args, **options):
        if options["chunk"] is not None and options["chunk"] < 1:
            raise CommandError("--chunk must be at least 1.")
        job = self.job_run(options=options, params={"chunk": options["chunk"]} if options["chunk"] else {})
        report = RebuildReport.of(RelationCacheGeneration.objects.get(pk=job.state["generation"]))
        self.stdout.write(f"generation {report.generation}: {report.status} ({report.scanned} scanned)")
        if report.status != "ACTIVE":
            raise CommandError(f"rebuild of generation {report.generation} failed ({report.failure}); reads stay on "
                               f"the database")
