"""Reads of the consumers' durable checkpoints: the one place that turns checkpoint rows into
per-partition positions, lowest positions and time watermarks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.eventlog.registry import CONSUMERS


def checkpoints_get(consumer: str) -> dict[int, str]:
    """{stream partition: last done entry id} of one consumer (partitions it never consumed are absent)."""
    return dict(ConsumerCheckpoint.objects.filter(consumer=consumer).values_list("partition", "last_done_id"))


def partitions_with_work(*consumers: str) -> list[int]:
    """The stream partitions where a pass of one of `consumers` (a pass group's, D143) has something to do: the log
    holds an entry past its checkpoint, or the checkpoint records a blocked head (to retry it, or to clear it once
    the entry is gone). One query and one pipelined round trip; what a sweeper starts passes on (D139), where it once
    started one on every partition every second whether or not anything had been written there."""
    rows = {(c, p): (streams.entry_id_key(last), blocked) for c, p, last, blocked in ConsumerCheckpoint.objects.filter(
        consumer__in=consumers).values_list("consumer", "partition", "last_done_id", "blocked_attempts")}
    partitions = streams.all_partitions()
    written = streams.last_generated_ids(partitions)
    never_read = ((0, 0), 0)
    return [p for p in partitions if any((done := rows.get((c, p), never_read))[1]
                                         or streams.entry_id_key(written[p]) > done[0] for c in consumers)]


def lowest_by_partition() -> dict[int, str]:
    """{stream partition: the lowest last done entry id over every consumer}, for every partition. A
    consumer with no checkpoint row on a partition yet (it never ran there, or was just added) counts as
    "0-0": nothing it has not read may be trimmed, archived or taken for consumed (issue 9 §3)."""
    done = {(c, p): streams.entry_id_key(last) for c, p, last in
            ConsumerCheckpoint.objects.values_list("consumer", "partition", "last_done_id")}
    consumers = set(CONSUMERS) | {c for c, _p in done}
    lows = {}
    for partition in streams.all_partitions():
        ms, seq = min(done.get((c, partition), (0, 0)) for c in consumers)
        lows[partition] = f"{ms}-{seq}"
    return lows


def consumer_watermark(consumer: str) -> datetime | None:
    """The time up to which `consumer` has consumed every partition: the millisecond part of its
    lowest checkpoint over all stream partitions. None while some partition has consumed nothing."""
    done = checkpoints_get(consumer)
    lowest = None
    for partition in streams.all_partitions():
        ms = streams.entry_id_key(done.get(partition, "0-0"))[0]
        if ms <= 0:
            return None
        lowest = ms if lowest is None else min(lowest, ms)
    if lowest is None:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=lowest)
