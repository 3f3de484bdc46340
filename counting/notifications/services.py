"""The author's writes to their notifications: marking them read. The windows themselves are written by
the `notify` consumer only (`counting.notifications.projector`)."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from counting.notifications.models import NotifyWindow


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
