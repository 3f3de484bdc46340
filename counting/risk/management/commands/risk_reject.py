"""manage.py risk_reject ID --reason TEXT --actor B [--json]

Rejects a risk hide or restore that awaits approval (an approver's decision; nothing is applied)."""

from __future__ import annotations

from counting.risk import services
from likes_project.cli import OperatorCommand, add_json_argument


class Command(OperatorCommand):
    help = "Reject a risk hide or restore that awaits approval (nothing is applied)."
    noun, permission = "risk", services.APPROVE_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("risk_id", type=int, metavar="ID")
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--actor", required=True, help="The rejecting approver's username.")
        add_json_argument(parser)

    def act(self, options, actor):
        return services.risk_reject(decision_id=options["risk_id"], actor=actor, reason=options["reason"])

    def result(self, decision):
        return services.risk_report(decision)

    def line(self, decision):
        return f"{self.name(decision)}: {decision.status}"
