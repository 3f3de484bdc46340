"""Control-plane rows (`default`) of the event log and its consumers."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.eventlog.registry import CONSUMERS
from likes_project.hashing import HashContract, one_active
from likes_project.switches import PauseSwitch


class StreamContract(HashContract):
    """Frozen partitioning of the event log: aggregateKey -> partition (architecture §7)."""

    topic = models.CharField(max_length=64)
    partitions = models.PositiveIntegerField()
    is_active = models.BooleanField(default=False)

    class Meta:
        constraints = [
            one_active("one_active_stream_contract"),
            models.CheckConstraint(condition=Q(partitions__gt=0), name="stream_partitions_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.topic} v{self.version}: {self.partitions} partitions ({self.hash_algorithm})"


class Lease(models.Model):
    """A singleton job's lease (consistency-techniques S2). `fencing_token` grows on every change of
    holder; writes made on behalf of a lease carry the token and are refused once it is stale."""

    resource = models.CharField(max_length=128, primary_key=True)
    holder = models.CharField(max_length=128)
    fencing_token = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField()
    acquired_at = models.DateTimeField()
    renewed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.resource} held by {self.holder} (token {self.fencing_token})"


class ConsumerCheckpoint(models.Model):
    """Durable position of one consumer in one stream partition. Every entry with an id up to and
    including `last_done_id` is done (applied, or poison set aside as a dead letter). Advanced only over
    the contiguous completed prefix (PROJ-8), only by the lease holder. `blocked_*` describe the head
    entry an infrastructure failure keeps retrying (issue 9 §1): how often, why, since when, and
    `retry_at`, the end of its current backoff."""

    consumer = models.CharField(max_length=64)
    partition = models.PositiveIntegerField()
    last_done_id = models.CharField(max_length=32, default="0-0")
    fencing_token = models.BigIntegerField(default=0)
    blocked_entry_id = models.CharField(max_length=32, blank=True, default="")
    blocked_attempts = models.PositiveIntegerField(default=0)
    blocked_reason = models.CharField(max_length=64, blank=True, default="")
    blocked_error = models.CharField(max_length=512, blank=True, default="")
    blocked_since = models.DateTimeField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    applied_total = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["consumer", "partition"], name="uniq_consumer_partition")]

    def __str__(self) -> str:
        return f"{self.consumer}[{self.partition}] done through {self.last_done_id}"


class LostTailWatermark(models.Model):
    """Per relation shard and stream partition, the position the lost-tail check looks above (issue 9
    §3): the lowest consumer checkpoint when it last ran, lowered to any row it was too young to check.
    Not the current lowest checkpoint: after a flush the consumers read the new entries and move past
    the ids of the lost ones, which a check above the current checkpoint would then never see."""

    shard = models.CharField(max_length=64)
    partition = models.PositiveIntegerField()
    checked_above = models.CharField(max_length=32, default="0-0")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["shard", "partition"], name="uniq_lost_tail_watermark")]

    def __str__(self) -> str:
        return f"{self.shard}[{self.partition}] checked above {self.checked_above}"


class ConsumerSwitch(PauseSwitch):
    """Runtime switch: pause dispatch for a consumer on every partition (snapshot barrier, incident
    response). One partition only: `ConsumerPartitionSwitch`."""

    switch_kind = "consumer"
    switch_audit = ("consumer.", "consumer")
    switch_key_help = "a consumer name, or consumer:partition for one partition"

    consumer = models.CharField(max_length=64, primary_key=True)

    class Meta:
        verbose_name_plural = "consumer switches"

    @classmethod
    def switch_key_choices(cls) -> list[str]:
        return sorted(CONSUMERS)

    @classmethod
    def switch_owns_key(cls, key: str) -> bool:
        return ":" not in key


class ConsumerPartitionSwitch(PauseSwitch):
    """Runtime switch: pause one consumer's dispatch on one stream partition (issue 14 §3, DEG-2); its
    other partitions keep flowing and the paused one's checkpoint stays where it is, so nothing is lost.
    Key `consumer:partition` (`count:3`), the names of the consumer's partition leases."""

    switch_kind = "consumer"
    switch_audit = ("consumer.", "consumer_partition")
    switch_key_help = "consumer:partition, e.g. count:0"

    key = models.CharField(max_length=80, primary_key=True)
    consumer = models.CharField(max_length=64)
    partition = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["consumer", "partition"], name="uniq_consumer_partition_switch")]
        verbose_name, verbose_name_plural = "consumer partition switch", "consumer partition switches"

    @classmethod
    def switch_key_choices(cls) -> list[str]:
        # The active contract's partition count read here, not through `streams` (which imports this module).
        partitions = StreamContract.objects.filter(is_active=True).values_list("partitions", flat=True).first()
        return [f"{c}:{p}" for c in sorted(CONSUMERS) for p in range(partitions or 0)]

    @classmethod
    def switch_owns_key(cls, key: str) -> bool:
        return ":" in key

    @classmethod
    def switch_fields(cls, key: str) -> dict:
        consumer, partition = key.rsplit(":", 1)
        return {"consumer": consumer, "partition": int(partition)}


class DeadLetterStatus(models.TextChoices):
    NEW = "NEW"
    REQUEUED = "REQUEUED"
    DISCARDED = "DISCARDED"
    RESOLVED = "RESOLVED"


class DeadLetter(models.Model):
    """Poison: an event a consumer can never apply as it is (C5, issue 9 §1). Writing one never raises
    into the consumer. Requeued (REQUEUED) it is applied again by the redrive path
    (`likes_project.eventlog.redrive`) and ends RESOLVED, or back to NEW when it is still poison;
    discarded (DISCARDED) it is kept with who discarded it and why."""

    consumer = models.CharField(max_length=64)
    stream_key = models.CharField(max_length=64)
    entry_id = models.CharField(max_length=32)
    event_id = models.CharField(max_length=64, blank=True, default="")
    video_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    user_id = models.BigIntegerField(null=True, db_index=True)
    payload = models.JSONField(default=dict)
    error_class = models.CharField(max_length=128)
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=1)
    first_failed_at = models.DateTimeField()
    last_failed_at = models.DateTimeField()
    status = models.CharField(max_length=12, choices=DeadLetterStatus.choices, default=DeadLetterStatus.NEW)
    resolver = models.CharField(max_length=150, blank=True, default="")
    reason = models.CharField(max_length=512, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["consumer", "stream_key", "entry_id"], name="uniq_dead_letter_entry"),
        ]
        permissions = [("requeue_deadletter", "Can requeue dead letters"),
                       ("discard_deadletter", "Can discard dead letters")]
        indexes = [models.Index(fields=["status", "first_failed_at"], name="dead_letter_status_idx")]

    def __str__(self) -> str:
        return f"{self.consumer} {self.stream_key}/{self.entry_id}: {self.error_class}"


class GaugeSnapshot(models.Model):
    """The scrape-time gauges as the beat job `observability.refresh_gauges` last computed them (issue
    10 §3, D46): one row (`key` "gauges"), replaced by every run; a scrape of /metrics reads only this
    row. `families` is a list of {"name", "help", "since", "samples": [[labels, value], ...]}; in a
    `since` family a value is the epoch time of the oldest pending thing (or null), which a scrape turns
    into an age. `errors` names the parts whose store failed in that run."""

    key = models.CharField(max_length=32, primary_key=True)
    computed_at = models.DateTimeField()
    duration_s = models.FloatField(default=0.0)
    families = models.JSONField(default=list)
    errors = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"gauges computed at {self.computed_at.isoformat()} ({len(self.errors)} parts failed)"
