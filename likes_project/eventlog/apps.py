from django.apps import AppConfig
from django.core import checks

PASS_GROUPS_ID = "likes.E034"  # issue 34 §2, D143


def pass_groups_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """CONSUMER_PASS_GROUPS names registered consumers, each in one group at most (run after every app's ready)."""
    from likes_project.eventlog.registry import pass_groups_problems

    return [checks.Error(f"CONSUMER_PASS_GROUPS: {problem}.", id=PASS_GROUPS_ID,
                         hint="Name each consumer at most once, e.g. 'count,relcache,reverse;notify,risk'; "
                              "empty runs every consumer alone.")
            for problem in pass_groups_problems()]


class EventlogConfig(AppConfig):
    """Shared event-log machinery: the stream partitioning contract, leases with fencing tokens,
    consumer checkpoints, pause switches and the dead-letter table. Every projector uses it."""

    name = "likes_project.eventlog"
    label = "eventlog"

    def ready(self) -> None:
        from likes_project.eventlog import redrive
        from likes_project.opsjobs.services import job_kind_register

        job_kind_register(redrive.REQUEUE_KIND)
        checks.register(pass_groups_check)
