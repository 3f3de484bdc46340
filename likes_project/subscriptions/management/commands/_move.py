"""What the commands acting on one subscription by name share: NAME [--reason TEXT] [--actor USER] [--json]
(`NamedCommand`: subscription_replay and, as `MoveCommand`, subscription_pause, subscription_resume and
subscription_retire)."""

from __future__ import annotations

from likes_project.cli import OperatorCommand, add_json_argument
from likes_project.subscriptions import selectors, services


class NamedCommand(OperatorCommand):
    """An operator's audited action on the subscription NAME, with a reason (`reason_help` says whether it is
    required)."""

    reason_help = "Why (recorded in the audit log)."

    def add_arguments(self, parser):
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("--reason", default="", help=self.reason_help)
        self.add_actor_argument(parser)
        add_json_argument(parser)


class MoveCommand(NamedCommand):
    noun, permission = "subscription", services.PERMISSION
    move = ""  # pause | resume | retire

    def act(self, options, actor):
        return services.subscription_move(name=options["name"], move=self.move, actor=actor, reason=options["reason"])

    def result(self, sub):
        return selectors.subscription_report(sub)

    def line(self, sub):
        return f"subscription {sub.name}: {sub.status}"
