"""The retention rule `notifications` (issue 31 §4, PRIV-3): a notification window goes (with its likers) once it
ended more than NOTIFICATION_RETENTION_DAYS ago, and so do the `notify` consumer's relation rows whose window is
gone and that were last changed before that cutoff. Registered in the registry of `likes_project.retention`, whose
runner, beat job, metric and console line apply it.

Why the relation rows may go: a row is the consumer's version guard and tells the cancel rule which window the
current like counts in. The cancel rule only acts on a change made before that window's end, and the window is
gone, past the cutoff: the cutoff (30 days by default) is far past NOTIFY_WINDOW_S (10 minutes). The version guard
only stops events whose version is not above the row's: such an event changed the relation no later than the
row's last applied change, hence before the row's `updated_at` (it was consumed after it was committed), hence
before the cutoff, and the consumer drops every change older than the retention before looking at a row
(`likes_notify_skipped_total{reason="expired"}`). An event above the row's version is then applied as to a relation
never seen, which is what the row would have let it do: there is no window left for it to take a like back from.
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction

from counting.notifications.models import NotifyRelation, NotifyWindow, NotifyWindowLiker
from likes_project.dbraw import raw_cursor
from likes_project.retention import RetentionRule

ALIAS = "default"


def notifications_sweep(cutoff: dt.datetime, limit: int) -> int:
    """Delete up to `limit` of the oldest windows that ended before `cutoff` (their likers with them), then, with
    what is left of `limit`, relation rows whose window is gone and that were last changed before `cutoff`;
    returns how many windows and rows it deleted.

    Transaction: one short durable transaction on `default` for the windows, one for the relation rows. Rows are
    taken `FOR UPDATE SKIP LOCKED`: a window a consumer pass or mark-read holds, or a relation row a pass holds, is
    left for the next run, and the sweep never waits on the consumer's locks, so it cannot deadlock with it.
    Idempotency: what it deleted is not found again."""
    with transaction.atomic(using=ALIAS, durable=True), raw_cursor(ALIAS) as cursor:
        cursor.execute(WINDOWS_DUE_SQL, [cutoff, cutoff, limit])
        ids = [pk for (pk,) in cursor.fetchall()]
        if ids:
            cursor.execute(LIKERS_DELETE_SQL, [ids])
            cursor.execute(WINDOWS_DELETE_SQL, [ids])
    deleted = len(ids)
    if deleted < limit:
        with transaction.atomic(using=ALIAS, durable=True), raw_cursor(ALIAS) as cursor:
            cursor.execute(RELATIONS_DUE_DELETE_SQL, [cutoff, limit - deleted])
            deleted += cursor.rowcount
    return deleted


def notifications_oldest() -> dt.datetime | None:
    """The start of the oldest window kept (None: no window)."""
    return NotifyWindow.objects.order_by("window_start").values_list("window_start", flat=True).first()


_WINDOW = NotifyWindow._meta.db_table
_LIKER = NotifyWindowLiker._meta.db_table
_RELATION = NotifyRelation._meta.db_table
# `window_start < cutoff` is implied by `window_end < cutoff`; it lets the scan walk `notify_window_start_idx`.
WINDOWS_DUE_SQL = (
    f"SELECT id FROM {_WINDOW} WHERE window_start < %s AND window_end < %s ORDER BY window_start LIMIT %s "
    "FOR UPDATE SKIP LOCKED"
)
LIKERS_DELETE_SQL = f"DELETE FROM {_LIKER} WHERE window_id = ANY(%s::bigint[])"
WINDOWS_DELETE_SQL = f"DELETE FROM {_WINDOW} WHERE id = ANY(%s::bigint[])"
RELATIONS_DUE_DELETE_SQL = (
    f"DELETE FROM {_RELATION} WHERE id IN (SELECT r.id FROM {_RELATION} r WHERE r.updated_at < %s "
    f"AND NOT EXISTS (SELECT 1 FROM {_WINDOW} w WHERE w.author_id = r.author_id AND w.video_id = r.video_id "
    "AND w.window_start = r.window_start) ORDER BY r.updated_at LIMIT %s FOR UPDATE SKIP LOCKED)"
)

RULE = RetentionRule(name="notifications", setting="NOTIFICATION_RETENTION_DAYS", unit="days",
                     what="creator notification windows (with their likers) and the notify consumer's relation rows",
                     sweep=notifications_sweep, oldest=notifications_oldest)
