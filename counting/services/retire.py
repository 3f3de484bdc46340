"""Retiring the count projection's serving state of deleted videos (issue 5 §3)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from redis.exceptions import RedisError

from counting import cache
from counting.models import CountCacheGeneration, DirtyVideo, VideoDisplayCount

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
    generations = list(CountCacheGeneration.objects.filter(status__in=["ACTIVE", "REBUILDING"])
                       .values_list("generation", flat=True))
    try:
        views = cache.views_delete(generations, video_ids)
    except RedisError as exc:
        logger.warning("count views of retired videos not deleted (Redis: %s); they expire by TTL",
                       exc.__class__.__name__)
    return {"snapshots": snapshots, "views": views, "dirty": dirty}
