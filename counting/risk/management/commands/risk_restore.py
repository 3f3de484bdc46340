"""manage.py risk_restore ID --reason TEXT --actor A [--evidence TEXT] [--json]

Requests restoring an applied risk hide: a new decision over the same users, approved the same way
(risk_approve on the restore's id)."""

from __future__ import annotations

from counting.risk import services
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


class Command(DomainCommand):
    help = "Request the restore of an applied risk hide (another operator approves it with risk_approve)."

    def add_arguments(self, parser):
        parser.add_argument("risk_id", type=int, metavar="ID", help="The hide decision to restore.")
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--evidence", default="", help="Free-text evidence kept with the decision.")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=services.REQUEST_PERMISSION)
            decision = services.risk_restore_request(actor=actor, decision_id=options["risk_id"],
                                                     reason=options["reason"], evidence=options["evidence"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, services.risk_report(decision),
             f"risk {decision.pk}: restore of {decision.restores} ({len(decision.user_ids)} users), {decision.status}")
