"""user_id -> relation shard alias, through the frozen contract stored in `default` (architecture §7).

The only module that knows which relation shard holds a user. The contract is immutable once
created, so it is cached in-process for the life of the process.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings

from likes_project.hashing import HASH_SHA256_BE64, stable_hash
from likes_project.l1cache import RefreshedValue

__all__ = ["HASH_SHA256_BE64", "stable_hash"]

ENCODING_DECIMAL_ASCII = "decimal-ascii-v1"


@dataclass(frozen=True)
class ShardContract:
    version: int
    hash_algorithm: str
    hash_seed: str
    key_encoding: str
    logical_slots: int
    slot_aliases: tuple[str, ...]  # index = slot


class ContractMissing(RuntimeError):
    """No active relation shard contract: run `manage.py migrate_all`."""


def encode_user_id(encoding: str, user_id: int) -> bytes:
    if encoding == ENCODING_DECIMAL_ASCII:
        return str(int(user_id)).encode("ascii")
    raise ValueError(f"unknown user-id encoding {encoding!r}")


def slot_for_user(contract: ShardContract, user_id: int) -> int:
    key = encode_user_id(contract.key_encoding, user_id)
    return stable_hash(contract.hash_algorithm, contract.hash_seed, key) % contract.logical_slots


def _load_active() -> ShardContract:
    from relations.models import RelationShardContract, RelationShardSlot

    row = RelationShardContract.objects.filter(is_active=True).first()
    if row is None:
        raise ContractMissing("no active relation shard contract; run `python manage.py migrate_all`")
    slots = dict(
        RelationShardSlot.objects.filter(contract_version=row.version).values_list("slot", "alias")
    )
    if len(slots) != row.logical_slots:
        raise ContractMissing(f"contract v{row.version} maps {len(slots)} of {row.logical_slots} slots")
    aliases = tuple(slots[i] for i in range(row.logical_slots))
    unknown = sorted(set(aliases) - set(settings.RELATION_SHARD_ALIASES))
    if unknown:
        raise ContractMissing(f"contract v{row.version} names aliases not configured here: {unknown}")
    return ShardContract(
        version=row.version,
        hash_algorithm=row.hash_algorithm,
        hash_seed=row.hash_seed,
        key_encoding=row.key_encoding,
        logical_slots=row.logical_slots,
        slot_aliases=aliases,
    )


_ACTIVE = RefreshedValue("relation_shard_contract", _load_active, refresh_s=float("inf"))


def active_contract() -> ShardContract:
    return _ACTIVE.get()


def reset_cache() -> None:
    _ACTIVE.reset()


def alias_for_user(user_id: int) -> str:
    contract = active_contract()
    return contract.slot_aliases[slot_for_user(contract, user_id)]


def all_aliases() -> list[str]:
    return list(settings.RELATION_SHARD_ALIASES)


def group_users_by_alias(user_ids) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for uid in user_ids:
        grouped[alias_for_user(uid)].append(uid)
    return dict(grouped)
