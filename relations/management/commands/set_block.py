"""Add or remove a block: the blocked user may not like the blocker's videos."""

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, user_by_username
from relations.services.social import block_set


class Command(DomainCommand):
    help = "Make <blocker> block <blocked> (or, with --remove, lift the block)."

    def add_arguments(self, parser):
        parser.add_argument("blocker")
        parser.add_argument("blocked")
        parser.add_argument("--remove", action="store_true")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        blocker, blocked = user_by_username(options["blocker"]), user_by_username(options["blocked"])
        perm = "relations.delete_block" if options["remove"] else "relations.add_block"
        actor = cli_actor_resolve(username=options.get("actor"), permission=perm)
        changed = block_set(blocker_id=blocker.pk, blocked_id=blocked.pk, present=not options["remove"],
                            actor=actor)
        verb = "no longer blocks" if options["remove"] else "blocks"
        self.stdout.write(f"{blocker.username} {verb} {blocked.username} ({'changed' if changed else 'unchanged'})")
