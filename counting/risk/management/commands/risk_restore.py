"""manage.py risk_restore ID --reason TEXT --actor A [--evidence TEXT] [--json]

Requests restoring an applied risk hide: a new decision over the same users, approved the same way
(risk_approve on the restore's id)."""

from __future__ import annotations

from counting.risk import services
from likes_project.cli import OperatorCommand, add_json_argument


class Command(OperatorCommand):
    help = "Request the restore of an applied risk hide (another operator approves it with risk_approve)."
    noun, permission = "risk", services.REQUEST_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("risk_id", type=int, metavar="ID", help="The hide decision to restore.")
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--evidence", default="", help="Free-text evidence kept with the decision.")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def act(self, options, actor):
        return services.risk_restore_request(actor=actor, decision_id=options["risk_id"], reason=options["reason"],
                                             evidence=options["evidence"])

    def result(self, decision):
        return services.risk_report(decision)

    def line(self, decision):
        return (f"{self.name(decision)}: restore of {decision.restores} ({len(decision.user_ids)} users), "
                f"{decision.status}")
