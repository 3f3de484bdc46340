"""The outbox publisher, the lost-tail republisher and the archiver (OUT-3 … OUT-10,
consistency-techniques O2–O5, O8). One relation shard at a time; many copies may run safely."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from likes_project import metrics
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import InvalidInput
from likes_project.eventlog import retry, streams
from likes_project.eventlog.checkpoints import lowest_by_partition
from likes_project.eventlog.retry import NonRetryable
from likes_project.switches import switch_is_set
from relations.models import OutboxArchive, OutboxEvent, OutboxPublisherSwitch, OutboxStatus

logger = logging.getLogger(__name__)



class Unpublishable(NonRetryable):
    """The row's payload can never be published (it does not serialize, or names no aggregate key)."""


@dataclass(frozen=True)
class ClaimedRow:
    id: int
    event_id: str
    payload: dict
    retry_count: int
    created_at: dt.datetime | None = None  # set by the command's transaction: about its commit time


@dataclass
class PublishReport:
    alias: str
    claimed: int = 0
    sent: int = 0
    retry: int = 0
    uncertain: int = 0
    dead: int = 0
    partitions: set[int] = field(default_factory=set)
    paused: bool = False  # the shard's publisher switch is set: nothing was claimed


# The commit-order watermark: the oldest transaction id still running IN THIS DATABASE (outbox rows
# only come from this database's transactions). `pg_snapshot_xmin(pg_current_snapshot())` would be
# the textbook form, but it is cluster-wide: a long transaction in any other database on the same
# server would stall publishing. pg_stat_activity's 32-bit `backend_xid` is widened to xid8 against the
# snapshot's xmax (same epoch unless that would put it in the future). Needs the app role to see its
# own sessions' backend_xid (it does; other roles need pg_read_all_stats).
# A snapshot's xmax is the newest *completed* xid + 1, so in a transaction that already holds an xid (a
# caller's own transaction: the tests' wrapping transaction) it can be at or below that xid, and the
# transaction would never see its own rows as publishable; the reference is therefore at least one past it.
# A claim in its own transaction (every publisher) holds no xid when this runs, so there it is xmax itself.
_SAFE_XID_SQL = """
    (WITH ref AS (SELECT GREATEST(pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
                                  COALESCE(pg_current_xact_id_if_assigned()::text::bigint + 1, 0)) AS x),
          running AS (SELECT backend_xid::text::bigint AS x32 FROM pg_stat_activity
                       WHERE datname = current_database() AND backend_xid IS NOT NULL
                         AND pid <> pg_backend_pid()),
          widened AS (SELECT CASE WHEN ((ref.x >> 32) << 32) + r.x32 > ref.x
                                  THEN ((ref.x >> 32) << 32) + r.x32 - 4294967296
                                  ELSE ((ref.x >> 32) << 32) + r.x32 END AS x
                        FROM running r, ref)
     SELECT COALESCE((SELECT MIN(x) FROM widened), (SELECT x FROM ref)))
"""

_CLAIM_SQL = """
WITH c AS (
    SELECT id FROM {t}
     WHERE ((status IN ('NEW', 'RETRY', 'UNCERTAIN') AND next_retry_at <= %(now)s)
            OR (status = 'PUBLISHING' AND claim_expires_at < %(now)s))
       AND xact_id < """ + _SAFE_XID_SQL + """
     ORDER BY id
     LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED
)
UPDATE {t} o
   SET status = 'PUBLISHING', claimed_by = %(holder)s, claim_expires_at = %(expires)s
  FROM c
 WHERE o.id = c.id
RETURNING o.id, o.event_id, o.payload, o.retry_count, o.created_at
"""


def outbox_claim(*, alias: str, holder: str, limit: int) -> list[ClaimedRow]:
    """Claim publishable rows: NEW/RETRY/UNCERTAIN rows due now, and PUBLISHING rows whose claim
    expired (their publisher died mid-way). Only rows whose transaction is older than every running
    transaction are taken, so a slow transaction that commits later with a smaller id is never
    overtaken (architecture §4): `sourceCommitSeq` stays a gap-free watermark.

    Transaction: one statement on `alias` (SKIP LOCKED: concurrent publishers take disjoint rows).
    """
    now = timezone.now()
    params = {"now": now, "limit": limit, "holder": holder,
              "expires": now + dt.timedelta(seconds=settings.OUTBOX_CLAIM_TTL_S)}
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(_CLAIM_SQL.format(t=OutboxEvent._meta.db_table), params)
        rows = cursor.fetchall()
    # Django hands jsonb to raw cursors as text.
    claimed = [ClaimedRow(r[0], str(r[1]), json.loads(r[2]) if isinstance(r[2], str) else r[2], r[3], r[4])
               for r in rows]
    claimed.sort(key=lambda r: r.id)
    return claimed


def event_envelope(row: ClaimedRow) -> dict:
    """The published event: the stored payload plus `sourceCommitSeq` (the outbox id)."""
    return {**row.payload, "eventId": row.event_id, "sourceCommitSeq": row.id}


def _mark_sent(alias: str, holder: str, rows: list[ClaimedRow], positions: list[tuple[str, str]]) -> None:
    now = timezone.now()
    params = []
    for row, (key, entry_id) in zip(rows, positions, strict=True):
        ms, seq = streams.entry_id_key(entry_id)
        partition = streams.partition_of(key)
        params.append((key, entry_id, partition, ms, seq, now, row.id, holder))
    sql = (f"UPDATE {OutboxEvent._meta.db_table} SET status = 'SENT', stream_key = %s, stream_entry_id = %s, "
           "stream_partition = %s, stream_entry_ms = %s, stream_entry_seq = %s, published_at = %s, "
           "claimed_by = '', claim_expires_at = NULL, last_error = '' "
           "WHERE id = %s AND claimed_by = %s AND status = 'PUBLISHING'")
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.executemany(sql, params)


def _mark_failed(alias: str, holder: str, rows: list[ClaimedRow], status: str, error: Exception,
                 report: PublishReport) -> None:
    """Give claimed rows back after a failure. An infrastructure failure (the stream Redis is down or
    timed out) is RETRY or UNCERTAIN with a capped, jittered backoff, for as long as it takes (issue 9
    §1); only an Unpublishable payload is DEAD."""
    now = timezone.now()
    message = f"{error.__class__.__name__}: {error}"[:1024]
    with transaction.atomic(using=alias, durable=True):
        for row in rows:
            attempt = row.retry_count + 1
            OutboxEvent.objects.using(alias).filter(id=row.id, claimed_by=holder).update(
                status=status, retry_count=attempt, last_error=message, claimed_by="", claim_expires_at=None,
                next_retry_at=now + dt.timedelta(seconds=retry.backoff_s(attempt)),
            )
            if status == OutboxStatus.DEAD:
                report.dead += 1
                metrics.inc("likes_outbox_dead_total", shard=alias)
                logger.error("ALERT outbox row %s on %s is DEAD (it can never be published): %s", row.id, alias,
                             message)
                continue
            if status == OutboxStatus.RETRY:
                report.retry += 1
            else:
                report.uncertain += 1
            if retry.should_alert(attempt):
                metrics.inc("likes_outbox_retry_alerts_total", shard=alias)
                logger.error("ALERT outbox row %s on %s has failed to publish %s times: %s", row.id, alias, attempt,
                             message)


def _envelope_or_poison(row: ClaimedRow) -> tuple[dict | None, Exception | None]:
    try:
        envelope = event_envelope(row)
        if not isinstance(envelope.get("aggregateKey"), str) or not envelope["aggregateKey"]:
            raise Unpublishable("the payload names no aggregateKey: no stream partition can take it")
        json.dumps(envelope, separators=(",", ":"))
    except (TypeError, ValueError, Unpublishable) as exc:
        return None, exc if isinstance(exc, Unpublishable) else Unpublishable(f"payload does not serialize: {exc}")
    return envelope, None


def outbox_publish_batch(*, alias: str, holder: str, limit: int | None = None) -> PublishReport:
    """Claim a batch and XADD it to the event log (one pipelined round trip).

    Outcomes (O4): OK -> SENT with the (stream, entry id) mapping (OUT-9); a definite failure
    (connection refused) -> RETRY; an ambiguous one (timeout, error after sending) -> UNCERTAIN,
    retried, since consumers converge by version (OUT-6). Both back off (capped at
    LIKES_RETRY_MAX_BACKOFF_S) and never give up. A payload that can never be published -> DEAD + alert.
    A publish confirmation never means the consumers are done (OUT-8). While the shard's publisher
    switch is set (`OutboxPublisherSwitch`) nothing is claimed and the report says `paused`.
    """
    report = PublishReport(alias=alias)
    if switch_is_set(OutboxPublisherSwitch, alias):  # paused (issue 14 §3): the rows wait, in order, none lost
        report.paused = True
        return report
    rows = outbox_claim(alias=alias, holder=holder, limit=limit or settings.OUTBOX_PUBLISH_BATCH)
    report.claimed = len(rows)
    if not rows:
        return report
    publishable, envelopes = [], []
    for row in rows:
        envelope, poison = _envelope_or_poison(row)
        if poison is not None:
            _mark_failed(alias, holder, [row], OutboxStatus.DEAD, poison, report)
            continue
        publishable.append(row)
        envelopes.append(envelope)
    if not publishable:
        return report
    try:
        positions = streams.publish_pipeline(envelopes)
    except RedisConnectionError as exc:
        _mark_failed(alias, holder, publishable, OutboxStatus.RETRY, exc, report)
        return report
    except (RedisTimeoutError, RedisError) as exc:
        _mark_failed(alias, holder, publishable, OutboxStatus.UNCERTAIN, exc, report)
        return report
    _mark_sent(alias, holder, publishable, positions)
    report.sent = len(publishable)
    report.partitions = {streams.partition_of(k) for k, _ in positions}
    metrics.inc("likes_outbox_published_total", len(publishable), shard=alias)
    # Commit -> published (OBS-2, M6): a retried row's lag includes its backoff, as it should.
    published_at = timezone.now()
    for row in publishable:
        if row.created_at is not None:
            metrics.observe("likes_outbox_publish_lag_seconds", (published_at - row.created_at).total_seconds(),
                            shard=alias)
    return report


@dataclass
class LostTailReport:
    alias: str
    checked: int = 0
    republished: int = 0
    lost_partitions: set[int] = field(default_factory=set)


def _lowest_checkpoints() -> dict[int, tuple[int, int]]:
    """Per partition, the lowest checkpoint over every consumer (see `lowest_by_partition`)."""
    return {p: streams.entry_id_key(last) for p, last in lowest_by_partition().items()}


def _first_mark(alias: str, partition: int, low: tuple[int, int]) -> tuple[int, int]:
    """Where a partition never checked before starts: the lowest checkpoint, but never above the rows
    published in the last OUTBOX_LOST_TAIL_LOOKBACK_S. The checkpoint alone is not enough: when the log
    was flushed before this shard's first check ran (a fresh deployment, a new shard, the watermark rows
    lost), the consumers have already moved past the lost entries, onto the new stream. Looking further
    back only republishes entries every consumer already has, which they absorb (one query per
    partition, once in a shard's life)."""
    since = timezone.now() - dt.timedelta(seconds=settings.OUTBOX_LOST_TAIL_LOOKBACK_S)
    first = (OutboxEvent.objects.using(alias)
             .filter(status=OutboxStatus.SENT, stream_partition=partition, published_at__gte=since)
             .order_by("stream_entry_ms", "stream_entry_seq").values_list("stream_entry_ms", "stream_entry_seq")
             .first())
    return low if first is None else min(low, streams.entry_just_below(first))


def outbox_republish_lost(*, alias: str, older_than_s: int | None = None, limit: int = 5000) -> LostTailReport:
    """Find SENT events the log lost (O5) and send them again.

    Looked at: SENT rows of this shard above the partition's lost-tail watermark (the lowest consumer
    checkpoint when this check last ran, so a flush whose new entries the consumers have already
    passed is still found, issue 9 §3; on a partition's first check, `_first_mark`) and at least
    `older_than_s` old. A row whose entry the stream no
    longer holds is set back to RETRY and republished; consumers absorb the duplicates by receipt and
    version. Each partition's candidate range is read from the stream once. Afterwards the watermark
    moves to the lowest checkpoint now, but never above a row that was too young to be checked.
    """
    from likes_project.eventlog.models import LostTailWatermark

    report = LostTailReport(alias=alias)
    cutoff = timezone.now() - dt.timedelta(seconds=settings.OUTBOX_REPUBLISH_AFTER_S if older_than_s is None
                                           else older_than_s)
    lows_now = _lowest_checkpoints()  # read before the stream: the next watermark
    marks = dict(LostTailWatermark.objects.filter(shard=alias).values_list("partition", "checked_above"))
    marks = {p: marks[p] if p in marks else "{}-{}".format(*_first_mark(alias, p, lows_now[p]))
             for p in streams.all_partitions()}
    lost_ids: list[int] = []
    next_marks: dict[int, tuple[int, int]] = {}
    for partition in streams.all_partitions():
        above = streams.entry_id_key(marks[partition])
        rows = list(
            OutboxEvent.objects.using(alias)
            .filter(status=OutboxStatus.SENT, stream_partition=partition, stream_entry_ms__gte=above[0])
            .order_by("stream_entry_ms", "stream_entry_seq")
            .values_list("id", "stream_entry_id", "stream_entry_ms", "stream_entry_seq", "published_at")[:limit]
        )
        rows = [r for r in rows if (r[2], r[3]) > above]
        candidates = [r[:4] for r in rows if r[4] <= cutoff]
        # The next watermark: the lowest checkpoint now, but never past a row not checked this time (one
        # too young, or beyond this run's limit).
        ceiling = lows_now[partition]
        young = [(r[2], r[3]) for r in rows if r[4] > cutoff]
        if young:
            ceiling = min(ceiling, streams.entry_just_below(min(young)))
        if len(rows) >= limit:
            ceiling = min(ceiling, (rows[-1][2], rows[-1][3]))
        next_marks[partition] = max(above, ceiling)
        report.checked += len(candidates)
        if not candidates:
            continue
        last = streams.entry_id_key(streams.last_generated_id(partition))
        held = streams.entry_ids_between(partition, candidates[0][1], candidates[-1][1])
        for row_id, entry_id, ms, seq in candidates:
            if (ms, seq) > last or entry_id not in held:
                lost_ids.append(row_id)
                report.lost_partitions.add(partition)
    with transaction.atomic(using=alias, durable=True):
        if lost_ids:
            report.republished = OutboxEvent.objects.using(alias).filter(
                id__in=lost_ids, status=OutboxStatus.SENT
            ).update(status=OutboxStatus.RETRY, next_retry_at=timezone.now(), last_error="lost from stream")
    # After the republish committed: a crash before this line only repeats the check.
    for partition, (ms, seq) in next_marks.items():
        LostTailWatermark.objects.update_or_create(shard=alias, partition=partition,
                                                   defaults={"checked_above": f"{ms}-{seq}"})
    if lost_ids:
        metrics.inc("likes_outbox_republished_total", report.republished, shard=alias)
        logger.warning("republishing %s events lost from partitions %s (shard %s)", report.republished,
                       sorted(report.lost_partitions), alias)
    return report


def outbox_archive_batch(*, alias: str, chunk: int = 1000) -> int:
    """Move one chunk of published rows past the retention window, and already consumed by every
    consumer, into OutboxArchive (OUT-7). Returns how many moved."""
    cutoff = timezone.now() - dt.timedelta(hours=settings.OUTBOX_RETENTION_HOURS)
    lows = _lowest_checkpoints()
    ids: list[int] = []
    for partition in streams.all_partitions():
        low_ms, low_seq = lows.get(partition, (0, 0))
        consumed = Q(stream_entry_ms__lt=low_ms) | Q(stream_entry_ms=low_ms, stream_entry_seq__lte=low_seq)
        ids += list(
            OutboxEvent.objects.using(alias)
            .filter(consumed, status=OutboxStatus.SENT, published_at__lt=cutoff, stream_partition=partition)
            .order_by("id").values_list("id", flat=True)[:chunk]
        )
    ids = sorted(ids)[:chunk]
    if not ids:
        return 0
    now = timezone.now()
    with transaction.atomic(using=alias, durable=True):
        rows = list(OutboxEvent.objects.using(alias).select_for_update().filter(id__in=ids, status="SENT"))
        OutboxArchive.objects.using(alias).bulk_create(
            [OutboxArchive(id=r.id, event_id=r.event_id, aggregate_key=r.aggregate_key,
                           relation_version=r.relation_version, event_type=r.event_type,
                           schema_version=r.schema_version, payload=r.payload, stream_key=r.stream_key,
                           stream_entry_id=r.stream_entry_id, created_at=r.created_at,
                           published_at=r.published_at, archived_at=now) for r in rows],
            ignore_conflicts=True,
        )
        OutboxEvent.objects.using(alias).filter(id__in=[r.id for r in rows]).delete()
    return len(rows)


OUTBOX_REQUEUE_PERMISSION = "relations.requeue_outbox"


def outbox_dead_requeue(*, alias: str, actor: Actor, ids: list[int] | None = None, limit: int = 1000,
                        reason: str = "") -> list[int]:
    """DEAD -> RETRY (due now, attempts reset) for the given ids on shard `alias`, or for up to `limit`
    of its DEAD rows (oldest first). The publisher then sends them; consumers absorb a duplicate by
    version, so a requeue is always safe. Returns the ids requeued.

    Transaction: the update on `alias` inside the audit record's transaction on `default` (the shard
    commits first; an audit failure after it is logged by the caller's error, the rows are requeued)."""
    if alias not in settings.RELATION_SHARD_ALIASES:
        raise InvalidInput(f"Unknown shard {alias!r}; one of {', '.join(settings.RELATION_SHARD_ALIASES)}.",
                           code="unknown_shard")
    with transaction.atomic(using="default", durable=True), transaction.atomic(using=alias, durable=True):
        rows = OutboxEvent.objects.using(alias).select_for_update().filter(status=OutboxStatus.DEAD).order_by("id")
        if ids is not None:
            rows = rows.filter(id__in=ids)
        picked = list(rows.values_list("id", flat=True)[:limit])
        OutboxEvent.objects.using(alias).filter(id__in=picked).update(
            status=OutboxStatus.RETRY, retry_count=0, next_retry_at=timezone.now(), claimed_by="",
            claim_expires_at=None)
        audit_record(actor=actor, action="outbox.requeue", target_type="outbox", target_id=alias,
                     params={"ids": picked, "asked": None if ids is None else sorted(ids)[:1000],
                             "reason": reason.strip()[:512]})
    if picked:
        metrics.inc("likes_outbox_requeued_total", len(picked), shard=alias)
    return picked
