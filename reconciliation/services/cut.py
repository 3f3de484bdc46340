"""The coordinated cut of exact mode (REC-5) and of a repair's switch (REPAIR-3 step 3).

  write barrier on the scope (relations.services.write_barrier) -> the outbox drained up to the
  barrier (every row written before it published; the commit-seq -> stream-offset mapping recorded) ->
  the count consumer drained to the barrier offsets B[p] (the streams' heads once the outbox is
  drained, as in SNAP-6), and its partition leases taken, so no pass moves the projection -> one
  snapshot opened on every relation shard and every count partition -> the leases checked (a lease
  that changed hands REFUSES the cut) and released, the barrier lowered -> the caller compares inside
  the snapshots, which stay open until the block ends.

The barrier is held from the first lock to the last snapshot only; the hold time is recorded. Any
step that cannot be completed in time raises CutRefused with the reason: nothing is claimed then.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections, transaction

from counting.services.projection import COUNT_CONSUMER
from likes_project import leases
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.eventlog.consumer import consumer_is_paused, consumer_resource, holder_id
from relations.models import OutboxEvent
from relations.services import write_barrier

_POLL_S = 0.05
_UNPUBLISHED = ("NEW", "RETRY", "PUBLISHING", "UNCERTAIN")


class CutRefused(Exception):
    """The cut could not be made (a barrier not established, a lease that changed hands)."""


@dataclass
class Cut:
    videos: list[str] | None
    source: dict = field(default_factory=dict)  # per shard: outbox rows up to the barrier, all published
    offsets: dict = field(default_factory=dict)  # B[p]: the stream heads the count consumer reached
    held_ms: float = 0.0
    mode: str = ""  # "videos" or "global" (the barrier's keys)


# A test hook: called with the cut's lease grants once they are held, before the snapshots are opened.
after_leases_taken: Callable[[list[leases.LeaseGrant]], None] | None = None


def wait_driving(condition: Callable[[], object], deadline: float, drive: Callable[[], None]) -> object:
    """Until `condition()` or the deadline; between looks, `drive()` moves the pipeline itself (the
    same publisher and consumer passes the workers run, under their own leases and claims), so the
    barrier is reached without waiting for the next beat tick."""
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        drive()
        if not condition():
            time.sleep(_POLL_S)  # a worker holds the pass we would run: wait for it (bounded by the deadline)


def _publish_pending() -> None:
    from relations.services.outbox import outbox_publish_batch

    for alias in settings.RELATION_SHARD_ALIASES:
        outbox_publish_batch(alias=alias, holder=f"reconcile:{holder_id()}")


def consume_to(offsets: dict[int, str]) -> Callable[[], None]:
    def drive() -> None:
        from counting.services.projection import CountProjector
        from likes_project.eventlog.consumer import consume_partition

        done = checkpoints_get(COUNT_CONSUMER)
        for p, b in offsets.items():
            if streams.entry_id_key(done.get(p, "0-0")) < streams.entry_id_key(b):
                consume_partition(CountProjector(), partition=p)
    return drive


def _outbox_drained(limits: dict[str, int]) -> Callable[[], bool]:
    def check() -> bool:
        for alias, max_id in limits.items():
            if OutboxEvent.objects.using(alias).filter(id__lte=max_id, status__in=_UNPUBLISHED).exists():
                return False
        return True
    return check


def _outbox_limits() -> dict[str, int]:
    out = {}
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {OutboxEvent._meta.db_table}")
            out[alias] = int(cursor.fetchone()[0])
    return out


def _consumer_reached(offsets: dict[int, str]) -> Callable[[], bool]:
    def check() -> bool:
        done = checkpoints_get(COUNT_CONSUMER)
        return all(streams.entry_id_key(done.get(p, "0-0")) >= streams.entry_id_key(b) for p, b in offsets.items()
                   if b != "0-0")
    return check


def published_and_consumed(deadline: float) -> dict[int, str]:
    """Without a barrier: every outbox row committed by now published, and the count consumer past the
    stream heads read after that (a generation built from facts read before this call is then not ahead of
    the live one once both are at the same stream positions). Returns the heads; raises CutRefused."""
    limits = _outbox_limits()
    if not wait_driving(_outbox_drained(limits), deadline, _publish_pending):
        raise CutRefused("the outbox was not drained within the deadline")
    offsets = {p: streams.last_generated_id(p) for p in streams.all_partitions()}
    if not wait_driving(_consumer_reached(offsets), deadline, consume_to(offsets)):
        raise CutRefused("the count consumer did not reach the stream heads within the deadline")
    return offsets


def count_leases_take(deadline: float, *, holder_prefix: str = "reconcile",
                      ttl_s: float | None = None) -> list[leases.LeaseGrant]:
    """Take the count consumer's lease of every stream partition (waiting, until `deadline`, for the pass
    holding one to end): while they are held no pass dispatches. Raises CutRefused past the deadline."""
    holder = f"{holder_prefix}:{holder_id()}"
    grants: list[leases.LeaseGrant] = []
    pending = list(streams.all_partitions())
    while pending:
        for p in list(pending):
            grant = leases.lease_acquire(resource=consumer_resource(COUNT_CONSUMER, p), holder=holder,
                                         ttl_s=ttl_s or max(5.0, settings.RECONCILE_DRAIN_MAX_S))
            if grant is not None:
                grants.append(grant)
                pending.remove(p)
        if pending:
            if time.monotonic() >= deadline:
                for g in grants:
                    leases.lease_release(g)
                raise CutRefused(f"the count consumer's partitions {pending} stayed busy past the drain deadline")
            time.sleep(_POLL_S)  # a consumer pass holds the lease for one bounded batch; wait for its end
    return grants


@contextlib.contextmanager
def held_cut(videos: list[str] | None, *, take_leases: bool) -> Iterator[tuple[Cut, list[leases.LeaseGrant]]]:
    """Raise the barrier over `videos` (None: all), drain the outbox and the count consumer to it, take
    the consumer's partition leases if asked, and yield while all of it holds; release it all at the
    end of the block. Raises CutRefused."""
    if consumer_is_paused(COUNT_CONSUMER):
        raise CutRefused("the count consumer is paused: it cannot drain to the barrier")
    try:
        barrier = write_barrier.barrier_raise(videos, timeout_ms=settings.RECONCILE_BARRIER_ACQUIRE_MS)
    except write_barrier.BarrierNotEstablished as exc:
        raise CutRefused(str(exc)) from exc
    cut = Cut(videos=videos, mode="global" if barrier.videos is None else "videos")
    grants: list[leases.LeaseGrant] = []
    try:
        deadline = time.monotonic() + settings.RECONCILE_DRAIN_MAX_S
        limits = _outbox_limits()
        if not wait_driving(_outbox_drained(limits), deadline, _publish_pending):
            raise CutRefused(f"the outbox was not drained to the barrier within {settings.RECONCILE_DRAIN_MAX_S} s")
        cut.source = {alias: {"outboxMaxId": max_id} for alias, max_id in limits.items()}
        offsets = {p: streams.last_generated_id(p) for p in streams.all_partitions()}
        cut.offsets = {str(p): b for p, b in offsets.items()}
        if consumer_is_paused(COUNT_CONSUMER):
            raise CutRefused("the count consumer was paused during the barrier")
        if not wait_driving(_consumer_reached(offsets), deadline, consume_to(offsets)):
            raise CutRefused(f"the count consumer did not reach the barrier offsets within "
                             f"{settings.RECONCILE_DRAIN_MAX_S} s")
        if take_leases:
            grants = count_leases_take(deadline)
            if after_leases_taken is not None:
                after_leases_taken(grants)
        yield cut, grants
    finally:
        for g in grants:
            leases.lease_release(g)
        cut.held_ms = barrier.held_ms
        write_barrier.barrier_lower(barrier)


@contextlib.contextmanager
def exact_cut(videos: list[str] | None) -> Iterator[Cut]:
    """Cut `videos` (None: all) and yield with REPEATABLE READ snapshots open on every relation shard
    and count partition, taken while the barrier and the consumer's leases held (the caller reads
    through the plain connections; the barrier is already lowered). Raises CutRefused."""
    with contextlib.ExitStack() as snapshots:
        with held_cut(videos, take_leases=True) as (cut, grants):
            for alias in [*settings.RELATION_SHARD_ALIASES, *settings.COUNT_PARTITION_ALIASES]:
                snapshots.enter_context(transaction.atomic(using=alias))
                with connections[alias].cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    cursor.execute("SELECT pg_current_snapshot()::text")  # the snapshot is taken here
                    snap = cursor.fetchone()[0]
                if alias in cut.source:
                    cut.source[alias]["snapshot"] = snap
            lost = [g.resource for g in grants if not leases.lease_is_current(g)]
            if lost:
                raise CutRefused(f"a lease changed hands during the barrier: {', '.join(lost)}")
        yield cut
