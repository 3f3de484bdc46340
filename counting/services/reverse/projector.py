"""The reverse-index projector on the shared consumer framework.

For a batch of events read from one stream partition:
  every live generation (ACTIVE, and the building one during a rebuild) -> reverse shard of the user ->
  the count partition `placement[shard]` -> per partition ONE local transaction that checks the
  consumer fence, skips receipted (generation, position)s, folds the versioned REV-2 rule over the
  locked state rows, deletes the exact old sort entries, inserts the new ones, updates the
  state/tombstone rows, keeps the recent-likers summary in step and writes the receipts. The framework
  advances the checkpoint only over entries whose every group committed.

`liked_at` is always the relation transaction's `stateChangedAt` (for a rebuild: the fact's
`state_changed_at`), never a publish, delivery or consume time. Serving filters (deleted videos,
privacy, bans, blocks) are applied at read time by the likers API, not here (REV-6): the projection
keeps recording versions and tombstones whatever the video's status.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass

from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from counting import routing
from counting.models import LikeReverseProjection, LikeReverseRecent, LikeReverseSort, ReverseEventReceipt
from counting.services import group_kit as kit
from likes_project import metrics
from likes_project.dbraw import raw_cursor
from likes_project.eventlog.consumer import Retryable
from likes_project.eventlog.retry import retryable_from
from likes_project.eventlog.streams import StreamEntry
from relations.events import LIKED, UNLIKED, validate_event

logger = logging.getLogger(__name__)

REVERSE_CONSUMER = "reverse"
RECENT_KEEP = 20  # K: rows of the recent-likers summary kept per (generation, video) on each partition


@dataclass(frozen=True)
class Item:
    """One relation change aimed at one generation's rows: an event (ref = stream entry id) or, in a
    rebuild, a relation fact (ref = "")."""

    generation: int
    shard: int
    video_id: str
    user_id: int
    version: int
    state: str
    changed_at: dt.datetime
    ref: str = ""
    event_id: str = ""

    @property
    def key(self) -> tuple[int, str, int]:
        return (self.generation, self.video_id, self.user_id)


@dataclass
class Row:
    state: str
    version: int
    liked_at: dt.datetime | None
    shard: int


def fold_items(items: list[Item], before: dict[tuple[int, str, int], Row]
               ) -> tuple[dict[tuple[int, str, int], Row], list[tuple[Item, str]]]:
    """REV-2 in stream order, in memory: a version not above the current one changes nothing; a higher
    UNLIKED makes a tombstone (no sort entry); a higher LIKED (v13 across a missing v12 included) puts
    the entry at that version's own stateChangedAt. Unknown relations start as UNLIKED v0."""
    return kit.fold_versions(
        items, before, key=lambda it: it.key, version=lambda it: it.version, stored_version=lambda row: row.version,
        apply=lambda it, _cur: Row(it.state, it.version, it.changed_at if it.state == LIKED else None, it.shard),
    )


def _ensure_state_rows(alias: str, items: list[Item], now) -> None:
    """Missing state rows as UNLIKED v0 placeholders ("never seen") before the group transaction, so
    the projector and a rebuild's backfill of the same rows never race on an insert (D31)."""
    kit.rows_ensure(alias, LikeReverseProjection,
                columns=[("generation", "int"), ("video_id", "text"), ("user_id", "bigint"), ("reverse_shard", "int")],
                rows=[(it.generation, it.video_id, it.user_id, it.shard) for it in items],
                defaults={"relation_version": "0", "state": f"'{UNLIKED}'", "liked_at": "NULL", "updated_at": "%s"},
                params=[now], conflict=("generation", "video_id", "user_id"))


def _fold_and_write(cursor, alias: str, items: list[Item], now) -> tuple[list[tuple[Item, str]], int]:
    """Inside the caller's transaction: lock the state rows, fold, then move the sort entries (exact
    delete with the stored liked_at, then insert) and update the state/tombstone rows. Returns the
    verdicts and how many state rows it wrote as tombstones (UNLIKED)."""
    _lock_videos(cursor, {(it.generation, it.video_id) for it in items})
    locked = kit.rows_lock(cursor, LikeReverseProjection, keys=[it.key for it in items],
                           columns=[("generation", "int"), ("video_id", "text"), ("user_id", "bigint")],
                           values=["state", "relation_version", "liked_at", "reverse_shard"])
    before = {key: Row(*values) for key, values in locked.items()}
    after, verdicts = fold_items(items, before)
    deletes, inserts, updates = [], [], []
    for key in sorted(after):
        old, new = before.get(key), after[key]
        if old is not None and (old.state, old.version) == (new.state, new.version):
            continue
        g, video_id, user_id = key
        had = old is not None and old.state == LIKED
        has = new.state == LIKED
        if had and (not has or old.liked_at != new.liked_at):
            deletes.append((g, video_id, old.shard, old.liked_at, user_id))
        if has and (not had or old.liked_at != new.liked_at):
            inserts.append((g, video_id, new.shard, new.liked_at, user_id))
        updates.append((new.state, new.version, new.liked_at, g, video_id, user_id))
    if deletes:
        cursor.execute(SORT_DELETE_SQL, _columns(deletes, 5))
    if inserts:
        cursor.execute(SORT_INSERT_SQL, _columns(inserts, 5))
    if updates:
        cursor.execute(STATE_UPDATE_SQL, [now, *_columns(updates, 6)])
    _recent_write(cursor, alias, deletes, inserts)
    return verdicts, sum(1 for state, *_rest in updates if state == UNLIKED)


def _columns(rows: list[tuple], width: int) -> list[list]:
    """Row tuples -> one list per column (the arrays of an unnest)."""
    return [[r[i] for r in rows] for i in range(width)] if rows else [[] for _ in range(width)]


# Each write of a group is one statement over arrays (issue 15 §3, D88). Keys are distinct within a
# statement: one state row per (generation, video, user), and its sort entry at most once each way.
_SORT_KEY = "(generation, video_id, reverse_shard, liked_at, user_id)"
_SORT_ARRAYS = "unnest(%s::int[], %s::text[], %s::int[], %s::timestamptz[], %s::bigint[]) AS d(g, v, s, at, u)"
SORT_DELETE_SQL = (f"DELETE FROM {kit.table(LikeReverseSort)} AS e USING {_SORT_ARRAYS} WHERE e.generation = d.g "
                   "AND e.video_id = d.v AND e.reverse_shard = d.s AND e.liked_at = d.at AND e.user_id = d.u")
SORT_INSERT_SQL = (f"INSERT INTO {kit.table(LikeReverseSort)} {_SORT_KEY} SELECT g, v, s, at, u FROM {_SORT_ARRAYS} "
                   "ORDER BY g, v, s, at DESC, u")
STATE_UPDATE_SQL = (
    f"UPDATE {kit.table(LikeReverseProjection)} AS p SET state = d.st, relation_version = d.ver, liked_at = d.at, "
    "updated_at = %s FROM unnest(%s::text[], %s::bigint[], %s::timestamptz[], %s::int[], %s::text[], %s::bigint[]) "
    "AS d(st, ver, at, g, v, u) WHERE p.generation = d.g AND p.video_id = d.v AND p.user_id = d.u"
)


def _recent_lock_key(generation: int, video_id: str) -> int:
    digest = hashlib.sha256(f"likes-reverse-recent:{generation}:{video_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_videos(cursor, videos: set[tuple[int, str]]) -> None:
    """Transaction-scoped advisory locks on the (generation, video)s of a group, in key order, taken
    before any row lock: two groups touching the same video's recent summary on one partition are
    serialised, so a refill can never re-insert a liker another group is removing."""
    keys = sorted({_recent_lock_key(g, v) for g, v in videos})
    if keys:
        cursor.execute("SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS t(k)", [keys])


def _recent_write(cursor, alias: str, deletes: list[tuple], inserts: list[tuple]) -> None:
    """Keep the recent-likers summary in step with the sort entries just written (same transaction):
    remove the rows of entries that went away, add the new entries, refill from this partition's sort
    entries where a removed row was among the kept ones, then prune every touched video to the newest
    RECENT_KEEP rows. Every read is bounded (K rows per shard of this partition); each step is one
    statement for the whole group."""
    recent = kit.table(LikeReverseRecent)
    touched = sorted({(g, v) for g, v, _s, _at, _u in deletes} | {(g, v) for g, v, _s, _at, _u in inserts})
    if not touched:
        return
    refill: set[tuple[int, str]] = set()
    if deletes:
        gone = sorted({(g, v, u) for g, v, _s, _at, u in deletes})
        cursor.execute(
            f"DELETE FROM {recent} AS r USING unnest(%s::int[], %s::text[], %s::bigint[]) AS d(g, v, u) "
            "WHERE r.generation = d.g AND r.video_id = d.v AND r.user_id = d.u RETURNING r.generation, r.video_id",
            _columns(gone, 3))
        refill = {(g, v) for g, v in cursor.fetchall()}
    if inserts:
        cursor.execute(
            f"INSERT INTO {recent} (generation, video_id, user_id, liked_at) SELECT g, v, u, at FROM {_SORT_ARRAYS} "
            "ORDER BY g, v, u ON CONFLICT (generation, video_id, user_id) DO UPDATE SET liked_at = EXCLUDED.liked_at",
            _columns(inserts, 5))
    if refill:
        # This partition's shards of each refilled video's generation: K newest sort entries per shard.
        # Each generation's placement read once for the group (it was one query per refilled video: half of a
        # pass's time when unlikes touched thousands of videos).
        gens = {g: routing.reverse_generation_load(g) for g in sorted({g for g, _v in refill})}
        triples = []
        for g, video_id in sorted(refill):
            gen = gens[g]
            triples += [(g, video_id, s) for s in range(gen.shards) if gen.placement[s] == alias]
        cursor.execute(
            f"INSERT INTO {recent} (generation, video_id, user_id, liked_at) "
            "SELECT f.g, f.v, e.user_id, e.liked_at FROM unnest(%s::int[], %s::text[], %s::int[]) AS f(g, v, s) "
            f"CROSS JOIN LATERAL (SELECT liked_at, user_id FROM {kit.table(LikeReverseSort)} WHERE generation = f.g "
            "AND video_id = f.v AND reverse_shard = f.s ORDER BY liked_at DESC, user_id DESC LIMIT %s) e "
            "ON CONFLICT (generation, video_id, user_id) DO NOTHING",
            [*_columns(triples, 3), RECENT_KEEP])
    cursor.execute(
        f"DELETE FROM {recent} WHERE id IN (SELECT id FROM (SELECT r.id, row_number() OVER (PARTITION BY "
        "r.generation, r.video_id ORDER BY r.liked_at DESC, r.user_id DESC) AS n FROM unnest(%s::int[], %s::text[]) "
        f"AS t(g, v) CROSS JOIN LATERAL (SELECT id, generation, video_id, liked_at, user_id FROM {recent} "
        "WHERE generation = t.g AND video_id = t.v) r) ranked WHERE n > %s)",
        [*_columns(touched, 2), RECENT_KEEP])


def _tombstones_count(n: int) -> None:
    """M16: tombstone rows written (every generation's), counted once their transaction committed. A counter,
    not a gauge of the tombstones held, which would count rows of a table of every relation ever projected."""
    if n:
        metrics.inc("likes_reverse_tombstones_written_total", n)


def reverse_facts_apply(*, alias: str, items: list[Item]) -> list[tuple[Item, str]]:
    """Apply relation facts (a rebuild's backfill) to the rows on count partition `alias`.

    Transaction: one durable transaction on `alias`. Idempotency: versions decide; re-applying a fact
    is a duplicate."""
    if not items:
        return []
    now = timezone.now()
    _ensure_state_rows(alias, items, now)
    with transaction.atomic(using=alias, durable=True), raw_cursor(alias) as cursor:
        verdicts, tombstones = _fold_and_write(cursor, alias, items, now)
    _tombstones_count(tombstones)
    return verdicts


def _apply_group(alias: str, items: list[Item], *, consumer: str, partition: int, token: int) -> kit.GroupOutcome:
    """One local transaction on count partition `alias`: fence, receipts, fold, sort entries."""
    out = kit.GroupOutcome()
    now = timezone.now()
    _ensure_state_rows(alias, items, now)
    with transaction.atomic(using=alias, durable=True), raw_cursor(alias) as cursor:
        kit.consumer_fence_check(cursor, consumer, partition, token)
        receipted = kit.receipts_seen(cursor, ReverseEventReceipt, generations=[it.generation for it in items],
                                  partition=partition, refs=[it.ref for it in items])
        fresh = []
        for it in items:
            if (it.generation, it.ref) in receipted:  # a replay after a crash past the commit
                out.add(it.ref, kit.DUPLICATE)
            else:
                fresh.append(it)
        if not fresh:
            return out
        verdicts, tombstones = _fold_and_write(cursor, alias, fresh, now)
        kit.receipts_write(cursor, ReverseEventReceipt, partition=partition, now=now,
                       rows=[(it.generation, it.ref, it.event_id, verdict) for it, verdict in verdicts])
    _tombstones_count(tombstones)
    for it, verdict in verdicts:
        # M16: a version below the row's is a low-version rejection (STALE, REV-6: it cannot revive a cancelled
        # entry); the consumer framework counts it as likes_events_stale_total{consumer="reverse"}.
        out.add(it.ref, verdict)
    return out


def items_by_partition(gens: list[routing.ReverseGeneration], facts) -> dict[str, list[Item]]:
    """Route (user, video, version, state, changed_at, ref, event_id) tuples into every given generation:
    reverse shard of the user -> the count partition placed for it."""
    groups: dict[str, list[Item]] = defaultdict(list)
    for user_id, video_id, version, state, changed_at, ref, event_id in facts:
        for gen in gens:
            shard = gen.shard_of(user_id)
            groups[gen.placement[shard]].append(Item(gen.generation, shard, video_id, user_id, version, state,
                                                     changed_at, ref, event_id))
    return groups


class ReverseIndexProjector:
    """Consumer `reverse` on the shared framework (`counting.project_reverse` runs it per stream
    partition). Writes every live generation: ACTIVE, and a building one from its creation on."""

    name = REVERSE_CONSUMER

    def validate(self, entry: StreamEntry) -> None:
        validate_event(entry.event)

    def apply(self, entries: list[StreamEntry], *, consumer: str, partition: int, token: int):
        outcome = kit.GroupOutcome()
        try:
            generations = routing.reverse_live()
        except (DatabaseError, routing.ReverseContractInvalid) as exc:
            outcome.failed = {e.entry_id: retryable_from(exc) for e in entries}
            return kit.apply_result(entries, outcome)
        if not generations:
            outcome.failed = {e.entry_id: Retryable("no live reverse index generation") for e in entries}
            return kit.apply_result(entries, outcome)
        facts = [(e.event["userId"], e.event["videoId"], e.event["relationVersion"], e.event["absoluteState"],
                  parse_datetime(e.event["stateChangedAt"]), e.entry_id, str(e.event["eventId"])) for e in entries]
        for alias, items in sorted(items_by_partition(generations, facts).items()):
            try:
                outcome.merge(_apply_group(alias, items, consumer=consumer, partition=partition, token=token))
            except (Retryable, DatabaseError) as exc:
                logger.warning("reverse group on %s failed (%s); it will be replayed", alias, exc.__class__.__name__)
                error = retryable_from(exc)
                outcome.failed.update({it.ref: error for it in items})
        return kit.apply_result(entries, outcome)
