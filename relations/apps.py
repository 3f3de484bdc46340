from django.apps import AppConfig


class RelationsConfig(AppConfig):
    """The relation facts: commands, outbox and publisher, the visibility inputs, the relation cache,
    the liked lists, exports and accounts."""

    name = "relations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from likes_project.opsjobs.services import job_kind_register
        from relations import jobs, observability
        from relations.api import schema  # noqa: F401 - registers OpenAPI extensions

        for kind in jobs.JOB_KINDS:
            job_kind_register(kind)
        observability.register()
