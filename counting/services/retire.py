"""Retiring what counting serves for deleted videos (issue 5 §3): their display counts, and (through
`counting.services.reverse.retire`) their reverse-index rows."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

from counting import cache
from counting.models import CountCacheGeneration, DirtyVideo, VideoDisplayCount
from counting.services.reverse.retire import reverse_index_retire_deleted
from likes_project.generations import LIVE
from relations import selectors as video_selectors

logger = logging.getLogger(__name__)


def count_display_retire(*, video_ids: list[str]) -> dict[str, int]:
    """Stop serving the counts of deleted videos: delete their display snapshots, their Redis views in
    every live count-cache generation, and their pending dirty marks, so no refresh brings them back.

    The durable vbuckets and LIKE_COUNT_PROJECTION rows stay: they are the projection's evidence for
    reconciliation and would be needed if a deletion were ever reverted. Idempotent; a job, never a
    request. Transaction: one on `default` for the snapshots, one per partition for the dirty marks.
    """
    if not video_ids:
        return {"snapshots": 0, "views": 0, "dirty": 0}
    with transaction.atomic(using="default", durable=True):
        snapshots = VideoDisplayCount.objects.filter(video_id__in=video_ids).delete()[0]
    dirty = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with transaction.atomic(using=alias, durable=True):
            dirty += DirtyVideo.objects.using(alias).filter(video_id__in=video_ids).delete()[0]
    views = 0
    generations = list(CountCacheGeneration.objects.filter(status__in=LIVE)
                       .values_list("generation", flat=True))
    try:
        views = cache.views_delete(generations, video_ids)
    except RedisError as exc:
        logger.warning("count views of retired videos not deleted (Redis: %s); they expire by TTL",
                       exc.__class__.__name__)
    return {"snapshots": snapshots, "views": views, "dirty": dirty}


def deleted_videos_retire(*, limit: int = 1000, rounds: int = 20) -> dict:
    """Retire every deleted video's reverse rows (a bounded chunk per partition and table per round,
    until none is left or `rounds` ran) and then its display counts. Idempotent; a beat job."""
    total: dict[str, dict[str, int]] = {}
    report = None
    for _ in range(max(1, rounds)):
        report = reverse_index_retire_deleted(limit=limit)
        for alias, counts in report.deleted.items():
            for table_name, n in counts.items():
                total.setdefault(alias, {}).setdefault(table_name, 0)
                total[alias][table_name] += n
        if not report.more:
            break
    counts = count_display_retire(video_ids=video_selectors.deleted_video_ids())
    return {"videos": report.videos, "deleted": total, "more": report.more, "counts": counts}
