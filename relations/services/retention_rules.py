"""The relations app's retention rules (issue 31 §4, PRIV-3), registered with `likes_project.retention` by
`RelationsConfig.ready()`:

- `noop-commands`: the command rows that changed nothing (CMD-15), past RELATION_COMMAND_RETENTION_HOURS, through
  `relations.services.retention`'s own batch (its command, beat job and page stay as they are);
- `commands`: the command rows that changed a relation, past COMMAND_RETENTION_DAYS;
- `outbox-archive`: the archived outbox events, published before OUTBOX_ARCHIVE_RETENTION_DAYS;
- `tombstones`: UNLIKED relation rows past TOMBSTONE_RETENTION_DAYS (`relations.services.tombstones`).

Kept whatever their age: the evidence of each relation's current version, which reconciliation reads to judge a
projection that lags or leads the facts (`reconciliation.services.evidence`): the command whose (user, video,
result_version) is the relation's (user, video, relation_version), and the archived event whose (aggregate_key,
relation_version) is the relation's. A relation's version only grows, so a row that is not the evidence when a
batch looks at it never becomes it again. UNLIKED tombstones are the fourth rule, `tombstones`, swept by
`relations.services.tombstones` with each slot's version floor (their window, TOMBSTONE_RETENTION_DAYS, must
exceed the longest event delay: `relations.checks`).

Scale: the kept evidence is the oldest part of both tables, and neither table has an index that skips it (the
archive has none on published_at at all), so a run walks it once per shard (`ShardedSweep` keeps each shard's
position between the batches of one run, so it is walked once a run, not once a batch)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable

from django.db import connections, transaction

from likes_project.retention import RetentionRule, retention_rule_register
from relations import routing
from relations.models import LikeCommand, LikeRelation, OutboxArchive
from relations.services.retention import MAX_BATCH, command_retention_batch
from relations.services.tombstones import tombstones_oldest, tombstones_sweep

CMD, REL, ARC = LikeCommand._meta.db_table, LikeRelation._meta.db_table, OutboxArchive._meta.db_table

# A position: where the last batch of this run stopped on a shard (None: at the start).
Batch = Callable[..., tuple[int, object | None]]


class ShardedSweep:
    """A rule's `sweep(cutoff, limit)` over every relation shard in turn, up to `limit` rows in all, `batch` deleting
    at most MAX_BATCH rows on one shard in one transaction. Within one run (one cutoff: the runner computes it once
    per run, under the rule's lease) it remembers the shards that have nothing left past the cutoff and each
    shard's position, so the later batches of the run neither ask a finished shard again nor walk again over the
    rows it keeps; a new cutoff (the next run) starts from the beginning."""

    def __init__(self, batch: Batch):
        self._batch = batch
        self._lock = threading.Lock()
        self._cutoff: dt.datetime | None = None
        self._after: dict[str, object] = {}
        self._done: set[str] = set()

    def __call__(self, cutoff: dt.datetime, limit: int) -> int:
        with self._lock:
            if cutoff != self._cutoff:
                self._cutoff, self._after, self._done = cutoff, {}, set()
            deleted = 0
            for alias in routing.all_aliases():
                while alias not in self._done and deleted < limit:
                    want = min(limit - deleted, MAX_BATCH)
                    n, position = self._batch(alias=alias, cutoff=cutoff, limit=want, after=self._after.get(alias))
                    deleted += n
                    if position is not None:
                        self._after[alias] = position
                    if n < want:
                        self._done.add(alias)
            return deleted


def _delete(alias: str, sql: str, params: list) -> list[tuple]:
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _oldest(sql: str) -> dt.datetime | None:
    found = []
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(sql)
            row = cursor.fetchone()  # no row: an ORDER BY ... LIMIT 1 that found nothing
            found.append(None if row is None else row[0])
    return min((f for f in found if f is not None), default=None)


# --- noop-commands: CMD-15's rows, through its own batch ------------------------------------------------


def _noop_batch(*, alias: str, cutoff: dt.datetime, limit: int, after) -> tuple[int, None]:
    return command_retention_batch(alias=alias, cutoff=cutoff, limit=limit), None


def noop_commands_oldest() -> dt.datetime | None:
    return _oldest(f"SELECT min(created_at) FROM {CMD} WHERE changed = false")


# --- commands: rows that changed a relation, except the current version's ------------------------------

_CMD_EVIDENCE = (f"EXISTS (SELECT 1 FROM {REL} r WHERE r.user_id = c.user_id AND r.video_id = c.video_id "
                 "AND r.relation_version = c.result_version)")

# Oldest first through the created_at index, after the run's position on this shard; SKIP LOCKED and the
# MATERIALIZED CTE as in `relations.services.retention._DELETE_SQL` (a batch is chosen once, never rescanned).
_CMD_DELETE_SQL = f"""
WITH batch AS MATERIALIZED (
    SELECT c.id, c.created_at FROM {CMD} c
     WHERE c.changed AND c.created_at < %s AND c.created_at >= %s AND (c.created_at, c.id) > (%s, %s)
       AND NOT {_CMD_EVIDENCE}
     ORDER BY c.created_at, c.id LIMIT %s FOR UPDATE OF c SKIP LOCKED)
DELETE FROM {CMD} d USING batch WHERE d.id = batch.id
RETURNING batch.created_at, batch.id
"""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def commands_batch(*, alias: str, cutoff: dt.datetime, limit: int, after: tuple | None = None) -> tuple[int, tuple]:
    """Delete up to `limit` command rows that changed a relation, created before `cutoff`, on one shard, after
    the position `after` ((created_at, id); None: from the oldest), keeping the evidence of each relation's
    current version. Returns (how many, the position of the last one deleted).

    Transaction: one durable transaction on `alias`.
    Idempotency: only rows past the cutoff that are not a current version's evidence are ever touched."""
    at, last_id = after or (_EPOCH, 0)
    rows = _delete(alias, _CMD_DELETE_SQL, [cutoff, at, at, last_id, min(limit, MAX_BATCH)])
    return len(rows), max(rows, default=after)


def commands_oldest() -> dt.datetime | None:
    """The oldest command row that changed a relation and is not its current version's evidence."""
    return _oldest(f"SELECT c.created_at FROM {CMD} c WHERE c.changed AND NOT {_CMD_EVIDENCE} "
                   "ORDER BY c.created_at LIMIT 1")


# --- outbox-archive: archived events, except the current version's --------------------------------------

# An aggregate key is "<user id>:<video id>" (`relations.events.aggregate_key`); split, it finds the relation by
# its unique (user_id, video_id) index. A key that is not one (none is today) matches no relation: not evidence.
_ARC_EVIDENCE = (
    f"EXISTS (SELECT 1 FROM {REL} r WHERE r.user_id = "
    "CASE WHEN split_part(a.aggregate_key, ':', 1) ~ '^[0-9]{1,18}$' "
    "THEN split_part(a.aggregate_key, ':', 1)::bigint END "
    "AND r.video_id = substr(a.aggregate_key, strpos(a.aggregate_key, ':') + 1) "
    "AND r.relation_version = a.relation_version)"
)
# By primary key: OutboxArchive has no index on published_at (ids follow commit order, so the old rows come first).
_ARC_DELETE_SQL = f"""
WITH batch AS MATERIALIZED (
    SELECT a.id FROM {ARC} a
     WHERE a.id > %s AND a.published_at < %s AND NOT {_ARC_EVIDENCE}
     ORDER BY a.id LIMIT %s FOR UPDATE OF a SKIP LOCKED)
DELETE FROM {ARC} d USING batch WHERE d.id = batch.id
RETURNING batch.id
"""


def outbox_archive_batch_delete(*, alias: str, cutoff: dt.datetime, limit: int,
                                after: int | None = None) -> tuple[int, int | None]:
    """Delete up to `limit` archived outbox events published before `cutoff` on one shard, after the id `after`,
    keeping the event of each relation's current version. Returns (how many, the last id deleted).

    Transaction: one durable transaction on `alias`.
    Idempotency: only archived events past the cutoff that are not a current version's evidence are touched."""
    rows = _delete(alias, _ARC_DELETE_SQL, [after or 0, cutoff, min(limit, MAX_BATCH)])
    return len(rows), max((r[0] for r in rows), default=after)


def outbox_archive_oldest() -> dt.datetime | None:
    """The oldest publication among the archived events that are not a current version's evidence (a scan of
    the archive: measured once a sweep)."""
    return _oldest(f"SELECT min(a.published_at) FROM {ARC} a WHERE NOT {_ARC_EVIDENCE}")


def register() -> None:
    """The relations app's rules (its AppConfig.ready)."""
    for rule in (
        RetentionRule("noop-commands", "RELATION_COMMAND_RETENTION_HOURS", "hours",
                      "command rows that changed nothing (CMD-15)", ShardedSweep(_noop_batch), noop_commands_oldest),
        RetentionRule("commands", "COMMAND_RETENTION_DAYS", "days",
                      "command rows that changed a relation, except each relation's current version",
                      ShardedSweep(commands_batch), commands_oldest),
        RetentionRule("outbox-archive", "OUTBOX_ARCHIVE_RETENTION_DAYS", "days",
                      "archived outbox events, except each relation's current version",
                      ShardedSweep(outbox_archive_batch_delete), outbox_archive_oldest),
        RetentionRule("tombstones", "TOMBSTONE_RETENTION_DAYS", "days",
                      "UNLIKED tombstones (their versions kept in each slot's floor)", tombstones_sweep,
                      tombstones_oldest),
    ):
        retention_rule_register(rule)
