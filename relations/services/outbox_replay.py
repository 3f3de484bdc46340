"""The event log's archive source (issue 31 §1): what an approved replay reads back of the entries the log no
longer holds. Every published event is still a row on its relation shard: SENT in the outbox until the archiver
moves it, then in the outbox archive (OUT-7), each with the stream entry it was published as.

Registered in RelationsConfig.ready (`likes_project.eventlog.registry.archive_source_register`): the core's
subscriptions replay through it without naming this app. Per shard it scans the outbox, then the archive, by id
in bounded chunks (a keyset cursor kept by the caller): a row the archiver moves while the scan runs is met again
in the archive (never missed; a duplicate carries the same eventId, which the replay deduplicates)."""

from __future__ import annotations

from likes_project.eventlog import streams
from likes_project.eventlog.registry import ArchivedEntry
from relations import routing
from relations.models import OutboxArchive, OutboxEvent, OutboxStatus

_FIELDS = ("id", "event_id", "payload", "stream_key", "stream_entry_id")


def _steps() -> list[tuple[str, str]]:
    return [(alias, source) for alias in routing.all_aliases() for source in ("outbox", "archive")]


def _rows(alias: str, source: str, after_id: int, limit: int) -> list[tuple]:
    if source == "outbox":
        rows = OutboxEvent.objects.using(alias).filter(status=OutboxStatus.SENT)
    else:
        rows = OutboxArchive.objects.using(alias)
    return list(rows.filter(id__gt=after_id).order_by("id").values_list(*_FIELDS)[:limit])


def archived_entries(after: dict[int, str], upto: dict[int, str], state: dict,
                     limit: int) -> tuple[list[ArchivedEntry], dict, bool]:
    """The next chunk (about `limit` rows scanned) of published events whose entry lies in (after[p], upto[p]] of
    their partition p; `state` ({"step", "last"}) is where the scan stands, {} to start."""
    steps = _steps()
    step, last = int(state.get("step", 0)), int(state.get("last", 0))
    low = {p: streams.entry_id_key(i) for p, i in after.items()}
    high = {p: streams.entry_id_key(i) for p, i in upto.items()}
    out: list[ArchivedEntry] = []
    scanned = 0
    while step < len(steps) and scanned < limit:
        want = limit - scanned
        rows = _rows(*steps[step], last, want)
        scanned += len(rows)
        for row_id, event_id, payload, key, entry_id in rows:
            if not key or not entry_id:
                continue
            partition = streams.partition_of(key)
            if partition in low and low[partition] < streams.entry_id_key(entry_id) <= high[partition]:
                out.append(ArchivedEntry(partition, entry_id,
                                         {**payload, "eventId": str(event_id), "sourceCommitSeq": row_id}))
        if len(rows) < want:  # this table of this shard is exhausted
            step, last = step + 1, 0
        else:
            last = rows[-1][0]
    return out, {"step": step, "last": last}, step >= len(steps)
