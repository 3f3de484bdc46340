"""manage.py repair_approve REPAIR_ID --actor USER [--wait] [--json]

Approves another operator's repair; the system then runs it on the workers (issue 11 §4). Non-zero
exit when refused (self_approval, approval_void, ...) or when the repair FAILED."""

from __future__ import annotations

from django.core.management.base import CommandError

from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand
from likes_project.errors import DomainError
from reconciliation.management.output import add_json_argument, emit, refuse
from reconciliation.models import RepairStatus
from reconciliation.services import repair


class Command(DomainCommand):
    help = ("Approve a repair another operator requested (never your own). The system runs it; with --wait this "
            "command follows it to its end. Non-zero exit when refused or when the repair failed.")

    def add_arguments(self, parser):
        parser.add_argument("repair_id", type=int, metavar="REPAIR_ID")
        parser.add_argument("--actor", required=True, help="The approving operator's username.")
        parser.add_argument("--wait", action="store_true", help="Follow the repair until it ends.")
        parser.add_argument("--wait-timeout", type=float, default=600.0, help="Seconds --wait follows it at most.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=repair.APPROVE_PERMISSION)
            req = repair.repair_approve(repair_id=options["repair_id"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        if options["wait"]:
            self.stderr.write(f"repair {req.pk} approved; the workers run it (job {req.job_id}); following it")
            req = repair.repair_wait(req.pk, timeout_s=options["wait_timeout"])
        emit(self, options, {"repairId": req.pk, "status": req.status, "before": req.before, "after": req.after},
             f"repair {req.pk}: {req.status}" + (f" ({req.error})" if req.error else ""))
        if req.status in (RepairStatus.FAILED, RepairStatus.VOID):
            raise CommandError(f"repair {req.pk} {req.status}: {req.error}")
        if options["wait"] and not req.finished:
            raise CommandError(f"repair {req.pk} is still {req.status} after {options['wait_timeout']:.0f} s")
