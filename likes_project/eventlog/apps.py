from django.apps import AppConfig


class EventlogConfig(AppConfig):
    """Shared event-log machinery: the stream partitioning contract, leases with fencing tokens,
    consumer checkpoints, pause switches and the dead-letter table. Every projector uses it."""

    name = "likes_project.eventlog"
    label = "eventlog"

    def ready(self) -> None:
        from likes_project.eventlog import redrive
        from likes_project.opsjobs.services import job_kind_register

        job_kind_register(redrive.REQUEUE_KIND)
