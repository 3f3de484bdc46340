"""The write barrier of the relation shards (REC-5 step 1, REPAIR-3 step 3): the one place that names its
locks, admits commands through it and lets reconciliation raise it.

Every relation change (the like command's transaction, whoever runs it) first takes two *shared*
transaction-level advisory locks on its shard: the shard's global key and its video's key. A barrier
takes the same keys *exclusively*, as session locks on each shard (the global key for a scope of all
videos or of more than RECONCILE_BARRIER_VIDEO_LOCKS_MAX videos, else one key per video). Postgres
queues lock requests: while a barrier waits for the commands in flight (they hold their shared locks
until they commit: the drain), new commands' requests already fail, so the barrier is reached, and it
is held until it is lowered.

The like command takes the same two locks inside its one-statement function (`likes_relation_apply`,
`relations/sql/likes_relation_apply.v3.sql`) with `LOCK_NAMESPACES`, and polls through `admit_polling` as well.

A command that meets a barrier polls for up to RECONCILE_BARRIER_MAX_MS, then gives up with
503 `write_barrier` and `Retry-After`, having written nothing (its transaction rolls back). The fast
path, no barrier, is one statement that takes two uncontended locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connections

from likes_project import metrics
from likes_project.errors import ServiceUnavailable

# Advisory lock keys (two int4 halves): (namespace, 0) is a shard's global key, (namespace + 1,
# hashtext(video_id)) a video's key. A hash collision only makes a barrier hold one more video.
_GLOBAL_NS = 0x4C4B4252  # "LKBR"
_VIDEO_NS = _GLOBAL_NS + 1
# A logical slot's fence (issue 16 §3): (namespace, slot), shared by every write of the slot's users, exclusive
# for a slot move's write pause (relations.services.slot_moves).
SLOT_NS = 0x4C4B534C  # "LKSL"
_POLL_S = 0.02

_ADMIT_SQL = ("SELECT pg_try_advisory_xact_lock_shared(%s, 0) "
              "AND pg_try_advisory_xact_lock_shared(%s, hashtext(%s))")
_SLOT_ADMIT_SQL = "SELECT pg_try_advisory_xact_lock_shared(%s, %s)"
_SLOT_MOVED_SQL = "SELECT EXISTS (SELECT 1 FROM relations_relationslotstate WHERE slot = %s AND state <> 'CAPTURING')"


class WriteBarrierHeld(ServiceUnavailable):
    code = "write_barrier"
    default_message = "A reconciliation barrier holds writes on this video for a moment; retry shortly."


LOCK_NAMESPACES = (_GLOBAL_NS, _VIDEO_NS)  # for callers that take the shared locks in SQL of their own


class SlotMoved(Exception):
    """The shard does not own the slot (a move's target before its switch, its source after): nothing was
    written; reload the contract and write where it points."""


# What a writer was kept out by -> the setting bounding its wait: a reconciliation barrier, a slot move's cutover.
BARRIER, FENCED = "barrier", "fenced"
_MAX_MS = {BARRIER: "RECONCILE_BARRIER_MAX_MS", FENCED: "RELATION_MOVE_MAX_PAUSE_MS"}


def admit_polling(try_admit: Callable[[], str | bool]) -> None:
    """Call `try_admit()` until it is admitted (True, or any value but BARRIER and FENCED), for at most
    RECONCILE_BARRIER_MAX_MS (a barrier, or False) or RELATION_MOVE_MAX_PAUSE_MS (FENCED, a slot move's
    write pause), counted from the first refusal; then raise WriteBarrierHeld (503). The one poll loop."""
    deadline = None
    while (kept := try_admit()) in (False, BARRIER, FENCED):
        now = time.monotonic()
        max_ms = getattr(settings, _MAX_MS[FENCED if kept == FENCED else BARRIER])
        if deadline is None:
            deadline = now + max_ms / 1000.0
            metrics.inc("likes_write_barrier_waits_total")
        if now >= deadline:
            metrics.inc("likes_write_barrier_refusals_total")
            retry_after = max(1, round(max_ms / 1000.0))
            raise WriteBarrierHeld(headers={"Retry-After": str(retry_after)}, retryAfterSeconds=retry_after)
        time.sleep(_POLL_S)  # a barrier is lowered (a cutover ends) within seconds; poll until the bound


def admit(alias: str, video_id: str, slot: int | None = None) -> None:
    """Inside a relation change's transaction on `alias`, before it reads or writes anything: wait
    (bounded) while a barrier holds `video_id` or the whole shard, or a slot move's cutover holds `slot`.
    Raises WriteBarrierHeld (503), or SlotMoved when the shard does not own `slot`."""
    with connections[alias].cursor() as cursor:
        def try_admit() -> str | bool:
            cursor.execute(_ADMIT_SQL, [_GLOBAL_NS, _VIDEO_NS, video_id])
            if not cursor.fetchone()[0]:
                return BARRIER
            if slot is None:
                return True
            cursor.execute(_SLOT_ADMIT_SQL, [SLOT_NS, slot])
            return True if cursor.fetchone()[0] else FENCED

        admit_polling(try_admit)
        if slot is not None:
            cursor.execute(_SLOT_MOVED_SQL, [slot])
            if cursor.fetchone()[0]:
                raise SlotMoved()


class BarrierNotEstablished(Exception):
    """A shard's barrier could not be taken within the time allowed (long transactions in flight)."""


@dataclass
class Barrier:
    """A raised barrier: which shards, which keys (None: the global key), when it went up."""

    aliases: list[str]
    videos: list[str] | None
    raised_at: float = 0.0
    held: list[str] = field(default_factory=list)

    @property
    def held_ms(self) -> float:
        return (time.monotonic() - self.raised_at) * 1000.0


def _lock_args(videos: list[str] | None) -> list[tuple[str, list]]:
    if videos is None:
        return [("SELECT pg_advisory_lock(%s, 0)", [_GLOBAL_NS])]
    return [("SELECT pg_advisory_lock(%s, hashtext(%s))", [_VIDEO_NS, v]) for v in sorted(set(videos))]


def _unlock_args(videos: list[str] | None) -> list[tuple[str, list]]:
    if videos is None:
        return [("SELECT pg_advisory_unlock(%s, 0)", [_GLOBAL_NS])]
    return [("SELECT pg_advisory_unlock(%s, hashtext(%s))", [_VIDEO_NS, v]) for v in sorted(set(videos))]


def barrier_videos(videos: list[str] | None) -> list[str] | None:
    """The keys a barrier over `videos` takes: the global one (None) for all or for many videos."""
    if videos is None or len(set(videos)) > settings.RECONCILE_BARRIER_VIDEO_LOCKS_MAX:
        return None
    return sorted(set(videos))


def barrier_raise(videos: list[str] | None, *, timeout_ms: float) -> Barrier:
    """Raise the barrier over `videos` (None: every video) on every relation shard, in alias order,
    waiting at most `timeout_ms` per shard for the commands in flight. On any failure what was taken
    is released and BarrierNotEstablished raised. The shards' connections must not be inside a
    transaction (the locks are the session's)."""
    keys = barrier_videos(videos)
    barrier = Barrier(aliases=list(settings.RELATION_SHARD_ALIASES), videos=keys)
    try:
        for alias in barrier.aliases:
            with connections[alias].cursor() as cursor:
                cursor.execute("SET lock_timeout = %s", [f"{max(1, int(timeout_ms))}ms"])
                try:
                    for sql, args in _lock_args(keys):
                        cursor.execute(sql, args)
                finally:
                    cursor.execute("RESET lock_timeout")
            barrier.held.append(alias)
    except DatabaseError as exc:
        barrier_lower(barrier)
        raise BarrierNotEstablished(f"the write barrier on {alias} was not reached within {timeout_ms:.0f} ms "
                                    f"({exc.__class__.__name__})") from exc
    barrier.raised_at = time.monotonic()
    return barrier


def barrier_lower(barrier: Barrier) -> None:
    """Release the barrier's locks on every shard that holds them (inside or outside a transaction:
    session locks are not transactional). Never raises for one shard's failure before trying the rest."""
    with ExitStack() as stack:
        for alias in list(barrier.held):
            def unlock(alias=alias):
                with connections[alias].cursor() as cursor:
                    for sql, args in _unlock_args(barrier.videos):
                        cursor.execute(sql, args)
            stack.callback(unlock)
        barrier.held.clear()
