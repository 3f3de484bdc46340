"""The audit log on `default`. Moved here from `opsconsole` (its table keeps the old name)."""

from __future__ import annotations

import pgtrigger
from django.db import models
from django.utils import timezone

from likes_project.migration_kit import sql_file

REDACT_ACTION = "audit.redact"


class AuditRecord(models.Model):
    """One operational action: who did what to which target, with which parameters and outcome, and
    the ops job it ran in (if any). Append-only, in the database: a row trigger refuses every UPDATE
    and DELETE (an outcome known later is a second record, never an edit), and the admin is read-only.
    The one UPDATE it lets through is a redaction's (`likes_project.audit.redaction`, PRIV-4): a deleted
    account's user id and username in `actor`/`target_id`/`params` replaced by its pseudonym, `redacted_at`
    set, every other column unchanged; the redaction is itself on record (an `audit.redact` row).

    Tamper-evident (D82): every row written by `audit_record` carries `seq` (1, 2, 3 ... without gaps,
    in commit order), the previous row's `row_hash` as `prev_hash`, and its own `row_hash` (SHA-256 of
    its fields and `prev_hash`, `likes_project.audit.chain`). A row inserted by hand, bypassing
    `audit_record`, has no `seq` and is reported by `audit_verify`."""

    # Set by audit_record from the database clock under the chain lock, so `at` follows `seq`.
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=150)
    channel = models.CharField(max_length=16)  # admin | cli | api | system
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=32)
    target_id = models.CharField(max_length=128, db_index=True)
    params = models.JSONField(default=dict)
    outcome = models.CharField(max_length=32, default="applied")
    job_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    # NULL only for a row that did not come through audit_record (a raw INSERT): the verifier reports it.
    seq = models.BigIntegerField(null=True, blank=True, unique=True)
    prev_hash = models.CharField(max_length=64, blank=True, db_default="")
    row_hash = models.CharField(max_length=64, blank=True, db_default="")
    # Set when a deleted account's mentions were replaced by its pseudonym: the `at` of the `audit.redact` record
    # that lists this row (its seq, its unchanged row_hash and the hash of its redacted content).
    redacted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "opsconsole_auditrecord"
        ordering = ["-at"]
        indexes = [
            # The verifier's "rows outside the chain" probe stays an index lookup however long the log.
            models.Index(fields=["id"], condition=models.Q(seq__isnull=True), name="audit_unchained_idx"),
        ]
        triggers = [
            # Row-level, so TRUNCATE (a test database flush) is not refused; see docs/decisions.md D49. Refuses
            # every UPDATE and DELETE but a redaction's (the SQL file says exactly which UPDATE passes).
            pgtrigger.Trigger(name="audit_append_only", when=pgtrigger.Before,
                              operation=pgtrigger.Update | pgtrigger.Delete,
                              func=sql_file("likes_project.audit", "audit_append_only.v2.sql")),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target_type}:{self.target_id}"


class AuditChainCheckpoint(models.Model):
    """The chain's head at a moment (the beat job `audit.chain_checkpoint`, hourly): the row `seq`
    and its `row_hash`, HMAC-SHA256-signed when AUDIT_CHAIN_SIGNING_KEY is set (`key_id` names the key
    without revealing it). A verification compares the chain with it, which catches a deleted tail.
    Append-only in the database like the log itself."""

    at = models.DateTimeField()
    seq = models.BigIntegerField(db_index=True)
    row_hash = models.CharField(max_length=64)
    signature = models.CharField(max_length=64, blank=True, default="")  # empty: no key configured
    key_id = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        ordering = ["-seq"]
        triggers = [
            pgtrigger.Protect(name="audit_checkpoint_append_only", operation=pgtrigger.Update | pgtrigger.Delete),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.pk} at seq {self.seq}"

    @property
    def signed(self) -> bool:
        return bool(self.signature)


class ChainStatus(models.TextChoices):
    INTACT = "INTACT"
    BROKEN = "BROKEN"


class AuditChainVerification(models.Model):
    """The outcome of one walk of the chain (`audit_verify` or the console's job): which seqs were
    checked, the head and checkpoint it compared with, and the first broken link. The console shows
    the latest one ("verified at T up to seq N" / "BROKEN at seq N")."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=150)
    channel = models.CharField(max_length=16)
    job_id = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=ChainStatus.choices)
    since_seq = models.BigIntegerField()  # the first row whose content was checked
    head_seq = models.BigIntegerField()  # the last row there was when the walk started (0: none)
    checked = models.BigIntegerField()
    broken_seq = models.BigIntegerField(null=True, blank=True)
    problem = models.CharField(max_length=512, blank=True, default="")
    checkpoint_id = models.BigIntegerField(null=True, blank=True)
    checkpoint_seq = models.BigIntegerField(null=True, blank=True)
    signature_checked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-id"]
        permissions = [("verify_auditchain", "Can verify the audit chain")]

    def __str__(self) -> str:
        return f"verification {self.pk}: {self.status}"
