"""(videoId, userId) -> virtual bucket -> physical count partition (BKT-1, PROJ-10).

The only module that knows where a count row lives. The bucket space comes from the generation's
stored contract, never from a code constant; the route comes from the generation's active manifest
(materialised in COUNT_BUCKET_ROUTE). Both are cached in-process and re-checked every few seconds so
that a CAS of `active_manifest_id` is seen; a partition fence catches anything in between.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from likes_project.hashing import HASH_SHA256_BE64, length_prefixed_utf8, stable_hash

__all__ = ["HASH_SHA256_BE64"]

ENCODING_LP_UTF8_V1 = "lp-utf8-v1"  # length-prefixed UTF-8 of video id, then decimal user id
ROUTE_REFRESH_S = 5.0


@dataclass(frozen=True)
class BucketSpace:
    version: int
    hash_algorithm: str
    hash_seed: str
    key_encoding: str
    virtual_buckets: int


@dataclass(frozen=True)
class Route:
    partition: str
    epoch: int


@dataclass(frozen=True)
class GenerationRoutes:
    generation: int
    space: BucketSpace
    manifest_id: int
    routes: tuple[Route, ...]  # index = virtual bucket

    def buckets_on(self, alias: str) -> list[int]:
        return [vb for vb, r in enumerate(self.routes) if r.partition == alias]


class NoActiveGeneration(RuntimeError):
    """No ACTIVE count projection generation: run `python manage.py migrate_all`."""


def canonical_key(encoding: str, video_id: str, user_id: int) -> bytes:
    if encoding == ENCODING_LP_UTF8_V1:
        return length_prefixed_utf8(video_id, str(int(user_id)))
    raise ValueError(f"unknown bucket key encoding {encoding!r}")


def virtual_bucket(space: BucketSpace, video_id: str, user_id: int) -> int:
    key = canonical_key(space.key_encoding, video_id, user_id)
    return stable_hash(space.hash_algorithm, space.hash_seed, key) % space.virtual_buckets


def load_generation(generation: int | None = None) -> GenerationRoutes:
    from counting.models import CountBucketRoute, CountBucketSpace, CountProjectionGeneration

    qs = CountProjectionGeneration.objects
    gen = qs.filter(generation=generation).first() if generation else qs.filter(status="ACTIVE").first()
    if gen is None or gen.active_manifest_id is None:
        raise NoActiveGeneration("no active count projection generation; run `python manage.py migrate_all`")
    row = CountBucketSpace.objects.get(version=gen.bucket_space_version)
    space = BucketSpace(row.version, row.hash_algorithm, row.hash_seed, row.key_encoding, row.virtual_buckets)
    routes = {
        vb: Route(p, e)
        for vb, p, e in CountBucketRoute.objects.filter(bucket_space_version=space.version).values_list(
            "virtual_bucket", "physical_partition", "route_epoch"
        )
    }
    if len(routes) != space.virtual_buckets:
        raise NoActiveGeneration(f"routes cover {len(routes)} of {space.virtual_buckets} buckets; rebuild them")
    return GenerationRoutes(gen.generation, space, gen.active_manifest_id,
                            tuple(routes[vb] for vb in range(space.virtual_buckets)))


_lock = threading.Lock()
_cached: tuple[float, GenerationRoutes] | None = None


def active() -> GenerationRoutes:
    """The active generation with its routes (cached; re-read after ROUTE_REFRESH_S)."""
    global _cached
    with _lock:
        if _cached is None or time.monotonic() - _cached[0] > ROUTE_REFRESH_S:
            _cached = (time.monotonic(), load_generation())
        return _cached[1]


def reset_cache() -> None:
    global _cached
    with _lock:
        _cached = None
