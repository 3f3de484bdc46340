"""manage.py subscription_replay_reject ID --reason TEXT --actor USER [--json]

Rejects a replay request that awaits approval (nothing is replayed)."""

from __future__ import annotations

from likes_project.cli import RejectCommand
from likes_project.subscriptions import replay


class Command(RejectCommand):
    help = "Reject a subscription's replay that awaits approval (nothing is replayed)."
    noun, permission, id_dest = "replay", replay.APPROVE_PERMISSION, "replay_id"

    def reject(self, request_id, actor, reason):
        return replay.replay_reject(replay_id=request_id, actor=actor, reason=reason)

    def result(self, row):
        return replay.replay_report(row)
