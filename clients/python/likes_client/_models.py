"""The values the client hands back: frozen dataclasses, named after the API's JSON fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

LIKED: Final = "LIKED"
UNLIKED: Final = "UNLIKED"


def state_of(liked: bool) -> str:
    return LIKED if liked else UNLIKED


@dataclass(frozen=True)
class Relation:
    """The caller's relation with one video at one server version.

    `replayed` and `operation_id` describe the command whose answer carried it (`replayed` is True when the
    server answered a retry from its stored verdict); a relation read from `currentRelation` or a batch query
    has `operation_id` None unless it is that command's own version."""

    video_id: str
    state: str
    version: int
    replayed: bool = False
    operation_id: str | None = None

    @property
    def liked(self) -> bool:
        return self.state == LIKED

    @classmethod
    def from_wire(cls, video_id: str, data: dict[str, Any]) -> Relation:
        """`{"state", "relationVersion"}` (a `currentRelation` or an `operationResult`)."""
        return cls(video_id=video_id, state=str(data["state"]), version=int(data["relationVersion"]))


@dataclass(frozen=True)
class VideoState:
    """One item of a batch query, as the client shows it.

    `my_state`/`relation_version` are the server's unless the client holds a newer confirmed relation of its
    own (CLI-3: then its own). `display_count` is always the server's number (None when the video is not
    available); `optimistic_count` adds or removes this session's own confirmed change while the server's
    count does not show it yet (CLI-4; see the README for the rule)."""

    video_id: str
    available: bool
    my_state: str
    relation_version: int
    display_count: int | None
    count_snapshot_at: str | None
    optimistic_count: int | None

    @property
    def liked(self) -> bool:
        return self.my_state == LIKED


@dataclass(frozen=True)
class LikedVideo:
    """One item of `GET /v1/me/likes` (`liked_at` is the server's ISO-8601 UTC string)."""

    video_id: str
    liked_at: str
    relation_version: int


@dataclass(frozen=True)
class Liker:
    """One item of `GET /v1/videos/<id>/likers` (`liked_at` is the server's ISO-8601 UTC string)."""

    user_id: int
    username: str
    liked_at: str
