"""The one consumer framework every projector runs on (issue 3 §2, issue 9 §1; consistency-techniques §3, §12).

For one (consumer, partition):
  backoff gate -> lease with a fencing token -> pause switch -> read entries after the checkpoint
  (ordered, bounded) -> validate (no side effects) -> projector.apply(...) -> classify failures
  (`likes_project.eventlog.retry`) -> advance the durable checkpoint over the contiguous completed
  prefix only, fenced by the lease token.

A projector returns, for the entries it was given, which ones are done. Poison (a NonRetryable) is
dead-lettered at once and counts as done. Anything else not done is kept: the checkpoint stays on it,
the partition waits a capped, jittered backoff (`retry_at`) and retries it, for as long as it takes,
alerting past LIKES_RETRY_ALERT_AFTER attempts. Other partitions and consumers are not held up.
"""

from __future__ import annotations

import datetime
import logging
import os
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from django.conf import settings
from django.db import connection
from django.utils import timezone

from likes_project import leases, logs, metrics
from likes_project.eventlog import registry, retry, streams
from likes_project.eventlog.checkpoints import partitions_with_work
from likes_project.eventlog.models import ConsumerCheckpoint, ConsumerSwitch, DeadLetter
from likes_project.eventlog.registry import CONSUMERS, pass_members
from likes_project.eventlog.retry import NonRetryable, Retryable
from likes_project.eventlog.streams import StreamEntry, entry_id_key
from likes_project.nudge import nudge, send_unless_pending
from likes_project.switches import switch_keys_set

logger = logging.getLogger(__name__)

__all__ = ["NonRetryable", "Retryable"]  # re-exported: projectors raise them from here


@dataclass
class ApplyResult:
    """What a projector did with a batch: ids done (applied, duplicate or stale all count as done),
    ids it dead-lettered itself, and errors for ids that failed."""

    done: set[str] = field(default_factory=set)
    failed: dict[str, Exception] = field(default_factory=dict)
    applied: int = 0
    duplicates: int = 0
    stale: int = 0


class Projector(Protocol):
    name: str

    def validate(self, entry: StreamEntry) -> None:
        """Raise NonRetryable when the event cannot be applied; must have no side effects."""

    def apply(self, entries: list[StreamEntry], *, consumer: str, partition: int, token: int) -> ApplyResult:
        """Apply the entries (in order) idempotently; never raise for one bad entry. Never change an entry: the
        consumers of a pass group are given the same ones (D143)."""


def contiguous_prefix_end(dispatched: list[str], done: set[str]) -> str | None:
    """The last id of the longest prefix of `dispatched` (in dispatch order) that is all done, or
    None when the first one is not done. The checkpoint never passes a hole (PROJ-8)."""
    last = None
    for entry_id in dispatched:
        if entry_id not in done:
            break
        last = entry_id
    return last


@dataclass(frozen=True)
class ConsumeReport:
    consumer: str
    partition: int
    status: str  # ok | paused | busy | lease_lost | backoff | retrying
    dispatched: int = 0
    advanced_to: str | None = None
    applied: int = 0
    duplicates: int = 0
    stale: int = 0
    dead_lettered: int = 0
    held_back: int = 0


def consumer_is_paused(consumer: str, partition: int | None = None) -> bool:
    """Whether `consumer` is paused on every partition, or on `partition` alone (None: on any partition,
    which is what a drain of every partition needs to know). Read through the runtime-switch cache, so
    another process's change is seen within SWITCH_CACHE_S."""
    keys = switch_keys_set(ConsumerSwitch.switch_kind)
    if consumer in keys:
        return True
    if partition is None:
        return any(k.startswith(f"{consumer}:") for k in keys)
    return f"{consumer}:{partition}" in keys


def dead_letter_record(*, consumer: str, entry: StreamEntry, error: Exception, attempts: int) -> None:
    """Record a dead letter. Never raises into the consumer (C5): a failure here is logged and the
    entry is simply not marked done, so it is retried instead of lost."""
    now = timezone.now()
    event = entry.event if isinstance(entry.event, dict) else {}
    user_id = event.get("userId")
    details = {
        "event_id": str(event.get("eventId", ""))[:64],
        "video_id": str(event.get("videoId", ""))[:64],
        "user_id": user_id if isinstance(user_id, int) and not isinstance(user_id, bool) else None,
        "payload": event, "error_class": error.__class__.__name__,
        "error": "".join(traceback.format_exception_only(error))[:4000],
        "attempts": attempts, "last_failed_at": now,
    }
    try:
        DeadLetter.objects.update_or_create(
            consumer=consumer, stream_key=entry.stream_key, entry_id=entry.entry_id,
            defaults=details, create_defaults={**details, "first_failed_at": now},
        )
    except Exception:
        logger.exception("could not write dead letter for %s %s", consumer, entry.entry_id)
        raise Retryable("dead letter write failed") from None
    metrics.inc("likes_dead_letters_total", consumer=consumer, error=error.__class__.__name__)
    logger.error("dead-lettered %s %s/%s: %s", consumer, entry.stream_key, entry.entry_id, error)


def _checkpoint(consumer: str, partition: int) -> ConsumerCheckpoint:
    """The checkpoint row (made at its first pass): one plain SELECT, not the ORM's (a pass's fixed cost, issue 34)."""
    fields = ConsumerCheckpoint._meta.concrete_fields
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(f.column for f in fields)} FROM {ConsumerCheckpoint._meta.db_table} "
                       f"WHERE consumer = %s AND partition = %s", [consumer, partition])
        row = cursor.fetchone()
    if row is None:
        return ConsumerCheckpoint.objects.get_or_create(consumer=consumer, partition=partition)[0]
    return ConsumerCheckpoint.from_db("default", [f.attname for f in fields], list(row))


def consumer_resource(consumer: str, partition: int) -> str:
    """The lease every pass (and every redrive) of `consumer` over `partition` holds."""
    return f"consumer:{consumer}:{partition}"


@dataclass(frozen=True)
class Blocked:
    """The head entry a pass could not complete, and when to try it again (issue 9 §1)."""

    entry_id: str = ""
    attempts: int = 0
    reason: str = ""
    error: str = ""
    retry_at: datetime.datetime | None = None
    since: datetime.datetime | None = None

    @classmethod
    def after(cls, cp: ConsumerCheckpoint, *, consumer: str, partition: int, entry_id: str,
              error: BaseException) -> Blocked:
        """The next state of a head that failed again (or for the first time), with its backoff."""
        same = cp.blocked_entry_id == entry_id and cp.blocked_attempts > 0
        attempts = cp.blocked_attempts + 1 if same else 1
        now = timezone.now()
        _verdict, reason = retry.classify(error)
        blocked = cls(entry_id=entry_id, attempts=attempts, reason=reason,
                      error=f"{error.__class__.__name__}: {error}"[:512],
                      retry_at=now + datetime.timedelta(seconds=retry.backoff_s(attempts)),
                      since=cp.blocked_since if same and cp.blocked_since else now)
        metrics.inc("likes_consumer_retries_total", consumer=consumer, reason=reason)
        if retry.should_alert(attempts):
            metrics.inc("likes_consumer_retry_alerts_total", consumer=consumer, reason=reason)
            logger.error("ALERT %s[%s] has retried %s for %s attempts since %s (%s): %s", consumer, partition,
                         entry_id or "its stream", attempts, blocked.since.isoformat(), reason, blocked.error)
        return blocked

    def fields(self) -> dict:
        return {"blocked_entry_id": self.entry_id, "blocked_attempts": self.attempts,
                "blocked_reason": self.reason, "blocked_error": self.error, "retry_at": self.retry_at,
                "blocked_since": self.since}


def checkpoint_advance(*, consumer: str, partition: int, grant: leases.LeaseGrant, to_id: str,
                       applied: int, blocked: Blocked | None = None, renew_ttl_s: float | None = None,
                       release: bool = False) -> bool:
    """Advance the checkpoint while `grant` is still the lease (False when it is not: abandon the pass; the
    token is checked in the same statement) and never backwards; record (or clear) the blocked head.
    `renew_ttl_s`: the lease is renewed in the same statement; `release`: given up in it (a pass's last batch).
    One statement and one commit (issue 34 §2)."""
    cte, params = leases.lease_fence_cte(grant, renew_ttl_s=renew_ttl_s, release=release)
    ms, seq = entry_id_key(to_id)
    fields = {**(blocked or Blocked()).fields(), "updated_at": timezone.now()}
    meta = ConsumerCheckpoint._meta
    sets = ", ".join(f"{meta.get_field(k).column} = %(f_{k})s" for k in fields)
    row = leases.one_statement(
        f"WITH {cte} UPDATE {meta.db_table} SET last_done_id = %(to)s, fencing_token = %(lease_tok)s, "
        f"applied_total = applied_total + %(applied)s, {sets} "
        f"WHERE consumer = %(c)s AND partition = %(p)s AND EXISTS (SELECT 1 FROM lease_held) "
        f"AND (split_part(last_done_id, '-', 1)::bigint, split_part(last_done_id, '-', 2)::bigint) "
        f"<= (%(ms)s, %(seq)s) "
        f"RETURNING 1",
        {**params, **{f"f_{k}": v for k, v in fields.items()}, "to": to_id, "applied": applied, "c": consumer,
         "p": partition, "ms": ms, "seq": seq})
    if row is not None:
        return True
    if not leases.lease_is_ours(grant):
        return False
    raise RuntimeError(f"checkpoint of {consumer}[{partition}] is missing or would move backwards")


def _set_blocked(consumer: str, partition: int, grant: leases.LeaseGrant, blocked: Blocked) -> None:
    ConsumerCheckpoint.objects.filter(consumer=consumer, partition=partition, fencing_token__lte=grant.token).update(
        fencing_token=grant.token, updated_at=timezone.now(), **blocked.fields()
    )


def holder_id() -> str:
    return f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def consume_partition(projector: Projector, *, partition: int, batch_size: int = 200, max_batches: int = 10,
                      lease_ttl_s: float | None = None, holder: str | None = None,
                      grant: leases.LeaseGrant | None = None,
                      ignore_backoff: bool = False, read: streams.Reader | None = None) -> ConsumeReport:
    """Run one bounded pass of `projector` over one partition. A second concurrent copy is harmless:
    it does not get the lease and returns `busy`. A partition whose head is waiting out its backoff
    returns `backoff` without touching the stream (`ignore_backoff` retries it now). `read`: how the pass reads the
    stream (a pass group's `streams.SharedRead`; `streams.read_after` by default)."""
    consumer = projector.name
    if consumer_is_paused(consumer, partition):
        return ConsumeReport(consumer, partition, "paused")
    resource = consumer_resource(consumer, partition)
    lease_ttl_s = lease_ttl_s or settings.CONSUMER_LEASE_TTL_S
    grant = grant or leases.lease_acquire(resource=resource, holder=holder or holder_id(), ttl_s=lease_ttl_s)
    if grant is None:
        return ConsumeReport(consumer, partition, "busy")
    released = [False]  # the pass's last checkpoint gave the lease up with it
    try:
        # Read once, under the lease: no other pass moves it while the grant holds (the backoff gate reads it too).
        cp = _checkpoint(consumer, partition)
        if not ignore_backoff and cp.retry_at is not None and cp.retry_at > timezone.now():
            return ConsumeReport(consumer, partition, "backoff")
        with logs.bound(consumer=consumer, partition=partition):
            return _consume(projector, grant, cp, partition=partition, batch_size=batch_size,
                            max_batches=max_batches, lease_ttl_s=lease_ttl_s, released=released,
                            read=read or streams.read_after)
    except Exception as exc:  # noqa: BLE001 - the stream, the checkpoint or a dead letter could not be reached
        # Not about any one event: the whole partition waits its backoff and is retried (issue 9 §1).
        logger.warning("%s[%s] pass failed (%s): it will be retried", consumer, partition, exc.__class__.__name__)
        try:
            cp = _checkpoint(consumer, partition)
            _set_blocked(consumer, partition, grant, Blocked.after(cp, consumer=consumer, partition=partition,
                                                                   entry_id=cp.blocked_entry_id, error=exc))
        except Exception:  # noqa: BLE001 - the control plane is down too: the next sweep retries anyway
            logger.warning("%s[%s] backoff not recorded", consumer, partition)
        return ConsumeReport(consumer, partition, "retrying")
    finally:
        # The next pass (a new holder) may start at once; its token will be higher.
        try:
            if not released[0]:
                leases.lease_release(grant)
        except Exception:  # noqa: BLE001 - an unreleased lease simply expires after its TTL
            logger.warning("lease %s not released; it expires by itself", grant.resource)


def _entry_log_fields(entry: StreamEntry) -> dict:
    """The log context of one entry: its stream id and, when the payload has one, its event id."""
    event_id = entry.event.get("eventId") if isinstance(entry.event, dict) else None
    return {"entry_id": entry.entry_id, "event_id": str(event_id)[:64] if event_id else None}  # None: unbound


def _batch_log_fields(entries: list[StreamEntry]) -> dict:
    if len(entries) == 1:
        return _entry_log_fields(entries[0])
    return {"first_entry_id": entries[0].entry_id, "last_entry_id": entries[-1].entry_id} if entries else {}


def _consume(projector: Projector, grant: leases.LeaseGrant, cp: ConsumerCheckpoint, *, partition: int,
             batch_size: int, max_batches: int, lease_ttl_s: float, released: list[bool],
             read: streams.Reader) -> ConsumeReport:
    consumer = projector.name
    totals = {"dispatched": 0, "applied": 0, "duplicates": 0, "stale": 0, "dead": 0, "held": 0}
    advanced_to = None

    def report(status: str) -> ConsumeReport:
        return ConsumeReport(consumer, partition, status, totals["dispatched"], advanced_to, totals["applied"],
                             totals["duplicates"], totals["stale"], totals["dead"], totals["held"])

    for batch in range(max_batches):
        if consumer_is_paused(consumer, partition):
            return report("paused")
        entries = read(partition, cp.last_done_id, batch_size)
        if not entries:
            # The blocked head is gone (trimmed, or the log was lost): clear it. Asked of the log itself: a shared
            # read may predate the head that another pass found blocked (D143).
            if cp.blocked_attempts and not streams.read_after(partition, cp.last_done_id, 1):
                _set_blocked(consumer, partition, grant, Blocked())
            break
        totals["dispatched"] += len(entries)
        dispatched = [e.entry_id for e in entries]
        done: set[str] = set()
        valid: list[StreamEntry] = []
        for entry in entries:
            try:
                projector.validate(entry)
                valid.append(entry)
            except NonRetryable as exc:
                with logs.bound(**_entry_log_fields(entry)):
                    dead_letter_record(consumer=consumer, entry=entry, error=exc, attempts=1)
                done.add(entry.entry_id)
                totals["dead"] += 1
        # A batch is applied at once: its lines name the entry (a batch of one) or the batch's range.
        with logs.bound(**_batch_log_fields(valid)):
            result = projector.apply(valid, consumer=consumer, partition=partition, token=grant.token) if valid \
                else ApplyResult()
        done |= result.done
        totals["applied"] += result.applied
        totals["duplicates"] += result.duplicates
        totals["stale"] += result.stale
        by_id = {e.entry_id: e for e in entries}
        for entry_id, error in result.failed.items():
            if retry.classify(error)[0] is retry.Verdict.POISON:
                with logs.bound(**_entry_log_fields(by_id[entry_id])):
                    dead_letter_record(consumer=consumer, entry=by_id[entry_id], error=error, attempts=1)
                done.add(entry_id)
                totals["dead"] += 1

        head = contiguous_prefix_end(dispatched, done)
        first_pending = next((i for i in dispatched if i not in done), None)
        blocked = None
        if first_pending is not None:
            # Not poison: an infrastructure failure. The head is kept and retried after its backoff.
            blocked = Blocked.after(cp, consumer=consumer, partition=partition, entry_id=first_pending,
                                    error=result.failed.get(first_pending) or Retryable("not completed"))
        # The last batch: the log held no more than this when it was read (what is appended later comes with its
        # own nudge), the pass is out of batches, or the head backs off.
        last = blocked is not None or len(entries) < batch_size or batch == max_batches - 1
        if head is not None:
            # The lease is renewed with the checkpoint, or given up with the last one: one commit a batch (issue 34).
            if not checkpoint_advance(consumer=consumer, partition=partition, grant=grant, to_id=head,
                                      applied=result.applied, blocked=blocked, renew_ttl_s=lease_ttl_s, release=last):
                return report("lease_lost")
            released[0] = last
            advanced_to = head
            cp.last_done_id = head  # what the statement wrote: the next batch reads on from it
            for name, value in (blocked or Blocked()).fields().items():
                setattr(cp, name, value)
        elif blocked is not None:
            _set_blocked(consumer, partition, grant, blocked)
        if blocked is not None:
            totals["held"] = sum(1 for i in dispatched if i not in done)
        if last:
            break  # on a blocked head: back off, the rest of this partition waits for its retry
    metrics.inc("likes_events_applied_total", totals["applied"], consumer=consumer)
    metrics.inc("likes_events_duplicate_total", totals["duplicates"], consumer=consumer)
    metrics.inc("likes_events_stale_total", totals["stale"], consumer=consumer)
    return report("ok")


def projector_get(consumer: str) -> Projector:
    """A new projector of the registered consumer `consumer` (KeyError when none is)."""
    if consumer not in CONSUMERS:
        raise KeyError(f"unknown consumer {consumer!r}")
    return CONSUMERS[consumer].projector()


@dataclass(frozen=True)
class PassConfig:
    """How a consumer's passes run (what `consumer_tasks` was given): its projector, its batch size, the hook
    run after each pass."""

    projector: Callable[[], Projector]
    batch_size: Callable[[], int]
    after: Callable[[ConsumeReport], None] | None = None


_PASSES: dict[str, PassConfig] = {}  # consumer -> how its passes run, as its app's tasks module defined them


def consume_pass(projector: Projector, *, partition: int, batch_size: int, max_batches: int = 10,
                 read: streams.Reader | None = None) -> ConsumeReport:
    """One bounded pass of a projector over one partition, as every consumer task runs it; the task that runs
    the consumer's passes is nudged again while a pass filled all its batches (more is waiting)."""
    report = consume_partition(projector, partition=int(partition), batch_size=batch_size, max_batches=max_batches,
                               read=read)
    if report.dispatched >= batch_size * max_batches:
        nudge(registry.pass_task(projector.name), int(partition), debounce_s=0.0)
    return report


def group_pass(consumer: str, *, partition: int, batch_size: int | None = None,
               max_batches: int = 10) -> list[ConsumeReport]:
    """What one run of `consumer`'s pass task does: a pass of each consumer of its group (`registry.pass_members`),
    in the group's order, over `partition`, all reading the stream through one `streams.SharedRead` (D143). Each
    pass keeps its own lease, checkpoint, backoff, pause switch and hook: one that fails, waits or is paused
    holds up none of the others. `batch_size`: every member's, instead of its own (a benchmark's)."""
    configs = [(name, _PASSES[name]) for name in pass_members(consumer) if name in _PASSES]
    sizes = {name: batch_size or config.batch_size() for name, config in configs}
    read = streams.SharedRead(partition, prefetch=max(sizes.values())) if len(configs) > 1 else None
    reports = []
    for name, config in configs:
        report = consume_pass(config.projector(), partition=partition, batch_size=sizes[name],
                              max_batches=max_batches, read=read)
        if config.after is not None:
            config.after(report)
        reports.append(report)
    return reports


def consumer_tasks(projector: Callable[[], Projector], *, name: str, sweep_name: str,
                   batch_size: Callable[[], int], after: Callable[[ConsumeReport], None] | None = None):
    """The two Celery tasks of a projector: one bounded pass over one partition (the task `name`, which
    the app registers as its consumer's task; lease-owned, so a duplicate run returns `busy`), and the beat
    sweeper that starts a pass per stream partition. `after(report)` runs after each pass (e.g. nudge the
    snapshot job). The pass task of a group's leader runs the whole group (`group_pass`, D143)."""
    from celery import shared_task

    consumer = projector().name
    _PASSES[consumer] = PassConfig(projector, batch_size, after)

    @shared_task(name=name, acks_late=True, ignore_result=True)
    def pass_task(partition: int) -> dict:
        first, *others = group_pass(consumer, partition=int(partition))
        return {"status": first.status, "applied": first.applied, "dead": first.dead_lettered,
                **({"group": {r.consumer: r.status for r in others}} if others else {})}

    @shared_task(name=sweep_name, ignore_result=True)
    def sweep_task() -> None:
        if registry.pass_task(consumer) != name:
            return  # a member of another consumer's pass group: the leader's sweeper sweeps for the group (D143)
        try:
            partitions = partitions_with_work(*pass_members(consumer))  # D139: no pass where nothing waits
        except Exception:  # noqa: BLE001 - the log or the checkpoints cannot be read: every pass finds out for itself
            partitions = streams.all_partitions()
        for partition in partitions:
            send_unless_pending(name, (partition,))  # nothing where a pass already waits (D89)

    pass_task.__doc__ = (f"One bounded pass of the {consumer} projector over one stream partition, and of the rest "
                         f"of its pass group when it leads one (D143).")
    sweep_task.__doc__ = (f"Beat sweeper: one {consumer} projector pass per stream partition with work (D139), for "
                          f"its pass group when it leads one; nothing when it is another's member (D143).")
    return pass_task, sweep_task
