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
