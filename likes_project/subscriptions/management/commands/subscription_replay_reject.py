"""manage.py subscription_replay_reject ID --reason TEXT --actor USER [--json]

Rejects a replay request that awaits approval (nothing is replayed)."""

from __future__ import annotations

from likes_project.cli import OperatorCommand, add_json_argument
from likes_project.subscriptions import replay


class Command(OperatorCommand):
    help = "Reject a subscription's replay that awaits approval (nothing is replayed)."
    noun, permission = "replay", replay.APPROVE_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("replay_id", type=int, metavar="ID")
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--actor", required=True, help="The rejecting approver's username.")
        add_json_argument(parser)

    def act(self, options, actor):
        return replay.replay_reject(replay_id=options["replay_id"], actor=actor, reason=options["reason"])

    def result(self, row):
        return replay.replay_report(row)

    def line(self, row):
        return f"replay {row.pk}: {row.status}"
