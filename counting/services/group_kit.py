"""What every projector of the count partitions does the same way, written once: the count projector
and the reverse-index projector both apply a batch as one local transaction per partition group.

- `consumer_fence_check`: the partition-local fence that refuses a paused old lease holder;
- `rows_ensure`: create the group's missing rows in their own committed statement before the group
  transaction, so that transaction only locks existing rows, in key order (decision D31);
- `receipts_seen` / `receipts_write`: which stream positions this projection already consumed;
- `fold_versions`: the versioned absolute-state rule (PROJ-1, PROJ-2, REV-2) in stream order;
- `GroupOutcome` and `apply_result`: one group's verdicts, and the framework's ApplyResult of them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from counting.models import CountConsumerFence
from likes_project.eventlog.consumer import ApplyResult, Retryable
from likes_project.eventlog.streams import TOPIC, StreamEntry

APPLIED, DUPLICATE, STALE = "applied", "duplicate", "stale"
_RANK = {APPLIED: 2, DUPLICATE: 1, STALE: 0}


class FenceLost(Retryable):
    """A newer lease holder has written to this partition: this (paused, old) holder must stop."""

    retry_reason = "fence"


def table(model) -> str:
    return model._meta.db_table


def consumer_fence_check(cursor, consumer: str, partition: int, token: int) -> None:
    """Record `token` as the highest seen for (consumer, stream partition) on this count partition, in
    the group's transaction; a lower token than one already seen raises FenceLost."""
    cursor.execute(
        f"INSERT INTO {table(CountConsumerFence)} AS f (consumer, partition, fencing_token) VALUES (%s, %s, %s) "
        "ON CONFLICT (consumer, partition) DO UPDATE SET fencing_token = GREATEST(f.fencing_token, "
        "EXCLUDED.fencing_token) RETURNING fencing_token",
        [consumer, partition, token],
    )
    seen = cursor.fetchone()[0]
    if seen > token:
        raise FenceLost(f"token {token} is older than {seen} on this partition")


def rows_ensure(alias: str, model, *, columns: list[tuple[str, str]], rows: Iterable[tuple], defaults: dict[str, str],
                conflict: tuple[str, ...], params: list | None = None) -> None:
    """INSERT the `rows` (values of `columns`, each `(name, postgres array type)`) that do not exist
    yet, with the constant `defaults` (column -> SQL literal or %s placeholder filled from `params`),
    in key order and in their own autocommit statement. A row created here for a group that then fails
    holds only the defaults, which is what "never seen" means."""
    rows = sorted(set(rows))
    if not rows:
        return
    names = [name for name, _type in columns]
    unnest = ", ".join(f"%s::{pg_type}[]" for _name, pg_type in columns)
    alias_cols = ", ".join(f"c{i}" for i in range(len(columns)))
    select = ", ".join([*(f"c{i}" for i in range(len(columns))), *defaults.values()])
    sql = (f"INSERT INTO {table(model)} ({', '.join([*names, *defaults])}) SELECT {select} "
           f"FROM unnest({unnest}) AS t({alias_cols}) ORDER BY {alias_cols} "
           f"ON CONFLICT ({', '.join(conflict)}) DO NOTHING")
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, [*(params or []), *([r[i] for r in rows] for i in range(len(columns)))])


def rows_lock(cursor, model, *, keys, columns: list[tuple[str, str]], values: list[str],
              generation: int | None = None) -> dict[tuple, tuple]:
    """Lock the rows of `keys` (values of the key `columns`, each `(name, postgres array type)`) in key
    order, in the caller's transaction, and return key -> the `values` columns. Rows that do not exist
    are absent (callers create them first, `rows_ensure`, so the lock order holds)."""
    names = [name for name, _type in columns]
    keys = sorted(set(keys))
    cursor.execute(
        f"SELECT {', '.join([*names, *values])} FROM {table(model)} WHERE "
        f"{'generation = %s AND ' if generation is not None else ''}({', '.join(names)}) IN "
        f"(SELECT * FROM unnest({', '.join(f'%s::{pg_type}[]' for _name, pg_type in columns)})) "
        f"ORDER BY {', '.join(names)} FOR UPDATE",
        [*([] if generation is None else [generation]), *([k[i] for k in keys] for i in range(len(names)))],
    )
    return {tuple(row[:len(names)]): tuple(row[len(names):]) for row in cursor.fetchall()}


def receipts_seen(cursor, model, *, generations: list[int], partition: int,
                  refs: Iterable[str]) -> set[tuple[int, str]]:
    """(generation, stream entry id) pairs already receipted on this partition: a replay after a crash
    past the commit (PROJ-4)."""
    cursor.execute(
        f"SELECT generation, source_offset FROM {table(model)} WHERE generation = ANY(%s) AND source_topic = %s "
        "AND source_partition = %s AND source_offset = ANY(%s)",
        [sorted(set(generations)), TOPIC, partition, sorted(set(refs))],
    )
    return {(g, ref) for g, ref in cursor.fetchall()}


def receipts_write(cursor, model, *, partition: int, rows: Iterable[tuple[int, str, str, str]], now) -> None:
    """One receipt per (generation, stream entry id, event id, verdict), in the group's transaction: one
    statement over arrays."""
    rows = list(rows)
    if not rows:
        return
    cursor.execute(
        f"INSERT INTO {table(model)} (generation, source_topic, source_partition, source_offset, event_id, outcome, "
        "created_at) SELECT g, %s, %s, ref, ev, verdict, %s FROM unnest(%s::int[], %s::text[], %s::text[], "
        "%s::text[]) AS t(g, ref, ev, verdict) "
        "ON CONFLICT (generation, source_topic, source_partition, source_offset) DO NOTHING",
        [TOPIC, partition, now, [r[0] for r in rows], [r[1] for r in rows], [r[2][:64] for r in rows],
         [r[3] for r in rows]],
    )


def fold_versions(items: Iterable[Any], before: dict[Hashable, Any], *, key: Callable[[Any], Hashable],
                  version: Callable[[Any], int], stored_version: Callable[[Any], int],
                  apply: Callable[[Any, Any], Any]) -> tuple[dict[Hashable, Any], list[tuple[Any, str]]]:
    """The versioned absolute-state rule, in order and in memory: an item whose version is not above
    the current one changes nothing (`duplicate` when equal, `stale` when lower); a higher one replaces
    the current value with `apply(item, current)` (`current` is None for a relation never seen, which
    reads as UNLIKED v0). Returns the values after the fold and each item's verdict."""
    state = dict(before)
    verdicts = []
    for item in items:
        k = key(item)
        current = state.get(k)
        have = stored_version(current) if current is not None else 0
        if version(item) <= have:
            verdicts.append((item, DUPLICATE if version(item) == have else STALE))
            continue
        state[k] = apply(item, current)
        verdicts.append((item, APPLIED))
    return state, verdicts


@dataclass
class GroupOutcome:
    """One partition group's result: a verdict per stream entry id it finished, an error per entry id
    it could not."""

    verdicts: dict[str, str] = field(default_factory=dict)
    failed: dict[str, Exception] = field(default_factory=dict)

    def add(self, ref: str, verdict: str) -> None:
        """An entry that fans out to several rows (generations) keeps its strongest verdict."""
        if ref not in self.verdicts or _RANK[verdict] > _RANK[self.verdicts[ref]]:
            self.verdicts[ref] = verdict

    def merge(self, other: GroupOutcome) -> None:
        for ref, verdict in other.verdicts.items():
            self.add(ref, verdict)
        self.failed.update(other.failed)


def apply_result(entries: list[StreamEntry], outcome: GroupOutcome) -> ApplyResult:
    """The framework's ApplyResult: an entry is done unless one of its groups failed (then it is
    replayed, and every group absorbs the replay by receipt or version)."""
    result = ApplyResult()
    for entry in entries:
        if entry.entry_id in outcome.failed:
            result.failed[entry.entry_id] = outcome.failed[entry.entry_id]
            continue
        result.done.add(entry.entry_id)
        verdict = outcome.verdicts.get(entry.entry_id, DUPLICATE)
        if verdict == APPLIED:
            result.applied += 1
        elif verdict == DUPLICATE:
            result.duplicates += 1
        else:
            result.stale += 1
    return result
