"""Thin Celery wrappers around the ops-job runner."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from likes_project.nudge import nudge
from likes_project.opsjobs.services import RUN_LONG_TASK, RUN_TASK, job_run_slice, jobs_sweep


def _run(job_id: int) -> dict:
    job, outcome = job_run_slice(int(job_id), budget_s=settings.OPS_JOB_SLICE_S)
    if outcome == "parked":
        nudge(RUN_TASK, job.pk, debounce_s=0.0)
    return {"job": job.pk, "status": job.status, "outcome": outcome, "done": job.done}


@shared_task(name=RUN_TASK, acks_late=True, ignore_result=True)
def run_job_task(job_id: int) -> dict:
    """One slice of an ops job (at most OPS_JOB_SLICE_S, far below the time limits); enqueues the next
    slice while there is more to do. A duplicate delivery finds the lease taken and does nothing."""
    return _run(job_id)


@shared_task(name=RUN_LONG_TASK, acks_late=True, ignore_result=True, soft_time_limit=240, time_limit=270)
def run_long_job_task(job_id: int) -> dict:
    """A job that cannot be cut into slices (an export: one snapshot transaction) runs to its end in
    one task, under its own time limits (still below the broker's visibility timeout)."""
    return _run(job_id)


@shared_task(name="opsjobs.sweep", acks_late=True, ignore_result=True)
def sweep_jobs_task() -> dict:
    """Beat job: fail jobs whose worker died (and their generations); re-nudge waiting ones."""
    report = jobs_sweep()
    return {"abandoned": report.abandoned, "nudged": report.nudged}
