"""What operators may do to Celery beat's periodic tasks (issue 10, D48): enable, disable, run now.

The schedules live in code (`CELERY_BEAT_SCHEDULE`); the DatabaseScheduler writes them into
django-celery-beat's tables every time beat starts, overwriting the task, schedule, arguments and
options of each entry, but not `enabled`. Editing a schedule in the database would therefore last until
the next beat restart, so it is not offered at all; switching a task off (or on) does last, and running
one now is a nudge. Each of the three needs `django_celery_beat.change_periodictask` and a reason, and
writes one audit record per task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db import transaction
from django_celery_beat.models import PeriodicTask
from kombu.exceptions import OperationalError as BrokerError

from likes_project.audit.services import Actor, audit_record
from likes_project.errors import InvalidInput, NotFound, ServiceUnavailable

BEAT_OPERATE_PERMISSION = "django_celery_beat.change_periodictask"


class PeriodicTaskNotFound(NotFound):
    code = "periodic_task_not_found"
    default_message = "No such periodic task."


@dataclass(frozen=True)
class BeatChange:
    changed: list[str]  # task names
    unchanged: list[str]


def _require_reason(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise InvalidInput("Give a reason.", code="reason_required")
    return reason


def periodic_tasks_set_enabled(*, ids: list[int], enabled: bool, actor: Actor, reason: str) -> BeatChange:
    """Enable or disable periodic tasks; beat reloads its schedule once it sees the change mark that
    `PeriodicTask.save` sets. One audit record per task ("periodic_task.enable" / "periodic_task.disable"),
    outcome "applied", or "unchanged" for a task already in that state.

    Transaction: one durable transaction on `default` (the task rows locked in id order, beat's change
    mark, the audit records).
    Idempotency: a task already in the requested state is not written (only its record, "unchanged")."""
    reason = _require_reason(reason)
    action = "periodic_task.enable" if enabled else "periodic_task.disable"
    changed, unchanged = [], []
    with transaction.atomic(using="default", durable=True):
        for task in PeriodicTask.objects.select_for_update().filter(pk__in=ids).order_by("pk"):
            before = task.enabled
            if before != enabled:
                task.enabled = enabled
                task.save()  # not a queryset update: save() marks the schedule changed (and clears last_run_at)
                changed.append(task.name)
            else:
                unchanged.append(task.name)
            audit_record(actor=actor, action=action, target_type="periodic_task", target_id=task.name,
                         params={"task": task.task, "enabled_before": before, "reason": reason},
                         outcome="applied" if before != enabled else "unchanged")
    return BeatChange(changed=changed, unchanged=unchanged)


def periodic_tasks_run_now(*, ids: list[int], actor: Actor, reason: str) -> list[str]:
    """Send the selected periodic tasks to the workers once, now, as beat would send them (their
    arguments; their queue, else the task routes). Returns the names sent.

    Transaction: the audit records ("periodic_task.run_now", outcome "requested") commit in one durable
    transaction on `default` before anything is sent; the sends follow, outside it, with no retry (the
    broker's connect and socket timeouts bound them). A send the broker refuses is a second record
    (outcome "send_failed", never an edit of the first) and a ServiceUnavailable naming the tasks not sent.
    Idempotency: none; each call sends again (the periodic tasks are sweepers, safe to run twice)."""
    from likes_project.celery import app

    reason = _require_reason(reason)
    app.loader.import_default_modules()
    with transaction.atomic(using="default", durable=True):
        tasks = list(PeriodicTask.objects.filter(pk__in=ids).order_by("pk"))
        unknown = sorted({t.task for t in tasks if t.task not in app.tasks})
        if unknown:
            raise InvalidInput(f"Not a task this service defines: {', '.join(unknown)}.", code="unknown_task")
        for task in tasks:
            audit_record(actor=actor, action="periodic_task.run_now", target_type="periodic_task",
                         target_id=task.name, params={"task": task.task, "reason": reason}, outcome="requested")
    sent, failed = [], []
    for task in tasks:
        try:
            app.send_task(task.task, args=json.loads(task.args or "[]"), kwargs=json.loads(task.kwargs or "{}"),
                          queue=task.queue or None, headers={"periodic_task_name": task.name}, retry=False)
        except (BrokerError, OSError) as exc:
            failed.append((task, exc))
        else:
            sent.append(task.name)
    if failed:
        with transaction.atomic(using="default", durable=True):
            for task, exc in failed:
                audit_record(actor=actor, action="periodic_task.run_now", target_type="periodic_task",
                             target_id=task.name, params={"task": task.task, "error": exc.__class__.__name__},
                             outcome="send_failed")
        raise ServiceUnavailable(f"The broker refused {', '.join(t.name for t, _e in failed)}"
                                 + (f"; sent {', '.join(sent)}." if sent else "."))
    return sent
