from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit log of every operational action and the identity of whoever acted (core layer:
    every app records its actions here), chained and checkpointed so tampering shows (D82)."""

    name = "likes_project.audit"
    label = "audit"

    def ready(self) -> None:
        from likes_project.audit import jobs
        from likes_project.audit.redaction import audit_redact_user
        from likes_project.erasure import account_eraser_register
        from likes_project.opsjobs.services import job_kind_register

        for kind in jobs.JOB_KINDS:
            job_kind_register(kind)
        # A deleted account is named by its pseudonym only, in every record, on record (issue 31 §4, PRIV-4).
        account_eraser_register("audit", audit_redact_user)
