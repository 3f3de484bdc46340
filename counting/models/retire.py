"""The retirement of deleted videos (issue 9 §4), tracked on `default` so each beat run only works on
videos it has not retired yet."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class RetirementStatus(models.TextChoices):
    PENDING = "PENDING"  # deleted; rows may remain or may still be written by a lagging projector
    RETIRED = "RETIRED"  # every row is gone and no event that could bring one back is unconsumed
    REVIVED = "REVIVED"  # undeleted before its retirement finished: nothing to retire until deleted again


class VideoRetirement(models.Model):
    """One deleted video's retirement. `version` is the snapshot version whose deletion it tracks: a
    video deleted again (a higher version) is PENDING again. `fence` holds the stream heads taken once
    no relation change that may concern the video is left unpublished; the video is RETIRED only after
    both projectors' checkpoints passed the fence and a pass then found its rows gone.
    `reverse_generation` is the ACTIVE reverse-index generation at retirement: a later generation
    (its backfill replays the facts of deleted videos too) makes the video PENDING again."""

    video_id = models.CharField(max_length=64, primary_key=True)
    version = models.BigIntegerField()
    deleted_at = models.DateTimeField()  # the snapshot's updated_at when its deletion was found
    status = models.CharField(max_length=12, choices=RetirementStatus.choices, default=RetirementStatus.PENDING)
    fence = models.JSONField(null=True, blank=True)  # {stream partition: entry id}
    reverse_generation = models.PositiveIntegerField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["deleted_at", "video_id"], name="retire_pending_idx",
                         condition=Q(status="PENDING")),
            models.Index(fields=["reverse_generation", "video_id"], name="retire_retired_gen_idx",
                         condition=Q(status="RETIRED")),
        ]

    def __str__(self) -> str:
        return f"{self.video_id} v{self.version}: {self.status}"


class VideoRetirementScan(models.Model):
    """The discovery cursor over deleted video snapshots, one row (id 1): every deletion at or before
    (`after_at`, `after_video_id`) has a VideoRetirement row."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    after_at = models.DateTimeField(null=True, blank=True)
    after_video_id = models.CharField(max_length=64, blank=True, default="")
    scanned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="retire_scan_singleton")]

    def __str__(self) -> str:
        return f"after {self.after_at} / {self.after_video_id or '-'}"
