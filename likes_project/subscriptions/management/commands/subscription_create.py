"""manage.py subscription_create NAME --owner TEAM --purpose TEXT --fields F1,F2,... --from earliest|latest [--json]

A new subscription to the event log (issue 31 §1, docs/events.md). Prints its token once: only its hash is kept."""

from __future__ import annotations

from likes_project.cli import OperatorCommand, add_json_argument
from likes_project.subscriptions import services


class Command(OperatorCommand):
    help = ("Create a subscription: a downstream team's own token and position in the event log, which holds back "
            "trimming until it acknowledges. The token is printed once.")
    noun, permission = "subscription", services.PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("name", metavar="NAME", help="1-63 of [a-z0-9-], starting with a letter.")
        parser.add_argument("--owner", required=True, metavar="TEAM", help="The team that consumes it.")
        parser.add_argument("--purpose", required=True, metavar="TEXT", help="What it is for (recorded).")
        parser.add_argument("--fields", required=True, metavar="F1,F2,...",
                            help=f"The event fields it may receive: some of {', '.join(services.FIELDS)} "
                                 "(userId or userPseudonym, not both).")
        parser.add_argument("--from", dest="start_from", required=True, choices=["earliest", "latest"],
                            help="Read from the oldest event the log holds, or from now on.")
        self.add_actor_argument(parser)
        add_json_argument(parser)

    def act(self, options, actor):
        fields = [f.strip() for f in options["fields"].split(",") if f.strip()]
        return services.subscription_create(name=options["name"], owner=options["owner"], purpose=options["purpose"],
                                            fields=fields, start_from=options["start_from"], actor=actor)

    def result(self, created):
        sub = created.subscription
        return {"name": sub.name, "token": created.token, "fields": sub.fields, "status": sub.status}

    def line(self, created):
        sub = created.subscription
        return (f"subscription {sub.name}: {sub.status}, fields {','.join(sub.fields)}\n"
                f"token (shown once, keep it secret): {created.token}")
