"""Thin Celery wrappers around the relations services: the outbox publisher, republisher and
archiver, the relation cache's projector, repair, loss detector and sampler, and the command retention
(house style: primitive args, one service call)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from likes_project import leases
from likes_project.audit.services import system_actor
from likes_project.eventlog.consumer import consumer_tasks, holder_id
from likes_project.eventlog.registry import pass_tasks
from likes_project.eventlog.services import streams_trim
from likes_project.nudge import nudge, send_unless_pending
from relations import routing
from relations.services import erasure, outbox, retention
from relations.services.relation_cache import (
    RelationCacheProjector,
    relation_cache_check_loss,
    relation_cache_repair,
    relation_cache_repair_hinted,
    relation_cache_sample_check,
)

PUBLISH_ROUNDS = 20


@shared_task(name="relations.publish_outbox", acks_late=True, ignore_result=True)
def publish_outbox_task(alias: str) -> dict:
    """Publish one relation shard's due outbox rows under the shard's publisher lease; nudge the
    count projector for every partition it wrote to. A second copy finds the lease taken."""
    if alias not in settings.RELATION_SHARD_ALIASES:
        return {"status": "unknown_alias"}
    grant = leases.lease_acquire(resource=f"publisher:{alias}", holder=holder_id(), ttl_s=30)
    if grant is None:
        return {"status": "busy"}
    sent, partitions = 0, set()
    try:
        for _ in range(PUBLISH_ROUNDS):
            report = outbox.outbox_publish_batch(alias=alias, holder=grant.holder)
            if report.paused:
                return {"status": "paused"}  # the shard's publisher switch (issue 14 §3); the lease is released
            sent += report.sent
            partitions |= report.partitions
            if report.claimed < settings.OUTBOX_PUBLISH_BATCH:
                break
            leases.lease_renew(grant, ttl_s=30)
    finally:
        leases.lease_release(grant)
    tasks = pass_tasks()  # every projector of the stream, by its pass group (D143)
    for partition in sorted(partitions):
        for task in tasks:
            nudge(task, partition, debounce_s=0.0)
    return {"status": "ok", "sent": sent}


@shared_task(name="relations.publish_all", ignore_result=True)
def publish_all_task() -> None:
    """Beat sweeper: the on-commit nudge is only an optimisation (T2). Nothing is added for a shard whose
    publisher already waits in the broker (D89)."""
    for alias in routing.all_aliases():
        send_unless_pending(publish_outbox_task.name, (alias,))


@shared_task(name="relations.republish_lost", acks_late=True, ignore_result=True)
def republish_lost_task() -> dict:
    """Detect events lost from the stream and republish them from the outbox (O5)."""
    found = {}
    for alias in routing.all_aliases():
        report = outbox.outbox_republish_lost(alias=alias)
        found[alias] = report.republished
        if report.republished:
            nudge("relations.publish_outbox", alias, debounce_s=0.0)
    return found


@shared_task(name="relations.archive_outbox", acks_late=True, ignore_result=True)
def archive_outbox_task() -> dict:
    """Move published rows past the retention window into the archive, a chunk per shard, then
    trim the streams below every consumer's checkpoint and the same window."""
    moved = {alias: outbox.outbox_archive_batch(alias=alias) for alias in routing.all_aliases()}
    trimmed = streams_trim(retention_s=settings.OUTBOX_RETENTION_HOURS * 3600)
    return {"archived": moved, "trimmed": trimmed}


@shared_task(name="relations.relcache_repair", ignore_result=True)
def relcache_repair_task(user_id: int, video_ids: list[str] | None = None) -> int:
    """Readers missed relations of this user: repair what their hint set holds (RCACHE-4 step 6). A
    message from before the hint sets (it names the videos) is served as it was."""
    if video_ids is not None:
        return relation_cache_repair(user_id=int(user_id), video_ids=[str(v) for v in video_ids][:200])
    return relation_cache_repair_hinted(user_id=int(user_id))


# The relation-cache projector (RCACHE-3), one pass per partition.
project_relcache_task, project_relcache_all_task = consumer_tasks(
    RelationCacheProjector, name="relations.project_relcache", sweep_name="relations.project_relcache_all",
    batch_size=lambda: 500)


@shared_task(name="relations.relcache_check_loss", acks_late=True, ignore_result=True)
def relcache_check_loss_task() -> str:
    """Detect a flushed relation cache and start its rebuild (RCACHE-7)."""
    return relation_cache_check_loss()


@shared_task(name="relations.relcache_sample_check", acks_late=True, ignore_result=True)
def relcache_sample_check_task() -> dict:
    """Dirty-data sampler: compare a random sample of cached relations with the facts and repair."""
    report = relation_cache_sample_check()
    return {"sampled": report.sampled, "stale": report.stale, "repaired": report.repaired}


@shared_task(name="relations.command_retention", acks_late=True, ignore_result=True)
def command_retention_task() -> dict:
    """Beat: delete no-op command rows past the retention window (CMD-15), a bounded number of batches
    per shard per run; the next run goes on where this one stopped. A run overlapping another is skipped."""
    try:
        report = retention.command_retention_run(actor=system_actor("command-retention"),
                                                 max_batches=settings.RELATION_COMMAND_RETENTION_MAX_BATCHES)
    except retention.RetentionRunning:
        return {"status": "busy"}
    return {"status": "ok", "deleted": report.deleted, "finished": report.finished}


@shared_task(name="relations.account_erasures_resume", acks_late=True, ignore_result=True)
def account_erasures_resume_task() -> list[int]:
    """Beat: run again every account deletion whose erasure was left waiting for the pipeline (issue 31 §4)."""
    return erasure.account_erasures_resume()


@shared_task(name="relations.slot_moves_cleanup", acks_late=True, ignore_result=True)
def slot_moves_cleanup_task() -> list[int]:
    """Issue 16 §3: delete the source rows of retired relation slot moves whose retention passed."""
    from relations.services.slot_moves.protocol import moves_cleanup_due

    return moves_cleanup_due()
