"""user_id -> relation shard alias, through the frozen contract stored in `default` (architecture §7).

The only module that knows which relation shard holds a user. A contract version is immutable once
created; a slot move (issue 16 §3) activates a new version with the same hash and some slots on another
shard. Every process reloads the active version every RELATION_CONTRACT_REFRESH_S, and a write that reaches
a shard which no longer owns its slot is answered `moved` and reloads it at once (`reset_cache`).

While a move is under way (or its source rows are kept), a user's rows exist on two shards. A scan of a whole
shard counts a row only where the contract it read puts the user: `owned_filter(alias)` (docs/slot-moves.md).
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


_ACTIVE = RefreshedValue("relation_shard_contract", _load_active,
                         refresh_s=lambda: settings.RELATION_CONTRACT_REFRESH_S)


def active_contract() -> ShardContract:
    return _ACTIVE.get()


def reset_cache() -> None:
    _ACTIVE.reset()


def alias_for_user(user_id: int) -> str:
    contract = active_contract()
    return contract.slot_aliases[slot_for_user(contract, user_id)]


def placement(user_id: int) -> tuple[str, int]:
    """(alias, logical slot) of a user under the active contract: a writer passes the slot to the shard's fence."""
    contract = active_contract()
    slot = slot_for_user(contract, user_id)
    return contract.slot_aliases[slot], slot


# --- rows of users a shard does not own (a slot move's two copies) --------------------------------


@dataclass(frozen=True)
class OwnedFilter:
    """Which rows of one shard count, under one contract: None when every row does (no move ever touched the
    shard); else the logical slots whose rows on this shard belong to another shard now (`foreign`)."""

    alias: str
    contract: ShardContract
    foreign: frozenset[int]

    def owns(self, user_id: int) -> bool:
        return not self.foreign or slot_for_user(self.contract, user_id) not in self.foreign

    def sql(self, column: str = "user_id") -> tuple[str, list]:
        """A condition for a WHERE clause (" AND ..."), empty when every row counts; `likes_slot_of` is the
        contract's slot in SQL (relations migration 0014)."""
        if not self.foreign:
            return "", []
        return (f" AND likes_slot_of({column}, %s, %s) <> ALL(%s)",
                [self.contract.hash_seed, self.contract.logical_slots, sorted(self.foreign)])


def owned_filter(alias: str, contract: ShardContract | None = None) -> OwnedFilter:
    """The rows of `alias` that count under `contract` (default: the active one, reloaded). A shard holds rows
    of a slot it does not own only while its `relations_slotstate` names the slot (INCOMING before a switch,
    MOVED_OUT after), so one small read of that table tells."""
    from django.db import connections

    from relations.models import RelationSlotState

    contract = contract or _ACTIVE.get(fresh=True)
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT slot FROM {RelationSlotState._meta.db_table}")
        present = {row[0] for row in cursor.fetchall()}
    return OwnedFilter(alias, contract, frozenset(s for s in present if contract.slot_aliases[s] != alias))


def all_aliases() -> list[str]:
    return list(settings.RELATION_SHARD_ALIASES)


def group_users_by_alias(user_ids) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = defaultdict(list)
    for uid in user_ids:
        grouped[alias_for_user(uid)].append(uid)
    return dict(grouped)
