"""Reads of display counts: the Redis view first, then the durable snapshot. Never COUNT(*)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.exceptions import RedisError

from counting import cache, routing
from counting.models import VideoDisplayCount
from likes_project import metrics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DisplayCount:
    video_id: str
    display_count: int
    snapshot_at: str | None  # ISO-8601 UTC "Z", None before the first snapshot
    source: str  # redis | snapshot | none


def display_count_get(*, video_id: str) -> DisplayCount:
    gen = routing.active()
    try:
        hit = cache.view_read(gen.generation, video_id)
    except RedisError as exc:
        metrics.inc("likes_cache_errors_total", cache="count_view")
        logger.warning("count view read failed: %s", exc.__class__.__name__)
        hit = None
    if hit is not None:
        metrics.inc("likes_cache_hits_total", cache="count_view")
        return DisplayCount(video_id, hit[0], hit[2], "redis")
    metrics.inc("likes_cache_misses_total", cache="count_view")
    row = VideoDisplayCount.objects.filter(video_id=video_id).first()
    if row is None:
        return DisplayCount(video_id, 0, None, "none")
    return DisplayCount(video_id, row.display_count, row.generated_at.isoformat().replace("+00:00", "Z"), "snapshot")
