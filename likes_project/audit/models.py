"""The audit log on `default`. Moved here from `opsconsole` (its table keeps the old name)."""

from __future__ import annotations

import pgtrigger
from django.db import models


class AuditRecord(models.Model):
    """One operational action: who did what to which target, with which parameters and outcome, and
    the ops job it ran in (if any). Append-only, in the database: a row trigger refuses every UPDATE
    and DELETE (an outcome known later is a second record, never an edit), and the admin is read-only."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.CharField(max_length=150)
    channel = models.CharField(max_length=16)  # admin | cli | api | system
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=32)
    target_id = models.CharField(max_length=128, db_index=True)
    params = models.JSONField(default=dict)
    outcome = models.CharField(max_length=32, default="applied")
    job_id = models.BigIntegerField(null=True, blank=True, db_index=True)

    class Meta:
        db_table = "opsconsole_auditrecord"
        ordering = ["-at"]
        triggers = [
            # Row-level, so TRUNCATE (a test database flush) is not refused; see docs/decisions.md D49.
            pgtrigger.Protect(name="audit_append_only", operation=pgtrigger.Update | pgtrigger.Delete),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target_type}:{self.target_id}"
