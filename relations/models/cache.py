"""The relation cache's generations and its projection rows (RCACHE-)."""

from __future__ import annotations

from django.db import models

from likes_project.db_routers import RELATION_SHARD
from likes_project.generations import GenerationModel
from relations.models.relation import RelationState


class RelationCacheGeneration(GenerationModel):
    """CACHE_GENERATION (E-13): the relation cache's generations, durable so that a Redis flush
    clears neither the current generation nor a rebuild's state (RCACHE-7a). Rebuilt through the one
    generation lifecycle (`likes_project.generations`); while one is building, readers bypass Redis
    (RCACHE-4 step 2)."""

    # Baseline checkpoint vector W: per relation shard, the highest outbox id (sourceCommitSeq) at the
    # start of the baseline scan (RCACHE-7d/e).
    baseline_watermark = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(GenerationModel.Meta):
        db_table = "relations_cachegeneration"
        permissions = [("rebuild_relation_cache", "Can rebuild the relation cache")]

    def __str__(self) -> str:
        return f"relation cache generation {self.generation} ({self.status})"


class LikeRelationCacheProjection(models.Model):
    """LIKE_RELATION_CACHE_PROJECTION (E-14): the durable version floor the Redis relation cache may
    not go below, per cache generation. It lives on the user's relation shard, next to the facts it
    mirrors: its writes are local to the shard the projector already routes by user (decision D22)."""

    db_family = RELATION_SHARD

    cache_generation = models.PositiveIntegerField()
    user_id = models.BigIntegerField()
    video_id = models.CharField(max_length=64)
    state = models.CharField(max_length=8, choices=RelationState.choices)
    relation_version = models.BigIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cache_generation", "user_id", "video_id"], name="uniq_relcache_floor"),
        ]

    def __str__(self) -> str:
        return f"g{self.cache_generation} {self.user_id}:{self.video_id} >= v{self.relation_version}"
