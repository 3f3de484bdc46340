"""manage.py risk_account USERNAME --level downweight|freeze|clear --reason TEXT --actor A [--evidence TEXT] [--json]

Requests an account's risk level (issue 32 §1): down-weight (its likes leave public counts), freeze (and its
commands are refused), or clear. AWAITING_APPROVAL until another operator approves it with risk_approve; prints
{"riskId", "status"} with --json."""

from __future__ import annotations

from counting.risk import accounts
from counting.risk.management.commands._request import RiskRequestCommand


class Command(RiskRequestCommand):
    help = ("Request an account's risk level: downweight (its likes leave public counts), freeze (its commands are "
            "refused too) or clear (back to none); another operator approves it with risk_approve.")

    def add_request_arguments(self, parser):
        parser.add_argument("username", help="The account.")
        parser.add_argument("--level", required=True, choices=sorted(accounts.LEVELS), help="The level to set.")

    def act(self, options, actor):
        return accounts.risk_account_request(actor=actor, username=options["username"], level=options["level"],
                                             reason=options["reason"], evidence=options["evidence"])

    def result(self, decision):
        return {"riskId": decision.pk, "status": decision.status}  # not the report: no "level" here

    def line(self, decision):
        return f"{self.name(decision)}: account level {decision.params['level']}, {decision.status}"
