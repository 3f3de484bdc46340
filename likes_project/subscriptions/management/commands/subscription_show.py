"""manage.py subscription_show NAME [--json]: a subscription's status, position, lag and last acknowledgement."""

from __future__ import annotations

from likes_project.cli import ShowCommand
from likes_project.subscriptions import selectors, services


class Command(ShowCommand):
    help = "Show a subscription: status, fields, position in each partition, lag and last acknowledgement."
    id_dest, id_metavar = "name", "NAME"

    def report(self, key):
        return selectors.subscription_report(services.subscription_get(key))

    def text(self, report):
        lag = "-" if report["lagSeconds"] is None else f"{report['lagSeconds']:.1f} s"
        return (f"subscription {report['name']} ({report['owner']}): {report['status']}, lag {lag}, "
                f"last ack {report['lastAckAt'] or 'never'}, fields {','.join(report['fields'])}")
