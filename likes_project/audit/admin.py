"""The audit log in the admin, read-only. `?job_id=<id>` lists the records of one ops job."""

from __future__ import annotations

from django.contrib import admin

from likes_project.admin_kit import ReadOnlyAdmin
from likes_project.audit.models import AuditRecord


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "channel", "action", "target_type", "target_id", "outcome", "job_id")
    list_filter = ("action", "channel")
    search_fields = ("actor", "target_id")
    date_hierarchy = "at"
