"""The operations console owns no table yet: the audit log moved to the core (`likes_project.audit`).
`ConsolePermission` only carries the console's own permissions, so their names stay
`opsconsole.<codename>`."""

from __future__ import annotations

from django.db import models


class ConsolePermission(models.Model):
    """Holds the console's permissions; no table (managed = False), never queried."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [("view_relation_lookup", "Can look up relations, commands and outbox rows")]

    def __str__(self) -> str:
        return "operations console permissions"
