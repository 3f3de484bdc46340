"""Route switching and what pauses it (SNAP-8; issue 12 §2 step 4).

A recovery snapshot pins the generation's sealed manifest: while it is built no switch of
`active_manifest_id` (a bucket cutover, a restored generation's activation) may happen. The pause is a
session-level shared advisory lock on `default`; a switch takes the same key exclusively for the few
milliseconds of its CAS. Several snapshots (shared) may overlap; a switch waits for them or is refused
after its timeout. Session-level, so a builder that dies releases it with its connection.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from django.db import connections

from likes_project.errors import Conflict

ROUTE_SWITCH_KEY = 0x4C4B5253  # "LKRS": one key for the whole route table
_POLL_S = 0.05


class RouteSwitching(Conflict):
    code = "route_switch_in_progress"
    default_message = "A route switch is in progress, or route switching is paused by a snapshot."


def _try(fn: str) -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT {fn}(%s)", [ROUTE_SWITCH_KEY])
        return bool(cursor.fetchone()[0])


def _unlock(fn: str) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT {fn}(%s)", [ROUTE_SWITCH_KEY])


@contextlib.contextmanager
def _held(lock: str, unlock: str, what: str, timeout_s: float) -> Iterator[None]:
    deadline = time.monotonic() + timeout_s
    while not _try(lock):
        if time.monotonic() >= deadline:
            raise RouteSwitching(f"{what}: the route table is locked by another holder")
        time.sleep(_POLL_S)  # the other side holds it for a bounded time (a CAS, or one snapshot build)
    try:
        yield
    finally:
        _unlock(unlock)


def switching_paused(reason: str, *, timeout_s: float = 5.0):
    """Hold route switching off for the block (shared with other pauses)."""
    return _held("pg_try_advisory_lock_shared", "pg_advisory_unlock_shared", f"cannot pause switching for {reason}",
                 timeout_s)


def switch_exclusive(reason: str, *, timeout_s: float = 2.0):
    """Hold the route table for one switch (refused while a snapshot pauses switching)."""
    return _held("pg_try_advisory_lock", "pg_advisory_unlock", f"cannot switch routes for {reason}", timeout_s)
