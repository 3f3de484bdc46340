"""What subscription_pause, subscription_resume and subscription_retire share: NAME [--reason] [--actor] [--json]."""

from __future__ import annotations

from likes_project.cli import OperatorCommand, add_json_argument
from likes_project.subscriptions import selectors, services


class MoveCommand(OperatorCommand):
    noun, permission = "subscription", services.PERMISSION
    move = ""  # pause | resume | retire

    def add_arguments(self, parser):
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("--reason", default="", help="Why (recorded in the audit log).")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def act(self, options, actor):
        return services.subscription_move(name=options["name"], move=self.move, actor=actor, reason=options["reason"])

    def result(self, sub):
        return selectors.subscription_report(sub)

    def line(self, sub):
        return f"subscription {sub.name}: {sub.status}"
