"""Thin Celery wrappers around the counting services: the count and reverse-index projectors, the
display snapshot job, the count cache's bucket refresh and loss detector, the retirement of
deleted videos, and the migrations' beat (the materialised routes put back, the source copies cleaned)."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task
from django.conf import settings

from counting.services.count_cache.layers import count_cache_buckets_refresh, count_cache_check_loss
from counting.services.projection import CountProjector
from counting.services.retire import deleted_videos_retire
from counting.services.reverse.projector import ReverseIndexProjector
from counting.services.snapshots import display_snapshot_refresh
from likes_project.eventlog.consumer import consumer_tasks
from likes_project.nudge import nudge


def _nudge_snapshot(report) -> None:
    if report.applied:  # the changed counts reach the display snapshot sooner than its beat
        nudge("counting.display_snapshot", debounce_s=0.2)


# The count projector (PROJ) and the reverse-index projector (REV-1, REV-2), one pass per partition.
project_partition_task, project_all_task = consumer_tasks(
    CountProjector, name="counting.project_partition", sweep_name="counting.project_all",
    batch_size=lambda: settings.COUNT_PROJECTOR_BATCH, after=_nudge_snapshot)
project_reverse_task, project_reverse_all_task = consumer_tasks(
    ReverseIndexProjector, name="counting.project_reverse", sweep_name="counting.project_reverse_all",
    batch_size=lambda: 500)


@shared_task(name="counting.display_snapshot", acks_late=True, ignore_result=True)
def display_snapshot_task() -> dict:
    report = display_snapshot_refresh()
    return {"videos": report.videos, "skipped_hot": report.skipped_hot}


@shared_task(name="counting.count_cache_refresh_buckets", acks_late=True, ignore_result=True)
def count_cache_refresh_buckets_task(video_ids: list[str], generation: int | None = None) -> dict:
    """Rewrite the bucket layer of `video_ids` from the durable vbuckets, for `generation` (as
    enqueued) or every write target. A task of a generation that is no longer live, or carrying a
    lower bucket version or route epoch than Redis holds, is refused by the script."""
    report = count_cache_buckets_refresh(video_ids=list(video_ids),
                                         generation=int(generation) if generation is not None else None)
    return {"rows": report.rows, "verdicts": {str(g): v for g, v in report.verdicts.items()}}


@shared_task(name="counting.count_cache_check_loss", acks_late=True, ignore_result=True)
def count_cache_check_loss_task() -> str:
    """Detect a flushed count cache and start its rebuild (CCACHE-3)."""
    return count_cache_check_loss()


@shared_task(name="counting.retire_deleted_videos", acks_late=True, ignore_result=True)
def retire_deleted_videos_task(limit: int = 1000, rounds: int = 20, batch: int | None = None) -> dict:
    """Beat job: retire a bounded batch (RETIRE_BATCH_VIDEOS) of deleted videos not retired yet:
    their reverse-index rows (state, sort, recent; a bounded chunk per partition and table per round)
    and display counts; a video is marked retired once they are gone for good. Idempotent (issue 5 §3,
    issue 9 §4)."""
    report = deleted_videos_retire(limit=int(limit), rounds=int(rounds),
                                   batch=int(batch) if batch is not None else None)
    return asdict(report)


@shared_task(name="counting.bucket_migrations_cleanup", acks_late=True, ignore_result=True)
def bucket_migrations_cleanup_task() -> list[int]:
    """The migrations' beat: ROUTE-3, the materialised routes rebuilt from the active manifest when they
    disagree with it (a crash, a hand edit; nothing is written when they agree), then MIG-5, the source
    copies of retired migrations whose retention passed deleted. Returns the migrations cleaned."""
    from counting.services.manifests import routes_rebuild_if_disagreeing
    from counting.services.migration.protocol import migrations_cleanup_due

    routes_rebuild_if_disagreeing()
    return migrations_cleanup_due()
