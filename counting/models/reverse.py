"""The reverse "who liked" index (REV-1 … REV-4, REV-10): its generations on `default`, and its rows on
the count partitions. These models moved here from `relations` (it is a projection); their tables
keep their `relations_` names, so no data was copied."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from counting.models.projection import EventReceipt
from likes_project.db_routers import COUNT_PARTITION
from likes_project.generations import GenerationModel

RELATION_STATES = [("LIKED", "Liked"), ("UNLIKED", "Unliked")]


class ReverseIndexGeneration(GenerationModel):
    """REVERSE_INDEX_GENERATION (REV-4): the frozen contract of one reverse-index generation on
    `default`: `reverse_shard = stable_hash(hash_algorithm, hash_seed, encode(user_id)) mod shards`, and
    reverse shard s of every video lives on count partition `placement[s]`. Never edited once created;
    a new R or contract is a new generation, built through the one generation lifecycle (the projector
    writes it from its creation on) and CAS-switched to ACTIVE after a verified rebuild."""

    hash_algorithm = models.CharField(max_length=32)
    hash_seed = models.CharField(max_length=64)
    user_id_encoding = models.CharField(max_length=32)
    shards = models.PositiveIntegerField()  # R
    placement = models.JSONField()  # list, index = reverse shard -> count partition alias
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta(GenerationModel.Meta):
        db_table = "relations_reverseindexgeneration"
        constraints = [
            *GenerationModel.Meta.constraints,
            models.CheckConstraint(condition=Q(shards__gt=0), name="reverse_gen_shards_positive"),
        ]
        permissions = [("rebuild_reverse_index", "Can rebuild the reverse (who liked) index")]

    def __str__(self) -> str:
        return f"reverse index generation {self.generation} ({self.status}, R={self.shards})"


class ReverseRow(models.Model):
    """What every row of the reverse index names: the index generation, the video and the user who liked it.
    The rows live on the count partitions (REV-3)."""

    db_family = COUNT_PARTITION

    generation = models.PositiveIntegerField()
    video_id = models.CharField(max_length=64)
    user_id = models.BigIntegerField()

    class Meta:
        abstract = True


class LikeReverseProjection(ReverseRow):
    """LIKE_REVERSE_PROJECTION (REV-1): the version and state the reverse index has seen per
    (generation, video, user), tombstones included. `liked_at` is the stateChangedAt of the LIKED
    version that created the current sort entry (null when not liked). Lives on count partition
    `placement[reverse_shard]`, next to its sort entry (REV-3)."""

    relation_version = models.BigIntegerField()
    state = models.CharField(max_length=8, choices=RELATION_STATES)
    liked_at = models.DateTimeField(null=True)
    reverse_shard = models.PositiveIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "relations_likereverseprojection"
        constraints = [
            models.UniqueConstraint(fields=["generation", "video_id", "user_id"], name="uniq_reverse_projection"),
            models.CheckConstraint(condition=Q(state="LIKED", liked_at__isnull=False) | Q(state="UNLIKED"),
                                   name="reverse_projection_liked_has_time"),
        ]

    def __str__(self) -> str:
        return f"g{self.generation} {self.video_id}<-{self.user_id} {self.state} v{self.relation_version}"


class LikeReverseSort(ReverseRow):
    """LIKE_REVERSE_SORT (REV-1): one entry per currently liked (generation, video, user), keyed
    `(generation, video_id, reverse_shard, liked_at DESC, user_id)` for the newest-first k-way merge."""

    reverse_shard = models.PositiveIntegerField()
    liked_at = models.DateTimeField()

    class Meta:
        db_table = "relations_likereversesort"
        constraints = [
            models.UniqueConstraint("generation", "video_id", "reverse_shard", models.F("liked_at").desc(),
                                    "user_id", name="uniq_reverse_sort_key"),
            models.UniqueConstraint(fields=["generation", "video_id", "user_id"], name="uniq_reverse_sort_user"),
        ]

    def __str__(self) -> str:
        return f"g{self.generation} {self.video_id}/{self.reverse_shard} {self.liked_at} {self.user_id}"


class ReverseEventReceipt(EventReceipt):
    """The reverse projector's receipts (per generation it wrote)."""

    class Meta:
        db_table = "relations_reverseeventreceipt"
        constraints = [
            models.UniqueConstraint(fields=["generation", "source_topic", "source_partition", "source_offset"],
                                    name="uniq_reverse_receipt_position"),
        ]


class LikeReverseRecent(ReverseRow):
    """The "recent likers" summary (REV-10): per count partition, the newest `RECENT_KEEP` liked
    (generation, video, user) rows of that partition's reverse shards, maintained by the reverse projector
    in the same local transaction as the sort entries (insert on LIKED, delete on unlike/tombstone/move,
    refill from the partition's sort entries when a kept row leaves, pruned to the newest K). `/likers/recent`
    reads the K newest rows of every partition and merges them; it never reads LIKE_REVERSE_SORT."""

    liked_at = models.DateTimeField()

    class Meta:
        db_table = "relations_likereverserecent"
        constraints = [
            models.UniqueConstraint(fields=["generation", "video_id", "user_id"], name="uniq_reverse_recent_user"),
        ]
        indexes = [
            models.Index("generation", "video_id", models.F("liked_at").desc(), models.F("user_id").desc(),
                         name="reverse_recent_newest"),
        ]

    def __str__(self) -> str:
        return f"g{self.generation} {self.video_id} recent {self.liked_at} {self.user_id}"
