"""Who liked a video (issue 5 §2; REV-5 … REV-8). Reads only; never writes, never opens a transaction.

The list is a k-way merge, newest first by (liked_at DESC, user_id DESC), over the R reverse shards of
the ACTIVE reverse-index generation. Per count partition one query reads, for every shard that
partition holds, a bounded prefetch (`limit + 1` rows) strictly after that shard's frontier (a LATERAL
join over the shard list, one index range per shard). The heads go into a heap; a shard whose buffer
runs dry while more rows may exist is refilled with one more bounded query.

REV-7: a candidate counts as scanned only once it is POPPED from the heap; it is then returned or
filtered by the read-time privacy rules (REV-6), and only then does its shard's frontier move to its
raw key. Prefetched rows that were never popped are dropped at page end and read again on the next
page. A shard with nothing popped keeps its pre-page frontier. A page ends when it is full, when every
shard is exhausted, or after `LIKERS_SCAN_LIMIT` pops, so an all-hidden stretch gives an empty page
whose cursor still moved (never a loop). nextCursor is null only when every shard is exhausted.

Cost (issue 10 §3): the first read takes `limit + 1` rows per shard (one query per count partition,
so a page of visible likers stays cheap); a shard that runs dry before the page is full is refilled
with `LIKERS_FETCH_BATCH` (128) rows at once (at least `limit + 1`, at most what the scan budget still
allows), and each fetch's new likers are checked for hiding in one query. A page over a long hidden
stretch costs at most P + 1 + 2 × (R + pops / LIKERS_FETCH_BATCH) queries (P partitions, R reverse
shards), where refilling `limit + 1` rows at a time with three privacy queries each cost about 2,000
for `limit=1` and the default scan limit.

Read-time privacy (REV-6, PRIV): a popped liker is hidden when they made their likes private (unless
they are the caller), when their account is banned or deleted, or when the caller has blocked them;
and when their like of this video is risk-hidden (issue 14 §4), unless the caller is an operator.
An orphan sort entry (no LIKED state row at its liked_at behind it: REV-3 writes both in one transaction,
so none should exist) is popped like a hidden liker and never served. Counted (M16): the entries popped
and the likers returned (their ratio is the filter's scan amplification) and the orphans popped.

The cursor is signed with `CURSOR_SIGNING_KEY` (salt below), bound to the caller and the video, and
holds the generation plus one frontier per shard of that generation: `null` (nothing popped yet),
`[liked_at µs since epoch, user_id]` (the last popped key) or `0` (exhausted). A cursor of another
generation answers 410 `cursor_expired` (REV-8: an old-R vector is never read against a new R); the
retired generation's rows are not served.

`indexWatermark` is an ISO-8601 UTC time: the lowest reverse-consumer checkpoint over all stream
partitions, as the millisecond time part of its Redis stream entry id. Everything published up to that
time is in the index; null when some partition has no checkpoint yet (nothing consumed).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections

from counting import routing
from counting.models import LikeReverseProjection, LikeReverseRecent, LikeReverseSort
from counting.risk import selectors as risk_selectors
from counting.services.reverse.projector import RECENT_KEEP, REVERSE_CONSUMER
from likes_project import metrics
from likes_project.cursors import cursor_sign, cursor_unsign, from_micros, invalid_cursor, iso_utc, micros
from likes_project.errors import DomainError, Forbidden
from likes_project.eventlog.checkpoints import consumer_watermark
from relations import selectors
from relations.errors import VideoNotFound
from relations.selectors.my_likes import list_limit_parse
from relations.selectors.privacy import hidden_likers, likers_public

DEFAULT_SCAN_LIMIT = 1000
DEFAULT_FETCH_BATCH = 128
RECENT_LIMIT = 3
CURSOR_SALT = "relations.likers.cursor"  # unchanged since the index moved here: issued cursors stay valid
CURSOR_FORMAT = 1
CURSOR_MAX_CHARS = 4096  # one frontier per shard
EXHAUSTED = 0

__all__ = ["list_limit_parse"]


class LikersNotVisible(Forbidden):
    code = "likers_not_visible"
    default_message = "The author has not made the likers of this video visible to you."


class CursorExpired(DomainError):
    code = "cursor_expired"
    http_status = 410
    default_message = "The likers index was rebuilt since this cursor was issued; start again without a cursor."


@dataclass(frozen=True)
class Liker:
    user_id: int
    username: str
    liked_at: datetime

    def as_dict(self) -> dict:
        return {"userId": self.user_id, "username": self.username, "likedAt": iso_utc(self.liked_at)}


@dataclass(frozen=True)
class LikersPage:
    items: list[Liker]
    generation: int
    frontiers: list  # per shard: None | (micros, user_id) | EXHAUSTED
    popped: int
    exhausted: bool


def scan_limit() -> int:
    return max(1, int(getattr(settings, "LIKERS_SCAN_LIMIT", DEFAULT_SCAN_LIMIT)))


def fetch_batch() -> int:
    return max(1, int(getattr(settings, "LIKERS_FETCH_BATCH", DEFAULT_FETCH_BATCH)))


# --- permission ------------------------------------------------------------------------------------


def likers_permission_check(*, caller_id: int, video_id: str) -> None:
    """404 `video_not_found` unless the caller may see the video; 403 `likers_not_visible` unless the
    caller is the author or the likers are public (the per-video override wins over the author's
    setting; both default to not public)."""
    if not selectors.video_visible_to(user_id=caller_id, video_id=video_id):
        raise VideoNotFound()
    video = selectors.video_snapshot_get(video_id=video_id)
    if video.author_id != caller_id and not likers_public(video_id=video_id, author_id=video.author_id):
        raise LikersNotVisible()


def sees_risk_hidden(caller_id: int) -> bool:
    """Operators (the risk ledger's request permission) see risk-hidden likers; everyone else has them
    omitted like privacy-hidden ones (RISK-3, PRIV-1)."""
    user = get_user_model().objects.filter(pk=caller_id, is_active=True).first()
    return user is not None and user.has_perm(risk_selectors.OPERATOR_PERMISSION)


# --- cursor ------------------------------------------------------------------------------------------


def likers_cursor_encode(*, caller_id: int, video_id: str, page: LikersPage) -> str:
    frontiers = [f if f is None or f == EXHAUSTED else [f[0], f[1]] for f in page.frontiers]
    payload = {"v": CURSOR_FORMAT, "u": caller_id, "vid": video_id, "g": page.generation, "f": frontiers}
    return cursor_sign(salt=CURSOR_SALT, payload=payload, compress=True)


def _valid_frontier(f) -> bool:
    if f is None:
        return True
    if isinstance(f, bool):
        return False
    if isinstance(f, int):
        return f == EXHAUSTED
    return (isinstance(f, list) and len(f) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in f))


def likers_cursor_decode(*, caller_id: int, video_id: str, cursor: str, generation: int, shards: int) -> list:
    """The per-shard frontiers of a cursor this service issued to this caller for this video in
    `generation`. Tampered or foreign cursors are 400 `invalid_cursor`; a cursor of another generation
    is 410 `cursor_expired`."""
    invalid = invalid_cursor()
    payload = cursor_unsign(salt=CURSOR_SALT, cursor=cursor, max_chars=CURSOR_MAX_CHARS, version=CURSOR_FORMAT)
    if payload.get("u") != caller_id or payload.get("vid") != video_id:
        raise invalid
    gen = payload.get("g")
    if isinstance(gen, bool) or not isinstance(gen, int):
        raise invalid
    if gen != generation:
        raise CursorExpired()
    frontiers = payload.get("f")
    if not isinstance(frontiers, list) or len(frontiers) != shards or not all(map(_valid_frontier, frontiers)):
        raise invalid
    out = []
    for f in frontiers:
        if isinstance(f, list):
            try:
                from_micros(f[0])
            except OverflowError:
                raise invalid from None
            out.append((f[0], f[1]))
        else:
            out.append(f)
    return out


# --- the merge -------------------------------------------------------------------------------------


def _prefetch(alias: str, generation: int, video_id: str, wanted: list[tuple[int, object]], count: int
              ) -> tuple[dict[int, list[tuple[datetime, int]]], set[int]]:
    """Up to `count` sort entries per shard strictly after each shard's frontier, newest first, in
    one query on count partition `alias` (one index range per shard through a LATERAL join), and the
    users of those that are orphans: no LIKED state row at that liked_at behind them (REV-3 keeps both in
    one transaction, so there should be none; the statement reads both in one snapshot, so a concurrent
    unlike is never mistaken for one)."""
    shards = [s for s, _f in wanted]
    times = [None if f is None else from_micros(f[0]) for _s, f in wanted]
    users = [None if f is None else f[1] for _s, f in wanted]
    table, states = LikeReverseSort._meta.db_table, LikeReverseProjection._meta.db_table
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT f.s, e.liked_at, e.user_id, p.user_id IS NULL FROM unnest(%s::int[], %s::timestamptz[], "
            "%s::bigint[]) AS f(s, t, u) "
            f"CROSS JOIN LATERAL (SELECT liked_at, user_id FROM {table} WHERE generation = %s AND video_id = %s "
            # A shard with nothing popped starts above every key, so the frontier is always one row
            # comparison in the index's own order and the scan starts at the cursor (an `IS NULL OR`
            # filtered every entry above it instead: page 1,000 cost twice page 1).
            "AND reverse_shard = f.s AND (liked_at, user_id) < (COALESCE(f.t, 'infinity'), "
            "COALESCE(f.u, 9223372036854775807)) "
            "ORDER BY liked_at DESC, user_id DESC LIMIT %s) e "
            # One unique-index probe per entry, on this partition (a pair's state row lives beside its entry).
            f"LEFT JOIN {states} p ON p.generation = %s AND p.video_id = %s AND p.user_id = e.user_id "
            "AND p.state = 'LIKED' AND p.liked_at = e.liked_at "
            "ORDER BY f.s, e.liked_at DESC, e.user_id DESC",
            [shards, times, users, generation, video_id, count, generation, video_id],
        )
        rows = cursor.fetchall()
    out: dict[int, list[tuple[datetime, int]]] = {s: [] for s in shards}
    orphans = set()
    for s, liked_at, user_id, orphan in rows:
        out[s].append((liked_at, user_id))
        if orphan:
            orphans.add(user_id)
    return out, orphans


def likers_page_list(*, caller_id: int, video_id: str, limit: int, cursor: str | None = None,
                     max_scan: int | None = None) -> LikersPage:
    """One page of the video's visible likers (permission checked by the caller of this function)."""
    gen = routing.reverse_active()
    if cursor is None:
        frontiers: list = [None] * gen.shards
    else:
        frontiers = likers_cursor_decode(caller_id=caller_id, video_id=video_id, cursor=cursor,
                                         generation=gen.generation, shards=gen.shards)
    budget = max_scan or scan_limit()
    buffers: dict[int, list[tuple[datetime, int]]] = {}
    more: dict[int, bool] = {}  # the shard's last fetch was full: rows may remain after the buffer
    hidden: set[int] = set()
    orphaned: set[int] = set()  # users whose sort entry has no LIKED state row behind it: never served
    checked: set[int] = set()
    # One query when the video has no risk-hidden relation (almost always): then no per-fetch risk check.
    risk_filter = risk_selectors.risk_hidden_exists(video_id=video_id) and not sees_risk_hidden(caller_id)

    def fetch(shards: list[int], count: int) -> None:
        by_alias: dict[str, list[tuple[int, object]]] = {}
        for s in shards:
            by_alias.setdefault(gen.placement[s], []).append((s, frontiers[s]))
        fresh: set[int] = set()
        for alias, wanted in sorted(by_alias.items()):
            got, orphans = _prefetch(alias, gen.generation, video_id, wanted, count)
            orphaned.update(orphans)
            for s, rows in got.items():
                buffers[s] = rows
                more[s] = len(rows) == count
                fresh |= {u for _t, u in rows}
        todo = fresh - checked
        hidden.update(hidden_likers(caller_id=caller_id, user_ids=todo))
        if risk_filter:
            hidden.update(risk_selectors.risk_hidden_users(video_id=video_id, user_ids=todo))
        checked.update(todo)

    fetch([s for s in range(gen.shards) if frontiers[s] != EXHAUSTED], limit + 1)
    heap: list[tuple[int, int, int, int]] = []  # (-micros, -user_id, shard, index in buffer)
    for s, rows in buffers.items():
        if rows:
            heapq.heappush(heap, (-micros(rows[0][0]), -rows[0][1], s, 0))
        else:
            frontiers[s] = EXHAUSTED
    picked: list[tuple[datetime, int]] = []
    popped = orphans_popped = 0
    while heap and len(picked) < limit and popped < budget:
        _neg_t, _neg_u, s, i = heapq.heappop(heap)
        liked_at, user_id = buffers[s][i]
        popped += 1
        frontiers[s] = (micros(liked_at), user_id)  # REV-7: popped, and now returned or filtered
        if user_id in orphaned:
            orphans_popped += 1
        elif user_id not in hidden:
            picked.append((liked_at, user_id))
        if i + 1 < len(buffers[s]):
            nxt = buffers[s][i + 1]
            heapq.heappush(heap, (-micros(nxt[0]), -nxt[1], s, i + 1))
        elif more[s]:
            if len(picked) >= limit or popped >= budget:
                continue  # the page is over; the shard is read again from its frontier next page
            # A shard that ran dry before the page filled is in a hidden stretch (or holds most of
            # the page): refill it in one large batch, not `limit + 1` rows at a time.
            fetch([s], min(max(limit + 1, fetch_batch()), budget - popped))
            if buffers[s]:
                head = buffers[s][0]
                heapq.heappush(heap, (-micros(head[0]), -head[1], s, 0))
            else:
                frontiers[s] = EXHAUSTED
        else:
            frontiers[s] = EXHAUSTED
    exhausted = all(f == EXHAUSTED for f in frontiers)
    # M16: privacy-filter scan amplification (scanned / returned, over a window) and orphan sort entries.
    metrics.inc("likes_likers_scanned_total", popped)
    metrics.inc("likes_likers_returned_total", len(picked))
    if orphans_popped:
        metrics.inc("likes_reverse_orphan_sort_entries_total", orphans_popped)
    names = dict(get_user_model().objects.filter(pk__in=[u for _t, u in picked]).values_list("pk", "username"))
    items = [Liker(u, names.get(u, ""), t) for t, u in picked]
    return LikersPage(items=items, generation=gen.generation, frontiers=frontiers, popped=popped, exhausted=exhausted)


def index_watermark() -> str | None:
    """The lowest `reverse` consumer checkpoint over all stream partitions, as the ISO UTC time of its
    entry id's millisecond part; null when a partition has consumed nothing yet."""
    watermark = consumer_watermark(REVERSE_CONSUMER)
    return None if watermark is None else iso_utc(watermark)


def recent_likers_list(*, caller_id: int, video_id: str) -> list[Liker]:
    """Up to 3 most recent visible likers from the projector-maintained summary (REV-10): one bounded
    indexed query per count partition reads that partition's newest `RECENT_KEEP` summary rows of the
    video in the ACTIVE generation; the rows are merged newest first and the read-time privacy filter of
    the list (REV-6) is applied. The sort index is never read here. K > 3 leaves headroom for hidden
    likers; when more than K - 3 of a partition's kept likers are hidden the summary may return fewer than
    3 even though older visible likers exist (the full list still pages through them)."""
    gen = routing.reverse_active()
    rows: list[tuple[datetime, int]] = []
    for alias in settings.COUNT_PARTITION_ALIASES:
        rows += LikeReverseRecent.objects.using(alias).filter(generation=gen.generation, video_id=video_id).order_by(
            "-liked_at", "-user_id").values_list("liked_at", "user_id")[:RECENT_KEEP]
    rows.sort(reverse=True)
    hidden = hidden_likers(caller_id=caller_id, user_ids={u for _t, u in rows})
    risk_hidden = risk_selectors.risk_hidden_users(video_id=video_id, user_ids={u for _t, u in rows})
    if risk_hidden and not sees_risk_hidden(caller_id):
        hidden |= risk_hidden
    picked = [(t, u) for t, u in rows if u not in hidden][:RECENT_LIMIT]
    names = dict(get_user_model().objects.filter(pk__in=[u for _t, u in picked]).values_list("pk", "username"))
    return [Liker(u, names.get(u, ""), t) for t, u in picked]
