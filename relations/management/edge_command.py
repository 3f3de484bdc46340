"""What `set_friends` and `set_block` share: two usernames, `--remove`, the add/delete permission of
the edge's model, one service call and one line of output."""

from __future__ import annotations

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, user_by_username


class EdgeCommand(DomainCommand):
    first: str  # argument names, e.g. "blocker"
    second: str
    model_name: str  # the edge's model, for the permission: relations.add_<model> / relations.delete_<model>
    setter: staticmethod  # the service: setter(<keys[0]>=a.pk, <keys[1]>=b.pk, present=..., actor=...) -> changed
    keys: tuple[str, str]
    said: tuple[str, str]  # the output when present / removed, formatted with {a} and {b} (usernames)

    def add_arguments(self, parser):
        parser.add_argument(self.first)
        parser.add_argument(self.second)
        parser.add_argument("--remove", action="store_true")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        a, b = user_by_username(options[self.first]), user_by_username(options[self.second])
        removed = options["remove"]
        actor = cli_actor_resolve(username=options.get("actor"),
                                  permission=f"relations.{'delete' if removed else 'add'}_{self.model_name}")
        ids = dict(zip(self.keys, (a.pk, b.pk), strict=True))
        changed = type(self).setter(**ids, present=not removed, actor=actor)
        line = self.said[removed].format(a=a.username, b=b.username)
        self.stdout.write(f"{line} ({'changed' if changed else 'unchanged'})")
