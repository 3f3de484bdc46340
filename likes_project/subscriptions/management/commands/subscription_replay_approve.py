"""manage.py subscription_replay_approve ID --actor USER [--wait] [--wait-timeout S] [--json]

Approves another operator's replay request (never your own: `self_approval`); the system then replays the
subscription from the outbox archive as an ops job. Non-zero exit when refused, or FAILED."""

from __future__ import annotations

from likes_project.cli import ApproveCommand
from likes_project.subscriptions import replay
from likes_project.subscriptions.models import ReplayStatus


class Command(ApproveCommand):
    help = ("Approve a subscription's replay another operator requested (never your own). The system runs it; with "
            "--wait this command follows it to its end.")
    noun, runs, id_dest, id_metavar = "replay", "run", "replay_id", "ID"
    permission, failed_statuses = replay.APPROVE_PERMISSION, (ReplayStatus.FAILED,)

    def approve(self, request_id, actor):
        return replay.replay_approve(replay_id=request_id, actor=actor)

    def wait(self, request_id, *, timeout_s):
        return replay.replay_wait(request_id, timeout_s=timeout_s)

    def result(self, row):
        return replay.replay_report(row)
