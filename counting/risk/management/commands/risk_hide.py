"""manage.py risk_hide --video V (--user U ... | --users-file F) --reason TEXT --actor A [--evidence TEXT] [--json]

Requests hiding these users' relations with the video from its displayed count and likers list (issue 14
§4). AWAITING_APPROVAL until another operator approves it with risk_approve. The relations themselves are
never changed."""

from __future__ import annotations

from counting.risk import services
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, add_json_argument, emit, refuse
from likes_project.errors import DomainError


class Command(DomainCommand):
    help = ("Request a risk hide of some users' relations with one video (reason and evidence kept; another "
            "operator approves it with risk_approve).")

    def add_arguments(self, parser):
        parser.add_argument("--video", required=True, help="The video id.")
        parser.add_argument("--user", action="append", default=[], help="A username (repeatable).")
        parser.add_argument("--users-file", help="A file of usernames, one a line (# comments allowed).")
        parser.add_argument("--reason", default="", help="Why (required).")
        parser.add_argument("--evidence", default="", help="Free-text evidence kept with the decision.")
        parser.add_argument("--actor", required=True, help="The requesting operator's username.")
        add_json_argument(parser)

    def run(self, *args, **options):
        try:
            actor = cli_actor_resolve(username=options["actor"], permission=services.REQUEST_PERMISSION)
            users = list(options["user"])
            if options["users_file"]:
                users += services.usernames_read(options["users_file"])
            decision = services.risk_hide_request(actor=actor, video_id=options["video"], usernames=users,
                                                  reason=options["reason"], evidence=options["evidence"])
        except DomainError as exc:
            raise refuse(self, options, exc) from exc
        emit(self, options, services.risk_report(decision),
             f"risk {decision.pk}: hide {len(decision.user_ids)} users on {decision.video_id}, {decision.status}")
