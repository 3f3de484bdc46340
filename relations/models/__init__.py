"""Relation facts and their evidence (relation shards), plus the video visibility snapshot and social
edges the command rules need (control plane, `default`).

Sharded models carry `db_family = "relation_shard"`; there are no foreign keys across aliases.

One module per concern; every model is importable from `relations.models`."""

from relations.models.cache import LikeRelationCacheProjection, RelationCacheGeneration
from relations.models.contract import RelationShardContract, RelationShardSlot
from relations.models.floors import RelationVersionFloor
from relations.models.outbox import OutboxArchive, OutboxEvent, OutboxPublisherSwitch, OutboxStatus
from relations.models.privacy import (
    AccountRiskLevel,
    AccountStatus,
    AccountStatusValue,
    LikesReadOnlySwitch,
    UserPrivacy,
    VideoLikersVisibility,
)
from relations.models.relation import LikeCommand, LikeRelation, RelationState
from relations.models.slot_moves import (
    SLOT_MOVE_TERMINAL,
    RelationSlotChange,
    RelationSlotMove,
    RelationSlotState,
    SlotFenceState,
    SlotMoveState,
)
from relations.models.videos import Block, Friendship, VideoSnapshot, VideoStatus, VideoVisibility

__all__ = [
    "SLOT_MOVE_TERMINAL", "AccountRiskLevel", "AccountStatus", "AccountStatusValue", "Block", "Friendship",
    "LikeCommand", "LikeRelation", "LikeRelationCacheProjection", "LikesReadOnlySwitch", "OutboxArchive", "OutboxEvent",
    "OutboxPublisherSwitch", "OutboxStatus", "RelationCacheGeneration", "RelationShardContract",
    "RelationShardSlot", "RelationSlotChange", "RelationSlotMove", "RelationSlotState", "RelationState",
    "RelationVersionFloor", "SlotFenceState", "SlotMoveState", "UserPrivacy", "VideoLikersVisibility",
    "VideoSnapshot", "VideoStatus", "VideoVisibility",
]
