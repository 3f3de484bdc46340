"""The `notify` consumer: relation events -> the author's notification windows, on `default` (issue 31 §2,
ARCH-4: never inside the like transaction; it reads the event log like every projection).

For a batch read from one stream partition:
  the videos' authors (the visibility snapshots; an unknown video, or a like of one's own video, is done
  with nothing written) -> ONE transaction on `default` that locks the (author, video, user) rows in key
  order, folds the events over them by version, then moves the likers in and out of their windows and
  the windows' `new_likes` by exactly what moved.

The rule, per (author, video, user), in stream order (`fold`):
  - a version not above the highest applied is a duplicate or stale: done, nothing changes;
  - a LIKED adds the user to the window of its `stateChangedAt` (`windows.window_of`);
  - a later change made before the end of the window the current like counts in takes that like back
    (`cancels`): an UNLIKED, or a LIKED above a LIKED (the unlike between them is missing, and it fell
    before the new like, hence inside that window). After the window's end the window stays as it was.

Idempotency: by version, under the row lock, in the transaction that moves the likers. No receipts and no
partition fence are needed: a replay, a duplicate delivery or an old lease holder's late batch only brings
versions that are not above the stored ones. The window counts move by the rows a statement actually
inserted or deleted, so passes of other partitions adding likers to the same window (one relation is on
one partition; one window gathers many) add up instead of overwriting each other.

Deleted accounts (issue 31 §4, PRIV-4): an event whose liker or author is a DELETED account is done with nothing
written about that account: no placeholder (the placeholder insert leaves out deleted accounts), no liker, no
window, no relation row. Status is read once per batch, one query, INSIDE the batch's transaction AFTER its
relation rows are locked; that ordering is what lets `notifications_erase_user` (run by the deletion once the
likes are withdrawn, so after AccountStatus DELETED committed) leave nothing behind. The race is a batch that
read the status just before the deletion committed:
  - the batch locked its rows before reading the status, and the deletion committed after that read, so the
    rows (whose placeholders were committed before the lock) were locked before the eraser could start;
  - the eraser's first statement locks the user's relation rows (`FOR UPDATE`), so it waits for that batch to
    commit, and its later statements (each a fresh snapshot, READ COMMITTED) see and remove the likers and
    windows the batch wrote;
  - a batch whose status read comes after the deletion committed skips the user; one whose placeholders were
    inserted before the eraser deleted them finds its rows gone at the lock and also reads DELETED.
The withdrawal's own UNLIKED events are skipped like any other event of the account: the eraser removes its
likes whatever the window. The eraser is idempotent, so a second run (a resumed deletion) finds nothing.

Retention (PRIV-3): a change made more than NOTIFICATION_RETENTION_DAYS ago is done with nothing written (its
notification would already be past the retention; `likes_notify_skipped_total{reason="expired"}`). That is what
makes the retention sweep's deletion of old relation rows safe (`counting.notifications.retention`).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from redis.exceptions import RedisError

from counting.notifications.models import NotifyRelation, NotifyWindow, NotifyWindowLiker
from counting.notifications.windows import window_of
from counting.services import group_kit as kit
from likes_project import metrics
from likes_project.dbraw import raw_cursor
from likes_project.eventlog.consumer import ApplyResult
from likes_project.eventlog.retry import Retryable, retryable_from
from likes_project.eventlog.streams import StreamEntry
from relations import selectors
from relations.events import LIKED, UNLIKED, validate_event
from relations.models import AccountStatus, AccountStatusValue

logger = logging.getLogger(__name__)

NOTIFY_CONSUMER = "notify"
ALIAS = "default"
ADD, REMOVE = "add", "remove"


class RowVanished(Retryable):
    """A relation row deleted between its placeholder insert and the batch's lock (the retention sweep): the batch
    is replayed, and its placeholder inserted again."""

    retry_reason = "row_vanished"


@dataclass(frozen=True)
class Item:
    """One relation change of an author's video (ref = the stream entry id)."""

    author_id: int
    video_id: str
    user_id: int
    version: int
    state: str
    changed_at: dt.datetime
    ref: str

    @property
    def key(self) -> tuple[int, str, int]:
        return (self.author_id, self.video_id, self.user_id)


@dataclass(frozen=True)
class Row:
    """What the consumer keeps of one relation: its highest applied version and state, and the window its
    current like counts in (None when it counts in none)."""

    state: str
    version: int
    window_start: dt.datetime | None
    window_end: dt.datetime | None


@dataclass(frozen=True)
class Move:
    """A liker in or out of one window: (author, video, window start) is the window's key."""

    kind: str  # ADD | REMOVE
    window: tuple[int, str, dt.datetime]
    window_end: dt.datetime
    user_id: int
    liked_at: dt.datetime | None = None


class NotifyProjector:
    """Consumer `notify` on the shared framework (`notifications.project_partition` runs it per stream
    partition, on the Celery queue `notify`). Paused with the consumer switch `notify` (DEG-1 step 2)."""

    name = NOTIFY_CONSUMER
    version_guard = True  # the protection a counter-example test turns off
    deleted_accounts_skipped = True  # likewise

    def validate(self, entry: StreamEntry) -> None:
        validate_event(entry.event)

    # --- the rule --------------------------------------------------------------------------------

    def cancels(self, current: Row, item: Item) -> bool:
        """Whether `item` (a change above the current like) takes that like back: only when it was made
        before the end of the window the like counts in."""
        return item.changed_at < current.window_end

    def fold(self, items: list[Item], before: dict[tuple, Row], window_s: int
             ) -> tuple[dict[tuple, Row], list[tuple[Item, str]], list[Move]]:
        """The rule in stream order, in memory: the rows after the items, each item's verdict, and the
        likers to move in and out of windows, in order."""
        moves: list[Move] = []

        def step(it: Item, current: Row | None) -> Row:
            if current is not None and current.window_start is not None and self.cancels(current, it):
                moves.append(Move(REMOVE, (it.author_id, it.video_id, current.window_start), current.window_end,
                                  it.user_id))
            if it.state != LIKED:
                return Row(UNLIKED, it.version, None, None)
            start, end = window_of(it.changed_at, window_s)
            moves.append(Move(ADD, (it.author_id, it.video_id, start), end, it.user_id, it.changed_at))
            return Row(LIKED, it.version, start, end)

        after, verdicts = kit.fold_versions(
            items, before, key=lambda it: it.key, version=lambda it: it.version,
            stored_version=lambda row: row.version if self.version_guard else 0, apply=step)
        return after, verdicts, moves

    # --- the batch -------------------------------------------------------------------------------

    def apply(self, entries: list[StreamEntry], *, consumer: str, partition: int, token: int) -> ApplyResult:
        outcome = kit.GroupOutcome()
        try:
            videos = selectors.video_snapshots_get(video_ids=sorted({e.event["videoId"] for e in entries}))
        except (DatabaseError, RedisError) as exc:
            outcome.failed = {e.entry_id: retryable_from(exc) for e in entries}
            return kit.apply_result(entries, outcome)
        items, skipped = [], {"unknown_video": 0, "self_like": 0, "expired": 0, "deleted_account": 0}
        expired_before = timezone.now() - dt.timedelta(days=float(settings.NOTIFICATION_RETENTION_DAYS))
        for e in entries:
            video = videos.get(e.event["videoId"])
            changed_at = parse_datetime(e.event["stateChangedAt"])
            # No author to tell, the author liking their own video, or a change older than the retention: done,
            # nothing written.
            reason = ("unknown_video" if video is None else "self_like" if video.author_id == e.event["userId"]
                      else "expired" if changed_at < expired_before else None)
            if reason is not None:
                skipped[reason] += 1
                outcome.add(e.entry_id, kit.DUPLICATE)  # nothing to apply (counted apart below)
                continue
            items.append(Item(video.author_id, e.event["videoId"], e.event["userId"], e.event["relationVersion"],
                              e.event["absoluteState"], changed_at, e.entry_id))
        if items:
            try:
                verdicts, skipped["deleted_account"] = self.items_apply(items)
                for it, verdict in verdicts:
                    outcome.add(it.ref, verdict)
            except (DatabaseError, RowVanished) as exc:
                logger.warning("notify batch failed (%s); it will be replayed", exc.__class__.__name__)
                error = retryable_from(exc)
                outcome.failed.update({it.ref: error for it in items})
        for reason, n in skipped.items():
            if n:
                metrics.inc("likes_notify_skipped_total", n, reason=reason)
        return kit.apply_result(entries, outcome)

    def items_apply(self, items: list[Item]) -> tuple[list[tuple[Item, str]], int]:
        """Apply the items to the rows on `default`; returns the verdicts and how many items were skipped because
        their liker or author is a deleted account.

        Transaction: one durable transaction on `default` (the rows' placeholders are inserted before it,
        in their own statement, so it only locks existing rows, in key order; D31). The accounts' status is read
        in it after the locks (see the module's docstring). Idempotency: versions decide under the row locks."""
        now = timezone.now()
        window_s = int(settings.NOTIFY_WINDOW_S)
        keys = sorted({it.key for it in items})
        with raw_cursor(ALIAS) as cursor:  # autocommit: the placeholders, deleted accounts left out
            cursor.execute(PLACEHOLDER_SQL, [now, *_columns(keys, 3), self._deleted_value()])
        with transaction.atomic(using=ALIAS, durable=True), raw_cursor(ALIAS) as cursor:
            locked = kit.rows_lock(cursor, NotifyRelation, keys=keys,
                                   columns=[("author_id", "bigint"), ("video_id", "text"), ("user_id", "bigint")],
                                   values=["state", "relation_version", "window_start", "window_end"])
            deleted = self._deleted_accounts(cursor, {u for it in items for u in (it.author_id, it.user_id)})
            kept = [it for it in items if it.author_id not in deleted and it.user_id not in deleted]
            if any(it.key not in locked for it in kept):
                raise RowVanished("a relation row was deleted before the batch locked it")
            before = {key: Row(*values) for key, values in locked.items()}
            after, verdicts, moves = self.fold(kept, before, window_s)
            _moves_write(cursor, moves, now)
            changed = [(k, r) for k, r in sorted(after.items()) if before.get(k) != r]
            if changed:
                cursor.execute(RELATION_UPDATE_SQL, [now, *_columns(
                    [(r.state, r.version, r.window_start, r.window_end, *k) for k, r in changed], 7)])
        kept_refs = {it.ref for it in kept}
        return verdicts + [(it, kit.DUPLICATE) for it in items if it.ref not in kept_refs], len(items) - len(kept)

    def _deleted_value(self) -> str:
        # A status no account has, when the counter-example turns the skip off.
        return AccountStatusValue.DELETED if self.deleted_accounts_skipped else "-"

    def _deleted_accounts(self, cursor, user_ids: set[int]) -> set[int]:
        """Which of `user_ids` are deleted accounts: one query, in the caller's transaction."""
        cursor.execute(DELETED_SQL, [sorted(user_ids), self._deleted_value()])
        return {user_id for (user_id,) in cursor.fetchall()}


def _columns(rows: list[tuple], width: int) -> list[list]:
    """Row tuples -> one list per column (the arrays of an unnest)."""
    return [[r[i] for r in rows] for i in range(width)]


def _moves_write(cursor, moves: list[Move], now: dt.datetime) -> None:
    """Inside the caller's transaction: the last move of each (window, user) wins; the touched windows are
    upserted (and so locked) in key order, the likers deleted and inserted, and each window's new_likes
    moved by the rows those two statements really changed."""
    final: dict[tuple, Move] = {}
    for move in moves:
        final[(move.window, move.user_id)] = move
    if not final:
        return
    ends = {m.window: m.window_end for m in final.values()}
    cursor.execute(WINDOW_UPSERT_SQL, [now, now, *_columns([(*w, ends[w]) for w in sorted(ends)], 4)])
    ids = {(a, v, s): pk for pk, a, v, s in cursor.fetchall()}
    removes = sorted((ids[m.window], m.user_id) for m in final.values() if m.kind == REMOVE)
    adds = sorted((ids[m.window], m.user_id, m.liked_at) for m in final.values() if m.kind == ADD)
    delta: dict[int, int] = {}
    if removes:
        cursor.execute(LIKER_DELETE_SQL, _columns(removes, 2))
        for (window_id,) in cursor.fetchall():
            delta[window_id] = delta.get(window_id, 0) - 1
    added: set[int] = set()
    if adds:
        cursor.execute(LIKER_INSERT_SQL, _columns(adds, 3))
        for (window_id,) in cursor.fetchall():
            delta[window_id] = delta.get(window_id, 0) + 1
            added.add(window_id)
    if delta:
        rows = sorted((pk, d, pk in added) for pk, d in delta.items())
        cursor.execute(WINDOW_COUNT_SQL, [now, now, *_columns(rows, 3)])


_WINDOW = NotifyWindow._meta.db_table
_LIKER = NotifyWindowLiker._meta.db_table
_RELATION = NotifyRelation._meta.db_table
_STATUS = AccountStatus._meta.db_table
DELETED_SQL = f"SELECT user_id FROM {_STATUS} WHERE user_id = ANY(%s::bigint[]) AND status = %s::text"
# Each write is one statement over arrays, keys distinct within it, rows taken in key order.
PLACEHOLDER_SQL = (
    f"INSERT INTO {_RELATION} (author_id, video_id, user_id, relation_version, state, updated_at) "
    f"SELECT a, v, u, 0, '{UNLIKED}', %s FROM unnest(%s::bigint[], %s::text[], %s::bigint[]) AS t(a, v, u) "
    f"WHERE NOT EXISTS (SELECT 1 FROM {_STATUS} s WHERE s.user_id IN (t.a, t.u) AND s.status = %s::text) "
    "ORDER BY a, v, u ON CONFLICT (author_id, video_id, user_id) DO NOTHING"
)
WINDOW_UPSERT_SQL = (
    f"INSERT INTO {_WINDOW} AS w (author_id, video_id, window_start, window_end, new_likes, created_at, updated_at) "
    "SELECT a, v, s, e, 0, %s, %s FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::timestamptz[]) "
    "AS t(a, v, s, e) ORDER BY a, v, s "
    "ON CONFLICT (author_id, video_id, window_start) DO UPDATE SET updated_at = EXCLUDED.updated_at "
    "RETURNING w.id, w.author_id, w.video_id, w.window_start"
)
LIKER_DELETE_SQL = (
    f"DELETE FROM {_LIKER} AS l USING unnest(%s::bigint[], %s::bigint[]) AS d(w, u) "
    "WHERE l.window_id = d.w AND l.user_id = d.u RETURNING l.window_id"
)
LIKER_INSERT_SQL = (
    f"INSERT INTO {_LIKER} (window_id, user_id, liked_at) SELECT w, u, at "
    "FROM unnest(%s::bigint[], %s::bigint[], %s::timestamptz[]) AS d(w, u, at) ORDER BY w, u "
    "ON CONFLICT (window_id, user_id) DO NOTHING RETURNING window_id"
)
WINDOW_COUNT_SQL = (
    f"UPDATE {_WINDOW} AS w SET new_likes = w.new_likes + d.delta, updated_at = %s, "
    "last_added_at = CASE WHEN d.added THEN %s ELSE w.last_added_at END "
    "FROM unnest(%s::bigint[], %s::int[], %s::bool[]) AS d(id, delta, added) WHERE w.id = d.id"
)
RELATION_UPDATE_SQL = (
    f"UPDATE {_RELATION} AS r SET state = d.st, relation_version = d.ver, window_start = d.ws, "
    "window_end = d.we, updated_at = %s FROM unnest(%s::text[], %s::bigint[], %s::timestamptz[], "
    "%s::timestamptz[], %s::bigint[], %s::text[], %s::bigint[]) AS d(st, ver, ws, we, a, v, u) "
    "WHERE r.author_id = d.a AND r.video_id = d.v AND r.user_id = d.u"
)
