"""The video visibility snapshot and the social edges the command rules read (control plane, `default`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce


class VideoVisibility(models.TextChoices):
    PUBLIC = "public"
    FRIENDS = "friends"
    PRIVATE = "private"


class VideoStatus(models.TextChoices):
    ACTIVE = "active"
    TAKEN_DOWN = "taken_down"
    DELETED = "deleted"


class VideoSnapshot(models.Model):
    """A video's visibility facts (CMD-12, E-22): the video service's snapshot as last pushed, and an
    operator override kept apart from it (decision D50).

    `service_visibility`, `service_status`, `author_id` and `version` are the service's: only a push
    with a higher version moves them, so an operator edit never consumes a service version. The
    `override_*` fields are the operator's (null: that field is not overridden). `visibility` and
    `status` are the effective values every reader uses: the override where there is one, else the
    service's; the check constraint keeps them so. `revision` grows with every applied change (push or
    override) and versions the visibility cache entry."""

    video_id = models.CharField(max_length=64, primary_key=True)
    author_id = models.BigIntegerField(db_index=True)
    visibility = models.CharField(max_length=16, choices=VideoVisibility.choices, default=VideoVisibility.PUBLIC)
    status = models.CharField(max_length=16, choices=VideoStatus.choices, default=VideoStatus.ACTIVE)
    version = models.BigIntegerField(default=1)
    # Database defaults too, so a raw INSERT written before these columns (the benchmarks' seeding,
    # bench/harness/seed.py) still stores a consistent row: the service's public/active, no override, revision 1.
    service_visibility = models.CharField(max_length=16, choices=VideoVisibility.choices,
                                          default=VideoVisibility.PUBLIC, db_default=VideoVisibility.PUBLIC)
    service_status = models.CharField(max_length=16, choices=VideoStatus.choices, default=VideoStatus.ACTIVE,
                                      db_default=VideoStatus.ACTIVE)
    override_visibility = models.CharField(max_length=16, choices=VideoVisibility.choices, null=True, blank=True)
    override_status = models.CharField(max_length=16, choices=VideoStatus.choices, null=True, blank=True)
    override_reason = models.CharField(max_length=512, blank=True, default="", db_default="")
    override_by = models.CharField(max_length=150, blank=True, default="", db_default="")
    override_at = models.DateTimeField(null=True, blank=True)
    revision = models.BigIntegerField(default=1, db_default=1)
    # The service's: when the video was published, if its push said so (the risk scorer's `fresh_upload`).
    published_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(version__gte=0), name="video_version_non_negative"),
            models.CheckConstraint(condition=Q(revision__gte=1), name="video_revision_positive"),
            models.CheckConstraint(
                condition=Q(visibility=Coalesce("override_visibility", "service_visibility"),
                            status=Coalesce("override_status", "service_status")),
                name="video_effective_is_override_over_service",
            ),
        ]

    def __str__(self) -> str:
        override = " overridden" if self.has_override else ""
        return f"{self.video_id} ({self.visibility}, {self.status}, v{self.version}{override})"

    @property
    def has_override(self) -> bool:
        return self.override_visibility is not None or self.override_status is not None


class Friendship(models.Model):
    """An undirected friendship, stored once with user_low < user_high."""

    user_low = models.BigIntegerField()
    user_high = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user_low", "user_high"], name="uniq_friendship"),
            models.CheckConstraint(condition=Q(user_low__lt=models.F("user_high")), name="friendship_ordered"),
        ]

    def __str__(self) -> str:
        return f"{self.user_low} <-> {self.user_high}"


class Block(models.Model):
    """`blocker` has blocked `blocked`: the blocked user may not like the blocker's videos."""

    blocker_id = models.BigIntegerField()
    blocked_id = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["blocker_id", "blocked_id"], name="uniq_block")]

    def __str__(self) -> str:
        return f"{self.blocker_id} blocks {self.blocked_id}"
