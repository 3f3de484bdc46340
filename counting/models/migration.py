"""The virtual-bucket migration ledger on `default` (MIG-2, MIG-4; issue 13 §2): one row per move of a set
of buckets of one bucket space onto one target partition. The ledger, never a worker's memory, says where
a migration stands: every step resumes from the cursor stored here, and `source_manifest_id` /
`target_manifest_id` against the generation's `active_manifest_id` tell before from after the CAS."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q


class MigrationState(models.TextChoices):
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    PREPARE = "PREPARE"
    COPYING = "COPYING"
    CATCHING_UP = "CATCHING_UP"
    CUTOVER = "CUTOVER"
    VERIFY = "VERIFY"
    RETIRED = "RETIRED"
    ABORTED = "ABORTED"
    FAILED = "FAILED"


class BucketMigration(models.Model):
    state = models.CharField(max_length=20, choices=MigrationState.choices, default=MigrationState.AWAITING_APPROVAL,
                             db_index=True)
    # Frozen at the plan: the contract, the generation and the buckets; the source of each bucket and its
    # epoch E (a bucket moves to epoch E+1 on the target).
    bucket_space_version = models.PositiveIntegerField()
    generation = models.PositiveIntegerField()
    buckets = models.JSONField(default=list)  # sorted virtual buckets
    source_partitions = models.JSONField(default=dict)  # str(bucket) -> partition
    source_epochs = models.JSONField(default=dict)  # str(bucket) -> E
    target_partition = models.CharField(max_length=32)
    source_manifest_id = models.BigIntegerField()
    target_manifest_id = models.BigIntegerField(null=True, blank=True)
    rows_to_copy = models.BigIntegerField(default=0)
    # Progress, all resumable: the copy's per (source, table) cursor {"bucket", "seq"}, the baseline C and
    # the change-log position the catch-up replays from, per source partition.
    copy_cursor = models.JSONField(default=dict, blank=True)
    baseline = models.JSONField(default=dict, blank=True)  # C: source partition -> change seq
    replay_next_position = models.JSONField(default=dict, blank=True)  # source partition -> change seq
    final_watermark = models.JSONField(default=dict, blank=True)  # H: source partition -> change seq
    # MIG-4: the change-log watermark of the moved buckets on each source partition at the cutover, kept
    # apart from the stream offsets the count consumer had reached at that moment.
    cutover_checkpoint_ref = models.JSONField(default=dict, blank=True)
    cutover_stream_offsets = models.JSONField(default=dict, blank=True)
    target_watermark = models.BigIntegerField(null=True, blank=True)  # the target's change seq at the CAS
    copied_rows = models.BigIntegerField(default=0)
    replayed_events = models.BigIntegerField(default=0)
    catchup_passes = models.PositiveIntegerField(default=0)
    write_pause_ms = models.FloatField(null=True, blank=True)  # source DRAINING -> CAS committed
    verify_result = models.JSONField(default=dict, blank=True)
    # Who and why: a second operator approves (the database refuses the requester).
    reason = models.TextField()
    requested_by = models.CharField(max_length=150)
    requested_channel = models.CharField(max_length=16, default="cli")
    approved_by = models.CharField(max_length=150, blank=True, default="")
    abort_reason = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    job_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    cutover_at = models.DateTimeField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    source_cleanup_after = models.DateTimeField(null=True, blank=True)
    source_cleaned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-pk"]
        permissions = [
            ("plan_bucketmigration", "Can plan a virtual-bucket migration"),
            ("approve_bucketmigration", "Can approve, resume or abort a virtual-bucket migration"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(approved_by="") | ~Q(approved_by=F("requested_by")),
                                   name="migration_not_approved_by_requester"),
        ]

    def __str__(self) -> str:
        return f"migration {self.pk}: {len(self.buckets)} buckets -> {self.target_partition} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL


TERMINAL = frozenset({MigrationState.RETIRED, MigrationState.ABORTED, MigrationState.FAILED})
