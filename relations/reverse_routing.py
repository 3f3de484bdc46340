"""user_id -> reverse shard -> count partition, for one reverse-index generation (REV-4).

The only module that knows where a reverse-index row lives. Everything is computed from the stored
REVERSE_INDEX_GENERATION row, never from a code constant or a setting: `reverse_shard =
stable_hash(alg, seed, encode(user_id)) mod R`, and reverse shard s of a video is held by the count
partition `placement[s]`. The state row and the sort entry of one (video, user) use the same shard, so
they live on the same partition and change in one local transaction (REV-3).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from likes_project.hashing import HASH_SHA256_BE64, stable_hash
from relations.routing import ENCODING_DECIMAL_ASCII, encode_user_id

__all__ = ["ENCODING_DECIMAL_ASCII", "HASH_SHA256_BE64"]

REVERSE_V1_SEED = "likes-reverse-v1"
REVERSE_V1_SHARDS = 8
LIVE_STATUSES = ("ACTIVE", "SHADOW")  # the projector writes both (tail capture during a rebuild)


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
    aliases = list(aliases or settings.COUNT_PARTITION_ALIASES)
    return [aliases[s % len(aliases)] for s in range(shards)]


def from_row(row) -> ReverseGeneration:
    placement = tuple(row.placement or ())
    if len(placement) != row.shards:
        raise ReverseContractInvalid(f"generation {row.generation} places {len(placement)} of {row.shards} shards")
    unknown = sorted(set(placement) - set(settings.COUNT_PARTITION_ALIASES))
    if unknown:
        raise ReverseContractInvalid(f"generation {row.generation} names unknown count partitions {unknown}")
    return ReverseGeneration(row.generation, row.status, row.hash_algorithm, row.hash_seed, row.user_id_encoding,
                             row.shards, placement)


def load_generation(generation: int) -> ReverseGeneration:
    from relations.models import ReverseIndexGeneration

    return from_row(ReverseIndexGeneration.objects.get(generation=generation))


def active_generation() -> ReverseGeneration:
    from relations.models import ReverseIndexGeneration

    row = ReverseIndexGeneration.objects.filter(status="ACTIVE").first()
    if row is None:
        raise NoActiveReverseGeneration("no active reverse index generation; run `python manage.py migrate_all`")
    return from_row(row)


def live_generations() -> list[ReverseGeneration]:
    """The generations the projector writes: ACTIVE and, during a rebuild, SHADOW. Read on every
    batch (one indexed query) so a new SHADOW generation is captured from its creation on."""
    from relations.models import ReverseIndexGeneration

    rows = ReverseIndexGeneration.objects.filter(status__in=LIVE_STATUSES).order_by("generation")
    return [from_row(r) for r in rows]
