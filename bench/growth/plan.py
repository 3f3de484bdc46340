"""The shape of the growth benchmark's history (docs/benchmarks.md, "The history"), a pure function of the relation
index (a larger size is the smaller one grown): the heavy user, the hot video's light users, the core users."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

PREFIX, HOT_VIDEO, OPERATOR = "bgr-", "bgr-hot", "bgr-operator"  # every video id and username starts with PREFIX
BASE_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
STEP_MS = 500  # relation idx changed first at BASE + idx * STEP; its version k at + k ms
PRIME = 1_000_003  # above any catalog size this benchmark makes (sizes up to 40,000,000 at 40 per video)
PER_VIDEO = 40
HEAVY_USER = f"{PREFIX}heavy"
LIGHT_PREFIX = f"{PREFIX}l"
CORE_PREFIX = f"{PREFIX}c"
VIDEO_PREFIX = f"{PREFIX}v"
MAX_RELATIONS = 40_000_000
MAX_LOOP = 1_000_000

HEAVY, LIGHT, CORE = "h", "l", "c"


def state_of(idx: int) -> tuple[str, int]:
    """The relation's current state and version."""
    m = (idx * 37) % 100
    if m < 82:
        return "LIKED", 1
    if m < 94:
        return "UNLIKED", 2
    if m < 99:
        return "LIKED", 3
    return "UNLIKED", 4


def liked_in(a: int, b: int) -> int:
    """LIKED relations among the indexes a .. b-1."""
    return sum(1 for idx in range(a, b) if state_of(idx)[0] == "LIKED")


def relations_for(liked: int, start: int) -> int:
    """The fewest relations from index `start` holding `liked` LIKED ones."""
    n = math.ceil(liked / 0.87)
    while liked_in(start, start + n) < liked:
        n += 100
    return n


def video_id(i: int) -> str:
    return f"{VIDEO_PREFIX}{i:07d}"


def core_likes(j: int) -> int:
    return 150 + (j * 7919) % 301


@dataclass
class Plan:
    heavy_likes: int
    hot_likes: int
    heavy_rel: int = 0
    hot_rel: int = 0
    catalog_min: int = 0
    _starts: list[int] = field(default_factory=list, repr=False)  # core user j's first relation index

    def __post_init__(self):
        self.heavy_rel = relations_for(self.heavy_likes, 0)
        self.hot_rel = relations_for(self.hot_likes, self.heavy_rel)
        self.catalog_min = max(1000, math.ceil(self.heavy_rel * 1.25))

    @property
    def core_start(self) -> int:
        return self.heavy_rel + self.hot_rel

    def _core_start_of(self, j: int) -> int:
        while len(self._starts) <= j:
            prev = len(self._starts) - 1
            self._starts.append(self.core_start if prev < 0 else self._starts[prev] + core_likes(prev))
        return self._starts[j]

    def core_users_started(self, n: int) -> int:
        """How many core users have at least one relation among the first `n`."""
        j = 0
        while self._core_start_of(j) < n:
            j += 1
        return j

    def core_users_complete(self, n: int) -> int:
        """How many core users have all their relations among the first `n`."""
        j = self.core_users_started(n)
        while j > 0 and self._core_start_of(j - 1) + core_likes(j - 1) > n:
            j -= 1
        return j

    def catalog_of(self, j: int) -> int:
        return max(self.catalog_min, (self._core_start_of(j) + core_likes(j)) // PER_VIDEO)

    def catalog(self, n: int) -> int:
        """Videos of the catalog once the first `n` relations exist."""
        started = self.core_users_started(n)
        return self.catalog_min if started == 0 else self.catalog_of(started - 1)

    def core_videos(self, j: int) -> list[int]:
        c = self.catalog_of(j)
        s = (j * 104_729) % c
        return [(s + k * PRIME) % c for k in range(core_likes(j))]

    def heavy_video(self, k: int) -> int:
        return (k * PRIME) % self.catalog_min

    def relations(self, a: int, b: int):
        """(idx, user kind, user number, video id) of the relation indexes a .. b-1, in index order."""
        for idx in range(max(a, 0), min(b, self.heavy_rel)):
            yield idx, HEAVY, 0, video_id(self.heavy_video(idx))
        for idx in range(max(a, self.heavy_rel), min(b, self.core_start)):
            yield idx, LIGHT, idx - self.heavy_rel, HOT_VIDEO
        if b <= self.core_start:
            return
        # the user holding index `lo`: the last one that starts at or before it
        j = max(0, self.core_users_started(max(a, self.core_start) + 1) - 1)
        for _ in range(MAX_RELATIONS):
            start = self._core_start_of(j)
            if start >= b:
                return
            videos = self.core_videos(j)
            for k, v in enumerate(videos):
                idx = start + k
                if a <= idx < b:
                    yield idx, CORE, j, video_id(v)
            j += 1

    def summary(self, n: int) -> dict:
        return {"relations": n, "heavy_relations": self.heavy_rel, "heavy_liked": liked_in(0, self.heavy_rel),
                "hot_relations": self.hot_rel, "hot_liked": liked_in(self.heavy_rel, self.core_start),
                "light_users": self.hot_rel, "core_users": self.core_users_started(n),
                "core_users_complete": self.core_users_complete(n), "videos": self.catalog(n) + 1}
