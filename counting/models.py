"""The count projection. Control-plane contracts and pointers live on `default`; the projection, the
sparse virtual buckets, the receipts and the partition-local fences live on each count partition
(`db_family = "count_partition"`), so one local transaction covers all three (PROJ-3)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.db_routers import COUNT_PARTITION

# --- control plane (default) -------------------------------------------------------------------


class CountBucketSpace(models.Model):
    """COUNT_BUCKET_SPACE (E-8): the immutable (hash algorithm, seed, key encoding, V) contract."""

    version = models.PositiveIntegerField(primary_key=True)
    hash_algorithm = models.CharField(max_length=32)
    hash_seed = models.CharField(max_length=64)
    key_encoding = models.CharField(max_length=32)
    virtual_buckets = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(virtual_buckets__gt=0), name="bucket_space_v_positive")]

    def __str__(self) -> str:
        return f"bucket space v{self.version} ({self.hash_algorithm}, V={self.virtual_buckets})"


class GenerationStatus(models.TextChoices):
    SHADOW = "SHADOW"
    ACTIVE = "ACTIVE"
    RETIRED = "RETIRED"


class CountProjectionGeneration(models.Model):
    """COUNT_PROJECTION_GENERATION (E-9): binds one bucket space; `active_manifest_id` is the
    CAS-switched authoritative route pointer."""

    generation = models.PositiveIntegerField(primary_key=True)
    bucket_space_version = models.PositiveIntegerField()
    active_manifest_id = models.BigIntegerField(null=True)
    status = models.CharField(max_length=8, choices=GenerationStatus.choices, default=GenerationStatus.SHADOW)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["status"], condition=Q(status="ACTIVE"), name="one_active_count_generation"
            ),
        ]

    def __str__(self) -> str:
        return f"generation {self.generation} ({self.status}, manifest {self.active_manifest_id})"


class ManifestStatus(models.TextChoices):
    CANDIDATE = "CANDIDATE"
    SEALED = "SEALED"


class CountRouteManifest(models.Model):
    """COUNT_ROUTE_MANIFEST (E-10): immutable once SEALED (row count and checksum verified)."""

    bucket_space_version = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=ManifestStatus.choices, default=ManifestStatus.CANDIDATE)
    row_count = models.PositiveIntegerField(default=0)
    checksum = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sealed_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"manifest {self.pk} ({self.status}, {self.row_count} buckets)"


class CountRouteManifestItem(models.Model):
    manifest_id = models.BigIntegerField()
    virtual_bucket = models.PositiveIntegerField()
    physical_partition = models.CharField(max_length=32)
    route_epoch = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["manifest_id", "virtual_bucket"], name="uniq_manifest_bucket"),
        ]

    def __str__(self) -> str:
        return f"manifest {self.manifest_id} vb {self.virtual_bucket} -> {self.physical_partition} e{self.route_epoch}"


class CountBucketRoute(models.Model):
    """COUNT_BUCKET_ROUTE (E-11): materialised current route, rebuilt from the active manifest."""

    bucket_space_version = models.PositiveIntegerField()
    virtual_bucket = models.PositiveIntegerField()
    physical_partition = models.CharField(max_length=32)
    route_epoch = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bucket_space_version", "virtual_bucket"], name="uniq_bucket_route"),
        ]

    def __str__(self) -> str:
        return f"bsv {self.bucket_space_version} vb {self.virtual_bucket} -> {self.physical_partition}"


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


class CountRefreshSwitch(models.Model):
    """Per-video switch that pauses display refreshes (spec §8.6)."""

    video_id = models.CharField(max_length=64, primary_key=True)
    paused = models.BooleanField(default=True)
    reason = models.CharField(max_length=256, blank=True, default="")
    updated_by = models.CharField(max_length=150, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.video_id}: refresh {'paused' if self.paused else 'on'}"


class CountCacheStatus(models.TextChoices):
    REBUILDING = "REBUILDING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    RETIRED = "RETIRED"


class CountCacheGeneration(models.Model):
    """COUNT_CACHE_GENERATION (E-15): one generation of the Redis count cache (bucket and view layers
    under `…:count:g<generation>:` / `…:count:view:g<generation>:`). Built REBUILDING from the durable
    vbuckets of `projection_generation` as routed by the pinned `route_manifest_id`, then CAS-switched
    to ACTIVE (the previous one RETIRED) in one transaction (CCACHE-3). Reads use the ACTIVE one only."""

    generation = models.PositiveIntegerField(primary_key=True)
    status = models.CharField(max_length=10, choices=CountCacheStatus.choices)
    projection_generation = models.PositiveIntegerField()
    route_manifest_id = models.BigIntegerField()  # pinned for the build; the rebuild fails if it moves
    previous_generation = models.PositiveIntegerField(null=True)  # the ACTIVE one when the build began
    build_from = models.DateTimeField()  # start point: changes at or after it are caught up
    start_checkpoints = models.JSONField(default=dict)  # count consumer {partition: last_done_id} at start
    rows_written = models.BigIntegerField(default=0)
    started_by = models.CharField(max_length=150, blank=True, default="")
    failure_reason = models.CharField(max_length=512, blank=True, default="")
    started_at = models.DateTimeField()
    activated_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)  # when it became FAILED or RETIRED

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["status"], condition=Q(status="ACTIVE"),
                                    name="one_active_count_cache_generation"),
            models.UniqueConstraint(fields=["status"], condition=Q(status="REBUILDING"),
                                    name="one_rebuilding_count_cache_generation"),
        ]
        permissions = [("rebuild_count_cache", "Can rebuild the count cache")]

    def __str__(self) -> str:
        return f"count cache generation {self.generation} ({self.status}, manifest {self.route_manifest_id})"


# --- count partitions --------------------------------------------------------------------------


class LikeCountProjection(models.Model):
    """LIKE_COUNT_PROJECTION (E-4): the version and state this projection has seen per relation."""

    db_family = COUNT_PARTITION

    generation = models.PositiveIntegerField()
    user_id = models.BigIntegerField()
    video_id = models.CharField(max_length=64)
    projected_state = models.CharField(max_length=8)
    projected_version = models.BigIntegerField()
    bucket_space_version = models.PositiveIntegerField()
    virtual_bucket = models.PositiveIntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["generation", "user_id", "video_id"], name="uniq_count_projection"),
        ]

    def __str__(self) -> str:
        return f"g{self.generation} {self.user_id}:{self.video_id} {self.projected_state} v{self.projected_version}"


class VideoLikeCountVbucket(models.Model):
    """VIDEO_LIKE_COUNT_VBUCKET (E-5): sparse, one row per touched (video, virtual bucket)."""

    db_family = COUNT_PARTITION

    generation = models.PositiveIntegerField()
    video_id = models.CharField(max_length=64)
    virtual_bucket = models.PositiveIntegerField()
    bucket_space_version = models.PositiveIntegerField()
    active_count = models.BigIntegerField()
    bucket_version = models.BigIntegerField(default=0)
    frozen = models.BooleanField(default=False)  # a negative attempt stops this bucket (PROJ-12)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["generation", "video_id", "virtual_bucket"], name="uniq_vbucket"),
            models.CheckConstraint(condition=Q(active_count__gte=0), name="vbucket_active_count_non_negative"),
        ]

    def __str__(self) -> str:
        return f"g{self.generation} {self.video_id} vb{self.virtual_bucket} = {self.active_count}"


class CountEventReceipt(models.Model):
    """COUNT_EVENT_RECEIPT (E-6): which stream position this projection consumed."""

    db_family = COUNT_PARTITION

    generation = models.PositiveIntegerField()
    source_topic = models.CharField(max_length=64)
    source_partition = models.PositiveIntegerField()
    source_offset = models.CharField(max_length=32)
    event_id = models.CharField(max_length=64)
    outcome = models.CharField(max_length=12)  # applied | stale | duplicate
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["generation", "source_topic", "source_partition", "source_offset"], name="uniq_receipt_position"
            ),
        ]
        indexes = [models.Index(fields=["event_id"], name="receipt_event_idx")]

    def __str__(self) -> str:
        return f"g{self.generation} {self.source_partition}/{self.source_offset} {self.outcome}"


class FenceState(models.TextChoices):
    ACTIVE = "ACTIVE"
    DRAINING = "DRAINING"
    RETIRED = "RETIRED"


class CountRouteFence(models.Model):
    """Partition-local route fence (E-11): this partition accepts writes for a bucket only at this
    epoch and while ACTIVE; anything else is ROUTE_EPOCH_MISMATCH (ROUTE-5)."""

    db_family = COUNT_PARTITION

    bucket_space_version = models.PositiveIntegerField()
    virtual_bucket = models.PositiveIntegerField()
    route_epoch = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=FenceState.choices, default=FenceState.ACTIVE)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bucket_space_version", "virtual_bucket"], name="uniq_route_fence"),
        ]

    def __str__(self) -> str:
        return f"bsv {self.bucket_space_version} vb {self.virtual_bucket} e{self.route_epoch} {self.state}"


class CountConsumerFence(models.Model):
    """The highest lease token seen per (consumer, stream partition) on this count partition: a
    write carrying a lower token comes from a paused old lease holder and is refused."""

    db_family = COUNT_PARTITION

    consumer = models.CharField(max_length=64)
    partition = models.PositiveIntegerField()
    fencing_token = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["consumer", "partition"], name="uniq_consumer_fence")]

    def __str__(self) -> str:
        return f"{self.consumer}[{self.partition}] token {self.fencing_token}"


class DirtyVideo(models.Model):
    """Videos whose buckets changed since their last display snapshot (written in the projection
    transaction, so a crash cannot lose a refresh). Keyed by the source stream partition as well, so
    the consumers of different partitions never contend on one hot video's marker row."""

    db_family = COUNT_PARTITION

    generation = models.PositiveIntegerField()
    video_id = models.CharField(max_length=64)
    source_partition = models.PositiveIntegerField()
    dirty_seq = models.BigIntegerField(default=1)
    first_dirty_at = models.DateTimeField()
    last_dirty_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["generation", "video_id", "source_partition"], name="uniq_dirty_video"),
        ]

    def __str__(self) -> str:
        return f"g{self.generation} {self.video_id} dirty x{self.dirty_seq}"
