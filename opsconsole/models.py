"""The operations console's own tables. The audit log moved to the core (`likes_project.audit`).
`ConsolePermission` only carries the console's own permissions, so their names stay
`opsconsole.<codename>`; `GaugeSample` keeps the last hours of the stored gauges for the front page's
charts."""

from __future__ import annotations

from django.db import models


class ConsolePermission(models.Model):
    """Holds the console's permissions; no table (managed = False), never queried."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_relation_lookup", "Can look up relations, commands and outbox rows"),
            ("view_dashboard", "Can see the pipeline's health on the console's front page"),
        ]

    def __str__(self) -> str:
        return "operations console permissions"


class GaugeSample(models.Model):
    """The stored gauges (`likes_project.eventlog.models.GaugeSnapshot`) as they were at `at`, copied by
    the beat job `opsconsole.gauge_history_sample` and pruned after CONSOLE_HISTORY_KEEP_S. `values` is
    {family: [[labels, value], ...]} for the families the front page charts, an age family already turned
    into seconds as of `at`."""

    at = models.DateTimeField(unique=True)  # the snapshot's computed_at: one sample per stored snapshot
    values = models.JSONField(default=dict)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"gauges at {self.at.isoformat()}"


class DrillVerdict(models.TextChoices):
    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"  # the drill itself broke off (its exception is the open issue)


class DrillRecord(models.Model):
    """One fault drill's run, kept (spec TEST-5, issue 33 §2): which drill (and its numbers in spec §7), where it ran
    (stage, topology, code version), when, what it was expected to show, what it saw (the verdict as JSON), and what
    is left open. Written by the drill runner at the end of every run, failed ones too; never edited."""

    drill = models.CharField(max_length=64, db_index=True)
    spec_numbers = models.JSONField(default=list, blank=True)  # the spec §7 drills it runs; []: beyond the list
    run_id = models.CharField(max_length=32)
    seed = models.BigIntegerField(null=True, blank=True)  # a seeded run's (the soak's)
    stage = models.CharField(max_length=64)
    topology = models.CharField(max_length=32)
    code_version = models.CharField(max_length=64)
    requested_by = models.CharField(max_length=150)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    expected = models.TextField()
    actual = models.JSONField(default=dict)
    verdict = models.CharField(max_length=8, choices=DrillVerdict.choices)
    open_issues = models.TextField(blank=True, default="")
    history_file = models.CharField(max_length=512, blank=True, default="")

    class Meta:
        ordering = ["-started_at", "-pk"]
        indexes = [models.Index(fields=["-started_at"], name="drill_record_started")]

    def __str__(self) -> str:
        return f"{self.drill} {self.verdict} at {self.started_at:%Y-%m-%d %H:%M}"
