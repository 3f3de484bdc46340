"""Test data builders that go through the real services (no fixtures that bypass the rules)."""

from __future__ import annotations

import itertools
import json

from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from likes_project.audit.services import Actor
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
