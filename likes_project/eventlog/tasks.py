"""Thin Celery wrappers of the dead-letter redrive (issue 9 §2) and of the store gauges' refresh
(issue 10 §3)."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from likes_project.eventlog.redrive import dead_letters_redrive
from likes_project.observability import gauges_refresh


@shared_task(name="eventlog.redrive", acks_late=True, ignore_result=True)
def redrive_task() -> dict:
    """Beat job: apply the REQUEUED dead letters still waiting (their store was down when an operator
    requeued them), oldest first, a bounded batch per run."""
    return asdict(dead_letters_redrive())


# expires: a refresh queued behind a worker outage is worthless once the next one is due; without it
# a worker coming back would first run every refresh beat queued meanwhile.
@shared_task(name="observability.refresh_gauges", acks_late=True, ignore_result=True, expires=60)
def gauges_refresh_task() -> dict:
    """Beat job (every METRICS_GAUGES_EVERY_S, `maintenance` queue): compute the store gauges of
    /metrics (outbox, streams, consumer lag, dead letters, snapshot staleness) and store them in the
    GaugeSnapshot row that scrapes read. Harmless when runs overlap (the newer snapshot wins)."""
    return asdict(gauges_refresh())
