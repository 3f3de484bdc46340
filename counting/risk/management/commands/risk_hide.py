"""manage.py risk_hide --video V (--user U ... | --users-file F) --reason TEXT --actor A [--evidence TEXT] [--json]

Requests hiding these users' relations with the video from its displayed count and likers list (issue 14
§4). AWAITING_APPROVAL until another operator approves it with risk_approve. The relations themselves are
never changed."""

from __future__ import annotations

from counting.risk import services
from likes_project.cli import OperatorCommand, add_json_argument


class Command(OperatorCommand):
    help = ("Request a risk hide of some users' relations with one video (reason and evidence kept; another "
            "operator approves it with risk_approve).")
    noun, permission = "risk", services.REQUEST_PERMISSION

    def add_arguments(self, parser):
        parser.add_argument("--video", required=True, help="The video id.")
        parser.add_argument("--user", action="append", default=[], help="A username (repeatable).")
        parser.add_argument("--users-file", help="A file of usernames, one a line (# comments allowed).")
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--evidence", default="", help="Free-text evidence kept with the decision.")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def act(self, options, actor):
        users = list(options["user"])
        if options["users_file"]:
            users += services.usernames_read(options["users_file"])
        return services.risk_hide_request(actor=actor, video_id=options["video"], usernames=users,
                                          reason=options["reason"], evidence=options["evidence"])

    def result(self, decision):
        return services.risk_report(decision)

    def line(self, decision):
        return f"{self.name(decision)}: hide {len(decision.user_ids)} users on {decision.video_id}, {decision.status}"
