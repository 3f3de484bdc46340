import time

from celery import signals

from likes_project import logs, metrics, nudge
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


_cpu_at_start: dict[str, float] = {}


@signals.task_prerun.connect(weak=False)
def _cpu_started(task_id=None, **_kw) -> None:
    _cpu_at_start[task_id] = time.process_time()


@signals.task_postrun.connect(weak=False)
def _cpu_counted(task_id=None, task=None, **_kw) -> None:
    """The process's CPU while the task ran (its nudge-sending thread included) and one run, per task name:
    `likes_task_cpu_seconds_total / likes_task_runs_total` is what one run of a task costs the worker."""
    started = _cpu_at_start.pop(task_id, None)
    if started is None or task is None:
        return
    metrics.inc("likes_task_cpu_seconds_total", time.process_time() - started, task=task.name)
    metrics.inc("likes_task_runs_total", task=task.name)
