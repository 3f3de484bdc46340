"""The event log on Redis Streams (architecture §4). The only module that builds stream keys.

Topic `likes:events`, partition p in [0, P): stream key `<prefix>:events:{p}`. An event's partition
is the stable hash of its aggregateKey under the stored StreamContract, so one relation's events
stay in one partition in publish order (consumers still converge by version, OUT-10).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from likes_project.hashing import stable_hash
from likes_project.l1cache import RefreshedValue
from likes_project.redis_client import stream_redis

ENCODING_UTF8 = "utf8-v1"
TOPIC = "likes:events"  # the one topic; receipts name it as their source_topic


@dataclass(frozen=True)
class StreamEntry:
    partition: int
    stream_key: str
    entry_id: str
    event: dict

    @property
    def sort_key(self) -> tuple[int, int]:
        return entry_id_key(self.entry_id)


@dataclass(frozen=True)
class PartitionContract:
    version: int
    topic: str
    hash_algorithm: str
    hash_seed: str
    partitions: int


def entry_id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def entry_just_below(key: tuple[int, int]) -> tuple[int, int]:
    """The greatest entry id below `key` that Redis can generate (a sequence never reaches 10**12 within one
    millisecond), short enough for the checkpoint and watermark columns (32 characters)."""
    ms, seq = key
    return (ms, seq - 1) if seq else (ms - 1, 10**12 - 1)


def stream_key(partition: int) -> str:
    return f"{settings.LIKES_REDIS_PREFIX}:events:{{{partition}}}"


def partition_of(key: str) -> int:
    """The partition a stream key (as `stream_key` builds it) names."""
    return int(key.rsplit("{", 1)[1].rstrip("}"))


def _load_contract() -> PartitionContract:
    from likes_project.eventlog.models import StreamContract

    row = StreamContract.objects.filter(is_active=True).first()
    if row is None:
        raise RuntimeError("no active stream contract; run `python manage.py migrate_all`")
    return PartitionContract(row.version, row.topic, row.hash_algorithm, row.hash_seed, row.partitions)


_ACTIVE = RefreshedValue("stream_contract", _load_contract, refresh_s=float("inf"))


def active_contract() -> PartitionContract:
    return _ACTIVE.get()


def reset_cache() -> None:
    _ACTIVE.reset()


def partition_for(aggregate_key: str, contract: PartitionContract | None = None) -> int:
    c = contract or active_contract()
    return stable_hash(c.hash_algorithm, c.hash_seed, aggregate_key.encode("utf-8")) % c.partitions


def all_partitions() -> list[int]:
    return list(range(active_contract().partitions))


def publish_pipeline(events: list[dict]) -> list[tuple[str, str]]:
    """XADD every event to its partition in one round trip; returns (stream key, entry id) each.
    Raises redis errors to the caller, which classifies them (O4)."""
    client = stream_redis()
    pipe = client.pipeline(transaction=False)
    keys = []
    for event in events:
        key = stream_key(partition_for(event["aggregateKey"]))
        keys.append(key)
        pipe.xadd(key, {"event": json.dumps(event, separators=(",", ":"))})
    ids = pipe.execute()
    return [(k, i.decode() if isinstance(i, bytes) else str(i)) for k, i in zip(keys, ids, strict=True)]


def read_after(partition: int, after_id: str, count: int) -> list[StreamEntry]:
    """Entries with id > after_id, in id order (the dispatch order of this partition)."""
    key = stream_key(partition)
    rows = stream_redis().xrange(key, min=f"({after_id}", max="+", count=count)
    out = []
    for entry_id, fields in rows:
        eid = entry_id.decode()
        raw = fields.get(b"event", b"")
        try:
            event = json.loads(raw)
        except ValueError:
            event = {"_undecodable": raw.decode("utf-8", "replace")}
        out.append(StreamEntry(partition, key, eid, event if isinstance(event, dict) else {"_invalid": event}))
    return out


Reader = Callable[[int, str, int], list[StreamEntry]]  # read_after's shape: (partition, after_id, count) -> entries


class SharedRead:
    """`read_after` for the consumers of one pass group over one partition (issue 34 §2, D143): a read is
    answered from the last window read when the window holds the answer, else the log is read (`prefetch`
    entries at least) and the window replaced. Consumers that are level read the log once between them.

    The window is every entry the partition held in (its `after`, its last id] when it was read, since ids only
    grow. A read past its end is answered from it only when the log held nothing more then (the window came
    back short): entries appended since are another pass's, which their own nudge queues, since the pass task's
    nudge flag was cleared before the window was read. Answers are the window's own entries, not copies:
    projectors must not change them."""

    def __init__(self, partition: int, *, prefetch: int):
        self.partition, self.prefetch, self.reads = partition, prefetch, 0
        self._after: tuple[int, int] | None = None
        self._entries: list[StreamEntry] = []
        self._complete = False  # the window reached the end of the log when it was read

    def __call__(self, partition: int, after_id: str, count: int) -> list[StreamEntry]:
        if partition == self.partition:
            served = self._served(entry_id_key(after_id), count)
            if served is not None:
                return served
        want = max(count, self.prefetch)
        entries = read_after(partition, after_id, want)
        self.reads += 1
        if partition == self.partition:
            self._after, self._entries, self._complete = entry_id_key(after_id), entries, len(entries) < want
        return entries[:count]

    def _served(self, after: tuple[int, int], count: int) -> list[StreamEntry] | None:
        if self._after is None or after < self._after:
            return None
        keys = [e.sort_key for e in self._entries]
        rest = self._entries[bisect.bisect_right(keys, after):]
        return rest[:count] if len(rest) >= count or self._complete else None


def entry_ids_between(partition: int, first_id: str, last_id: str, *, page: int = 1000) -> set[str]:
    """The ids the stream holds from `first_id` to `last_id` (both included): one forward walk of the
    range, `page` entries per round trip."""
    client, key = stream_redis(), stream_key(partition)
    found: set[str] = set()
    low = first_id
    while True:
        rows = client.xrange(key, min=low, max=last_id, count=page)
        found |= {(i.decode() if isinstance(i, bytes) else str(i)) for i, _fields in rows}
        if len(rows) < page:
            return found
        last = rows[-1][0]
        low = "(" + (last.decode() if isinstance(last, bytes) else str(last))


def last_generated_id(partition: int) -> str:
    """The stream's last id, "0-0" when the stream does not exist (lost or never written)."""
    client = stream_redis()
    key = stream_key(partition)
    if not client.exists(key):
        return "0-0"
    info = client.xinfo_stream(key)
    last = info.get("last-generated-id") or info.get(b"last-generated-id") or b"0-0"
    return last.decode() if isinstance(last, bytes) else str(last)


def last_generated_ids(partitions: list[int]) -> dict[int, str]:
    """`last_generated_id` of several partitions in one pipelined round trip (per node on a Cluster)."""
    from redis.exceptions import ResponseError

    pipe = stream_redis().pipeline(transaction=False)
    for partition in partitions:
        pipe.xinfo_stream(stream_key(partition))
    out = {}
    for partition, info in zip(partitions, pipe.execute(raise_on_error=False), strict=True):
        if isinstance(info, ResponseError):  # no such key: lost or never written
            out[partition] = "0-0"
            continue
        if isinstance(info, Exception):
            raise info
        last = info.get("last-generated-id") or info.get(b"last-generated-id") or b"0-0"
        out[partition] = last.decode() if isinstance(last, bytes) else str(last)
    return out


def length(partition: int) -> int:
    return int(stream_redis().xlen(stream_key(partition)))


def trim_key(partition: int) -> str:
    """Where the highest bound a partition was ever trimmed below is kept (beside its stream, same slot)."""
    return f"{settings.LIKES_REDIS_PREFIX}:events-trimmed:{{{partition}}}"


# XTRIM MINID, and remember the highest bound trimmed below (XINFO does not tell it: max-deleted-entry-id
# follows XDEL only), so a recovery snapshot can tell whether the entries it replays are still there.
_TRIM_LUA = """
local removed = redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local cur = redis.call('GET', KEYS[2])
local nms, nseq = parse(ARGV[1])
if not cur then
  redis.call('SET', KEYS[2], ARGV[1])
else
  local cms, cseq = parse(cur)
  if nms > cms or (nms == cms and nseq > cseq) then redis.call('SET', KEYS[2], ARGV[1]) end
end
return removed
"""


def trim_below(partition: int, min_id: str) -> int:
    """Drop entries older than min_id (only below every consumer's checkpoint); the bound is recorded."""
    ms, seq = entry_id_key(min_id)
    return int(stream_redis().eval(_TRIM_LUA, 2, stream_key(partition), trim_key(partition), f"{ms}-{seq}"))


@dataclass(frozen=True)
class Retention:
    """What a partition's stream no longer holds: entries below `trimmed_below`, anything up to
    `deleted_through` (XDEL), and `added` entries ever written to this stream (a stream that was lost and
    written again starts counting from zero)."""

    trimmed_below: str
    deleted_through: str
    added: int
    exists: bool


def retention(partition: int) -> Retention:
    client = stream_redis()
    bound = client.get(trim_key(partition))
    bound = bound.decode() if isinstance(bound, bytes) else (bound or "0-0")
    key = stream_key(partition)
    if not client.exists(key):
        return Retention(bound, "0-0", 0, False)
    info = client.xinfo_stream(key)

    def field(name: str, default):
        value = info.get(name, info.get(name.encode(), default))
        return value.decode() if isinstance(value, bytes) else value

    return Retention(bound, str(field("max-deleted-entry-id", "0-0")), int(field("entries-added", 0)), True)
