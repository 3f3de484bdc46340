"""The caller's liked list (spec §4.13, LIST-1 … LIST-7). Reads only; never writes, never opens a
transaction.

The list is a keyset scan of the user's VIDEO_LIKE_RELATION rows with `state='LIKED'` on their shard,
in the order of `relation_user_list_idx` (user_id, state, updated_at DESC, video_id DESC). A page
reads rows strictly below the cursor's raw key with a row comparison, which PostgreSQL turns into an
index range condition, so page 500 costs what page 1 costs (LIST-2; never OFFSET). Because it reads
the fact table, a like is listed as soon as its transaction commits (LIST-1).

Visibility (LIST-6): taken-down and deleted videos, and videos with no snapshot row, are dropped
after the scan, with one snapshot query on `default` per scanned batch. The cursor is the last
SCANNED raw key, not the last returned item, and a request scans at most `MY_LIKES_SCAN_LIMIT` rows,
so a stretch of filtered rows yields short or empty pages whose cursor still moves forward.

The cursor is an opaque string signed with `CURSOR_SIGNING_KEY` (LIST-7) and bound to the user it
was issued to; it is a live traversal position, not a snapshot (LIST-4). Exact exports are
`relations.services.export`, never this cursor (LIST-5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from likes_project.cursors import cursor_sign, cursor_unsign, from_micros, invalid_cursor, iso_utc, micros
from likes_project.errors import InvalidInput
from relations import routing
from relations.models import LikeRelation, RelationState, VideoSnapshot, VideoStatus

DEFAULT_LIMIT = 20
DEFAULT_MAX_LIMIT = 100
DEFAULT_SCAN_LIMIT = 1000
CURSOR_SALT = "relations.my-likes.cursor"
CURSOR_FORMAT = 1
CURSOR_MAX_CHARS = 512  # a real cursor is ~120 characters; anything far longer is not ours
_LIMIT_RE = re.compile(r"-?[0-9]{1,6}")


@dataclass(frozen=True)
class ListKey:
    """A raw position in the index order: (updated_at, video_id), compared as a row."""

    updated_at: datetime
    video_id: str


@dataclass(frozen=True)
class LikedItem:
    video_id: str
    liked_at: datetime
    relation_version: int

    def as_dict(self) -> dict:
        return {"videoId": self.video_id, "likedAt": iso_utc(self.liked_at), "relationVersion": self.relation_version}


@dataclass(frozen=True)
class LikedPage:
    items: list[LikedItem]
    next_key: ListKey | None  # None only when the scan reached the end of the user's LIKED rows
    scanned: int  # raw rows examined (visible or not)


def max_limit() -> int:
    return int(getattr(settings, "MY_LIKES_MAX_LIMIT", DEFAULT_MAX_LIMIT))


def scan_limit() -> int:
    return max(1, int(getattr(settings, "MY_LIKES_SCAN_LIMIT", DEFAULT_SCAN_LIMIT)))


# --- request parameters ------------------------------------------------------------------------


def list_limit_parse(raw: str | None) -> int:
    """`limit` from the query string: absent means the default; anything but an integer in
    1..max is refused (an empty `limit=` is malformed, not absent)."""
    if raw is None:
        return min(DEFAULT_LIMIT, max_limit())
    top = max_limit()
    if not _LIMIT_RE.fullmatch(raw) or not 1 <= int(raw) <= top:
        raise InvalidInput(f"limit must be an integer from 1 to {top}.", code="invalid_limit")
    return int(raw)


def list_cursor_encode(*, user_id: int, key: ListKey) -> str:
    """An opaque, signed cursor: format version, owner and raw key (`likes_project.cursors`)."""
    payload = {"v": CURSOR_FORMAT, "u": user_id, "t": micros(key.updated_at), "k": key.video_id}
    return cursor_sign(salt=CURSOR_SALT, payload=payload)


def list_cursor_decode(*, user_id: int, cursor: str) -> ListKey:
    """The raw key in a cursor this service issued to this user; anything else is `invalid_cursor`
    (tampered, truncated, garbage, another user's, an unknown format version)."""
    payload = cursor_unsign(salt=CURSOR_SALT, cursor=cursor, max_chars=CURSOR_MAX_CHARS, version=CURSOR_FORMAT)
    stamp, video_id = payload.get("t"), payload.get("k")
    if (payload.get("u") != user_id or isinstance(stamp, bool) or not isinstance(stamp, int)
            or not isinstance(video_id, str)):
        raise invalid_cursor()
    try:
        return ListKey(updated_at=from_micros(stamp), video_id=video_id)
    except OverflowError:
        raise invalid_cursor() from None


# --- the scan ----------------------------------------------------------------------------------


def liked_rows_scan_queryset(*, alias: str, user_id: int, after: ListKey | None, count: int):
    """`count` LIKED rows of the user strictly below `after`, in index order. The row comparison
    `(updated_at, video_id) < (%s, %s)` is an Index Cond on relation_user_list_idx (a range start,
    not a filter), which keeps every page as cheap as the first."""
    qs = LikeRelation.objects.using(alias).filter(user_id=user_id, state=RelationState.LIKED)
    if after is not None:
        qs = qs.filter(RawSQL("(updated_at, video_id) < (%s, %s)", (after.updated_at, after.video_id),
                              output_field=BooleanField()))
    return (
        qs.order_by("-updated_at", "-video_id")
        .values_list("updated_at", "video_id", "state_changed_at", "relation_version")[:count]
    )


def listed_video_ids(video_ids: list[str]) -> set[str]:
    """Which of these videos the list shows: an active snapshot exists. Taken-down, deleted and
    unknown (no snapshot row) videos are not listed. One query on `default`."""
    if not video_ids:
        return set()
    return set(
        VideoSnapshot.objects.using("default")
        .filter(video_id__in=video_ids, status=VideoStatus.ACTIVE)
        .values_list("video_id", flat=True)
    )


def liked_page_list(*, user_id: int, limit: int, after: ListKey | None = None) -> LikedPage:
    """One page of the user's liked list (LIST-1, LIST-2, LIST-6).

    Scans in batches (the first of `limit` rows, then doubling) until the page is full, the end is
    reached or the scan limit triggers. Every batch fetches one extra row so that a page ending on the
    last LIKED row reports the end (next_key None) instead of a cursor to an empty page.

    `likedAt` is the relation's `state_changed_at`: the time of the last effective change, i.e. when
    this like happened. The sort key is `updated_at`, which the index holds. For a LIKED row the two
    are set by the same effective command (`relations.services.commands._apply`); a no-op command
    (already LIKED) touches neither, so they agree and the list is in likedAt order. They can differ
    only when a web node's clock stepped back: `state_changed_at` never goes backwards on one relation,
    `updated_at` is the node's `now`. The order then follows `updated_at`, which is what the cursor
    holds, so paging stays gapless either way.
    """
    alias = routing.alias_for_user(user_id)
    budget = scan_limit()
    items: list[LikedItem] = []
    key = after
    scanned = 0
    at_end = False
    batch = limit
    while len(items) < limit and scanned < budget:
        n = min(batch, budget - scanned)
        rows = list(liked_rows_scan_queryset(alias=alias, user_id=user_id, after=key, count=n + 1))
        more_after_batch = len(rows) > n
        rows = rows[:n]
        listed = listed_video_ids([r[1] for r in rows])
        examined = 0
        for updated_at, video_id, state_changed_at, relation_version in rows:
            examined += 1
            key = ListKey(updated_at=updated_at, video_id=video_id)
            if video_id in listed:
                items.append(LikedItem(video_id, state_changed_at, relation_version))
                if len(items) == limit:
                    break
        scanned += examined
        if examined == len(rows) and not more_after_batch:
            at_end = True
            break
        batch *= 2
    return LikedPage(items=items, next_key=None if at_end else key, scanned=scanned)
