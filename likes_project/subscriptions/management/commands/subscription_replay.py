"""manage.py subscription_replay NAME --reason TEXT [--actor USER] [--json]

Requests the replay of a BEHIND_RETENTION subscription from the outbox archive; another operator approves it
(`subscription_replay_approve`), then the system runs it."""

from __future__ import annotations

from likes_project.subscriptions import replay
from likes_project.subscriptions.management.commands._move import NamedCommand


class Command(NamedCommand):
    help = ("Request the replay of a subscription that fell behind its retention, from the outbox archive. Another "
            "operator approves it; the system then runs it.")
    noun, permission = "replay", replay.REQUEST_PERMISSION
    reason_help = "Why (required; recorded in the audit log)."

    def act(self, options, actor):
        return replay.replay_request(name=options["name"], actor=actor, reason=options["reason"])

    def result(self, row):
        return replay.replay_report(row)

    def line(self, row):
        return (f"replay {row.pk} of {row.params['subscription']}: {row.status}; another operator approves it with "
                f"`manage.py subscription_replay_approve {row.pk} --actor USER`")
