"""Requeue dead letters: apply them again through their consumer's redrive path (issue 9 §2), as an ops
job with progress. Always safe: the projections absorb a duplicate or an older event by version."""

from django.core.management.base import CommandError

from likes_project.cli import JobCommand
from likes_project.eventlog.redrive import REQUEUE_JOB, REQUEUE_PERMISSION
from likes_project.eventlog.registry import CONSUMERS


def id_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--ids takes comma-separated dead letter ids, not {text!r}.") from None


class Command(JobCommand):
    help = ("Requeue dead letters (the ids given, or every NEW one, optionally of one consumer) and apply them "
            "again through their projector; prints how many were resolved, are still poison, or wait for "
            "their store (the `eventlog.redrive` beat job retries those).")
    job_kind, permission = REQUEUE_JOB, REQUEUE_PERMISSION

    def add_arguments(self, parser):
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--ids", type=id_list, help="Comma-separated dead letter ids.")
        which.add_argument("--all", action="store_true", help="Every NEW dead letter (of --consumer, if given).")
        parser.add_argument("--consumer", choices=sorted(CONSUMERS), help="Only this consumer's dead letters.")
        parser.add_argument("--reason", default="", help="Why (recorded in the audit log).")
        self.add_job_arguments(parser)

    def run(self, *args, **options):
        params = {"all": bool(options["all"]), "consumer": options["consumer"] or "", "reason": options["reason"]}
        if options["ids"] is not None:
            if not options["ids"]:
                raise CommandError("--ids names no dead letter.")
            params["ids"] = options["ids"]
        job = self.job_run(options=options, params=params)
        if job.status != "SUCCEEDED":
            raise self.job_failed(job)
        r = job.result
        self.stdout.write(f"requeued {job.done} dead letters: {r['resolved']} resolved, {r['still_poison']} still "
                          f"poison, {r['waiting']} waiting for their store")
