"""The relation-change event: the one contract between the relation facts and every projection
(OUT-2, OUT-3). The producer (the like command) builds it here and every consumer validates it here,
so a projector never imports another projector to know what a valid event is."""

from __future__ import annotations

import uuid

from django.utils.dateparse import parse_datetime

from likes_project.eventlog.consumer import NonRetryable

EVENT_TYPE = "LikeRelationChanged"
EVENT_SCHEMA_VERSION = 1
LIKED, UNLIKED = "LIKED", "UNLIKED"


def aggregate_key(user_id: int, video_id: str) -> str:
    return f"{user_id}:{video_id}"


def event_payload(*, event_id: uuid.UUID, alias: str, user_id: int, video_id: str, operation_id: str,
                   previous, new_state: str, new_version: int, changed_at, device_id: str = "") -> dict:
    """OUT-2's absolute-state payload (`previous` is the relation before the change, a RelationView).
    `sourceCommitSeq` is the outbox row id and is added by the publisher's envelope (the id is
    assigned by the insert)."""
    return {
        "eventId": str(event_id),
        "eventType": EVENT_TYPE,
        "schemaVersion": EVENT_SCHEMA_VERSION,
        "aggregateKey": aggregate_key(user_id, video_id),
        "relationVersion": new_version,
        "absoluteState": new_state,
        "previousState": previous.state,  # audit only (OUT-3): consumers never apply a delta
        "previousVersion": previous.relation_version,
        "userId": user_id,
        "videoId": video_id,
        "sourceShard": alias,
        "operationId": operation_id,
        "deviceId": device_id or "",  # the command's device ("" when the client named none); never logged
        "stateChangedAt": changed_at.isoformat().replace("+00:00", "Z"),
    }


def validate_event(event: dict) -> None:
    """Segment 1 of the consumer (C3): shape checks with no side effects."""
    def need(cond: bool, what: str) -> None:
        if not cond:
            raise NonRetryable(f"invalid event: {what}")

    need(isinstance(event, dict), "not an object")
    need(event.get("eventType") == EVENT_TYPE, "unknown eventType")
    need(event.get("absoluteState") in (LIKED, UNLIKED), "absoluteState")
    for key in ("relationVersion", "userId"):
        value = event.get(key)
        need(isinstance(value, int) and not isinstance(value, bool) and value >= 1, key)
    video_id = event.get("videoId")
    need(isinstance(video_id, str) and 0 < len(video_id) <= 64, "videoId")
    need(isinstance(event.get("eventId"), str), "eventId")
    need(event.get("aggregateKey") == aggregate_key(event.get("userId"), video_id), "aggregateKey")
    need(isinstance(event.get("stateChangedAt"), str) and parse_datetime(event["stateChangedAt"]) is not None,
         "stateChangedAt")
