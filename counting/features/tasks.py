"""The feature export's beat job (`features.export`, every FEATURE_EXPORT_EVERY_S on the queue `maintenance`)."""

from __future__ import annotations

from celery import shared_task

from counting.features.services import ExportRunning, feature_export_run

MAX_SECONDS = 180.0  # periods started per run stop here; the time limits below cover the period in progress


@shared_task(name="features.export", acks_late=True, ignore_result=True, soft_time_limit=240, time_limit=270)
def export_task() -> dict:
    """One export pass (erasures, then every closed period); a run that finds another holding the lease is skipped."""
    try:
        report = feature_export_run(max_seconds=MAX_SECONDS)
    except ExportRunning:
        return {"status": "busy"}
    return {"status": "ok", **report.as_dict()}
