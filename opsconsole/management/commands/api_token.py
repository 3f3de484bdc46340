"""Issue or revoke a user's API token from the shell, as the token admin does (D48): each needs its own
permission and a reason, and is audited without the key. `issue` prints the key as the last stdout line,
once; nothing else ever shows it again."""

from likes_project.api_tokens import TOKEN_ADD_PERMISSION, TOKEN_REVOKE_PERMISSION, token_create, token_revoke
from likes_project.audit.services import cli_actor_resolve
from likes_project.cli import DomainCommand, user_by_username


class Command(DomainCommand):
    help = ("Issue (prints the key once, as the last line) or revoke a user's API token; a reason is required "
            "and the action is audited (token.create / token.revoke) without the key.")

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["issue", "revoke"])
        parser.add_argument("username")
        parser.add_argument("--reason", required=True, help="Why (recorded in the audit log).")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        issue = options["action"] == "issue"
        actor = cli_actor_resolve(username=options.get("actor"),
                                  permission=TOKEN_ADD_PERMISSION if issue else TOKEN_REVOKE_PERMISSION)
        user = user_by_username(options["username"])
        if issue:
            created = token_create(user_id=user.pk, actor=actor, reason=options["reason"])
            self.stderr.write(f"issued API token {created.fingerprint} for {created.username}; "
                              "it is shown once, below")
            self.stdout.write(created.key)
        else:
            revoked = token_revoke(user_id=user.pk, actor=actor, reason=options["reason"])
            self.stdout.write(f"revoked API token {revoked.fingerprint} of {revoked.username}")
