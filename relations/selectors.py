"""Reads for the relations app. Never writes the database; never opens a transaction."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.exceptions import RedisError

from likes_project import metrics
from relations import cache, routing
from relations.models import Block, Friendship, LikeCommand, LikeRelation, RelationState, VideoSnapshot

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
    video_id: str
    author_id: int
    visibility: str
    status: str
    version: int


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


def command_get(*, user_id: int, operation_id: str) -> LikeCommand | None:
    alias = routing.alias_for_user(user_id)
    return LikeCommand.objects.using(alias).filter(user_id=user_id, operation_id=operation_id).first()


def _video_from_db(video_id: str) -> VideoView | None:
    row = VideoSnapshot.objects.filter(video_id=video_id).first()
    if row is None:
        return None
    return VideoView(row.video_id, row.author_id, row.visibility, row.status, row.version)


def video_snapshot_get(*, video_id: str) -> VideoView | None:
    """The visibility snapshot through its short-TTL cache (CMD-12). Redis trouble falls back to the
    database; it never makes the answer wrong."""
    try:
        cached = cache.visibility_cache_get(video_id)
    except RedisError as exc:
        metrics.inc("likes_cache_errors_total", cache="visibility")
        logger.warning("visibility cache read failed: %s", exc.__class__.__name__)
        return _video_from_db(video_id)
    if cached is not None:
        metrics.inc("likes_cache_hits_total", cache="visibility")
        if cached.get("missing"):
            return None
        return VideoView(
            video_id, cached["author_id"], cached["visibility"], cached["status"], cached["version"]
        )
    metrics.inc("likes_cache_misses_total", cache="visibility")
    video = _video_from_db(video_id)
    snapshot = {"missing": True} if video is None else {
        "author_id": video.author_id, "visibility": video.visibility, "status": video.status,
        "version": video.version,
    }
    try:
        cache.visibility_cache_put(video_id, 0 if video is None else video.version, snapshot)
    except RedisError as exc:
        logger.warning("visibility cache fill failed: %s", exc.__class__.__name__)
    return video


def _edges_from_db(author_id: int, user_id: int) -> Edges:
    low, high = sorted((author_id, user_id))
    friends = Friendship.objects.filter(user_low=low, user_high=high).exists()
    blocked = Block.objects.filter(blocker_id=author_id, blocked_id=user_id).exists()
    return Edges(friends=friends, blocked=blocked)


def edges_get(*, author_id: int, user_id: int) -> Edges:
    """Friendship and block between a video's author and a user, through the short-TTL cache."""
    try:
        cached = cache.edge_cache_get(author_id, user_id)
    except RedisError:
        metrics.inc("likes_cache_errors_total", cache="edges")
        return _edges_from_db(author_id, user_id)
    if cached is not None:
        return Edges(friends=cached["f"], blocked=cached["b"])
    edges = _edges_from_db(author_id, user_id)
    try:
        cache.edge_cache_put(author_id, user_id, {"f": edges.friends, "b": edges.blocked})
    except RedisError:
        metrics.inc("likes_cache_errors_total", cache="edges")
    return edges


def video_visible_to(*, user_id: int, video_id: str) -> bool:
    """Whether the user may see the video at all (and so its count): it exists, is active, its
    visibility admits the user, and its author has not blocked the user."""
    video = video_snapshot_get(video_id=video_id)
    if video is None or video.status != "active":
        return False
    if video.author_id == user_id:
        return True
    if video.visibility == "private":
        return False
    edges = edges_get(author_id=video.author_id, user_id=user_id)
    if edges.blocked:
        return False
    return video.visibility != "friends" or edges.friends
