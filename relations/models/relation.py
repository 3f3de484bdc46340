"""The relation facts on the relation shards: one row per (user, video) and the commands that set it (CMD-, OUT-)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.db_routers import RELATION_SHARD


class RelationState(models.TextChoices):
    LIKED = "LIKED"
    UNLIKED = "UNLIKED"


class LikeRelation(models.Model):
    """VIDEO_LIKE_RELATION (E-1): the single current fact for (user, video). Unlike keeps the row as a
    versioned tombstone."""

    db_family = RELATION_SHARD

    user_id = models.BigIntegerField()
    video_id = models.CharField(max_length=64)
    state = models.CharField(max_length=8, choices=RelationState.choices)
    relation_version = models.BigIntegerField()
    last_operation_id = models.CharField(max_length=128)
    state_changed_at = models.DateTimeField()
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_id", "video_id"], name="uniq_relation_user_video"),
            models.CheckConstraint(condition=Q(relation_version__gte=1), name="relation_version_positive"),
            models.CheckConstraint(condition=Q(state__in=["LIKED", "UNLIKED"]), name="relation_state_valid"),
        ]
        indexes = [
            # The liked list (LIST-1): (user_id, state, updated_at DESC, video_id DESC).
            models.Index("user_id", "state", models.F("updated_at").desc(), models.F("video_id").desc(),
                         name="relation_user_list_idx"),
            # Per-video reads of the facts: reconciliation and repair (issue 11 §3).
            models.Index(fields=["video_id", "user_id"], name="relation_video_idx"),
        ]
        # A video's likers are not public because its count is (PRIV-1): exporting them is its own
        # permission, held by no role by default (OPS-9).
        permissions = [("export_video_likers", "Can export a video's likers, with a stated purpose")]

    def __str__(self) -> str:
        return f"user {self.user_id} / {self.video_id}: {self.state} v{self.relation_version}"


class LikeCommand(models.Model):
    """LIKE_COMMAND (E-2): the fixed verdict of one operation id, bound to its user, video and desired
    state. Unique on (user_id, operation_id) so uniqueness holds inside one user shard (I3)."""

    db_family = RELATION_SHARD

    user_id = models.BigIntegerField()
    operation_id = models.CharField(max_length=128)
    video_id = models.CharField(max_length=64)
    desired_state = models.CharField(max_length=8, choices=RelationState.choices)
    result_state = models.CharField(max_length=8, choices=RelationState.choices)
    result_version = models.BigIntegerField()
    changed = models.BooleanField()
    base_version = models.BigIntegerField(null=True)
    device_id = models.CharField(max_length=128, blank=True, default="")
    client_sequence = models.BigIntegerField(null=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_id", "operation_id"], name="uniq_command_user_operation"),
        ]
        indexes = [models.Index(fields=["created_at"], name="command_created_idx")]

    def __str__(self) -> str:
        return f"{self.operation_id} (user {self.user_id}, {self.video_id}) -> {self.result_state}"
