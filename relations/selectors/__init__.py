"""Reads for the relations app. Never writes the database; never opens a transaction."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import connections
from django.db.models import Min
from redis.exceptions import RedisError

from likes_project import metrics
from likes_project.fallback import FallbackLimiter
from likes_project.generations import BUILDING, LIVE, GenerationStatus
from likes_project.l1cache import RefreshedValue
from likes_project.redis_client import Flow, Read, run_flows
from relations import cache, routing
from relations.models import (
    Block,
    Friendship,
    LikeCommand,
    LikeRelation,
    OutboxEvent,
    RelationCacheGeneration,
    RelationState,
    VideoSnapshot,
    VideoStatus,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RelationView:
    state: str
    relation_version: int

    def as_dict(self) -> dict:
        return {"state": self.state, "relationVersion": self.relation_version}


UNLIKED_V0 = RelationView(state=RelationState.UNLIKED, relation_version=0)


@dataclass(frozen=True)
class VideoView:
    """The effective view of a video every rule reads: the video service's snapshot with the operator
    override, if any, applied on top (D50). `version` is the service's version; `revision` grows with
    every applied change and orders the visibility cache."""

    video_id: str
    author_id: int
    visibility: str
    status: str
    version: int
    revision: int = 0


@dataclass(frozen=True)
class VideoRecord:
    """A video's stored facts, service snapshot and operator override apart (the internal API, the
    admin and the command show these)."""

    video_id: str
    author_id: int
    service_visibility: str
    service_status: str
    version: int
    override_visibility: str | None
    override_status: str | None
    override_reason: str
    override_by: str
    override_at: dt.datetime | None
    visibility: str
    status: str
    revision: int

    @property
    def has_override(self) -> bool:
        return self.override_visibility is not None or self.override_status is not None

    @property
    def effective(self) -> VideoView:
        return VideoView(self.video_id, self.author_id, self.visibility, self.status, self.version, self.revision)


_RECORD_FIELDS = ("video_id", "author_id", "service_visibility", "service_status", "version", "override_visibility",
                  "override_status", "override_reason", "override_by", "override_at", "visibility", "status",
                  "revision")


def video_record_get(*, video_id: str, using: str = "default") -> VideoRecord | None:
    """The stored row of one video, from the database (never the cache)."""
    row = VideoSnapshot.objects.using(using).filter(video_id=video_id).values_list(*_RECORD_FIELDS).first()
    return None if row is None else VideoRecord(*row)


def video_ids_known(video_ids: list[str]) -> set[str]:
    """Which of these videos the service knows (a stored row, whatever its status: a deleted video is known)."""
    return set(VideoSnapshot.objects.filter(video_id__in=video_ids).values_list("video_id", flat=True))


def video_cache_entry(video: VideoView) -> dict:
    """The visibility cache's value for a video (its cache version is `video.revision`)."""
    return {"author_id": video.author_id, "visibility": video.visibility, "status": video.status,
            "version": video.version, "revision": video.revision}


@dataclass(frozen=True)
class Edges:
    friends: bool
    blocked: bool  # the author has blocked the user


def relation_get(*, user_id: int, video_id: str) -> RelationView:
    """The relation fact; a user who never acted reads UNLIKED v0."""
    alias = routing.alias_for_user(user_id)
    row = (
        LikeRelation.objects.using(alias)
        .filter(user_id=user_id, video_id=video_id)
        .values_list("state", "relation_version")
        .first()
    )
    return UNLIKED_V0 if row is None else RelationView(state=row[0], relation_version=row[1])


@dataclass(frozen=True)
class CommandRecord:
    """The stored verdict of one operation (LIKE_COMMAND)."""

    user_id: int
    operation_id: str
    video_id: str
    desired_state: str
    result_state: str
    result_version: int
    changed: bool


def command_get(*, user_id: int, operation_id: str) -> CommandRecord | None:
    """One indexed lookup on the user's shard (raw SQL: it runs before every command)."""
    alias = routing.alias_for_user(user_id)
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"SELECT user_id, operation_id, video_id, desired_state, result_state, result_version, changed "
            f"FROM {LikeCommand._meta.db_table} WHERE user_id = %s AND operation_id = %s",
            [user_id, operation_id],
        )
        row = cursor.fetchone()
    return None if row is None else CommandRecord(*row)


_VIDEOS_SQL = (f"SELECT video_id, author_id, visibility, status, version, revision FROM {VideoSnapshot._meta.db_table} "
               "WHERE video_id = ANY(%s)")


def _videos_from_db(video_ids: list[str]) -> dict[str, VideoView]:
    """One statement, raw SQL: it runs on every visibility cache miss of the like command."""
    with connections["default"].cursor() as cursor:
        cursor.execute(_VIDEOS_SQL, [list(video_ids)])
        return {r[0]: VideoView(*r) for r in cursor.fetchall()}


def _cached_view(video_id: str, snap: dict) -> VideoView:
    # An entry written before revisions existed carries only the version (the migration started each
    # revision at its version, so the two agree).
    return VideoView(video_id, snap["author_id"], snap["visibility"], snap["status"], snap["version"],
                     snap.get("revision", snap["version"]))


def video_snapshots_flow(video_ids: list[str], *, also: Read | None = None) -> Flow[dict[str, VideoView | None]]:
    """The effective view of each video (D50) through the visibility cache's short TTL (CMD-12): one
    Redis read, then one query for the misses. Redis trouble falls back to the database; it never
    makes an answer wrong. `also`: another read to carry in the same round trip; the flow then
    returns (views, its value), the value None when Redis failed."""
    wanted = list(dict.fromkeys(video_ids))
    read = cache.visibility_read(wanted)
    try:
        if also is None:
            cached, extra = (yield read), None
        else:
            cached, extra = yield Read(read.size + also.size, lambda pipe: (read.queue(pipe), also.queue(pipe)),
                                       lambda r: (read.parse(r[:read.size]), also.parse(r[read.size:])))
    except RedisError as exc:
        metrics.inc("likes_cache_errors_total", cache="visibility")
        logger.warning("visibility cache read failed: %s", exc.__class__.__name__)
        found = _videos_from_db(wanted)
        views = {v: found.get(v) for v in wanted}
        return views if also is None else (views, None)
    out: dict[str, VideoView | None] = {}
    for video_id, snap in cached.items():
        out[video_id] = None if snap.get("missing") else _cached_view(video_id, snap)
    misses = [v for v in wanted if v not in cached]
    metrics.inc("likes_cache_hits_total", len(cached), cache="visibility")  # M15: cache hit rate
    if misses:
        metrics.inc("likes_cache_misses_total", len(misses), cache="visibility")  # M15
        found = _videos_from_db(misses)
        fills = []
        for video_id in misses:
            video = found.get(video_id)
            out[video_id] = video
            fills.append((video_id, 0, {"missing": True}) if video is None
                         else (video_id, video.revision, video_cache_entry(video)))
        try:
            cache.visibility_cache_put_many(fills)
        except RedisError as exc:
            logger.warning("visibility cache fill failed: %s", exc.__class__.__name__)
    for video in out.values():
        if video is not None:
            _author_remember(video)
    views = {v: out[v] for v in wanted}
    return views if also is None else (views, extra)


def video_snapshots_get(*, video_ids: list[str]) -> dict[str, VideoView | None]:
    return run_flows(video_snapshots_flow(video_ids))[0]


def deleted_video_ids() -> list[str]:
    """Every video whose snapshot says `deleted` (the retirement jobs' input)."""
    return list(VideoSnapshot.objects.filter(status=VideoStatus.DELETED).order_by("video_id")
                .values_list("video_id", flat=True))


def video_snapshot_get(*, video_id: str) -> VideoView | None:
    return video_snapshots_get(video_ids=[video_id])[video_id]


# Both edges of every (author, user) pair in one statement (raw SQL: it runs on every edge cache miss of
# the like command). A friendship is stored once, ordered (user_low < user_high).
_EDGES_SQL = (
    "SELECT p.a, p.u, "
    f"EXISTS (SELECT 1 FROM {Friendship._meta.db_table} f WHERE f.user_low = LEAST(p.a, p.u) "
    "AND f.user_high = GREATEST(p.a, p.u)), "
    f"EXISTS (SELECT 1 FROM {Block._meta.db_table} b WHERE b.blocker_id = p.a AND b.blocked_id = p.u) "
    "FROM unnest(%s::bigint[], %s::bigint[]) AS p(a, u)"
)


def _edges_from_db(pairs: list[tuple[int, int]]) -> dict[tuple[int, int], Edges]:
    with connections["default"].cursor() as cursor:
        cursor.execute(_EDGES_SQL, [[a for a, _ in pairs], [u for _, u in pairs]])
        return {(a, u): Edges(friends=f, blocked=b) for a, u, f, b in cursor.fetchall()}


def edges_flow(pairs: list[tuple[int, int]], *, cached: dict | None = None) -> Flow[dict[tuple[int, int], Edges]]:
    """Friendship and block for each (author, user) pair through the short-TTL cache: one Redis read
    (none for the pairs in `cached`, cache values an earlier read of the same request fetched), then
    one query for all misses."""
    wanted = list(dict.fromkeys(pairs))
    hits = {p: cached[p] for p in wanted if p in cached} if cached else {}
    ask = [p for p in wanted if p not in hits]
    if ask:
        try:
            hits.update((yield cache.edge_read(ask)))
        except RedisError:
            metrics.inc("likes_cache_errors_total", cache="edges")
            return _edges_from_db(wanted)
    out = {p: Edges(friends=c["f"], blocked=c["b"]) for p, c in hits.items()}
    misses = [p for p in wanted if p not in out]
    if misses:
        found = _edges_from_db(misses)
        out.update(found)
        try:
            cache.edge_cache_put_many({p: {"f": e.friends, "b": e.blocked} for p, e in found.items()})
        except RedisError:
            metrics.inc("likes_cache_errors_total", cache="edges")
    return out


def edges_get_many(*, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], Edges]:
    return run_flows(edges_flow(pairs))[0] if pairs else {}


def edges_get(*, author_id: int, user_id: int) -> Edges:
    return edges_get_many(pairs=[(author_id, user_id)])[(author_id, user_id)]


# The author of each video this process has seen (bounded): the edges of a video's (author, caller)
# pair are read in the same round trip as the video's snapshot. A guess only: the snapshot read with
# it says who the author is now, and a wrong or missing guess costs one more round trip, never a
# wrong answer.
_AUTHORS: dict[str, int] = {}


def _author_remember(video: VideoView) -> None:
    limit = settings.AUTHOR_HINTS_MAX  # 0: no guesses, the edges always take a round trip of their own
    if limit > 0 and _AUTHORS.get(video.video_id) != video.author_id:
        if len(_AUTHORS) >= limit:
            _AUTHORS.clear()
        _AUTHORS[video.video_id] = video.author_id


def _edge_pairs(user_id: int, videos) -> list[tuple[int, int]]:
    """The (author, user) pairs whose edges decide visibility: active, not the caller's own, not private."""
    return [(v.author_id, user_id) for v in videos
            if v is not None and v.status == "active" and v.author_id != user_id and v.visibility != "private"]


def snapshots_and_edges_flow(user_id: int, video_ids: list[str]
                             ) -> Flow[tuple[dict[str, VideoView | None], dict[tuple[int, int], Edges]]]:
    """The videos' snapshots and the edges between their authors and the user that decide visibility
    (active videos of others, not private): one round trip for the snapshots and the edges of the
    authors this process already knows, a second only for the others."""
    guessed = list(dict.fromkeys((a, user_id) for v in video_ids if settings.AUTHOR_HINTS_MAX > 0
                                 and (a := _AUTHORS.get(v)) is not None and a != user_id))
    videos, cached_edges = yield from video_snapshots_flow(video_ids, also=cache.edge_read(guessed))
    pairs = _edge_pairs(user_id, videos.values())
    if cached_edges is None:  # Redis failed this round: the database answers, as for a failed edge read
        edges = _edges_from_db(list(dict.fromkeys(pairs))) if pairs else {}
    else:
        edges = yield from edges_flow(pairs, cached=cached_edges)
    return videos, edges


def videos_visible_flow(user_id: int, video_ids: list[str]) -> Flow[dict[str, bool]]:
    """Whether the user may see each video at all (and so its count): it exists, is active, its
    visibility admits the user, and its author has not blocked the user."""
    videos, edges = yield from snapshots_and_edges_flow(user_id, video_ids)
    out = {}
    for video_id, video in videos.items():
        if video is None or video.status != "active":
            out[video_id] = False
        elif video.author_id == user_id:
            out[video_id] = True
        elif video.visibility == "private":
            out[video_id] = False
        else:
            e = edges[(video.author_id, user_id)]
            out[video_id] = not e.blocked and (video.visibility != "friends" or e.friends)
    return out


def recent_public_videos(*, limit: int) -> list[str]:
    """The ids of the `limit` public, active videos the video service pushed most recently (the demo feed)."""
    rows = (VideoSnapshot.objects.filter(visibility="public", status=VideoStatus.ACTIVE)
            .order_by("-updated_at", "video_id").values_list("video_id", flat=True)[:limit])
    return list(rows)


def videos_visible_to(*, user_id: int, video_ids: list[str]) -> dict[str, bool]:
    return run_flows(videos_visible_flow(user_id, video_ids))[0]


def video_and_edges_get(*, user_id: int, video_id: str) -> tuple[VideoView | None, Edges | None]:
    """One video's snapshot and, when they decide (an active video of another author, not private),
    the edges between its author and the user; one Redis round trip once this process knows the author."""
    videos, edges = run_flows(snapshots_and_edges_flow(user_id, [video_id]))[0]
    video = videos[video_id]
    return video, edges.get((video.author_id, user_id)) if video is not None else None


def video_visible_to(*, user_id: int, video_id: str) -> bool:
    return videos_visible_to(user_id=user_id, video_ids=[video_id])[video_id]


# --- relation cache read path (RCACHE-4, RCACHE-8) -----------------------------------------------

GENERATION_REFRESH_S = 1.0


def _readable_generation() -> int | None:
    statuses = dict(RelationCacheGeneration.objects.filter(status__in=LIVE).values_list("status", "generation"))
    return None if any(s in statuses for s in BUILDING) else statuses.get(GenerationStatus.ACTIVE)


_READABLE_GENERATION = RefreshedValue("relcache_generation", _readable_generation, refresh_s=GENERATION_REFRESH_S)
RELATION_FALLBACK = FallbackLimiter("relation", wait_s=lambda: 0.5)


def cache_generation_for_reads() -> int | None:
    """The generation readers may use: the ACTIVE one, unless a rebuild is building one (then Redis is
    bypassed, RCACHE-4 step 2). Read from the durable table, cached for one second per process."""
    return _READABLE_GENERATION.get()


def reset_generation_cache() -> None:
    _READABLE_GENERATION.reset()


def relation_states_flow(user_id: int, video_ids: list[str], min_versions: dict[str, int] | None = None
                         ) -> Flow[dict[str, RelationView]]:
    """The caller's relation with each video (RCACHE-4): Redis for values of the readable generation
    at or above the caller's `minRelationVersion`; everything else from the user's shard in one query.
    The reader never writes the cache; it submits a repair hint for what it missed (RCACHE-4 step 5)."""
    wanted = list(dict.fromkeys(video_ids))
    floors = min_versions or {}
    gen = cache_generation_for_reads()
    cached: dict[str, tuple[str, int]] = {}
    redis_ok = gen is not None
    if gen is not None:
        try:
            cached = yield cache.relation_read(gen, user_id, wanted)
        except RedisError as exc:
            redis_ok = False
            metrics.inc("likes_cache_errors_total", cache="relation")
            logger.warning("relation cache read failed: %s", exc.__class__.__name__)
    else:
        metrics.inc("likes_relcache_bypassed_total")
    out: dict[str, RelationView] = {}
    misses = []
    for video_id in wanted:
        hit = cached.get(video_id)
        if hit is not None and hit[1] >= floors.get(video_id, 0):
            out[video_id] = RelationView(*hit)
        else:
            misses.append(video_id)
    metrics.inc("likes_cache_hits_total", len(out), cache="relation")  # M15: relation cache hit rate
    if misses:
        metrics.inc("likes_cache_misses_total", len(misses), cache="relation")  # M15
        alias = routing.alias_for_user(user_id)
        with RELATION_FALLBACK.slot():
            rows = LikeRelation.objects.using(alias).filter(user_id=user_id, video_id__in=misses).values_list(
                "video_id", "state", "relation_version")
            found = {v: RelationView(s, ver) for v, s, ver in rows}
        for video_id in misses:
            out[video_id] = found.get(video_id, UNLIKED_V0)
        if redis_ok:
            _repair_hint(user_id, misses)
    return out


def relation_states_get(*, user_id: int, video_ids: list[str], min_versions: dict[str, int] | None = None
                        ) -> dict[str, RelationView]:
    return run_flows(relation_states_flow(user_id, video_ids, min_versions))[0]


REPAIR_TASK = "relations.relcache_repair"


def _repair_hint(user_id: int, video_ids: list[str]) -> None:
    """Submit the misses as a repair hint (RCACHE-4 step 5), coalesced per user in Redis: only the read
    that opens the user's hint set sends a message, so N reads with misses cost one message per repair
    round, not N (`relations.cache.relation_hints_add`). A failure only delays the repair."""
    from likes_project.nudge import nudge

    try:
        first = cache.relation_hints_add(user_id, video_ids)
    except RedisError as exc:
        metrics.inc("likes_cache_errors_total", cache="relation_hints")
        logger.warning("relation repair hint not recorded: %s", exc.__class__.__name__)
        return
    if first:
        nudge(REPAIR_TASK, user_id, debounce_s=0.0)
    else:
        metrics.inc("likes_relcache_hints_coalesced_total")


def outbox_oldest_created_at(*, alias: str, statuses) -> dt.datetime | None:
    """When the oldest outbox row of shard `alias` in one of `statuses` was created (None: there is none)."""
    return OutboxEvent.objects.using(alias).filter(status__in=statuses).aggregate(oldest=Min("created_at"))["oldest"]
