"""manage.py risk_approve ID --actor B [--wait] [--wait-timeout S] [--json]

Approves another operator's risk hide or restore (never your own: `self_approval`); the system then
applies it as an ops job on the workers. Non-zero exit when refused, or FAILED."""

from __future__ import annotations

from django.core.management.base import CommandError

from counting.risk import services
from counting.risk.models import RiskStatus
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


class Command(DomainCommand):
    help = ("Approve a risk hide or restore another operator requested (never your own). The system applies it; "
            "with --wait this command follows it to its end.")

    def add_arguments(self, parser):
        parser.add_argument("risk_id", type=int, metavar="ID")
        parser.add_argument("--actor", required=True, help="The approving operator's username.")
        parser.add_argument("--wait", action="store_true", help="Follow the apply job until it ends.")
        parser.add_argument("--wait-timeout", type=float, default=600.0, help="Seconds --wait follows it at most.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=services.APPROVE_PERMISSION)
            decision = services.risk_approve(decision_id=options["risk_id"], actor=actor)
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        if options["wait"]:
            self.stderr.write(f"risk {decision.pk} approved; the workers apply it (job {decision.job_id}); "
                              "following it")
            decision = services.risk_wait(decision.pk, timeout_s=options["wait_timeout"])
        emit(self, options, services.risk_report(decision),
             f"risk {decision.pk}: {decision.status}" + (f" ({decision.error})" if decision.error else ""))
        if decision.status == RiskStatus.FAILED:
            raise CommandError(f"risk {decision.pk} FAILED: {decision.error}")
        if options["wait"] and decision.status in (RiskStatus.APPROVED, RiskStatus.APPLYING):
            raise CommandError(f"risk {decision.pk} is still {decision.status} after {options['wait_timeout']:.0f} s")
