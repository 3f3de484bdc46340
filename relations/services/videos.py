"""The video visibility snapshot and the social edges it is checked with (CMD-12, SEC-2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import connection, transaction
from redis.exceptions import RedisError

from likes_project import metrics
from opsconsole.services import Actor, audit_record
from relations import cache, validation
from relations.models import Block, Friendship, VideoSnapshot
from relations.selectors import VideoView

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoUpsertResult:
    video: VideoView
    applied: bool  # False when the push was not newer than what we hold


_UPSERT_SQL = """
INSERT INTO {table} (video_id, author_id, visibility, status, version, updated_at)
VALUES (%s, %s, %s, %s, %s, now())
ON CONFLICT (video_id) DO UPDATE
   SET author_id = EXCLUDED.author_id, visibility = EXCLUDED.visibility, status = EXCLUDED.status,
       version = EXCLUDED.version, updated_at = now()
 WHERE {table}.version < EXCLUDED.version
RETURNING video_id
"""


def _row_view(video_id: str) -> VideoView:
    row = VideoSnapshot.objects.get(video_id=video_id)
    return VideoView(row.video_id, row.author_id, row.visibility, row.status, row.version)


def _cache_write_through(video: VideoView) -> None:
    snapshot = {"author_id": video.author_id, "visibility": video.visibility, "status": video.status,
                "version": video.version}
    try:
        cache.visibility_cache_put(video.video_id, video.version, snapshot)
    except RedisError as exc:
        # The short TTL bounds how long a stale entry can live; count it so it is visible.
        metrics.inc("likes_cache_errors_total", cache="visibility_push")
        logger.warning("visibility cache push failed for %s: %s", video.video_id, exc.__class__.__name__)


def video_snapshot_upsert(*, video_id: str, author_id: int, visibility: str, status: str,
                          version: int | None, actor: Actor) -> VideoUpsertResult:
    """Apply a push from the video service. A push whose version is not above the stored one is
    ignored (versions are monotonic); `version=None` means "the next version".

    Transaction: one durable transaction on `default` (snapshot row + audit record).
    Idempotency: re-sending the same version changes nothing.
    After commit the cache entry is overwritten with the new version (active invalidation, CMD-12).
    """
    validation.video_id(video_id)
    validation.visibility(visibility)
    validation.video_status(status)
    if isinstance(author_id, bool) or not isinstance(author_id, int) or author_id < 1:
        raise validation.InvalidInput("authorId must be a positive integer.", code="invalid_author")
    with transaction.atomic(using="default", durable=True):
        if version is None:
            current = VideoSnapshot.objects.select_for_update().filter(video_id=video_id).first()
            version = 1 if current is None else current.version + 1
        validation.strict_int(version, field="version", code="invalid_version", minimum=1)
        with connection.cursor() as cursor:
            cursor.execute(_UPSERT_SQL.format(table=VideoSnapshot._meta.db_table),
                           [video_id, author_id, visibility, status, version])
            applied = cursor.fetchone() is not None
        audit_record(
            actor=actor, action="video.upsert", target_type="video", target_id=video_id,
            params={"authorId": author_id, "visibility": visibility, "status": status, "version": version},
            outcome="applied" if applied else "ignored_not_newer",
        )
    video = _row_view(video_id)
    if applied:
        _cache_write_through(video)
    return VideoUpsertResult(video=video, applied=applied)


def friendship_set(*, user_a: int, user_b: int, present: bool, actor: Actor) -> bool:
    """Add or remove the friendship between two users. Returns whether anything changed.

    Transaction: one durable transaction on `default` (edge + audit). Idempotency: setting the
    current state again changes nothing. The edge cache is invalidated after commit.
    """
    if user_a == user_b:
        raise validation.InvalidInput("A user cannot be their own friend.", code="invalid_edge")
    low, high = sorted((user_a, user_b))
    with transaction.atomic(using="default", durable=True):
        if present:
            _, changed = Friendship.objects.get_or_create(user_low=low, user_high=high)
        else:
            changed = Friendship.objects.filter(user_low=low, user_high=high).delete()[0] > 0
        audit_record(actor=actor, action="friendship.add" if present else "friendship.remove",
                     target_type="friendship", target_id=f"{low}:{high}", params={},
                     outcome="applied" if changed else "unchanged")
    _edges_invalidate(user_a, user_b)
    return changed


def block_set(*, blocker_id: int, blocked_id: int, present: bool, actor: Actor) -> bool:
    """Add or remove `blocker`'s block of `blocked`. Same transaction and cache rules as friendships."""
    if blocker_id == blocked_id:
        raise validation.InvalidInput("A user cannot block themselves.", code="invalid_edge")
    with transaction.atomic(using="default", durable=True):
        if present:
            _, changed = Block.objects.get_or_create(blocker_id=blocker_id, blocked_id=blocked_id)
        else:
            changed = Block.objects.filter(blocker_id=blocker_id, blocked_id=blocked_id).delete()[0] > 0
        audit_record(actor=actor, action="block.add" if present else "block.remove",
                     target_type="block", target_id=f"{blocker_id}>{blocked_id}", params={},
                     outcome="applied" if changed else "unchanged")
    _edges_invalidate(blocker_id, blocked_id)
    return changed


def _edges_invalidate(a: int, b: int) -> None:
    try:
        cache.edge_cache_invalidate(a, b)
    except RedisError as exc:
        metrics.inc("likes_cache_errors_total", cache="edges_invalidate")
        logger.warning("edge cache invalidation failed: %s", exc.__class__.__name__)
