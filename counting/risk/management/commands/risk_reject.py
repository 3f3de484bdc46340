"""manage.py risk_reject ID --reason TEXT --actor B [--json]

Rejects a risk hide or restore that awaits approval (an approver's decision; nothing is applied)."""

from __future__ import annotations

from counting.risk import services
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


class Command(DomainCommand):
    help = "Reject a risk hide or restore that awaits approval (nothing is applied)."

    def add_arguments(self, parser):
        parser.add_argument("risk_id", type=int, metavar="ID")
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--actor", required=True, help="The rejecting approver's username.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=services.APPROVE_PERMISSION)
            decision = services.risk_reject(decision_id=options["risk_id"], actor=actor, reason=options["reason"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, services.risk_report(decision), f"risk {decision.pk}: {decision.status}")
