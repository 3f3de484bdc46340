"""Ops jobs on `default`."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from likes_project.model_kit import FinishedByStatus


class JobStatus(models.TextChoices):
    QUEUED = "QUEUED"  # created; no slice has run yet
    RUNNING = "RUNNING"  # a slice runs now (holder set) or the next slice is due (holder empty)
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


FINISHED_JOB_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED)


class OpsJob(FinishedByStatus, models.Model):
    """One long operator action. Its handler (by `kind`) runs it in slices: each slice holds a lease,
    works until its budget is spent and saves `state` (its resumable cursor) and the progress counters.
    `holder` is the slice running now; empty between slices."""

    finished_statuses = FINISHED_JOB_STATUSES

    kind = models.CharField(max_length=64, db_index=True)
    params = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED)
    actor = models.CharField(max_length=150)
    channel = models.CharField(max_length=16)
    target = models.CharField(max_length=128, blank=True, default="")  # what it works on, for the list
    done = models.BigIntegerField(default=0)
    total = models.BigIntegerField(null=True, blank=True)
    unit = models.CharField(max_length=32, default="items")
    message = models.CharField(max_length=512, blank=True, default="")  # the latest progress line
    last_error = models.TextField(blank=True, default="")
    state = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    holder = models.CharField(max_length=128, blank=True, default="")
    slices = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "updated_at"], name="opsjob_status_idx")]
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"job {self.pk} {self.kind} ({self.status})"

    @property
    def rate(self) -> float | None:
        """Units per second since the first slice started."""
        if self.started_at is None or not self.done:
            return None
        end = self.finished_at or timezone.now()
        seconds = (end - self.started_at).total_seconds()
        return self.done / seconds if seconds > 0 else None

    @property
    def eta_seconds(self) -> float | None:
        rate = self.rate
        if self.finished or rate is None or self.total is None or self.total < self.done:
            return None
        return (self.total - self.done) / rate

    @property
    def percent(self) -> float | None:
        if self.total is None or self.total <= 0:
            return 100.0 if self.status == JobStatus.SUCCEEDED else None
        return min(100.0, 100.0 * self.done / self.total)
