from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """Creator notifications (issue 31 §2): a consumer of the event log that coalesces the likes of each
    (author, video) over NOTIFY_WINDOW_S, on `default`, and the API that lists them to the author."""

    name = "counting.notifications"
    label = "notifications"
    verbose_name = "Creator notifications"

    def ready(self) -> None:
        from counting.notifications import tasks
        from counting.notifications.projector import NotifyProjector
        from counting.notifications.retention import RULE
        from counting.notifications.services import notifications_erase_user
        from likes_project.erasure import account_eraser_register
        from likes_project.eventlog.registry import consumer_register
        from likes_project.retention import retention_rule_register

        # The consumer `notify`: its pause switch (`switch set consumer notify`) is the consumer switch.
        consumer_register(NotifyProjector.name, task=tasks.project_notify_task.name, projector=NotifyProjector)
        # A deleted account's likes, relation rows and own notifications go (issue 31 §4, PRIV-4), and every
        # notification goes after NOTIFICATION_RETENTION_DAYS (PRIV-3).
        account_eraser_register("notifications", notifications_erase_user)
        retention_rule_register(RULE)
