"""The count projection's contracts and pointers on `default`, and its rows on each count partition
(`db_family = "count_partition"`): projection, sparse virtual buckets, receipts, fences and dirty marks, so
one local transaction covers them all (PROJ-3)."""

from __future__ import annotations

import pgtrigger
from django.db import models
from django.db.models import Q

from likes_project.db_routers import COUNT_PARTITION
from likes_project.hashing import HashContract

# --- control plane (default) -------------------------------------------------------------------


class CountBucketSpace(HashContract):
    """COUNT_BUCKET_SPACE (E-8): the immutable (hash algorithm, seed, key encoding, V) contract."""

    virtual_buckets = models.PositiveIntegerField()

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(virtual_buckets__gt=0), name="bucket_space_v_positive")]
        triggers = [
            # BKT-6: a bucket space is a frozen contract; a change is a new version (issue 13 §5). The
            # database refuses an edit or a delete whoever sends it (row-level: a test flush's TRUNCATE passes).
            pgtrigger.Protect(name="bucket_space_immutable", operation=pgtrigger.Update | pgtrigger.Delete),
        ]

    def __str__(self) -> str:
        return f"bucket space v{self.version} ({self.hash_algorithm}, V={self.virtual_buckets})"


class ProjectionGenerationStatus(models.TextChoices):
    SHADOW = "SHADOW"
    ACTIVE = "ACTIVE"
    RETIRED = "RETIRED"


class CountProjectionGeneration(models.Model):
    """COUNT_PROJECTION_GENERATION (E-9): binds one bucket space; `active_manifest_id` is the
    CAS-switched authoritative route pointer."""

    generation = models.PositiveIntegerField(primary_key=True)
    bucket_space_version = models.PositiveIntegerField()
    active_manifest_id = models.BigIntegerField(null=True)
    status = models.CharField(max_length=8, choices=ProjectionGenerationStatus.choices,
                              default=ProjectionGenerationStatus.SHADOW)
    created_at = models.DateTimeField(auto_now_add=True)
    # A generation restored from a recovery snapshot (issue 12): which one, and when it was switched in
    # or out. A RETIRED generation's rows stay readable until COUNT_GENERATION_OBSERVATION_S after
    # `retired_at`, then the maintenance beat drops them.
    restored_from_snapshot = models.BigIntegerField(null=True, blank=True)
    scratch = models.BooleanField(default=False)  # a test-restore's generation: never activated
    activated_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    rows_dropped_at = models.DateTimeField(null=True, blank=True)

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


class BucketRoute(models.Model):
    """Where one virtual bucket lives: its physical partition, and the route epoch that fences its writers."""

    virtual_bucket = models.PositiveIntegerField()
    physical_partition = models.CharField(max_length=32)
    route_epoch = models.PositiveIntegerField()

    class Meta:
        abstract = True


class CountRouteManifestItem(BucketRoute):
    manifest_id = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["manifest_id", "virtual_bucket"], name="uniq_manifest_bucket"),
        ]

    def __str__(self) -> str:
        return f"manifest {self.manifest_id} vb {self.virtual_bucket} -> {self.physical_partition} e{self.route_epoch}"


class CountBucketRoute(BucketRoute):
    """COUNT_BUCKET_ROUTE (E-11): materialised current route, rebuilt from the active manifest."""

    bucket_space_version = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bucket_space_version", "virtual_bucket"], name="uniq_bucket_route"),
        ]

    def __str__(self) -> str:
        return f"bsv {self.bucket_space_version} vb {self.virtual_bucket} -> {self.physical_partition}"


# --- count partitions --------------------------------------------------------------------------

# The partition-local change log of a bucket migration (issue 13 §3, D69): every INSERT or UPDATE of a
# projection or bucket row takes the next value of the partition's `count_change_seq`, in the writer's own
# transaction. A migration copies a bucket's rows by it and catches up on the rows changed since.
CHANGE_SEQ = "count_change_seq"


def change_seq_trigger(name: str) -> pgtrigger.Trigger:
    return pgtrigger.Trigger(name=name, when=pgtrigger.Before, operation=pgtrigger.Insert | pgtrigger.Update,
                             func=f"NEW.change_seq := nextval('{CHANGE_SEQ}'); RETURN NEW;")



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
    change_seq = models.BigIntegerField(default=0)  # set by the trigger on every write

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["generation", "user_id", "video_id"], name="uniq_count_projection"),
        ]
        # Per-video reads: reconciliation's identity and coverage, a scoped repair (issue 11); per bucket
        # by change: a migration's copy and catch-up (issue 13).
        indexes = [models.Index(fields=["generation", "video_id", "virtual_bucket"], name="projection_video_idx"),
                   models.Index(fields=["generation", "virtual_bucket", "change_seq"], name="projection_change_idx")]
        triggers = [change_seq_trigger("projection_change_seq")]

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
    change_seq = models.BigIntegerField(default=0)  # set by the trigger on every write

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["generation", "video_id", "virtual_bucket"], name="uniq_vbucket"),
            models.CheckConstraint(condition=Q(active_count__gte=0), name="vbucket_active_count_non_negative"),
        ]
        indexes = [models.Index(fields=["generation", "virtual_bucket", "change_seq"], name="vbucket_change_idx")]
        triggers = [change_seq_trigger("vbucket_change_seq")]

    def __str__(self) -> str:
        return f"g{self.generation} {self.video_id} vb{self.virtual_bucket} = {self.active_count}"


class EventReceipt(models.Model):
    """Which stream position a projection consumed into which generation, on the partition that holds
    the rows it wrote, so a replay after a crash past the commit is absorbed (PROJ-4)."""

    db_family = COUNT_PARTITION

    generation = models.PositiveIntegerField()
    source_topic = models.CharField(max_length=64)
    source_partition = models.PositiveIntegerField()
    source_offset = models.CharField(max_length=32)
    event_id = models.CharField(max_length=64)
    outcome = models.CharField(max_length=12)  # applied | stale | duplicate
    created_at = models.DateTimeField()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"g{self.generation} {self.source_partition}/{self.source_offset} {self.outcome}"


class CountEventReceipt(EventReceipt):
    """COUNT_EVENT_RECEIPT (E-6): which stream position the count projection consumed."""

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["generation", "source_topic", "source_partition", "source_offset"], name="uniq_receipt_position"
            ),
        ]
        indexes = [models.Index(fields=["event_id"], name="receipt_event_idx")]


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


class CountGenerationFence(models.Model):
    """Partition-local generation fence (issue 12): the count projection generation this partition
    accepts live projector writes for. The switch to a restored generation writes it on every
    partition while it holds the count consumer's leases, so a pass that still routes to the old
    generation (a cached route) is refused and retried against the new one."""

    db_family = COUNT_PARTITION

    key = models.CharField(max_length=16, primary_key=True, default="active")
    generation = models.PositiveIntegerField()
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"accepts generation {self.generation}"


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
