"""Thin Celery wrapper of the dead-letter redrive (issue 9 §2)."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from likes_project.eventlog.redrive import dead_letters_redrive


@shared_task(name="eventlog.redrive", acks_late=True, ignore_result=True)
def redrive_task() -> dict:
    """Beat job: apply the REQUEUED dead letters still waiting (their store was down when an operator
    requeued them), oldest first, a bounded batch per run."""
    return asdict(dead_letters_redrive())
