"""Thin Celery wrappers: the beat entries of the check schedule (reconciliation.schedule)."""

from __future__ import annotations

from celery import shared_task

from reconciliation import schedule


@shared_task(name="reconciliation.identity_recent", acks_late=True, ignore_result=True)
def identity_recent_task() -> dict:
    return schedule.scheduled_start("reconcile-identity-recent")


@shared_task(name="reconciliation.coverage_recent", acks_late=True, ignore_result=True)
def coverage_recent_task() -> dict:
    return schedule.scheduled_start("reconcile-coverage-recent")


@shared_task(name="reconciliation.coverage_rotating", acks_late=True, ignore_result=True)
def coverage_rotating_task() -> dict:
    return schedule.scheduled_start("reconcile-coverage-rotating")


@shared_task(name="reconciliation.exact_hot", acks_late=True, ignore_result=True)
def exact_hot_task() -> dict:
    return schedule.scheduled_start("reconcile-exact-hot")


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
