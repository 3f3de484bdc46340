"""Thin Celery wrappers of the console's own periodic work."""

from __future__ import annotations

from celery import shared_task

from opsconsole import dashboard


@shared_task(name="opsconsole.gauge_history_sample", acks_late=True, ignore_result=True)
def gauge_history_sample_task() -> dict:
    """Beat job: keep the stored gauges of this moment for the front page's charts."""
    return {"added": dashboard.gauge_history_sample()}
