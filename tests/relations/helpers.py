"""Shared helpers of the relations tests: the real like command (and likes made for the liked-list
tests), what the relation shards hold (read straight from each shard database), and the HTTP contract
of the public and internal APIs."""

from __future__ import annotations

import itertools
import json
import uuid

from django.conf import settings
from rest_framework.test import APIClient

from relations import routing
from relations.models import LikeCommand, LikeRelation, OutboxEvent
from relations.services.commands import relation_set_state


def cmd(user, video_id: str, desired: str = "LIKED", key: str | None = None):
    """The real like command for `user`, with a fresh operation id unless `key` names one."""
    return relation_set_state(user_id=user.pk, video_id=video_id, desired_state=desired,
                              operation_id=key or uuid.uuid4().hex)


# --- the caller's liked list (the my-likes list and export tests) -----------------------------------

LIKED, UNLIKED = "LIKED", "UNLIKED"
_ops = itertools.count(1)


def set_state(user, video_id: str, desired: str = LIKED):
    """The like command with a sequential operation id (`op-1`, `op-2`, ...)."""
    return cmd(user, video_id, desired, key=f"op-{next(_ops)}")


def like_new(user, author, make_video, video_ids) -> list[str]:
    """Create each video and like it, in order (so the last one is the newest like)."""
    for vid in video_ids:
        make_video(vid, author)
        set_state(user, vid)
    return list(video_ids)


def ids(n: int, prefix: str = "v") -> list[str]:
    # Zero-padded so that, should two likes share a timestamp, video_id DESC still orders them newest first.
    return [f"{prefix}-{i:03d}" for i in range(n)]


# --- what the shards hold ------------------------------------------------------------------------


def shard_rows() -> dict[str, int]:
    """Rows of every relation-shard table, summed over all shards."""
    return {model.__name__: total(model) for model in (LikeRelation, LikeCommand, OutboxEvent)}


NOTHING = {"LikeRelation": 0, "LikeCommand": 0, "OutboxEvent": 0}


def total(model, **filters) -> int:
    return sum(model.objects.using(alias).filter(**filters).count() for alias in settings.RELATION_SHARD_ALIASES)


def relation_row(user_id: int, video_id: str) -> LikeRelation | None:
    alias = routing.alias_for_user(user_id)
    return LikeRelation.objects.using(alias).filter(user_id=user_id, video_id=video_id).first()


def outbox_rows(user_id: int, video_id: str) -> list[OutboxEvent]:
    return list(
        OutboxEvent.objects.using(routing.alias_for_user(user_id))
        .filter(aggregate_key=f"{user_id}:{video_id}")
        .order_by("relation_version")
    )


def command_rows(user_id: int) -> list[LikeCommand]:
    return list(LikeCommand.objects.using(routing.alias_for_user(user_id)).filter(user_id=user_id).order_by("id"))


def nothing_written() -> bool:
    return total(LikeRelation) == 0 and total(LikeCommand) == 0 and total(OutboxEvent) == 0


# --- the HTTP contract ---------------------------------------------------------------------------

SERVICE_TOKEN = "test-video-service-token"
COMMAND_KEYS = {
    "operationId", "videoId", "state", "relationVersion", "operationResult", "currentRelation",
    "changed", "replayed", "countConsistency",
}


def body_of(resp) -> dict:
    """The JSON body; fails on anything that is not a JSON response (an HTML error page, say)."""
    assert resp["Content-Type"].startswith("application/json"), (resp.status_code, resp["Content-Type"])
    data = json.loads(resp.content)
    assert isinstance(data, dict)
    return data


def assert_error(resp, status: int, code: str) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.content[:300])
    data = body_of(resp)
    assert data["code"] == code, data
    assert isinstance(data["message"], str) and data["message"]
    return data


def assert_command_shape(data: dict) -> None:
    assert set(data) == COMMAND_KEYS
    assert data["countConsistency"] == "EVENTUAL"
    assert set(data["operationResult"]) == {"state", "relationVersion"}
    assert set(data["currentRelation"]) == {"state", "relationVersion"}
    assert data["state"] == data["operationResult"]["state"]
    assert data["relationVersion"] == data["operationResult"]["relationVersion"]
    assert isinstance(data["changed"], bool) and isinstance(data["replayed"], bool)


def raw_put(client, video_id: str, body: bytes | str, key: str | None = "op-1",
            content_type: str = "application/json", **extra):
    """PUT a raw like-relation body; `extra` adds request headers (`HTTP_ACCEPT=...`, `CONTENT_LENGTH=...`)."""
    if key is not None:
        extra["HTTP_IDEMPOTENCY_KEY"] = key
    return client.put(f"/v1/videos/{video_id}/like-relation", data=body, content_type=content_type, **extra)


def service_client(token: str = SERVICE_TOKEN) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def push_video(client, video_id: str, **body):
    return client.put(f"/internal/v1/videos/{video_id}", data=json.dumps(body), content_type="application/json")
