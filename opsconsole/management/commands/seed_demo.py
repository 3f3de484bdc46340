"""Demo data for the run command: users with tokens, videos of every visibility, a friendship and a
block. Idempotent: re-running reuses everything and prints the same tokens."""

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from likes_project.audit.services import Actor, audit_record
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
                token, _ = Token.objects.get_or_create(user=user)
            users[name] = (user, token.key)
            self.stdout.write(f"[{i}/{len(DEMO_USERS)}] user {name}")
        if options["admin_password"]:
            # Development only: (re)sets the demo superuser's password to the one given.
            admin_user, _ = get_user_model().objects.get_or_create(
                username="admin", defaults={"email": "admin@example.invalid"}
            )
            admin_user.is_staff = admin_user.is_superuser = True
            admin_user.set_password(options["admin_password"])
            admin_user.save()
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
