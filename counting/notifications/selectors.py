"""The author's notifications, newest window first (issue 31 §2). Reads only; never writes, never opens a
transaction.

A page is a keyset scan of the author's windows with at least one like, in the order of
`notify_window_list_idx` (author_id, window_end DESC, id DESC), strictly below the cursor's key: page 500
costs what page 1 costs. An open window is listed as soon as the consumer added its first like and grows
until its end; a window whose likes were all taken back (new_likes 0) is not listed.

Privacy is applied here, when read, never stored (REV-6, PRIV): `sampleLikers` are up to
SAMPLE_LIKERS usernames among the SAMPLE_SCAN newest likers of the window whom the author may see named
(`relations.selectors.privacy.hidden_likers`: not `likes_private`, not banned or deleted, not blocked by
the author). A hidden liker still counts in `newLikes`.

The cursor is signed with CURSOR_SIGNING_KEY under its own salt and bound to the author it was issued to;
anything else is 400 `invalid_cursor`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models import Q

from counting.notifications.models import NotifyWindow, NotifyWindowLiker
from likes_project.cursors import cursor_sign, cursor_unsign, from_micros, invalid_cursor, iso_utc, micros
from relations.selectors.my_likes import list_limit_parse
from relations.selectors.privacy import hidden_likers

SAMPLE_LIKERS = 3
SAMPLE_SCAN = 50  # newest likers of a window read to find the named ones (bounds the cost of a hot window)
CURSOR_SALT = "counting.notifications.cursor"
CURSOR_FORMAT = 1
CURSOR_MAX_CHARS = 512

__all__ = ["list_limit_parse"]  # `limit` 1..100 (400 invalid_limit), as every list of the API


@dataclass(frozen=True)
class Notification:
    window_id: int
    video_id: str
    new_likes: int
    sample_likers: list[str]
    window_start: dt.datetime
    window_end: dt.datetime
    read: bool

    def as_dict(self) -> dict:
        return {"videoId": self.video_id, "newLikes": self.new_likes, "sampleLikers": self.sample_likers,
                "windowStart": iso_utc(self.window_start), "windowEnd": iso_utc(self.window_end),
                "read": self.read}


@dataclass(frozen=True)
class NotificationsPage:
    items: list[Notification]
    next_key: tuple[dt.datetime, int] | None  # (window_end, id) of the last item; None at the end


def notifications_cursor_encode(*, author_id: int, key: tuple[dt.datetime, int]) -> str:
    return cursor_sign(salt=CURSOR_SALT, payload={"v": CURSOR_FORMAT, "u": author_id, "e": micros(key[0]),
                                                  "i": key[1]})


def notifications_cursor_decode(*, author_id: int, cursor: str) -> tuple[dt.datetime, int]:
    """The (window_end, id) key of a cursor this service issued to this author; else `invalid_cursor`."""
    payload = cursor_unsign(salt=CURSOR_SALT, cursor=cursor, max_chars=CURSOR_MAX_CHARS, version=CURSOR_FORMAT)
    end, pk = payload.get("e"), payload.get("i")
    if payload.get("u") != author_id or not all(isinstance(x, int) and not isinstance(x, bool) for x in (end, pk)):
        raise invalid_cursor()
    try:
        return from_micros(end), pk
    except OverflowError:
        raise invalid_cursor() from None


def notifications_page_list(*, author_id: int, limit: int, cursor: str | None) -> NotificationsPage:
    """One page of the author's notifications, newest window first."""
    qs = NotifyWindow.objects.filter(author_id=author_id, new_likes__gt=0)
    if cursor is not None:
        end, pk = notifications_cursor_decode(author_id=author_id, cursor=cursor)
        qs = qs.filter(Q(window_end__lt=end) | Q(window_end=end, id__lt=pk))
    rows = list(qs.order_by("-window_end", "-id")[: limit + 1])
    more, rows = len(rows) > limit, rows[:limit]
    names = sample_likers_get(author_id=author_id, window_ids=[w.id for w in rows])
    items = [Notification(w.id, w.video_id, w.new_likes, names.get(w.id, []), w.window_start, w.window_end,
                          w.is_read) for w in rows]
    return NotificationsPage(items, (rows[-1].window_end, rows[-1].id) if more else None)


_SAMPLE_SQL = (
    "SELECT w.id, l.user_id FROM unnest(%s::bigint[]) AS w(id) CROSS JOIN LATERAL "
    f"(SELECT user_id, liked_at FROM {NotifyWindowLiker._meta.db_table} WHERE window_id = w.id "
    "ORDER BY liked_at DESC, user_id DESC LIMIT %s) l ORDER BY w.id, l.liked_at DESC, l.user_id DESC"
)


def sample_likers_get(*, author_id: int, window_ids: list[int]) -> dict[int, list[str]]:
    """Per window, the usernames of up to SAMPLE_LIKERS of its newest likers the author may see named:
    one query for the likers (SAMPLE_SCAN per window), one for who is hidden, one for the names."""
    if not window_ids:
        return {}
    with connections["default"].cursor() as cursor:
        cursor.execute(_SAMPLE_SQL, [window_ids, SAMPLE_SCAN])
        likers = cursor.fetchall()  # per window, newest first
    users = {u for _w, u in likers}
    hidden = hidden_likers(caller_id=author_id, user_ids=users)
    usernames = dict(get_user_model().objects.filter(pk__in=users - hidden).values_list("pk", "username"))
    out: dict[int, list[str]] = {}
    for window_id, user_id in likers:
        names = out.setdefault(window_id, [])
        if user_id in usernames and len(names) < SAMPLE_LIKERS:
            names.append(usernames[user_id])
    return out
