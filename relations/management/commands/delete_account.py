"""Delete an account's likes: hide the account at once, then withdraw every like with a versioned UNLIKED
command (issue 5 §3), as an ops job. Safe to re-run; a re-run resumes where a crashed run stopped."""

from django.core.management.base import CommandError

from likes_project.cli import JobCommand, user_by_username
from relations.jobs import ACCOUNT_DELETE
from relations.services.accounts import ACCOUNT_DELETE_PERMISSION, DEFAULT_PROGRESS_EVERY


class Command(JobCommand):
    help = ("Mark <username> deleted (login and API token disabled, hidden from every list), then unlike every "
            "video the user likes; counts and likers lists converge through the projectors.")
    job_kind, permission = ACCOUNT_DELETE, ACCOUNT_DELETE_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--progress-every", type=int, default=DEFAULT_PROGRESS_EVERY,
                            help=f"Print progress every N relations (default {DEFAULT_PROGRESS_EVERY}).")
        self.add_job_arguments(parser)

    def run(self, *args, **options):
        if options["progress_every"] < 1:
            raise CommandError("--progress-every must be at least 1.")
        user = user_by_username(options["username"])
        job = self.job_run(options=options, target=f"user:{user.pk}", params={
            "user_id": user.pk, "username": user.username, "progress_every": options["progress_every"]})
        if job.status != "SUCCEEDED":
            raise self.job_failed(job)
        r = job.result
        again = " (already marked deleted: resumed)" if r["already_deleted"] else ""
        self.stdout.write(
            f"Deleted account {user.username} (user {user.pk}, shard {r['alias']}){again}: "
            f"{r['unliked']} of {r['scanned']} likes withdrawn, {r['skipped']} found withdrawn already, "
            f"{r['failed']} refused."
        )
        if r["failed"]:
            raise CommandError(f"{r['failed']} likes could not be withdrawn (first: {', '.join(r['failed_videos'])}); "
                               "see the audit record account.delete.withdrawn.", returncode=3)
