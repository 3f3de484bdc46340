"""Redis keys of the count cache (CCACHE-1, CCACHE-2). Nothing else builds them.

View layer: `<prefix>:count:view:g<generation>:{<videoId>}` -> "displayCount|snapshotId|generation|generatedAt".
Bucket layer (written by the count-cache rebuild of a later issue):
`<prefix>:count:g<generation>:{<videoId>|vb-<bucket>}` -> "activeCount|bucketVersion|routeEpoch|generation";
the hash tag holds both the video and the bucket, so a hot video's buckets spread over slots.
"""

from __future__ import annotations

import random

from django.conf import settings

from likes_project.redis_client import cache_redis

VIEW_TTL_S = 24 * 3600


def view_key(generation: int, video_id: str) -> str:
    return f"{settings.LIKES_REDIS_PREFIX}:count:view:g{generation}:{{{video_id}}}"


def bucket_key(generation: int, video_id: str, virtual_bucket: int) -> str:
    return f"{settings.LIKES_REDIS_PREFIX}:count:g{generation}:{{{video_id}|vb-{virtual_bucket}}}"


def views_write(generation: int, rows: list[tuple[str, int, int, str]]) -> None:
    """(video id, display count, snapshot id, generatedAt ISO) -> view keys, one pipelined round trip.
    Every key expires (with jitter); the durable snapshot is the fallback."""
    pipe = cache_redis().pipeline(transaction=False)
    for video_id, display, snapshot_id, generated_at in rows:
        ttl = int(VIEW_TTL_S * random.uniform(0.9, 1.1))
        pipe.set(view_key(generation, video_id), f"{display}|{snapshot_id}|{generation}|{generated_at}", ex=ttl)
    pipe.execute()


def view_read(generation: int, video_id: str) -> tuple[int, int, str] | None:
    """(display count, snapshot id, generatedAt) or None on a miss."""
    raw = cache_redis().get(view_key(generation, video_id))
    if raw is None:
        return None
    display, snapshot_id, _gen, generated_at = raw.decode().split("|", 3)
    return int(display), int(snapshot_id), generated_at
