"""Where the writes go (issue 32 §2; M4, M11): the hottest videos, virtual buckets and users, each count partition's
and each relation shard's share of the writes, the skew, and the bucket move that would relieve it.

The live count projector records every event it applied (`record`, one pipelined round trip per batch, after the
transactions committed) into sorted sets of 10-second slots on the cache role's Redis; a slot lives a little over
the longest window (5 minutes). A slot keeps its `HOTSPOT_TRACK_MAX` hottest videos and users (the long tail is
trimmed as it goes: the figures are those of heavy hitters, which is what a hot spot is); buckets are at most V per
partition and kept whole. `read(window_s)` adds the slots of a window up on the server (ZUNIONSTORE into a
scratch key of the same hash tag, then the top K) and never reads a whole set.

A suggestion (`suggest`) appears when one count partition took more than `HOTSPOT_MOVE_SUGGEST_SHARE` of the writes
of the last 5 minutes (and at least `HOTSPOT_MIN_WRITES` of them): its hottest buckets, moved to the partition that
took the fewest, as many as bring the two closest without overshooting (at most `HOTSPOT_MOVE_MAX_BUCKETS`). It is
only a suggestion: the console links it to the bucket migration's plan form, filled in, and nothing moves without
the usual second person's approval.

Recording and reading fail open: Redis down costs the figures, never a projected event
(`likes_hotspot_errors_total`). Keys are built by `counting.cache.hotspot_key`; each partition's keys share one hash tag
(`{cnt_00}`), so a window's union runs on one Cluster slot.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from redis.exceptions import RedisError

from counting import routing
from counting.cache import hotspot_key
from likes_project import metrics
from likes_project.redis_client import cache_redis

logger = logging.getLogger(__name__)

SLOT_S = 10
WINDOWS_S = (60, 300)
SUGGEST_WINDOW_S = 300
TOP_K = 20
USERS_TAG, SHARDS_TAG = "hot-users", "hot-shards"  # the hash tags of the two global sets


def _slot(now: float | None = None) -> int:
    return int((time.time() if now is None else now) // SLOT_S)


def record(writes: Iterable[tuple[str, str, int, int, str]], *, now: float | None = None) -> None:
    """Count applied events: (count partition, video, virtual bucket, user, relation shard) each. One round trip."""
    videos: dict[str, Counter] = {}
    buckets: dict[str, Counter] = {}
    users, shards = Counter(), Counter()
    for partition, video_id, vb, user_id, shard in writes:
        videos.setdefault(partition, Counter())[video_id] += 1
        buckets.setdefault(partition, Counter())[vb] += 1
        users[user_id] += 1
        shards[shard] += 1
    if not videos:
        return
    slot, ttl, keep = _slot(now), max(WINDOWS_S) + 3 * SLOT_S, settings.HOTSPOT_TRACK_MAX
    try:
        pipe = cache_redis().pipeline(transaction=False)
        for partition in videos:
            for kind, counts, trim in (("v", videos[partition], True), ("b", buckets[partition], False)):
                key = hotspot_key(partition, kind, slot)
                for member, n in counts.items():
                    pipe.zincrby(key, n, member)
                if trim:
                    pipe.zremrangebyrank(key, 0, -(keep + 1))
                pipe.expire(key, ttl)
        for tag, kind, counts in ((USERS_TAG, "u", users), (SHARDS_TAG, "s", shards)):
            key = hotspot_key(tag, kind, slot)
            for member, n in counts.items():
                pipe.zincrby(key, n, member)
            pipe.zremrangebyrank(key, 0, -(keep + 1))
            pipe.expire(key, ttl)
        pipe.execute()
    except RedisError as exc:
        metrics.inc("likes_hotspot_errors_total", step="record")
        logger.warning("hot-spot figures not recorded: %s", exc.__class__.__name__)


@dataclass
class Window:
    """The writes of the last `seconds`, as the slots have them."""

    seconds: int
    partitions: dict[str, int] = field(default_factory=dict)  # every configured count partition, 0 included
    videos: list[tuple[str, int]] = field(default_factory=list)  # the TOP_K hottest, over every partition
    buckets: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # partition -> its hottest buckets
    users: list[tuple[int, int]] = field(default_factory=list)
    shards: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.partitions.values())

    def share(self, partition: str) -> float:
        return self.partitions.get(partition, 0) / self.total if self.total else 0.0

    @property
    def skew(self) -> float:
        """The hottest partition's writes over the mean (1.0: even; 0.0: no writes)."""
        if not self.total:
            return 0.0
        return max(self.partitions.values()) / (self.total / len(self.partitions))


def _top(pipe, tag: str, kind: str, slots: list[int], limit: int) -> None:
    """Queue the union of a tag's slots and its `limit` highest members (-1: all) on a pipeline (3 replies)."""
    scratch = hotspot_key(tag, f"{kind}-sum", slots[-1])
    pipe.zunionstore(scratch, [hotspot_key(tag, kind, s) for s in slots])
    pipe.zrevrange(scratch, 0, limit - 1 if limit > 0 else -1, withscores=True)
    pipe.delete(scratch)


def _slots(seconds: int, now: float | None) -> list[int]:
    last = _slot(now)
    return list(range(last - seconds // SLOT_S + 1, last + 1))


def _videos_summed(replies) -> Counter:
    """The hottest videos' writes, added up over the partitions' `_top` replies."""
    videos = Counter()
    for reply in replies:
        for member, score in reply:
            videos[member.decode()] += int(score)
    return videos


def hot_videos(seconds: int, min_writes: int, *, now: float | None = None) -> set[str]:
    """The videos that took at least `min_writes` writes over the last `seconds` (one round trip): the display
    snapshot's throttle reads it (DEG-2). Raises RedisError (the caller fails open)."""
    slots = _slots(seconds, now)
    pipe = cache_redis().pipeline(transaction=False)
    for alias in settings.COUNT_PARTITION_ALIASES:
        _top(pipe, alias, "v", slots, TOP_K)
    return {v for v, n in _videos_summed(pipe.execute()[1::3]).items() if n >= min_writes}


def read(seconds: int, *, now: float | None = None, bucket_limit: int = TOP_K) -> Window:
    """The window's figures. Raises RedisError (the callers fail open)."""
    slots = _slots(seconds, now)
    aliases = list(settings.COUNT_PARTITION_ALIASES)
    pipe = cache_redis().pipeline(transaction=False)
    for alias in aliases:
        _top(pipe, alias, "v", slots, TOP_K)
        _top(pipe, alias, "b", slots, -1)
    _top(pipe, USERS_TAG, "u", slots, TOP_K)
    _top(pipe, SHARDS_TAG, "s", slots, -1)
    replies = pipe.execute()[1::3]
    out, videos = Window(seconds), _videos_summed(replies[0:2 * len(aliases):2])
    for i, alias in enumerate(aliases):
        hot = [(int(member), int(score)) for member, score in replies[2 * i + 1]]
        out.partitions[alias] = sum(n for _vb, n in hot)
        out.buckets[alias] = hot[:bucket_limit] if bucket_limit > 0 else hot
    out.videos = videos.most_common(TOP_K)
    out.users = [(int(member), int(score)) for member, score in replies[-2]]
    out.shards = {member.decode(): int(score) for member, score in replies[-1]}
    return out


@dataclass(frozen=True)
class Suggestion:
    source: str
    target: str
    buckets: list[int]
    source_share: float
    moved_writes: int

    @property
    def buckets_text(self) -> str:
        return ",".join(str(vb) for vb in sorted(self.buckets))


def suggest(window: Window, *, busy: Iterable[int] = ()) -> Suggestion | None:
    """The bucket move that would relieve the hottest partition of `window` (see the module), or None. `busy`: the
    buckets an unfinished migration already moves (never suggested again)."""
    if len(window.partitions) < 2 or window.total < settings.HOTSPOT_MIN_WRITES:
        return None
    source = max(window.partitions, key=lambda p: (window.partitions[p], p))
    if window.share(source) <= settings.HOTSPOT_MOVE_SUGGEST_SHARE:
        return None
    target = min((p for p in window.partitions if p != source), key=lambda p: (window.partitions[p], p))
    gen = routing.active()
    busy = set(busy)
    hot, cold, moved, chosen = window.partitions[source], window.partitions[target], 0, []
    for vb, n in window.buckets.get(source, []):
        if len(chosen) >= settings.HOTSPOT_MOVE_MAX_BUCKETS:
            break
        if vb in busy or gen.routes[vb].partition != source or cold + moved + n > hot - moved - n:
            continue  # already moving, moved since, or a move that would overshoot
        chosen.append(vb)
        moved += n
    if not chosen:
        return None
    return Suggestion(source, target, chosen, window.share(source), moved)
