"""manage.py subscription_show NAME [--json]: a subscription's status, position, lag and last acknowledgement."""

from __future__ import annotations

from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError
from likes_project.subscriptions import selectors, services


class Command(DomainCommand):
    help = "Show a subscription: status, fields, position in each partition, lag and last acknowledgement."

    def add_arguments(self, parser):
        parser.add_argument("name", metavar="NAME")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            report = selectors.subscription_report(services.subscription_get(options["name"]))
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        lag = "-" if report["lagSeconds"] is None else f"{report['lagSeconds']:.1f} s"
        emit(self, options, report,
             f"subscription {report['name']} ({report['owner']}): {report['status']}, lag {lag}, "
             f"last ack {report['lastAckAt'] or 'never'}, fields {','.join(report['fields'])}")
