"""The video visibility snapshot the video service pushes (CMD-12, SEC-2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import connection, transaction
from redis.exceptions import RedisError

from likes_project import metrics
from likes_project.audit.services import Actor, audit_record
from relations import cache, validation
from relations.models import VideoSnapshot
from relations.selectors import VideoView

logger = logging.getLogger(__name__)

VIDEO_SERVICE_ACTOR = Actor(name="video-service", channel="api")


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
