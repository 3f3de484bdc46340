"""manage.py risk_reject ID --reason TEXT --actor B [--json]

Rejects a risk hide or restore that awaits approval (an approver's decision; nothing is applied)."""

from __future__ import annotations

from counting.risk import services
from likes_project.cli import RejectCommand


class Command(RejectCommand):
    help = "Reject a risk hide or restore that awaits approval (nothing is applied)."
    noun, permission, id_dest = "risk", services.APPROVE_PERMISSION, "risk_id"

    def reject(self, request_id, actor, reason):
        return services.risk_reject(decision_id=request_id, actor=actor, reason=reason)

    def result(self, decision):
        return services.risk_report(decision)
