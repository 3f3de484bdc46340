from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit log of every operational action and the identity of whoever acted (core layer:
    every app records its actions here)."""

    name = "likes_project.audit"
    label = "audit"
    default_auto_field = "django.db.models.BigAutoField"
