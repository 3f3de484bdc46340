"""manage.py bucket_space_create --vbuckets N [--seed S] [--actor USER] [--async] [--json]

Changes the bucket contract (BKT-6, issue 13 §5): registers bucket space v(N+1) with N virtual buckets, builds
a shadow count generation on it from the relation facts, catches it up from the event log, verifies it
(identity, coverage, every video's count equal to the old generation's at the switch barrier) and
CAS-switches it in; then the exact reconciliation runs over it. The old generation stays readable until it
is retired. Prints {"bucketSpaceVersion", "generation", "status", ...}; exit 0 switched, 1 not switched."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.cli import JobCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from reconciliation.jobs import BUCKET_SPACE_JOB


class Command(JobCommand):
    help = ("Register a new bucket space (number of virtual buckets, seed) and switch the counts to a generation "
            "built on it from the facts, verified before the switch. Exit 0 switched, 1 not switched.")
    job_kind = BUCKET_SPACE_JOB
    permission = "counting.approve_bucketmigration"

    def add_arguments(self, parser):
        parser.add_argument("--vbuckets", type=int, required=True, metavar="N",
                            help="Virtual buckets of the new space.")
        parser.add_argument("--seed", default="", help="Hash seed of the new space (default likes-count-bucket-vN).")
        add_json_argument(parser)
        self.add_job_arguments(parser)

    def run(self, *args, **options):
        params = {"virtualBuckets": options["vbuckets"], "seed": options["seed"] or None}
        try:
            job = self.job_run(options=options, params=params, target="bucket space")
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        if job.status != "SUCCEEDED":
            payload = {"status": "FAILED", "jobId": job.pk, "error": job.last_error or job.message}
            emit(self, options, payload, f"bucket space change FAILED (job {job.pk}): {payload['error']}")
            raise CommandError(f"bucket space change failed: {payload['error']}", returncode=1)
        result = {**job.result, "status": "ACTIVE", "jobId": job.pk}
        emit(self, options, result, f"bucket space v{result['bucketSpaceVersion']} (V={result['virtualBuckets']}) "
                                    f"ACTIVE in generation {result['generation']}; exact run "
                                    f"{result['exactRun']['status']}")
