"""A video's visibility facts (CMD-12, SEC-2): the snapshot the video service pushes, and the operator
override kept apart from it (decision D50).

The service owns `author_id`, its visibility and status and its `version`; only a push with a higher
version moves them. An operator overrides visibility and/or status on top, audited, until cleared; an
override never touches the service's version, so the service's next push is applied (to the service
fields) instead of being ignored as "not newer". Every applied change writes the effective values
(override over service) into `visibility` / `status`, grows `revision`, and writes the cache entry
through after commit.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from likes_project import metrics
from likes_project.audit.services import Actor, audit_record
from relations import cache, validation
from relations.errors import VideoNotFound
from relations.models import VideoSnapshot
from relations.selectors import VideoRecord, VideoView, video_cache_entry, video_record_get

logger = logging.getLogger(__name__)

VIDEO_SERVICE_ACTOR = Actor(name="video-service", channel="api")
OVERRIDE_PERMISSION = "relations.change_videosnapshot"
REASON_MAX_CHARS = 512


@dataclass(frozen=True)
class VideoUpsertResult:
    record: VideoRecord
    applied: bool  # False when the push was not newer than what we hold

    @property
    def video(self) -> VideoView:
        """The effective view after the push (the override, if any, still applied)."""
        return self.record.effective


@dataclass(frozen=True)
class VideoOverrideResult:
    record: VideoRecord
    changed: bool  # False when the override already was exactly this


_UPSERT_SQL = """
INSERT INTO {table} (video_id, author_id, service_visibility, service_status, version, visibility, status,
                     published_at, override_reason, override_by, revision, updated_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, '', '', 1, now())
ON CONFLICT (video_id) DO UPDATE
   SET author_id = EXCLUDED.author_id, service_visibility = EXCLUDED.service_visibility,
       service_status = EXCLUDED.service_status, version = EXCLUDED.version,
       published_at = COALESCE(EXCLUDED.published_at, {table}.published_at),
       visibility = COALESCE({table}.override_visibility, EXCLUDED.service_visibility),
       status = COALESCE({table}.override_status, EXCLUDED.service_status),
       revision = {table}.revision + 1, updated_at = now()
 WHERE {table}.version < EXCLUDED.version
RETURNING video_id
"""


def _cache_write_through(video: VideoView) -> None:
    try:
        cache.visibility_cache_put(video.video_id, video.revision, video_cache_entry(video))
    except RedisError as exc:
        # The short TTL bounds how long a stale entry can live; count it so it is visible.
        metrics.inc("likes_cache_errors_total", cache="visibility_push")
        logger.warning("visibility cache push failed for %s: %s", video.video_id, exc.__class__.__name__)


def video_snapshot_upsert(*, video_id: str, author_id: int, visibility: str, status: str,
                          version: int | None, actor: Actor, published_at: dt.datetime | None = None
                          ) -> VideoUpsertResult:
    """Apply a push from the video service to the service's fields. A push whose version is not above
    the stored one is ignored (versions are monotonic). An operator override stays applied on top.
    `published_at` (aware) is kept when a later push leaves it out.
    `version=None` means "the next version"; only fixtures and demo data that stand in for the video
    service use it (the admin and `upsert_video` never do: D50).

    Transaction: one durable transaction on `default` (snapshot row + audit record).
    Idempotency: re-sending the same version changes nothing.
    After commit the cache entry is overwritten with the new revision (active invalidation, CMD-12).
    """
    validation.video_id(video_id)
    validation.visibility(visibility)
    validation.video_status(status)
    if isinstance(author_id, bool) or not isinstance(author_id, int) or author_id < 1:
        raise validation.InvalidInput("authorId must be a positive integer.", code="invalid_author")
    if published_at is not None and (not isinstance(published_at, dt.datetime) or timezone.is_naive(published_at)):
        raise validation.InvalidInput("publishedAt must be a date and time with its offset.",
                                      code="invalid_published_at")
    if not get_user_model().objects.filter(pk=author_id).exists():
        raise validation.InvalidInput("authorId names no user.", code="unknown_author")
    with transaction.atomic(using="default", durable=True):
        if version is None:
            current = VideoSnapshot.objects.select_for_update().filter(video_id=video_id).first()
            version = 1 if current is None else current.version + 1
        validation.strict_int(version, field="version", code="invalid_version", minimum=1)
        with connection.cursor() as cursor:
            cursor.execute(_UPSERT_SQL.format(table=VideoSnapshot._meta.db_table),
                           [video_id, author_id, visibility, status, version, visibility, status, published_at])
            applied = cursor.fetchone() is not None
        audit_record(
            actor=actor, action="video.upsert", target_type="video", target_id=video_id,
            params={"authorId": author_id, "visibility": visibility, "status": status, "version": version,
                    **({"publishedAt": published_at.isoformat()} if published_at else {})},
            outcome="applied" if applied else "ignored_not_newer",
        )
    record = video_record_get(video_id=video_id)
    if applied:
        _cache_write_through(record.effective)
    return VideoUpsertResult(record=record, applied=applied)


def _reason(value, *, required: bool) -> str:
    value = "" if value is None else value
    if not isinstance(value, str) or not validation.storable_text(value) or len(value) > REASON_MAX_CHARS:
        raise validation.InvalidInput(f"The reason must be text of at most {REASON_MAX_CHARS} characters.",
                                      code="invalid_reason")
    if required and not value.strip():
        raise validation.InvalidInput("An operator override needs a reason (it is audited).", code="reason_required")
    return value.strip()


def video_override_set(*, video_id: str, visibility: str | None, status: str | None, reason: str,
                       actor: Actor) -> VideoOverrideResult:
    """Set the operator override of a video: `visibility` and/or `status` (None: that field follows
    the video service). Both None clears the override. The service's fields and version are never
    touched. The video must have a snapshot (404 `video_not_found`).

    Transaction: one durable transaction on `default` (the row, locked, + audit record).
    Idempotency: setting the override it already has changes nothing (audited as `unchanged`).
    After commit a changed entry is written through the visibility cache at its new revision.
    """
    validation.video_id(video_id)
    if visibility is not None:
        validation.visibility(visibility)
    if status is not None:
        validation.video_status(status)
    clearing = visibility is None and status is None
    reason = _reason(reason, required=not clearing)
    with transaction.atomic(using="default", durable=True):
        row = VideoSnapshot.objects.select_for_update().filter(video_id=video_id).first()
        if row is None:
            raise VideoNotFound(f"No snapshot of video {video_id!r}; the video service has not pushed it.")
        previous = {"visibility": row.override_visibility, "status": row.override_status}
        changed = (row.override_visibility, row.override_status) != (visibility, status)
        if changed:
            row.override_visibility, row.override_status = visibility, status
            row.visibility = visibility or row.service_visibility
            row.status = status or row.service_status
            row.override_reason = "" if clearing else reason
            row.override_by = "" if clearing else actor.name
            row.override_at = None if clearing else timezone.now()
            row.revision += 1
            row.save(update_fields=["override_visibility", "override_status", "visibility", "status",
                                    "override_reason", "override_by", "override_at", "revision", "updated_at"])
        audit_record(
            actor=actor, action="video.override_clear" if clearing else "video.override", target_type="video",
            target_id=video_id, outcome="applied" if changed else "unchanged",
            params={"visibility": visibility, "status": status, "reason": reason, "previous": previous,
                    "serviceVersion": row.version, "effective": {"visibility": row.visibility, "status": row.status}},
        )
    record = video_record_get(video_id=video_id)
    if changed:
        _cache_write_through(record.effective)
    return VideoOverrideResult(record=record, changed=changed)


def video_override_clear(*, video_id: str, reason: str = "", actor: Actor) -> VideoOverrideResult:
    """Clear the operator override: the video shows the service's snapshot again (see
    `video_override_set`, of which this is the both-None case)."""
    return video_override_set(video_id=video_id, visibility=None, status=None, reason=reason, actor=actor)
