"""Reads the retirement of deleted videos needs from the relations app (issue 9 §4): the deleted
snapshots after a cursor, and how far the outboxes have published. Never writes; never opens a
transaction."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import Q

from relations import routing
from relations.models import OutboxStatus, VideoSnapshot, VideoStatus
from relations.selectors import outbox_oldest_created_at

# Rows that may still reach the event log (DEAD ones never do unless an operator requeues them).
UNPUBLISHED = (OutboxStatus.NEW, OutboxStatus.PUBLISHING, OutboxStatus.RETRY, OutboxStatus.UNCERTAIN)


@dataclass(frozen=True)
class DeletedVideo:
    video_id: str
    version: int
    deleted_at: dt.datetime  # the snapshot's updated_at: when it last changed while deleted


def deleted_videos_list(*, after: tuple[dt.datetime, str] | None = None, video_ids: list[str] | None = None,
                        limit: int) -> list[DeletedVideo]:
    """Deleted snapshots in (updated_at, video_id) order: those strictly after the cursor `after`, or
    those among `video_ids` (to re-check tracked videos against their current status), at most `limit`."""
    qs = VideoSnapshot.objects.filter(status=VideoStatus.DELETED)
    if after is not None and after[0] is not None:
        at, video_id = after
        qs = qs.filter(Q(updated_at__gt=at) | Q(updated_at=at, video_id__gt=video_id))
    if video_ids is not None:
        qs = qs.filter(video_id__in=video_ids)
    rows = qs.order_by("updated_at", "video_id").values_list("video_id", "version", "updated_at")[:max(1, limit)]
    return [DeletedVideo(v, ver, at) for v, ver, at in rows]


def outbox_oldest_unpublished_at() -> dt.datetime | None:
    """The creation time of the oldest outbox row on any relation shard that may still be published
    (None when every row is SENT or DEAD)."""
    found = [at for alias in routing.all_aliases()
             if (at := outbox_oldest_created_at(alias=alias, statuses=UNPUBLISHED)) is not None]
    return min(found, default=None)
