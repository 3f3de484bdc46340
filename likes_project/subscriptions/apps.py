from django.apps import AppConfig


class SubscriptionsConfig(AppConfig):
    """Subscriptions (issue 31 §1): the governed way for another team to read the event log, pulled over HTTP
    with a token of its own, holding back trimming and archiving like an internal consumer."""

    name = "likes_project.subscriptions"
    label = "subscriptions"
    verbose_name = "Subscriptions"

    def ready(self) -> None:
        from likes_project.opsjobs.services import job_kind_register
        from likes_project.subscriptions import observability, replay, tasks  # noqa: F401 - the lag check's task

        observability.register()
        for kind in replay.JOB_KINDS:
            job_kind_register(kind)
