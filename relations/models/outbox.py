"""The outbox on each relation shard, its archive, and the publisher's pause switch (OUT-)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from likes_project.db_routers import RELATION_SHARD
from likes_project.switches import PauseSwitch


class OutboxStatus(models.TextChoices):
    NEW = "NEW"
    PUBLISHING = "PUBLISHING"
    RETRY = "RETRY"
    UNCERTAIN = "UNCERTAIN"
    SENT = "SENT"
    DEAD = "DEAD"


class OutboxRecord(models.Model):
    """An event as the outbox wrote it on its relation shard: its id, identity and payload. The outbox
    and its archive hold the same event, so they declare it once; an archived row keeps its id."""

    db_family = RELATION_SHARD

    id = models.BigIntegerField(primary_key=True)
    event_id = models.UUIDField(unique=True)
    aggregate_key = models.CharField(max_length=96)
    relation_version = models.BigIntegerField()
    event_type = models.CharField(max_length=48)
    schema_version = models.PositiveSmallIntegerField()
    payload = models.JSONField()

    class Meta:
        abstract = True


class OutboxEvent(OutboxRecord):
    """OUTBOX (E-3, consistency-techniques O1). `id` is the shard's `sourceCommitSeq`; `xact_id` is the
    writing transaction's `pg_current_xact_id()`, which lets the publisher only take rows whose
    transaction is older than every running one (architecture §4)."""

    id = models.BigAutoField(primary_key=True)  # the shard's sequence assigns it here; the archive copies it
    xact_id = models.BigIntegerField()
    status = models.CharField(max_length=12, choices=OutboxStatus.choices, default=OutboxStatus.NEW)
    retry_count = models.PositiveIntegerField(default=0)
    next_retry_at = models.DateTimeField()
    claimed_by = models.CharField(max_length=64, blank=True, default="")
    claim_expires_at = models.DateTimeField(null=True)
    last_error = models.CharField(max_length=1024, blank=True, default="")
    stream_key = models.CharField(max_length=64, blank=True, default="")
    stream_entry_id = models.CharField(max_length=32, blank=True, default="")
    # The entry id split into numbers, so "published but not yet consumed" is an index range scan.
    stream_partition = models.PositiveIntegerField(null=True)
    stream_entry_ms = models.BigIntegerField(null=True)
    stream_entry_seq = models.BigIntegerField(null=True)
    created_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["aggregate_key", "relation_version", "event_type"], name="uniq_outbox_aggregate_version"
            ),
        ]
        indexes = [
            models.Index(fields=["next_retry_at"], name="outbox_pending_idx",
                         condition=Q(status__in=["NEW", "RETRY", "UNCERTAIN"])),
            models.Index(fields=["created_at"], name="outbox_created_idx"),
            models.Index(fields=["status", "id"], name="outbox_status_idx"),
            models.Index(fields=["stream_partition", "stream_entry_ms"], name="outbox_stream_pos_idx",
                         condition=Q(status="SENT")),
        ]
        permissions = [("requeue_outbox", "Can requeue DEAD outbox rows")]

    def __str__(self) -> str:
        return f"outbox #{self.id} {self.aggregate_key} v{self.relation_version} {self.status}"


class OutboxArchive(OutboxRecord):
    """Published outbox rows past the retention window (OUT-7, O8): kept for audit and replay, out of
    the publisher's hot table. Moved in chunks by a beat job."""

    stream_key = models.CharField(max_length=64)
    stream_entry_id = models.CharField(max_length=32)
    created_at = models.DateTimeField()
    published_at = models.DateTimeField()
    archived_at = models.DateTimeField()

    class Meta:
        # The evidence of one relation version (reconciliation's coverage, REC-4).
        indexes = [models.Index(fields=["aggregate_key", "relation_version"], name="outbox_archive_agg_idx")]

    def __str__(self) -> str:
        return f"archived outbox #{self.id} {self.aggregate_key} v{self.relation_version}"


class OutboxPublisherSwitch(PauseSwitch):
    """Pause the outbox publisher of one relation shard (issue 14 §3, DEG-2): its rows wait in the
    outbox (commands still commit) and are published, none lost, once it is cleared."""

    switch_kind = "publisher"
    switch_audit = ("outbox.publisher_", "shard")
    switch_key_help = "a relation shard alias"

    shard = models.CharField(max_length=64, primary_key=True)

    class Meta:
        verbose_name, verbose_name_plural = "publisher switch", "publisher switches"

    @classmethod
    def switch_key_choices(cls) -> list[str]:
        from django.conf import settings

        return list(settings.RELATION_SHARD_ALIASES)
