"""The synthetic users and videos a drill drives: created through the same code paths as real ones
(users with an API token, videos through the video snapshot service), named `drill-<run>-...` so they
are never mistaken for real data, and spread over every relation shard."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction
from rest_framework.authtoken.models import Token

from likes_project.audit.services import Actor, audit_record
from relations import routing
from relations.services.videos import video_snapshot_upsert

DRILL_ACTOR = Actor(name="drill", channel="cli")


@dataclass(frozen=True)
class DrillUser:
    user_id: int
    username: str
    token: str
    shard: str


@dataclass
class Population:
    run_id: str
    author: DrillUser
    users: list[DrillUser]
    videos: list[str]
    by_shard: dict[str, list[DrillUser]] = field(default_factory=dict)

    def users_on(self, shard: str) -> list[DrillUser]:
        return self.by_shard.get(shard, [])


def _user_create(username: str) -> DrillUser:
    with transaction.atomic(using="default", durable=True):
        user = get_user_model().objects.create(username=username)
        user.set_unusable_password()
        user.save(update_fields=["password"])
        token = Token.objects.create(user=user)
        audit_record(actor=DRILL_ACTOR, action="drill.user_create", target_type="user", target_id=str(user.pk),
                     params={"username": username})
    return DrillUser(user.pk, username, token.key, routing.alias_for_user(user.pk))


def drill_population_create(*, users_per_shard: int = 15, videos: int = 8, run_id: str | None = None
                            ) -> Population:
    """Create a drill's own author, `videos` public videos and `users_per_shard` users on every relation
    shard (users are created until each shard has its share; the shard follows from the user id).

    Transaction: one on `default` per user (user, token, audit record); the video service's own per video.
    Idempotency: none needed: every run has a fresh `run_id`, so nothing collides with an earlier run.
    """
    run_id = run_id or uuid.uuid4().hex[:8]
    author = _user_create(f"drill-{run_id}-author")
    by_shard: dict[str, list[DrillUser]] = {alias: [] for alias in routing.all_aliases()}
    users: list[DrillUser] = []
    n = 0
    # The shard of a user is a hash of its id: a few extra users are created until each shard has its share.
    while any(len(members) < users_per_shard for members in by_shard.values()):
        n += 1
        if n > users_per_shard * len(by_shard) * 20:
            raise RuntimeError("could not place drill users on every relation shard")
        user = _user_create(f"drill-{run_id}-u{n}")
        if len(by_shard[user.shard]) < users_per_shard:
            by_shard[user.shard].append(user)
            users.append(user)
    video_ids = []
    for i in range(videos):
        video_id = f"drill-{run_id}-v{i}"
        video_snapshot_upsert(video_id=video_id, author_id=author.user_id, visibility="public", status="active",
                              version=None, actor=DRILL_ACTOR)
        video_ids.append(video_id)
    return Population(run_id, author, users, video_ids, by_shard)


def drill_video_create(population: Population, suffix: str) -> str:
    """A public video of the drill's own, `drill-<run>-<suffix>`, by the population's author (the video service's
    path, as the population's videos); not among `population.videos`, so the runner's traffic never touches it."""
    video_id = f"drill-{population.run_id}-{suffix}"
    video_snapshot_upsert(video_id=video_id, author_id=population.author.user_id, visibility="public",
                          status="active", version=None, actor=DRILL_ACTOR)
    return video_id
