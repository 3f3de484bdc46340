"""Delete an account's likes: hide the account at once, then withdraw every like with a versioned UNLIKED
command (issue 5 §3). Safe to re-run; a re-run resumes where a crashed run stopped."""

from django.core.management.base import CommandError

from opsconsole.cli import DomainCommand, user_by_username
from opsconsole.services import cli_actor_resolve
from relations.services.accounts import ACCOUNT_DELETE_PERMISSION, DEFAULT_PROGRESS_EVERY, account_delete


class Command(DomainCommand):
    help = ("Mark <username> deleted (login and API token disabled, hidden from every list), then unlike every "
            "video the user likes; counts and likers lists converge through the projectors.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--progress-every", type=int, default=DEFAULT_PROGRESS_EVERY,
                            help=f"Print progress every N relations (default {DEFAULT_PROGRESS_EVERY}).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        if options["progress_every"] < 1:
            raise CommandError("--progress-every must be at least 1.")
        user = user_by_username(options["username"])
        actor = cli_actor_resolve(username=options.get("actor"), permission=ACCOUNT_DELETE_PERMISSION)

        def progress(done: int, scanned: int) -> None:
            self.stderr.write(f"{user.username}: {scanned} likes handled, {done} withdrawn...")

        result = account_delete(user_id=user.pk, actor=actor, progress=progress,
                                progress_every=options["progress_every"])
        again = " (already marked deleted: resumed)" if result.already_deleted else ""
        self.stdout.write(
            f"Deleted account {user.username} (user {user.pk}, shard {result.alias}){again}: "
            f"{result.unliked} of {result.scanned} likes withdrawn, {result.rate_limit_bypassed} past the rate limit."
        )
