"""The check schedule (REC-8; issue 11 §2), run by Celery beat: each entry picks its scope and starts a
run as an ops job on the workers, unless its previous run is still going (no pile-up).

- identity on the recently changed videos (their display snapshot moved in RECONCILE_RECENT_WINDOW_S),
  hot ones first (highest count), every minute;
- coverage on the same, every 5 minutes;
- a rotating coverage pass over every video by id (so no cold shard or partition starves), the next
  RECONCILE_ROTATING_VIDEOS_PER_RUN videos after where the previous pass stopped, every 10 minutes;
- exact on the RECONCILE_EXACT_HOT_LIMIT hottest videos (highest displayed count), once a day: the priority exact
  reconciliation of hot videos (REC-8), under its short write barrier; a scheduled exact PASSED is also what
  clears a refused or failed one-off check from the console's verdicts panel;
- exact on request, after a repair (the repair runs it) and after a migration (`exact_verify`).

`likes_reconcile_schedule_overdue{schedule}` is 1 when a schedule's last run finished longer ago than
three of its periods (the meta-alert), with the age of that run in `likes_reconcile_schedule_age_seconds`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from counting.models import VideoDisplayCount
from likes_project.audit.services import system_actor
from reconciliation.models import CheckRun, RunKind, RunMode, RunStatus
from reconciliation.services import evidence


@dataclass(frozen=True)
class Schedule:
    name: str
    mode: str
    every_s: float
    task: str


SCHEDULES = (
    Schedule("reconcile-identity-recent", RunMode.IDENTITY, 60.0, "reconciliation.identity_recent"),
    Schedule("reconcile-coverage-recent", RunMode.COVERAGE, 300.0, "reconciliation.coverage_recent"),
    Schedule("reconcile-coverage-rotating", RunMode.COVERAGE, 600.0, "reconciliation.coverage_rotating"),
    Schedule("reconcile-exact-hot", RunMode.EXACT, 86400.0, "reconciliation.exact_hot"),
)
BY_NAME = {s.name: s for s in SCHEDULES}


def recent_videos(*, limit: int | None = None) -> list[str]:
    """Videos whose display snapshot moved within the window, hottest first."""
    since = timezone.now() - dt.timedelta(seconds=settings.RECONCILE_RECENT_WINDOW_S)
    return list(VideoDisplayCount.objects.filter(generated_at__gte=since).order_by("-display_count", "video_id")
                .values_list("video_id", flat=True)[:limit or settings.RECONCILE_RECENT_LIMIT])


def hot_videos() -> list[str]:
    """The hottest videos by displayed count, whenever they last moved."""
    return list(VideoDisplayCount.objects.order_by("-display_count", "video_id")
                .values_list("video_id", flat=True)[:settings.RECONCILE_EXACT_HOT_LIMIT])


def rotating_videos() -> list[str]:
    """The next slice of every video by id after the previous rotating run's last one (wrapping)."""
    last = (CheckRun.objects.filter(schedule="reconcile-coverage-rotating").exclude(scope={})
            .order_by("-id").values_list("scope", flat=True).first())
    after = (last or {}).get("videos", [""])[-1] if last and last.get("videos") else ""
    from counting import routing

    gen = routing.active()
    videos = evidence.videos_after(after, settings.RECONCILE_ROTATING_VIDEOS_PER_RUN, gen=gen)
    return videos or evidence.videos_after("", settings.RECONCILE_ROTATING_VIDEOS_PER_RUN, gen=gen)


def scheduled_start(name: str) -> dict:
    """Start the schedule's next run (an ops job), or say why not."""
    from likes_project.opsjobs.services import job_start
    from reconciliation.jobs import job_for_mode

    spec = BY_NAME[name]
    if CheckRun.objects.filter(schedule=name, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).exists():
        return {"status": "previous_running"}
    videos = {"reconcile-coverage-rotating": rotating_videos, "reconcile-exact-hot": hot_videos}.get(
        name, recent_videos)()
    if not videos:
        return {"status": "nothing_to_check"}
    job = job_start(kind=job_for_mode(spec.mode), actor=system_actor(f"schedule:{name}"),
                    params={"mode": spec.mode, "scope": {"videos": videos}, "kind": RunKind.SCHEDULED,
                            "schedule": name}, target=name)
    return {"status": "started", "jobId": job.pk, "videos": len(videos)}


def overdue() -> dict[str, tuple[float | None, bool]]:
    """schedule -> (seconds since its last run finished (None: never), overdue?)."""
    now = timezone.now()
    out = {}
    for spec in SCHEDULES:
        last = (CheckRun.objects.filter(schedule=spec.name, finished_at__isnull=False).order_by("-finished_at")
                .values_list("finished_at", flat=True).first())
        age = (now - last).total_seconds() if last else None
        out[spec.name] = (age, age is None or age > 3 * spec.every_s)
    return out
