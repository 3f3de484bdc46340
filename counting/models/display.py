"""Display counts and the Redis count cache's generations (control plane, `default`)."""

from __future__ import annotations

from django.db import models

from likes_project.generations import GenerationModel
from likes_project.switches import PauseSwitch


class VideoDisplayCount(models.Model):
    """The durable display snapshot of one video (SNAP-1, E-21). Read by `like-count` when the Redis
    view misses; never computed with COUNT(*) on request."""

    video_id = models.CharField(max_length=64, primary_key=True)
    generation = models.PositiveIntegerField()
    manifest_id = models.BigIntegerField()
    raw_active_count = models.BigIntegerField()
    risk_hidden_count = models.BigIntegerField(default=0)
    policy_hidden_count = models.BigIntegerField(default=0)
    display_count = models.BigIntegerField()
    snapshot_id = models.BigIntegerField()
    generated_at = models.DateTimeField()
    watermark = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"{self.video_id}: {self.display_count} (snapshot {self.snapshot_id})"


class CountRefreshSwitch(PauseSwitch):
    """Per-video switch that pauses display refreshes (spec §8.6)."""

    switch_kind, switch_audit, switch_key_help = "refresh", ("count.refresh", "video"), "a video id"  # issue 14 §3
    switch_states = ("refresh paused", "refresh on")
    video_id = models.CharField(max_length=64, primary_key=True)
    paused = models.BooleanField(default=True)

    class Meta:
        verbose_name_plural = "count refresh switches"


class CountCacheGeneration(GenerationModel):
    """COUNT_CACHE_GENERATION (E-15): one generation of the Redis count cache (bucket and view layers
    under `…:count:g<generation>:` / `…:count:view:g<generation>:`). Built through the one generation
    lifecycle from the durable vbuckets of `projection_generation` as routed by the pinned
    `route_manifest_id`, then CAS-switched to ACTIVE (the previous one RETIRED) in one transaction
    (CCACHE-3). Reads use the ACTIVE one only."""

    projection_generation = models.PositiveIntegerField()
    route_manifest_id = models.BigIntegerField()  # pinned for the build; the rebuild fails if it moves
    build_from = models.DateTimeField()  # start point: changes at or after it are caught up
    start_checkpoints = models.JSONField(default=dict)  # count consumer {partition: last_done_id} at start
    rows_written = models.BigIntegerField(default=0)
    started_at = models.DateTimeField()

    class Meta(GenerationModel.Meta):
        permissions = [("rebuild_count_cache", "Can rebuild the count cache")]

    def __str__(self) -> str:
        return f"count cache generation {self.generation} ({self.status}, manifest {self.route_manifest_id})"
