"""The relation shard contract is data, and its outputs are pinned (architecture §7)."""

import pytest
from django.conf import settings

from relations import routing
from relations.models import RelationShardContract, RelationShardSlot
from relations.services.contracts import relation_shard_contract_ensure

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]

# user_id -> logical slot under contract v1 (sha256-be64, seed "likes-relation-shard-v1",
# decimal-ascii-v1, 256 slots). These never change; a new contract version is the only way to move users.
GOLDEN_SLOTS = {1: 156, 2: 6, 3: 102, 7: 157, 42: 68, 1000: 123, 123456789: 29, 2**62: 123}


def test_contract_v1_golden_vectors():
    contract = routing.active_contract()
    assert contract.version == 1
    assert (contract.hash_algorithm, contract.hash_seed, contract.key_encoding, contract.logical_slots) == (
        "sha256-be64", "likes-relation-shard-v1", "decimal-ascii-v1", 256)
    assert {uid: routing.slot_for_user(contract, uid) for uid in GOLDEN_SLOTS} == GOLDEN_SLOTS


def test_contract_is_stored_as_rows_covering_every_slot_on_both_shards():
    row = RelationShardContract.objects.get(is_active=True)
    slots = dict(RelationShardSlot.objects.filter(contract_version=row.version).values_list("slot", "alias"))
    assert sorted(slots) == list(range(row.logical_slots))
    assert set(slots.values()) == set(settings.RELATION_SHARD_ALIASES)
    assert len(settings.RELATION_SHARD_ALIASES) >= 2


def test_routing_follows_the_stored_slot_map_not_a_code_constant():
    contract = routing.active_contract()
    uid = 42
    slot = routing.slot_for_user(contract, uid)
    other = next(a for a in settings.RELATION_SHARD_ALIASES if a != routing.alias_for_user(uid))
    RelationShardSlot.objects.filter(contract_version=contract.version, slot=slot).update(alias=other)
    routing.reset_cache()
    assert routing.alias_for_user(uid) == other


def test_ensure_is_idempotent_and_never_rewrites_an_existing_contract():
    before = list(RelationShardSlot.objects.order_by("slot").values_list("slot", "alias"))
    again = relation_shard_contract_ensure()
    assert again.created is False
    assert list(RelationShardSlot.objects.order_by("slot").values_list("slot", "alias")) == before
    assert RelationShardContract.objects.count() == 1


def test_users_spread_over_both_shards():
    aliases = {routing.alias_for_user(uid) for uid in range(1, 200)}
    assert aliases == set(settings.RELATION_SHARD_ALIASES)


def test_unknown_hash_algorithm_is_refused():
    with pytest.raises(ValueError):
        routing.stable_hash("md5-please", "seed", b"1")
