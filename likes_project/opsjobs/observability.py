"""The ops jobs' gauge (registered with `likes_project.observability`): jobs not finished yet, by kind and
status, which the console's front page charts beside the list of running jobs (issue 14 §0)."""

from __future__ import annotations

from django.db.models import Count

from likes_project.observability import Scrape, register_part
from likes_project.opsjobs.models import FINISHED_JOB_STATUSES, OpsJob


def _unfinished(scrape: Scrape) -> None:
    rows = (OpsJob.objects.exclude(status__in=FINISHED_JOB_STATUSES).order_by()
            .values_list("kind", "status").annotate(n=Count("id")))
    family = scrape.family("likes_ops_jobs_unfinished", "Ops jobs QUEUED or RUNNING, by kind and status.")
    for kind, status, n in sorted(rows):
        family.add(n, kind=kind, status=status)


def register() -> None:
    register_part("ops_jobs", _unfinished)
