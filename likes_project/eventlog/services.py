"""Writes for the event-log control plane."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction

from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerSwitch, StreamContract
from likes_project.hashing import HASH_SHA256_BE64
from likes_project.switches import pause_switch_set

STREAM_V1_SEED = "likes-stream-v1"


def stream_contract_ensure() -> StreamContract:
    """Create the stream partitioning contract v1 (P = STREAM_PARTITIONS) unless one exists.

    Idempotency: an existing contract is returned untouched, whatever STREAM_PARTITIONS says now;
    changing P is a new contract version plus a drain (R2), never an in-place edit.
    """
    existing = StreamContract.objects.filter(is_active=True).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic(using="default", durable=True):
            row = StreamContract.objects.create(
                version=1, topic=streams.TOPIC, hash_algorithm=HASH_SHA256_BE64, hash_seed=STREAM_V1_SEED,
                key_encoding=streams.ENCODING_UTF8, partitions=settings.STREAM_PARTITIONS, is_active=True,
            )
    except IntegrityError:
        row = StreamContract.objects.get(is_active=True)
    streams.reset_cache()
    return row


def consumer_switch_set(*, consumer: str, paused: bool, reason: str, actor) -> ConsumerSwitch:
    """Pause or resume dispatch for a consumer. Transaction: switch row + audit on `default`."""
    return pause_switch_set(ConsumerSwitch, key=consumer, paused=paused, reason=reason, actor=actor,
                            action_prefix="consumer.", target_type="consumer")


def streams_trim(*, retention_s: int) -> dict[int, int]:
    """Trim every partition below both the lowest consumer checkpoint and the retention window
    (architecture §4): an entry is dropped only when every consumer is past it AND it is older than
    `retention_s`. Returns entries removed per partition."""
    import time

    from likes_project.eventlog.checkpoints import lowest_by_partition

    lows = {p: streams.entry_id_key(last) for p, last in lowest_by_partition().items()}
    cutoff_ms = int((time.time() - retention_s) * 1000)
    removed = {}
    for partition in streams.all_partitions():
        ms, seq = lows[partition]
        if (ms, seq) == (0, 0):
            continue  # some consumer has read nothing of this partition yet: keep everything
        # MINID keeps entries >= the bound; the checkpoint entry itself is done, so keep from seq+1.
        bound = f"{ms}-{seq + 1}" if ms < cutoff_ms else f"{cutoff_ms}-0"
        removed[partition] = streams.trim_below(partition, bound)
    return removed
