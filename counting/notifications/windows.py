"""The window rule of creator notifications: pure functions, no I/O.

Windows are fixed buckets of the epoch: a like changed at `t` counts in [floor(t / W) * W, that + W), with W
= NOTIFY_WINDOW_S. The bucket depends on the event alone (its `stateChangedAt`, the relation transaction's
time), never on when it is published, delivered, consumed or replayed, nor on which likes came first, so
duplicates, reordering and replays all land in the same window. Computed in integer microseconds, the unit
PostgreSQL stores, so a like exactly on a boundary opens the next window.
"""

from __future__ import annotations

import datetime as dt

from likes_project.cursors import from_micros, micros


def window_of(changed_at: dt.datetime, window_s: int) -> tuple[dt.datetime, dt.datetime]:
    """(windowStart, windowEnd) of the window a change at `changed_at` falls in."""
    width = max(1, int(window_s)) * 1_000_000
    start = micros(changed_at) // width * width
    return from_micros(start), from_micros(start + width)
