"""The lifecycle's states and the columns it owns on a generation model."""

from __future__ import annotations

from django.db import models
from django.db.models import Q, Value


class GenerationStatus(models.TextChoices):
    SHADOW = "SHADOW"
    BACKFILLING = "BACKFILLING"
    CATCHING_UP = "CATCHING_UP"
    VERIFYING = "VERIFYING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    RETIRED = "RETIRED"


S = GenerationStatus
BUILDING = (S.SHADOW.value, S.BACKFILLING.value, S.CATCHING_UP.value, S.VERIFYING.value)
LIVE = (*BUILDING, S.ACTIVE.value)  # the generations live writers keep current
FINISHED = (S.FAILED.value, S.RETIRED.value)
STEPS = ("backfill", "catch_up", "verify")
_STATUS_OF_STEP = {"backfill": S.BACKFILLING, "catch_up": S.CATCHING_UP, "verify": S.VERIFYING}


class GenerationModel(models.Model):
    """The columns the lifecycle owns. A concrete generation model adds its own contract or pins."""

    generation = models.PositiveIntegerField(primary_key=True)
    status = models.CharField(max_length=12, choices=GenerationStatus.choices)
    previous_generation = models.PositiveIntegerField(null=True, blank=True)  # ACTIVE when the run began
    job_id = models.BigIntegerField(null=True, blank=True)  # the ops job running the rebuild
    progress = models.JSONField(default=dict, blank=True)  # step, cursor, counters, user state
    fencing_token = models.BigIntegerField(default=0)  # the highest lease token that wrote this row
    started_by = models.CharField(max_length=150, blank=True, default="")
    activated_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)  # when it became FAILED or RETIRED
    failure_reason = models.CharField(max_length=512, blank=True, default="")

    class Meta:
        abstract = True
        constraints = [
            models.UniqueConstraint(fields=["status"], condition=Q(status="ACTIVE"),
                                    name="%(app_label)s_%(class)s_one_active"),
            # At most one run at a time: a unique index over a constant, for the building states only.
            models.UniqueConstraint(Value(True), condition=Q(status__in=BUILDING),
                                    name="%(app_label)s_%(class)s_one_building"),
        ]

    @property
    def is_building(self) -> bool:
        return self.status in BUILDING

    @property
    def step(self) -> str | None:
        return (self.progress or {}).get("step")

    @property
    def stats(self) -> dict:
        return (self.progress or {}).get("stats", {})
