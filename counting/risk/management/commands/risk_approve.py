"""manage.py risk_approve ID --actor B [--wait] [--wait-timeout S] [--json]

Approves another operator's risk hide or restore (never your own: `self_approval`); the system then
applies it as an ops job on the workers. Non-zero exit when refused, or FAILED."""

from __future__ import annotations

from counting.risk import services
from counting.risk.models import RiskStatus
from likes_project.cli import ApproveCommand


class Command(ApproveCommand):
    help = ("Approve a risk hide or restore another operator requested (never your own). The system applies it; "
            "with --wait this command follows it to its end.")
    noun, runs, id_dest, id_metavar = "risk", "apply", "risk_id", "ID"
    permission, failed_statuses = services.APPROVE_PERMISSION, (RiskStatus.FAILED,)

    def approve(self, request_id, actor):
        return services.risk_approve(decision_id=request_id, actor=actor)

    def wait(self, request_id, *, timeout_s):
        return services.risk_wait(request_id, timeout_s=timeout_s)

    def result(self, row):
        return services.risk_report(row)
