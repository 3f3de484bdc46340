"""Add or remove a friendship between two users."""

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, user_by_username
from relations.services.social import friendship_set


class Command(DomainCommand):
    help = "Make two users friends (or, with --remove, not friends)."

    def add_arguments(self, parser):
        parser.add_argument("user_a")
        parser.add_argument("user_b")
        parser.add_argument("--remove", action="store_true")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        a, b = user_by_username(options["user_a"]), user_by_username(options["user_b"])
        perm = "relations.delete_friendship" if options["remove"] else "relations.add_friendship"
        actor = cli_actor_resolve(username=options.get("actor"), permission=perm)
        changed = friendship_set(user_a=a.pk, user_b=b.pk, present=not options["remove"], actor=actor)
        state = "not friends" if options["remove"] else "friends"
        self.stdout.write(f"{a.username} and {b.username}: {state} ({'changed' if changed else 'unchanged'})")
