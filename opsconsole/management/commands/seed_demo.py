"""Demo data for the run command: users with tokens, videos of every visibility, a friendship and a
block. Idempotent: re-running reuses everything and prints the same tokens."""

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from likes_project.api_tokens import token_fingerprint
from likes_project.audit.services import Actor, audit_record, cli_actor_resolve
from likes_project.cli import DomainCommand
from relations.selectors import video_snapshot_get
from relations.services.social import block_set, friendship_set
from relations.services.videos import video_snapshot_upsert

DEMO_USERS = ["alice", "bob", "carol", "dave"]
DEMO_VIDEOS = [
    # (video id, author, visibility, status)
    ("v-public-1", "alice", "public", "active"),
    ("v-public-2", "bob", "public", "active"),
    ("v-friends-1", "alice", "friends", "active"),
    ("v-private-1", "alice", "private", "active"),
    ("v-takendown-1", "bob", "public", "taken_down"),
]


class Command(DomainCommand):
    help = "Create demo users, videos and social edges, and print each user's API token."

    def add_arguments(self, parser):
        parser.add_argument("--admin-password", default=None,
                            help="Also create a superuser 'admin' with this password (development only).")

    def run(self, *args, **options):
        actor = Actor(name="seed_demo", channel="cli")
        users = {}
        for i, name in enumerate(DEMO_USERS, start=1):
            with transaction.atomic(using="default", durable=True):
                user, created = get_user_model().objects.get_or_create(username=name)
                if created:
                    user.set_unusable_password()
                    user.save(update_fields=["password"])
                    audit_record(actor=actor, action="user.create_api", target_type="user",
                                 target_id=str(user.pk), params={"username": name})
                token, token_created = Token.objects.get_or_create(user=user)
                if token_created and not created:  # an existing demo user whose token had been revoked
                    audit_record(actor=actor, action="token.create", target_type="user", target_id=str(user.pk),
                                 params={"username": name, "fingerprint": token_fingerprint(token.key),
                                         "reason": "seed_demo"})
            users[name] = (user, token.key)
            self.stdout.write(f"[{i}/{len(DEMO_USERS)}] user {name}")
        if options["admin_password"]:
            self.superuser_ensure(options["admin_password"])
            self.stdout.write("superuser admin ready")
        for video_id, author, visibility, status in DEMO_VIDEOS:
            existing = video_snapshot_get(video_id=video_id)
            if existing is None:
                video_snapshot_upsert(video_id=video_id, author_id=users[author][0].pk, visibility=visibility,
                                      status=status, version=1, actor=actor)
            self.stdout.write(f"video {video_id}: {author} {visibility} {status}")
        friendship_set(user_a=users["alice"][0].pk, user_b=users["bob"][0].pk, present=True, actor=actor)
        block_set(blocker_id=users["alice"][0].pk, blocked_id=users["dave"][0].pk, present=True, actor=actor)
        self.stdout.write("alice and bob are friends; alice blocks dave")
        self.stdout.write("")
        self.stdout.write("API tokens (Authorization: Token <key>):")
        for name, (user, key) in users.items():
            self.stdout.write(f"  {name:<6} id={user.pk:<4} {key}")

    def superuser_ensure(self, password: str) -> str | None:
        """Development only: the superuser `admin`, with this password. Creating it, changing its
        password and making it a superuser again are audited as the OS account running the command
        (`user.superuser_create`, `user.password_reset`, `user.superuser_grant`; never the password).
        Returns the action recorded, or None when `admin` already was a superuser with this password
        (`run.sh` passes the same password on every start: nothing is written then).

        Transaction: one durable transaction on `default` (the user row locked, the audit record)."""
        actor = cli_actor_resolve(username=None, permission="auth.change_user")
        User = get_user_model()
        with transaction.atomic(using="default", durable=True):
            user = User.objects.select_for_update().filter(username="admin").first()
            created = user is None
            if created:
                user = User(username="admin", email="admin@example.invalid")
            new_password = created or not user.check_password(password)
            granted = not (user.is_staff and user.is_superuser)
            if not (new_password or granted):
                return None
            user.is_staff = user.is_superuser = True
            if new_password:
                user.set_password(password)
            user.save()
            action = ("user.superuser_create" if created else "user.password_reset" if new_password
                      else "user.superuser_grant")
            audit_record(actor=actor, action=action, target_type="user", target_id=str(user.pk),
                         params={"username": "admin", "superuser_granted": granted and not created})
        return action
