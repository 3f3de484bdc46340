"""The writes to the notifications outside the `notify` consumer (`counting.notifications.projector`, which
alone adds and takes back likes): the author marking them read, and the erasure of a deleted account."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from counting.notifications.models import NotifyRelation, NotifyWindow, NotifyWindowLiker
from likes_project.dbraw import raw_cursor

ALIAS = "default"


def notifications_mark_read(*, author_id: int, up_to: dt.datetime) -> int:
    """Mark read every notification of the author whose window ends at or before `up_to` and that reads
    unread (listed, never marked, or given a like since it was); returns how many. A window marked read
    that gains a like afterwards reads unread again.

    Transaction: one durable transaction on `default`; the windows are locked in the consumer's key order
    (author, video, window start), so marking never deadlocks with a pass adding likes. Idempotency:
    marking the same range again marks 0."""
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        unread = list(NotifyWindow.objects.select_for_update()
                      .filter(Q(read_at__isnull=True) | Q(last_added_at__gt=F("read_at")), author_id=author_id,
                              window_end__lte=up_to, new_likes__gt=0)
                      .order_by("author_id", "video_id", "window_start").values_list("id", flat=True))
        if unread:
            NotifyWindow.objects.filter(id__in=unread).update(read_at=now, updated_at=now)
    return len(unread)


def notifications_erase_user(user_id: int) -> dict:
    """Erase a deleted account from the notifications (issue 31 §4, PRIV-4; the eraser `notifications` that the
    account deletion runs after its withdrawal): its likes leave every window they count in (each window's
    `newLikes` drops by as many; a window left with no like is deleted), the consumer's relation rows naming it
    (as liker or as author) are deleted, and so are the notifications addressed to it (its windows and their
    likers). Names are never stored, so nothing else names it. Returns how many of each it removed.

    Transaction: one durable transaction on `default`. It first locks the account's relation rows, in the
    consumer's key order: a `notify` batch that read the account as not deleted holds those locks until it
    commits, so this waits for it and the statements after the lock see what it wrote (the projector's
    docstring has the whole argument); then the windows it touches, in the consumer's key order (author, video,
    window start), so it never deadlocks with a pass or with mark-read. Idempotency: a second run finds nothing
    and removes nothing."""
    now = timezone.now()
    with transaction.atomic(using=ALIAS, durable=True), raw_cursor(ALIAS) as cursor:
        cursor.execute(ERASE_LOCK_RELATIONS_SQL, [user_id, user_id])
        cursor.execute(ERASE_LOCK_WINDOWS_SQL, [user_id, user_id])
        cursor.execute(ERASE_AUTHOR_LIKERS_SQL, [user_id])
        cursor.execute(ERASE_AUTHOR_WINDOWS_SQL, [user_id])
        notifications = cursor.rowcount
        cursor.execute(ERASE_LIKES_SQL, [user_id])
        removed: dict[int, int] = {}
        for (window_id,) in cursor.fetchall():
            removed[window_id] = removed.get(window_id, 0) + 1
        emptied = 0
        if removed:
            ids = sorted(removed)
            cursor.execute(ERASE_COUNT_SQL, [now, ids, [removed[pk] for pk in ids]])
            cursor.execute(ERASE_EMPTY_WINDOWS_SQL, [[pk for pk, likes in cursor.fetchall() if likes <= 0]])
            emptied = cursor.rowcount
        cursor.execute(ERASE_RELATIONS_SQL, [user_id, user_id])
        relations = cursor.rowcount
    return {"likes_removed": sum(removed.values()), "windows_emptied": emptied,
            "notifications_deleted": notifications, "relation_rows_deleted": relations}


_RELATION = NotifyRelation._meta.db_table
_WINDOW = NotifyWindow._meta.db_table
_LIKER = NotifyWindowLiker._meta.db_table
ERASE_LOCK_RELATIONS_SQL = (
    f"SELECT id FROM {_RELATION} WHERE user_id = %s OR author_id = %s ORDER BY author_id, video_id, user_id FOR UPDATE"
)
ERASE_LOCK_WINDOWS_SQL = (
    f"SELECT id FROM {_WINDOW} WHERE author_id = %s OR id IN (SELECT window_id FROM {_LIKER} WHERE user_id = %s) "
    "ORDER BY author_id, video_id, window_start FOR UPDATE"
)
ERASE_AUTHOR_LIKERS_SQL = f"DELETE FROM {_LIKER} WHERE window_id IN (SELECT id FROM {_WINDOW} WHERE author_id = %s)"
ERASE_AUTHOR_WINDOWS_SQL = f"DELETE FROM {_WINDOW} WHERE author_id = %s"
ERASE_LIKES_SQL = f"DELETE FROM {_LIKER} WHERE user_id = %s RETURNING window_id"
ERASE_COUNT_SQL = (
    f"UPDATE {_WINDOW} AS w SET new_likes = w.new_likes - d.n, updated_at = %s "
    "FROM unnest(%s::bigint[], %s::int[]) AS d(id, n) WHERE w.id = d.id RETURNING w.id, w.new_likes"
)
ERASE_EMPTY_WINDOWS_SQL = f"DELETE FROM {_WINDOW} WHERE id = ANY(%s::bigint[]) AND new_likes <= 0"
ERASE_RELATIONS_SQL = f"DELETE FROM {_RELATION} WHERE user_id = %s OR author_id = %s"
