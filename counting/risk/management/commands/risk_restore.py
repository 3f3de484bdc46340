"""manage.py risk_restore ID --reason TEXT --actor A [--evidence TEXT] [--json]

Requests restoring an applied risk hide: a new decision over the same users, approved the same way
(risk_approve on the restore's id)."""

from __future__ import annotations

from counting.risk import services
from counting.risk.management.commands._request import RiskRequestCommand


class Command(RiskRequestCommand):
    help = "Request the restore of an applied risk hide (another operator approves it with risk_approve)."

    def add_request_arguments(self, parser):
        parser.add_argument("risk_id", type=int, metavar="ID", help="The hide decision to restore.")

    def act(self, options, actor):
        return services.risk_restore_request(actor=actor, decision_id=options["risk_id"], reason=options["reason"],
                                             evidence=options["evidence"])

    def line(self, decision):
        return (f"{self.name(decision)}: restore of {decision.restores} ({len(decision.user_ids)} users), "
                f"{decision.status}")
