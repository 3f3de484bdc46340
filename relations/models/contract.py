"""The relation shard contract: the hash of a user to a logical slot and each slot's shard (ROUTE-)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.hashing import HashContract, one_active


class RelationShardContract(HashContract):
    """The frozen contract user_id -> logical slot (architecture §7). Never edited once created."""

    logical_slots = models.PositiveIntegerField()
    is_active = models.BooleanField(default=False)

    class Meta:
        constraints = [
            one_active("one_active_shard_contract"),
            models.CheckConstraint(condition=Q(logical_slots__gt=0), name="shard_contract_slots_positive"),
        ]

    def __str__(self) -> str:
        return f"relation shard contract v{self.version} ({self.hash_algorithm}, {self.logical_slots} slots)"


class RelationShardSlot(models.Model):
    """Logical slot -> relation shard alias, for one contract version."""

    contract_version = models.PositiveIntegerField()
    slot = models.PositiveIntegerField()
    alias = models.CharField(max_length=32)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["contract_version", "slot"], name="uniq_shard_slot"),
        ]

    def __str__(self) -> str:
        return f"v{self.contract_version} slot {self.slot} -> {self.alias}"
