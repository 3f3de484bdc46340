"""Create (or reuse) an API user and print its token as the last line of stdout."""

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from likes_project.audit.services import audit_record, cli_actor_resolve
from likes_project.cli import DomainCommand
from likes_project.errors import InvalidInput


class Command(DomainCommand):
    help = "Create an API user (or reuse an existing one) and print its token as the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        self.add_actor_argument(parser)

    def run(self, *args, **options):
        username = options["username"]
        field = get_user_model()._meta.get_field("username")
        try:
            field.run_validators(username)
        except Exception as exc:
            raise InvalidInput(f"invalid username {username!r}", code="invalid_username") from exc
        if not username or len(username) > 150:
            raise InvalidInput(f"invalid username {username!r}", code="invalid_username")
        actor = cli_actor_resolve(username=options.get("actor"), permission="auth.add_user")
        with transaction.atomic(using="default", durable=True):
            user, created = get_user_model().objects.get_or_create(username=username)
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            token, _ = Token.objects.get_or_create(user=user)
            audit_record(actor=actor, action="user.create_api" if created else "user.reuse_api",
                         target_type="user", target_id=str(user.pk), params={"username": username})
        self.stderr.write(f"{'created' if created else 'reused'} user {username} (id {user.pk})")
        self.stdout.write(token.key)
