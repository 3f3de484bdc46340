"""Thin Celery wrappers around the counting services: the count and reverse-index projectors, the
display snapshot job, the count cache's bucket refresh and loss detector, and the retirement of
deleted videos."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from counting.services.count_cache.layers import count_cache_buckets_refresh, count_cache_check_loss
from counting.services.projection import CountProjector
from counting.services.retire import deleted_videos_retire
from counting.services.reverse.projector import ReverseIndexProjector
from counting.services.snapshots import display_snapshot_refresh
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_pass
from likes_project.nudge import nudge


@shared_task(name="counting.project_partition", acks_late=True, ignore_result=True)
def project_partition_task(partition: int) -> dict:
    """One bounded pass of the count projector over one stream partition (lease-owned; a duplicate
    run returns `busy`). Re-triggers itself while there is more to read, and nudges the snapshot."""
    report = consume_pass(CountProjector(), partition=int(partition), batch_size=settings.COUNT_PROJECTOR_BATCH)
    if report.applied:
        nudge("counting.display_snapshot", debounce_s=0.2)
    return {"status": report.status, "applied": report.applied, "dead": report.dead_lettered}


@shared_task(name="counting.project_all", ignore_result=True)
def project_all_task() -> None:
    """Beat sweeper over every stream partition."""
    for partition in streams.all_partitions():
        project_partition_task.delay(partition)


@shared_task(name="counting.project_reverse", acks_late=True, ignore_result=True)
def project_reverse_task(partition: int) -> dict:
    """One bounded pass of the reverse-index projector over one stream partition (REV-1, REV-2)."""
    report = consume_pass(ReverseIndexProjector(), partition=int(partition), batch_size=500)
    return {"status": report.status, "applied": report.applied}


@shared_task(name="counting.project_reverse_all", ignore_result=True)
def project_reverse_all_task() -> None:
    """Beat sweeper: one reverse-projector pass per stream partition."""
    for partition in streams.all_partitions():
        project_reverse_task.delay(partition)


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
def retire_deleted_videos_task(limit: int = 1000, rounds: int = 20) -> dict:
    """Beat job: retire the reverse-index rows (state, sort, recent) of deleted videos, a bounded chunk
    per partition and table per round, and their display counts; idempotent (issue 5 §3)."""
    return deleted_videos_retire(limit=int(limit), rounds=int(rounds))
