"""manage.py risk_hide --video V (--user U ... | --users-file F) --reason TEXT --actor A [--evidence TEXT] [--json]

Requests hiding these users' relations with the video from its displayed count and likers list (issue 14
§4). AWAITING_APPROVAL until another operator approves it with risk_approve. The relations themselves are
never changed."""

from __future__ import annotations

from counting.risk import services
from counting.risk.management.commands._request import RiskRequestCommand


class Command(RiskRequestCommand):
    help = ("Request a risk hide of some users' relations with one video (reason and evidence kept; another "
            "operator approves it with risk_approve).")

    def add_request_arguments(self, parser):
        parser.add_argument("--video", required=True, help="The video id.")
        parser.add_argument("--user", action="append", default=[], help="A username (repeatable).")
        parser.add_argument("--users-file", help="A file of usernames, one a line (# comments allowed).")

    def act(self, options, actor):
        users = list(options["user"])
        if options["users_file"]:
            users += services.usernames_read(options["users_file"])
        return services.risk_hide_request(actor=actor, video_id=options["video"], usernames=users,
                                          reason=options["reason"], evidence=options["evidence"])

    def line(self, decision):
        return f"{self.name(decision)}: hide {len(decision.user_ids)} users on {decision.video_id}, {decision.status}"
