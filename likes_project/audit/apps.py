from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit log of every operational action and the identity of whoever acted (core layer:
    every app records its actions here), chained and checkpointed so tampering shows (D82)."""

    name = "likes_project.audit"
    label = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from likes_project.audit import jobs
        from likes_project.opsjobs.services import job_kind_register

        for kind in jobs.JOB_KINDS:
            job_kind_register(kind)
