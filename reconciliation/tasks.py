"""Thin Celery wrappers: the beat entries of the check schedule (reconciliation.schedule)."""

from __future__ import annotations

from celery import shared_task

from reconciliation import schedule


def _scheduled_check_task(spec: schedule.Schedule):
    """The beat task of one check schedule: start the schedule's next run (`schedule.scheduled_start`)."""

    @shared_task(name=spec.task, acks_late=True, ignore_result=True)
    def scheduled_check_task() -> dict:
        return schedule.scheduled_start(spec.name)

    return scheduled_check_task


# One beat task per check schedule, named as `schedule.SCHEDULES` says: reconciliation.identity_recent,
# .coverage_recent, .coverage_rotating and .exact_hot.
SCHEDULED_CHECK_TASKS = {spec.name: _scheduled_check_task(spec) for spec in schedule.SCHEDULES}


# --- recovery snapshots (issue 12): a snapshot every SNAPSHOT_INTERVAL_S, a daily test-restore, and the
# drop of replaced generations' rows after their observation period.


@shared_task(name="reconciliation.snapshot_scheduled", acks_late=True, ignore_result=True)
def snapshot_scheduled_task() -> dict:
    from reconciliation.services.recovery import schedule as recovery_schedule

    return recovery_schedule.snapshot_scheduled()


@shared_task(name="reconciliation.snapshot_test_restore", acks_late=True, ignore_result=True)
def snapshot_test_restore_task() -> dict:
    from reconciliation.services.recovery import schedule as recovery_schedule

    return recovery_schedule.test_restore_scheduled()


@shared_task(name="reconciliation.drop_retired_generations", acks_late=True, ignore_result=True)
def drop_retired_generations_task() -> dict:
    from likes_project.audit.services import system_actor
    from reconciliation.services.recovery import restore

    return {str(g): n for g, n in restore.generations_drop_retired(actor=system_actor("generation-retention"))
            .items()}
