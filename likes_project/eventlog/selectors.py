"""Reads of one event's passage through the consumers, for the console's trace (OPS-2, OBS-1): a
consumer's checkpoint on one stream partition, whether it has consumed an entry, and its dead letters
for one event. Never writes and never opens a transaction."""

from __future__ import annotations

from django.db.models import Q

from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter
from likes_project.eventlog.streams import entry_id_key


def checkpoint_get(*, consumer: str, partition: int) -> ConsumerCheckpoint | None:
    """The durable checkpoint of `consumer` on stream partition `partition`; None: it never ran there."""
    return ConsumerCheckpoint.objects.filter(consumer=consumer, partition=partition).first()


def entry_consumed(*, checkpoint: ConsumerCheckpoint | None, entry_id: str) -> bool:
    """Whether the checkpoint has passed `entry_id` (every entry up to `last_done_id` is done: applied,
    or set aside as a dead letter). An entry not published yet (no id) is not consumed."""
    if checkpoint is None or not entry_id:
        return False
    return entry_id_key(checkpoint.last_done_id) >= entry_id_key(entry_id)


def dead_letter_list_for_event(*, consumer: str, event_id: str, user_id: int | None, stream_key: str = "",
                               entry_id: str = "") -> list[DeadLetter]:
    """The dead letters `consumer` wrote for one event, newest first: by its event id (within the user's
    rows, which are indexed) or by its stream position (an undecodable entry has no event id)."""
    match = Q(pk__in=[])
    if event_id and user_id is not None:
        match |= Q(user_id=user_id, event_id=event_id)
    if stream_key and entry_id:
        match |= Q(stream_key=stream_key, entry_id=entry_id)
    return list(DeadLetter.objects.filter(match, consumer=consumer).order_by("-last_failed_at", "-id"))
