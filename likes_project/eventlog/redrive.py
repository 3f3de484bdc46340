"""Redrive of dead letters (issue 9 §2): requeue, discard, and the one path that applies a requeued
event again.

A dead letter is an entry its consumer's checkpoint has already passed (it was set aside so the
partition could move on). Requeueing it never rewinds that checkpoint: rewinding would replay every
later entry of the partition and, for a checkpoint many hours past the hole, re-read a stream that may
have been trimmed. Instead the stored entry is handed to its consumer's projector again, under the
same partition lease (and fencing token) a normal pass holds, so it is serialized with the pass and
every projection absorbs it as it absorbs any replay: by receipt, and by relation version (an event
older than what the projection holds is `stale` and changes nothing). Requeue is therefore always
safe. Redrive outcomes:

  applied / duplicate / stale -> RESOLVED;
  still poison                -> back to NEW with the new error (attempts + 1);
  an infrastructure failure   -> stays REQUEUED; the beat task `eventlog.redrive` retries it.

Discard keeps the row as DISCARDED with who and why (a reason is required). The second person's
approval of a discard arrives with the approval flow (a later issue); until then discard needs the
`eventlog.discard_deadletter` permission and a reason.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from likes_project import leases, metrics
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import InvalidInput
from likes_project.eventlog import retry, streams
from likes_project.eventlog.consumer import consumer_resource, holder_id, projector_get
from likes_project.eventlog.models import DeadLetter, DeadLetterStatus
from likes_project.eventlog.registry import CONSUMERS
from likes_project.eventlog.streams import StreamEntry
from likes_project.opsjobs.services import JobKind, SliceContext

logger = logging.getLogger(__name__)

REQUEUE_PERMISSION = "eventlog.requeue_deadletter"
DISCARD_PERMISSION = "eventlog.discard_deadletter"
REQUEUE_JOB = "deadletters.requeue"
CHUNK = 200
SYSTEM = system_actor("redrive")


def _ids(ids) -> list[int]:
    try:
        out = sorted({int(i) for i in ids})
    except (TypeError, ValueError):
        raise InvalidInput("Dead letter ids must be integers.", code="invalid_ids") from None
    if not out:
        raise InvalidInput("Name at least one dead letter.", code="no_ids")
    return out


def dead_letters_requeue(*, ids, actor: Actor, reason: str = "") -> int:
    """NEW -> REQUEUED for the given ids (others are left as they are). Returns how many moved.
    Transaction: the update and one audit record, on `default`."""
    ids = _ids(ids)
    with transaction.atomic(using="default", durable=True):
        moved = list(DeadLetter.objects.select_for_update().filter(id__in=ids, status=DeadLetterStatus.NEW)
                     .values_list("id", flat=True))
        DeadLetter.objects.filter(id__in=moved).update(status=DeadLetterStatus.REQUEUED, resolver=actor.name,
                                                       reason=reason.strip()[:512])
        audit_record(actor=actor, action="deadletter.requeue", target_type="dead_letter",
                     target_id=",".join(map(str, moved[:50])) or "-",
                     params={"ids": moved, "asked": len(ids), "reason": reason.strip()[:512]})
    return len(moved)


def dead_letters_discard(*, ids, actor: Actor, reason: str) -> int:
    """NEW or REQUEUED -> DISCARDED, with who and why; the event is given up for good. Returns how
    many were discarded. Transaction: the update and one audit record, on `default`."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("Give a reason for discarding dead letters.", code="reason_required")
    ids = _ids(ids)
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        rows = list(DeadLetter.objects.select_for_update().filter(
            id__in=ids, status__in=[DeadLetterStatus.NEW, DeadLetterStatus.REQUEUED]
        ).values_list("id", "consumer", "entry_id", "event_id"))
        DeadLetter.objects.filter(id__in=[r[0] for r in rows]).update(
            status=DeadLetterStatus.DISCARDED, resolver=actor.name, reason=reason[:512], resolved_at=now)
        audit_record(actor=actor, action="deadletter.discard", target_type="dead_letter",
                     target_id=",".join(str(r[0]) for r in rows[:50]) or "-",
                     params={"ids": [r[0] for r in rows], "asked": len(ids), "reason": reason[:512],
                             "events": [{"consumer": c, "entry_id": e, "event_id": ev} for _i, c, e, ev in rows]})
    return len(rows)


@dataclass
class RedriveReport:
    resolved: int = 0  # applied, duplicate or stale: the projection holds what the event says
    applied: int = 0
    still_poison: int = 0  # back to NEW with the new error
    waiting: int = 0  # an infrastructure failure or a busy partition: still REQUEUED, retried later

    def add(self, other: RedriveReport) -> None:
        for key, value in asdict(other).items():
            setattr(self, key, getattr(self, key) + value)


def dead_letters_redrive(*, ids: list[int] | None = None, limit: int = CHUNK, actor: Actor = SYSTEM) -> RedriveReport:
    """Apply REQUEUED dead letters (the given ids, or the oldest `limit`) through their consumer's
    projector, partition by partition, each under that partition's consumer lease."""
    report = RedriveReport()
    rows = DeadLetter.objects.filter(status=DeadLetterStatus.REQUEUED).order_by("id")
    rows = list(rows.filter(id__in=ids) if ids is not None else rows[:limit])
    groups: dict[tuple[str, int], list[DeadLetter]] = defaultdict(list)
    for dl in rows:
        if dl.consumer not in CONSUMERS:
            _still_poison(dl, retry.NonRetryable(f"unknown consumer {dl.consumer!r}"), report)
            continue
        groups[(dl.consumer, streams.partition_of(dl.stream_key))].append(dl)
    for (consumer, partition), group in sorted(groups.items()):
        _redrive_group(consumer, partition, group, report)
    if rows:
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=actor, action="deadletter.redrive", target_type="dead_letter",
                         target_id=",".join(str(dl.id) for dl in rows[:50]), params=asdict(report))
        metrics.inc("likes_dead_letters_redriven_total", report.resolved)
    return report


def _redrive_group(consumer: str, partition: int, group: list[DeadLetter], report: RedriveReport) -> None:
    grant = leases.lease_acquire(resource=consumer_resource(consumer, partition), holder=holder_id(),
                                 ttl_s=settings.REDRIVE_LEASE_S)
    if grant is None:  # a pass holds the partition now; the next redrive run takes them
        report.waiting += len(group)
        return
    try:
        projector = projector_get(consumer)
        valid = []
        for dl in group:
            entry = StreamEntry(partition, dl.stream_key, dl.entry_id, dl.payload if isinstance(dl.payload, dict)
                                else {"_invalid": dl.payload})
            try:
                projector.validate(entry)
            except retry.NonRetryable as exc:
                _still_poison(dl, exc, report)
                continue
            valid.append((dl, entry))
        if not valid:
            return
        try:
            result = projector.apply([e for _dl, e in valid], consumer=consumer, partition=partition,
                                     token=grant.token)
        except Exception as exc:  # noqa: BLE001 - a store is down: they stay REQUEUED for the next run
            logger.warning("redrive of %s[%s] failed (%s); retried later", consumer, partition,
                           exc.__class__.__name__)
            report.waiting += len(valid)
            return
        report.applied += result.applied
        now = timezone.now()
        for dl, entry in valid:
            if entry.entry_id in result.done:
                DeadLetter.objects.filter(pk=dl.pk, status=DeadLetterStatus.REQUEUED).update(
                    status=DeadLetterStatus.RESOLVED, resolved_at=now)
                report.resolved += 1
                continue
            error = result.failed.get(entry.entry_id) or retry.Retryable("not completed")
            if retry.classify(error)[0] is retry.Verdict.POISON:
                _still_poison(dl, error, report)
            else:
                DeadLetter.objects.filter(pk=dl.pk).update(error=f"{error.__class__.__name__}: {error}"[:4000],
                                                           last_failed_at=now)
                report.waiting += 1
    finally:
        leases.lease_release(grant)


def _still_poison(dl: DeadLetter, error: Exception, report: RedriveReport) -> None:
    DeadLetter.objects.filter(pk=dl.pk).update(
        status=DeadLetterStatus.NEW, error_class=error.__class__.__name__,
        error=f"{error.__class__.__name__}: {error}"[:4000], attempts=F("attempts") + 1,
        last_failed_at=timezone.now())
    report.still_poison += 1


# --- the requeue job: mark and redrive, chunk by chunk, with progress --------------------------------


def requeue_filter(params: dict):
    """The dead letters a requeue job covers: the ids it names, or every NEW one (of one consumer)."""
    rows = DeadLetter.objects.filter(status=DeadLetterStatus.NEW)
    if params.get("ids"):
        rows = rows.filter(id__in=_ids(params["ids"]))
    if params.get("consumer"):
        rows = rows.filter(consumer=params["consumer"])
    return rows


def _requeue_create(job, actor: Actor) -> None:
    consumer = job.params.get("consumer") or ""
    if consumer and consumer not in CONSUMERS:
        raise InvalidInput(f"Unknown consumer {consumer!r}; one of {', '.join(sorted(CONSUMERS))}.",
                           code="unknown_consumer")
    if job.params.get("ids"):
        job.params["ids"] = _ids(job.params["ids"])
    elif not job.params.get("all"):
        raise InvalidInput("Name dead letter ids, or ask for all NEW ones.", code="no_ids")
    job.total = requeue_filter(job.params).count()
    job.target = f"consumer:{consumer}" if consumer else "dead_letters"
    job.state.update(after=0, resolved=0, still_poison=0, waiting=0)


def _requeue_slice(ctx: SliceContext) -> bool:
    st = ctx.state
    while True:
        chunk = list(requeue_filter(ctx.params).filter(id__gt=st["after"]).order_by("id")
                     .values_list("id", flat=True)[:CHUNK])
        if not chunk:
            ctx.result = {k: st[k] for k in ("resolved", "still_poison", "waiting")}
            ctx.job.message = (f"Requeued {ctx.job.done}: {st['resolved']} resolved, {st['still_poison']} still "
                               f"poison, {st['waiting']} waiting for their store.")
            return True
        dead_letters_requeue(ids=chunk, actor=ctx.actor, reason=ctx.params.get("reason", ""))
        report = dead_letters_redrive(ids=chunk, actor=ctx.actor)
        st["after"] = chunk[-1]
        for key in ("resolved", "still_poison", "waiting"):
            st[key] += getattr(report, key)
        ctx.say(f"{st['resolved']} resolved, {st['still_poison']} still poison, {st['waiting']} waiting...")
        ctx.progress(add=len(chunk))
        left = ctx.time_left()
        if left is not None and left <= 0:
            return False


REQUEUE_KIND = JobKind(kind=REQUEUE_JOB, permission=REQUEUE_PERMISSION, run_slice=_requeue_slice,
                       create=_requeue_create, unit="dead letters")
