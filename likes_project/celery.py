from celery import signals

from likes_project import logs, nudge
from likes_project.taskapp import app

__all__ = ["app"]

app.autodiscover_tasks()
# Our LOGGING in worker and beat; task_id, task name and the enqueuing request's id on every task line.
logs.celery_connect()
# A nudged task clears its "queued" flag when it starts (cross-process nudge coalescing, D89).
nudge.celery_connect()


@signals.task_prerun.connect(weak=False)
def _connections_checked(task=None, **_kw) -> None:
    """What Django does at the start of a request: close the connections that are past CONN_MAX_AGE or
    broken, keep the others (CELERY_DB_REUSE_MAX keeps Celery from closing them all, D91). Not for a
    task run in the caller's process (`apply`), whose connections are the caller's."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    from django.db import close_old_connections

    from likes_project.pgbackend.base import check_at_next_use

    close_old_connections()
    check_at_next_use()  # a task checks before its first query, as before D137 (only a request skips it)
