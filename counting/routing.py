"""Where the count partitions' rows live: (videoId, userId) -> virtual bucket -> physical count
partition (BKT-1, PROJ-10), and user -> reverse shard -> count partition for the who-liked index
(REV-4).

The only module that knows where a count-partition row lives. The bucket space comes from the generation's
stored contract, never from a code constant; the routes come from the immutable items of the manifest the
generation's `active_manifest_id` names (ROUTE-4), never from the mutable COUNT_BUCKET_ROUTE, which is only
its materialised copy (ROUTE-1; rebuilt from the manifest when they disagree, ROUTE-3). So the manifest id and
the routes of a `GenerationRoutes` always belong together, for the projector, the aggregators, recovery and
reconciliation alike. Both are cached in-process and re-checked every few seconds so that a CAS of
`active_manifest_id` is seen; a partition fence catches anything in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from likes_project.generations import LIVE
from likes_project.hashing import HASH_SHA256_BE64, length_prefixed_utf8, stable_hash
from likes_project.l1cache import RefreshedValue
from relations.routing import ENCODING_DECIMAL_ASCII, encode_user_id

__all__ = ["ENCODING_DECIMAL_ASCII", "HASH_SHA256_BE64"]

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
    _arrays: dict[str, str] = field(default_factory=dict, init=False, compare=False, repr=False)

    def buckets_on(self, alias: str) -> list[int]:
        return [vb for vb, r in enumerate(self.routes) if r.partition == alias]

    def buckets_array(self, alias: str) -> str:
        """`buckets_on(alias)` as a PostgreSQL array literal, for a `%s::int[]` parameter: one string to send, where
        a list of the partition's hundreds of bucket ids is adapted id by id on every statement (1.4 against 0.1 ms
        of CPU for three such parameters, issue 34 §2). Made once per generation's routes."""
        if alias not in self._arrays:
            self._arrays[alias] = "{" + ",".join(map(str, self.buckets_on(alias))) + "}"
        return self._arrays[alias]


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
    """The generation (the ACTIVE one by default) with the routes of the manifest it names (ROUTE-4: a route
    table rewritten since, by hand or by a crash, changes nothing here). The pointer is read first and the
    manifest's items after it: a cutover's CAS in between leaves the old, immutable manifest with its own id."""
    from counting.models import CountBucketSpace, CountProjectionGeneration, CountRouteManifestItem

    qs = CountProjectionGeneration.objects
    gen = qs.filter(generation=generation).first() if generation else qs.filter(status="ACTIVE").first()
    if gen is None or gen.active_manifest_id is None:
        raise NoActiveGeneration("no active count projection generation; run `python manage.py migrate_all`")
    row = CountBucketSpace.objects.get(version=gen.bucket_space_version)
    space = BucketSpace(row.version, row.hash_algorithm, row.hash_seed, row.key_encoding, row.virtual_buckets)
    routes = {
        vb: Route(p, e)
        for vb, p, e in CountRouteManifestItem.objects.filter(manifest_id=gen.active_manifest_id).values_list(
            "virtual_bucket", "physical_partition", "route_epoch"
        )
    }
    if set(routes) != set(range(space.virtual_buckets)):
        raise NoActiveGeneration(f"manifest {gen.active_manifest_id} covers {len(routes)} of {space.virtual_buckets} "
                                 "buckets")
    return GenerationRoutes(gen.generation, space, gen.active_manifest_id,
                            tuple(routes[vb] for vb in range(space.virtual_buckets)))


_ACTIVE = RefreshedValue("count_routes", lambda: load_generation(), refresh_s=ROUTE_REFRESH_S)


def active() -> GenerationRoutes:
    """The active generation with its routes (cached; re-read after ROUTE_REFRESH_S)."""
    return _ACTIVE.get()


def active_checked() -> GenerationRoutes:
    """The active generation's routes, re-read when the pointer moved since they were cached (one primary-key
    query): for a reader that clears state by what it read, like the display snapshot, which must never
    read a bucket's old copy after a migration's cutover and then drop the target's dirty marks."""
    from counting.models import CountProjectionGeneration

    gen = _ACTIVE.get()
    pointer = CountProjectionGeneration.objects.filter(status="ACTIVE").values_list(
        "generation", "active_manifest_id").first()
    if pointer != (gen.generation, gen.manifest_id):
        gen = _ACTIVE.get(fresh=True)
    return gen


def reset_cache() -> None:
    _ACTIVE.reset()


# --- the reverse (who liked) index: user -> reverse shard -> count partition (REV-4) ----------------

REVERSE_V1_SEED = "likes-reverse-v1"
REVERSE_V1_SHARDS = 8


class NoActiveReverseGeneration(RuntimeError):
    """No ACTIVE reverse-index generation: run `python manage.py migrate_all`."""


class ReverseContractInvalid(RuntimeError):
    """A generation whose placement does not cover 0..R-1 on configured count partitions."""


@dataclass(frozen=True)
class ReverseGeneration:
    generation: int
    status: str
    hash_algorithm: str
    hash_seed: str
    user_id_encoding: str
    shards: int
    placement: tuple[str, ...]  # index = reverse shard

    def shard_of(self, user_id: int) -> int:
        return reverse_shard(self, user_id)

    def alias_of(self, user_id: int) -> str:
        return self.placement[reverse_shard(self, user_id)]


def reverse_shard(gen: ReverseGeneration, user_id: int) -> int:
    key = encode_user_id(gen.user_id_encoding, user_id)
    return stable_hash(gen.hash_algorithm, gen.hash_seed, key) % gen.shards


def round_robin_placement(shards: int, aliases: list[str] | None = None) -> list[str]:
    """Reverse shards over `aliases`, by default the bootstrap partitions (a partition added later for
    bucket migrations receives no reverse shards unless a rebuild names it)."""
    aliases = list(aliases or [a for a in settings.COUNT_PARTITION_ALIASES if a in settings.COUNT_BOOTSTRAP_PARTITIONS])
    return [aliases[s % len(aliases)] for s in range(shards)]


def reverse_from_row(row) -> ReverseGeneration:
    placement = tuple(row.placement or ())
    if len(placement) != row.shards:
        raise ReverseContractInvalid(f"generation {row.generation} places {len(placement)} of {row.shards} shards")
    unknown = sorted(set(placement) - set(settings.COUNT_PARTITION_ALIASES))
    if unknown:
        raise ReverseContractInvalid(f"generation {row.generation} names unknown count partitions {unknown}")
    return ReverseGeneration(row.generation, row.status, row.hash_algorithm, row.hash_seed, row.user_id_encoding,
                             row.shards, placement)


def reverse_generation_load(generation: int) -> ReverseGeneration:
    from counting.models import ReverseIndexGeneration

    return reverse_from_row(ReverseIndexGeneration.objects.get(generation=generation))


def reverse_active() -> ReverseGeneration:
    from counting.models import ReverseIndexGeneration

    row = ReverseIndexGeneration.objects.filter(status="ACTIVE").first()
    if row is None:
        raise NoActiveReverseGeneration("no active reverse index generation; run `python manage.py migrate_all`")
    return reverse_from_row(row)


def reverse_live() -> list[ReverseGeneration]:
    """The generations the projector writes: ACTIVE and, during a rebuild, the building one. Read on
    every batch (one indexed query) so a new generation is captured from its creation on."""
    from counting.models import ReverseIndexGeneration

    rows = ReverseIndexGeneration.objects.filter(status__in=LIVE).order_by("generation")
    return [reverse_from_row(r) for r in rows]
