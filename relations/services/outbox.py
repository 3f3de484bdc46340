"""The outbox publisher, the lost-tail republisher and the archiver (OUT-3 … OUT-10,
consistency-techniques O2–O5, O8). One relation shard at a time; many copies may run safely."""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from likes_project import metrics
from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint
from relations.models import OutboxArchive, OutboxEvent, OutboxStatus

logger = logging.getLogger(__name__)

BACKOFF_STEPS_S = (1, 2, 5, 15, 60, 300, 900, 3600)


def backoff_delay(attempt: int) -> float:
    """Tiered delay for the n-th failed attempt (1-based), plus 0–50 % jitter, capped (O3)."""
    base = BACKOFF_STEPS_S[min(max(attempt, 1), len(BACKOFF_STEPS_S)) - 1]
    return base * (1 + random.uniform(0, 0.5))


@dataclass(frozen=True)
class ClaimedRow:
    id: int
    event_id: str
    payload: dict
    retry_count: int


@dataclass
class PublishReport:
    alias: str
    claimed: int = 0
    sent: int = 0
    retry: int = 0
    uncertain: int = 0
    dead: int = 0
    partitions: set[int] = field(default_factory=set)


# The commit-order watermark: the oldest transaction id still running IN THIS DATABASE (outbox rows
# only come from this database's transactions). `pg_snapshot_xmin(pg_current_snapshot())` would be
# the textbook form, but it is cluster-wide: a long transaction in any other database on the same
# server would stall publishing. pg_stat_activity's 32-bit `backend_xid` is widened to xid8 against the
# snapshot's xmax (same epoch unless that would put it in the future). Needs the app role to see its
# own sessions' backend_xid (it does; other roles need pg_read_all_stats).
_SAFE_XID_SQL = """
    (WITH ref AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x),
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
RETURNING o.id, o.event_id, o.payload, o.retry_count
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
    claimed = [ClaimedRow(r[0], str(r[1]), json.loads(r[2]) if isinstance(r[2], str) else r[2], r[3]) for r in rows]
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
        partition = int(key.rsplit("{", 1)[1].rstrip("}"))
        params.append((key, entry_id, partition, ms, seq, now, row.id, holder))
    sql = (f"UPDATE {OutboxEvent._meta.db_table} SET status = 'SENT', stream_key = %s, stream_entry_id = %s, "
           "stream_partition = %s, stream_entry_ms = %s, stream_entry_seq = %s, published_at = %s, "
           "claimed_by = '', claim_expires_at = NULL, last_error = '' "
           "WHERE id = %s AND claimed_by = %s AND status = 'PUBLISHING'")
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.executemany(sql, params)


def _mark_failed(alias: str, holder: str, rows: list[ClaimedRow], status: str, error: Exception,
                 report: PublishReport) -> None:
    now = timezone.now()
    message = f"{error.__class__.__name__}: {error}"[:1024]
    with transaction.atomic(using=alias, durable=True):
        for row in rows:
            attempt = row.retry_count + 1
            final = OutboxStatus.DEAD if attempt >= settings.OUTBOX_MAX_ATTEMPTS else status
            OutboxEvent.objects.using(alias).filter(id=row.id, claimed_by=holder).update(
                status=final, retry_count=attempt, last_error=message, claimed_by="", claim_expires_at=None,
                next_retry_at=now + dt.timedelta(seconds=backoff_delay(attempt)),
            )
            if final == OutboxStatus.DEAD:
                report.dead += 1
                metrics.inc("likes_outbox_dead_total", shard=alias)
                logger.error("ALERT outbox row %s on %s is DEAD after %s attempts: %s", row.id, alias, attempt,
                             message)
            elif status == OutboxStatus.RETRY:
                report.retry += 1
            else:
                report.uncertain += 1


def outbox_publish_batch(*, alias: str, holder: str, limit: int | None = None) -> PublishReport:
    """Claim a batch and XADD it to the event log (one pipelined round trip).

    Outcomes (O4): OK -> SENT with the (stream, entry id) mapping (OUT-9); a definite failure
    (connection refused) -> RETRY; an ambiguous one (timeout, error after sending) -> UNCERTAIN,
    retried, since consumers converge by version (OUT-6); past OUTBOX_MAX_ATTEMPTS -> DEAD + alert.
    A publish confirmation never means the consumers are done (OUT-8).
    """
    report = PublishReport(alias=alias)
    rows = outbox_claim(alias=alias, holder=holder, limit=limit or settings.OUTBOX_PUBLISH_BATCH)
    report.claimed = len(rows)
    if not rows:
        return report
    try:
        positions = streams.publish_pipeline([event_envelope(r) for r in rows])
    except RedisTimeoutError as exc:
        _mark_failed(alias, holder, rows, OutboxStatus.UNCERTAIN, exc, report)
        return report
    except RedisConnectionError as exc:
        _mark_failed(alias, holder, rows, OutboxStatus.RETRY, exc, report)
        return report
    except RedisError as exc:
        _mark_failed(alias, holder, rows, OutboxStatus.UNCERTAIN, exc, report)
        return report
    _mark_sent(alias, holder, rows, positions)
    report.sent = len(rows)
    report.partitions = {int(k.rsplit("{", 1)[1].rstrip("}")) for k, _ in positions}
    metrics.inc("likes_outbox_published_total", len(rows), shard=alias)
    return report


@dataclass
class LostTailReport:
    alias: str
    checked: int = 0
    republished: int = 0
    lost_partitions: set[int] = field(default_factory=set)


def _min_checkpoints() -> dict[int, tuple[int, int]]:
    """Per partition, the lowest checkpoint over all consumers ((0, 0) when none exists)."""
    lows: dict[int, tuple[int, int]] = {}
    for partition, last_done in ConsumerCheckpoint.objects.values_list("partition", "last_done_id"):
        key = streams.entry_id_key(last_done)
        lows[partition] = min(lows.get(partition, key), key)
    return lows


def outbox_republish_lost(*, alias: str, older_than_s: int | None = None, limit: int = 5000) -> LostTailReport:
    """Find SENT events the log lost (O5) and send them again.

    A SENT row is unconsumed when its entry id is above the lowest consumer checkpoint of its
    partition; if it is also older than the threshold and its entry is no longer in the stream (a
    flush, a failover that lost the tail), it is set back to RETRY and republished. Consumers absorb
    the duplicates by receipt and version.
    """
    report = LostTailReport(alias=alias)
    cutoff = timezone.now() - dt.timedelta(seconds=settings.OUTBOX_REPUBLISH_AFTER_S if older_than_s is None
                                           else older_than_s)
    lows = _min_checkpoints()
    lost_ids: list[int] = []
    for partition in streams.all_partitions():
        low_ms, low_seq = lows.get(partition, (0, 0))
        candidates = list(
            OutboxEvent.objects.using(alias)
            .filter(status=OutboxStatus.SENT, stream_partition=partition, stream_entry_ms__gte=low_ms,
                    published_at__lte=cutoff)
            .order_by("stream_entry_ms", "stream_entry_seq")
            .values_list("id", "stream_entry_id", "stream_entry_ms", "stream_entry_seq")[:limit]
        )
        candidates = [c for c in candidates if (c[2], c[3]) > (low_ms, low_seq)]
        report.checked += len(candidates)
        if not candidates:
            continue
        last = streams.entry_id_key(streams.last_generated_id(partition))
        for row_id, entry_id, ms, seq in candidates:
            if (ms, seq) > last or not streams.entry_exists(partition, entry_id):
                lost_ids.append(row_id)
                report.lost_partitions.add(partition)
    if lost_ids:
        with transaction.atomic(using=alias, durable=True):
            report.republished = OutboxEvent.objects.using(alias).filter(
                id__in=lost_ids, status=OutboxStatus.SENT
            ).update(status=OutboxStatus.RETRY, next_retry_at=timezone.now(), last_error="lost from stream")
        metrics.inc("likes_outbox_republished_total", report.republished, shard=alias)
        logger.warning("republishing %s events lost from partitions %s (shard %s)", report.republished,
                       sorted(report.lost_partitions), alias)
    return report


def outbox_archive_batch(*, alias: str, chunk: int = 1000) -> int:
    """Move one chunk of published rows past the retention window, and already consumed by every
    consumer, into OutboxArchive (OUT-7). Returns how many moved."""
    cutoff = timezone.now() - dt.timedelta(hours=settings.OUTBOX_RETENTION_HOURS)
    lows = _min_checkpoints()
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
