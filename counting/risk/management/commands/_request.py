"""What the three risk request commands share (risk_hide, risk_restore, risk_account): the request's own flags,
then --reason, --evidence, --actor and --json, under the request permission; the decision awaits another
operator's approval (risk_approve)."""

from __future__ import annotations

from counting.risk import services
from likes_project.cli import OperatorCommand, add_json_argument


class RiskRequestCommand(OperatorCommand):
    """A request for a risk decision. A command adds its own flags (`add_request_arguments`), calls its request
    service (`act`) and says its line; it prints the decision's report (`services.risk_report`) with --json."""

    noun, permission = "risk", services.REQUEST_PERMISSION

    def add_request_arguments(self, parser) -> None:
        raise NotImplementedError  # what the request is about: every request command names its flags

    def add_arguments(self, parser):
        self.add_request_arguments(parser)
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--evidence", default="", help="Free-text evidence kept with the decision.")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def result(self, decision):
        return services.risk_report(decision)
