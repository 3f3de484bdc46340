"""The virtual-bucket migration ledger on `default` (MIG-2, MIG-4; issue 13 §2): one row per move of a set
of buckets of one bucket space onto one target partition. The ledger, never a worker's memory, says where
a migration stands: every step resumes from the cursor stored here, and `source_manifest_id` /
`target_manifest_id` against the generation's `active_manifest_id` tell before from after the CAS."""

from __future__ import annotations

from django.db import models

from likes_project.ledgers.model import TERMINAL as TERMINAL  # the selectors and the admin import it from here
from likes_project.ledgers.model import ApprovedLedgerModel, LedgerState
from likes_project.model_kit import requester_not_approver

MigrationState = LedgerState  # the approved-ledger kit's states (likes_project.ledgers.model)


class BucketMigration(ApprovedLedgerModel):
    """The kit's fields (state, who and why, the job, progress, the timeline) and what a migration moves."""

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
    # Progress, all resumable (the kit's copy_cursor: per (source, table) {"bucket", "seq"}): the baseline C and
    # the change-log position the catch-up replays from, per source partition.
    baseline = models.JSONField(default=dict, blank=True)  # C: source partition -> change seq
    replay_next_position = models.JSONField(default=dict, blank=True)  # source partition -> change seq
    final_watermark = models.JSONField(default=dict, blank=True)  # H: source partition -> change seq
    # MIG-4: the change-log watermark of the moved buckets on each source partition at the cutover, kept
    # apart from the stream offsets the count consumer had reached at that moment.
    cutover_checkpoint_ref = models.JSONField(default=dict, blank=True)
    cutover_stream_offsets = models.JSONField(default=dict, blank=True)
    target_watermark = models.BigIntegerField(null=True, blank=True)  # the target's change seq at the CAS
    replayed_events = models.BigIntegerField(default=0)

    class Meta(ApprovedLedgerModel.Meta):
        permissions = [
            ("plan_bucketmigration", "Can plan a virtual-bucket migration"),
            ("approve_bucketmigration", "Can approve, resume or abort a virtual-bucket migration"),
        ]
        constraints = [requester_not_approver("migration")]

    def __str__(self) -> str:
        return f"migration {self.pk}: {len(self.buckets)} buckets -> {self.target_partition} ({self.state})"

