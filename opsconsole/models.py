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
