"""Retention of LIKE_COMMAND rows that changed nothing (CMD-15, E-2).

A command whose desired state was already the relation's state (an unlike of a video never liked, a
repeated like) leaves a `changed = false` command row and nothing else: no version, no outbox event.
Those rows exist only to answer a retry of the same operation id with its first verdict (CMD-13), so
past the retention window they are deleted, in bounded batches. Kept, whatever their age:

- command rows that changed a relation (`changed = true`): the evidence of each relation version;
- the relations themselves, UNLIKED tombstones included (CMD-15);
- every row inside the window: a retry inside it must still replay its verdict. The window
  (`RELATION_COMMAND_RETENTION_HOURS`) must therefore exceed the longest client retry window: a retry of
  a deleted no-op operation runs again as a new command.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from likes_project import leases
from likes_project.audit.services import Actor, audit_record
from likes_project.cursors import iso_utc
from likes_project.errors import Conflict, InvalidInput
from likes_project.eventlog.consumer import holder_id
from relations import routing
from relations.models import LikeCommand

RETENTION_PERMISSION = "relations.delete_likecommand"
RETENTION_LEASE = "relations:command_retention"
LEASE_TTL_S = 300.0
MAX_BATCH = 1000  # rows per transaction (consistency-techniques: chunk deletes at <= 1000 rows)


class RetentionRunning(Conflict):
    code = "retention_running"
    default_message = "Another command retention run holds the lease; try again when it ends."


@dataclass
class RetentionReport:
    cutoff: dt.datetime
    retention_hours: int
    deleted: dict[str, int] = field(default_factory=dict)
    finished: bool = True  # every shard had nothing left past the cutoff (a bounded run may stop early)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def _check_whole(name: str, value, *, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidInput(f"{name} must be a whole number {bound} (got {value!r}).", code="invalid_parameter",
                           parameter=name)
    return value


def command_retention_params(*, retention_hours: int | None = None, batch: int | None = None) -> tuple[int, int]:
    """The window (hours) and batch size a run uses: the given ones, checked, or the settings."""
    hours = _check_whole("retention_hours", settings.RELATION_COMMAND_RETENTION_HOURS
                         if retention_hours is None else retention_hours, low=1)
    size = _check_whole("batch", settings.RELATION_COMMAND_RETENTION_BATCH if batch is None else batch,
                        low=1, high=MAX_BATCH)
    return hours, size


def command_retention_cutoff(*, retention_hours: int, now: dt.datetime | None = None) -> dt.datetime:
    """No-op command rows created before this instant are past the window."""
    return (now or timezone.now()) - dt.timedelta(hours=retention_hours)


_DUE_SQL = "SELECT count(*) FROM {t} WHERE changed = false AND created_at < %s"

# Oldest first through the created_at index; SKIP LOCKED so two runs never wait on each other. The batch is
# chosen once, in a MATERIALIZED CTE: as `id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)` the planner may
# rescan the subquery for each outer row, and a rescan skips the row this statement just deleted and locks the
# next one, so one "batch" could delete more than n rows (the scaled topology's CI run deleted 2 for n = 1).
_DELETE_SQL = """
WITH batch AS MATERIALIZED (
    SELECT id FROM {t} WHERE changed = false AND created_at < %s
     ORDER BY created_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
DELETE FROM {t} c USING batch WHERE c.id = batch.id
"""


def command_retention_due(*, cutoff: dt.datetime) -> dict[str, int]:
    """How many no-op command rows each shard holds past `cutoff` (the progress total; a read)."""
    out = {}
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(_DUE_SQL.format(t=LikeCommand._meta.db_table), [cutoff])
            out[alias] = cursor.fetchone()[0]
    return out


def command_retention_batch(*, alias: str, cutoff: dt.datetime, limit: int) -> int:
    """Delete up to `limit` no-op command rows created before `cutoff` on one shard; returns how many.

    Transaction: one durable transaction on `alias`.
    Idempotency: deleting what is already gone deletes nothing; only `changed = false` rows past the
    cutoff are ever touched, so a retry inside the window still finds its row."""
    _check_whole("batch", limit, low=1, high=MAX_BATCH)
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(_DELETE_SQL.format(t=LikeCommand._meta.db_table), [cutoff, limit])
        return cursor.rowcount


def command_retention_run(*, actor: Actor, retention_hours: int | None = None, batch: int | None = None,
                          max_batches: int | None = None,
                          progress: Callable[[str, int], None] | None = None) -> RetentionReport:
    """Delete every no-op command row past the retention window, shard by shard in batches, under the
    retention lease; audited (`relations.command_retention`). `max_batches` bounds the batches per shard
    (the beat run); None runs to the end (the command). `progress(alias, deleted)` after every batch.

    Transaction: one per batch on the shard, then one on `default` for the audit record (the deletes
    are not undone if the audit fails: each batch is complete and repeatable on its own).
    Idempotency: a re-run deletes what is left; a concurrent run finds the lease taken (RetentionRunning)."""
    hours, size = command_retention_params(retention_hours=retention_hours, batch=batch)
    if max_batches is not None:
        _check_whole("max_batches", max_batches, low=1)
    grant = leases.lease_acquire(resource=RETENTION_LEASE, holder=holder_id(), ttl_s=LEASE_TTL_S)
    if grant is None:
        raise RetentionRunning()
    report = RetentionReport(cutoff=command_retention_cutoff(retention_hours=hours), retention_hours=hours)
    try:
        for alias in routing.all_aliases():
            report.deleted[alias] = 0
            batches = 0
            while True:
                n = command_retention_batch(alias=alias, cutoff=report.cutoff, limit=size)
                report.deleted[alias] += n
                batches += 1
                if progress is not None:
                    progress(alias, n)
                if n < size:
                    break
                if max_batches is not None and batches >= max_batches:
                    report.finished = False  # the next run goes on from here (oldest first)
                    break
                leases.lease_renew(grant, ttl_s=LEASE_TTL_S)
    finally:
        leases.lease_release(grant)
    if report.total or actor.channel != "system":  # an idle beat run is not worth an audit row
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="relations.command_retention", target_type="like_command",
                         target_id="changed=false", params={
                             "cutoff": iso_utc(report.cutoff), "retentionHours": hours, "batch": size,
                             "deleted": report.deleted, "finished": report.finished})
    return report
