"""manage.py repair_approve REPAIR_ID --actor USER [--wait] [--json]

Approves another operator's repair; the system then runs it on the workers (issue 11 §4). Non-zero
exit when refused (self_approval, approval_void, ...) or when the repair FAILED."""

from __future__ import annotations

from likes_project.cli import ApproveCommand
from reconciliation.models import RepairStatus
from reconciliation.services import repair


class Command(ApproveCommand):
    help = ("Approve a repair another operator requested (never your own). The system runs it; with --wait this "
            "command follows it to its end. Non-zero exit when refused or when the repair failed.")
    noun, runs, id_dest, id_metavar = "repair", "run", "repair_id", "REPAIR_ID"
    permission, failed_statuses = repair.APPROVE_PERMISSION, (RepairStatus.FAILED, RepairStatus.VOID)

    def approve(self, request_id, actor):
        return repair.repair_approve(repair_id=request_id, actor=actor)

    def wait(self, request_id, *, timeout_s):
        return repair.repair_wait(request_id, timeout_s=timeout_s)

    def result(self, row):
        return {"repairId": row.pk, "status": row.status, "before": row.before, "after": row.after}
