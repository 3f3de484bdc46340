from django.apps import AppConfig


class ReconciliationConfig(AppConfig):
    """Proving the counts (identity, coverage, exact check runs and their diffs) and repairing them
    from the facts with a second operator's approval (issue 11)."""

    name = "reconciliation"

    def ready(self) -> None:
        from likes_project.opsjobs.services import job_kind_register
        from reconciliation import jobs, observability

        for kind in jobs.JOB_KINDS:
            job_kind_register(kind)
        observability.register()
