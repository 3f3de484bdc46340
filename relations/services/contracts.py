"""Creates the relation shard contract (architecture §7). Idempotent; never changes an existing one."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction

from relations import routing
from relations.models import RelationShardContract, RelationShardSlot

CONTRACT_V1_SEED = "likes-relation-shard-v1"
CONTRACT_V1_SLOTS = 256


@dataclass(frozen=True)
class ContractEnsured:
    version: int
    created: bool


def relation_shard_contract_ensure() -> ContractEnsured:
    """Create contract v1 (256 logical slots spread round-robin over RELATION_CONTRACT_SHARDS)
    if no contract exists; otherwise check that the active one only names configured aliases.

    Transaction: one durable transaction on `default`.
    Idempotency: a second call (or a concurrent one) finds the contract and creates nothing.
    """
    active = RelationShardContract.objects.filter(is_active=True).first()
    if active is not None:
        routing.reset_cache()
        try:
            routing.active_contract()
        except routing.ContractMissing as exc:
            raise ImproperlyConfigured(str(exc)) from exc
        return ContractEnsured(version=active.version, created=False)
    aliases = list(settings.RELATION_CONTRACT_SHARDS)
    if not aliases or set(aliases) - set(settings.RELATION_SHARD_ALIASES):
        raise ImproperlyConfigured(f"RELATION_CONTRACT_SHARDS {aliases} must name configured relation shards "
                                   f"({', '.join(settings.RELATION_SHARD_ALIASES)})")
    try:
        with transaction.atomic(using="default", durable=True):
            RelationShardContract.objects.create(
                version=1,
                hash_algorithm=routing.HASH_SHA256_BE64,
                hash_seed=CONTRACT_V1_SEED,
                key_encoding=routing.ENCODING_DECIMAL_ASCII,
                logical_slots=CONTRACT_V1_SLOTS,
                is_active=True,
            )
            RelationShardSlot.objects.bulk_create(
                RelationShardSlot(contract_version=1, slot=s, alias=aliases[s % len(aliases)])
                for s in range(CONTRACT_V1_SLOTS)
            )
    except IntegrityError:
        # Another process created it first: that one is the contract.
        return ContractEnsured(version=1, created=False)
    routing.reset_cache()
    return ContractEnsured(version=1, created=True)
