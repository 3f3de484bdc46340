"""Test data builders that go through the real services (no fixtures that bypass the rules)."""

from __future__ import annotations

import contextlib
import itertools
import json

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from likes_project.audit.services import Actor
from likes_project.redis_client import reset_clients
from relations import routing
from relations.services.videos import video_snapshot_upsert

TEST_ACTOR = Actor(name="tests", channel="cli")
_seq = itertools.count(1)


def make_user(username: str | None = None, *, shard: str | None = None):
    """Create a user; with `shard`, keep creating until one routes to that relation shard alias."""
    User = get_user_model()
    while True:
        name = username or f"user{next(_seq)}"
        user = User.objects.create(username=name)
        if shard is None or routing.alias_for_user(user.pk) == shard:
            return user
        if username:
            raise AssertionError(f"{username} does not route to {shard}")


def make_staff(username: str | None = None):
    """A staff user with no permission at all (grant what a test needs with `grant`)."""
    user = make_user(username)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    return user


def staff_client(username: str):
    """A staff user with no permission yet, and a test client logged in as them."""
    from django.test import Client

    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return user, client


def grant(user, *perms: str) -> None:
    """Give `user` each permission, named as Django names it: "app_label.codename"."""
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))


def login_non_staff(client, *perms: str):
    """Log `client` in as a new user who holds `perms` but is not staff (the admin must still refuse)."""
    user = make_user()
    grant(user, *perms)
    client.force_login(user)
    return user


def make_video(video_id: str, author, *, visibility: str = "public", status: str = "active", version=None):
    return video_snapshot_upsert(
        video_id=video_id, author_id=author.pk, visibility=visibility, status=status, version=version,
        actor=TEST_ACTOR,
    ).video


class ApiClientFactory:
    """`api.as_user(user)` -> an APIClient authenticated with the user's DRF token."""

    def as_user(self, user) -> APIClient:
        token, _ = Token.objects.get_or_create(user=user)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    def anonymous(self) -> APIClient:
        return APIClient()


def put_like(client: APIClient, video_id: str, desired: str, key: str, **body):
    payload = {"desiredState": desired, **body}
    return client.put(
        f"/v1/videos/{video_id}/like-relation", data=json.dumps(payload), content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"


@contextlib.contextmanager
def redis_unreachable(settings, *, streams: bool = True):
    """Point the cache Redis (and, unless `streams=False`, the streams Redis) at a closed port for the
    duration of the block; the process-wide clients are rebuilt on the way in and out."""
    names = ("REDIS_URL", "REDIS_STREAMS_URL") if streams else ("REDIS_URL",)
    saved = {name: getattr(settings, name) for name in names}
    for name in names:
        setattr(settings, name, UNREACHABLE_REDIS)
    reset_clients()
    try:
        yield
    finally:
        for name, url in saved.items():
            setattr(settings, name, url)
        reset_clients()


def run_jobs(*, max_slices: int = 1000) -> list:
    """Drive the real ops-job task (`opsjobs.run`) over every job not finished yet, slice after slice,
    as the workers would; returns the jobs as they ended."""
    from likes_project.opsjobs.models import OpsJob
    from likes_project.opsjobs.tasks import run_job_task

    for _ in range(max_slices):
        pending = list(OpsJob.objects.filter(status__in=["QUEUED", "RUNNING"]).values_list("pk", flat=True))
        if not pending:
            break
        for job_id in pending:
            run_job_task(job_id)
    return list(OpsJob.objects.order_by("pk"))
