from django.apps import AppConfig


class OpsJobsConfig(AppConfig):
    """Ops jobs: every long operator action (rebuilds, account deletion, exports, and what later
    issues add) runs as a job with persisted progress, on the workers or in the foreground of a
    management command, never inside a web request."""

    name = "likes_project.opsjobs"
    label = "opsjobs"
    verbose_name = "Ops jobs"

    def ready(self) -> None:
        from likes_project.opsjobs import observability

        observability.register()
