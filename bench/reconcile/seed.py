"""The data set of the reconciliation and snapshot benchmarks (docs/benchmarks.md, "Reconciliation and repair"),
written by the harness loader, then checked against the routing on a sample."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass

from bench.harness import load
from bench.harness.seed import author_id, partitions, rows, snapshots_insert, table, users_sql

PREFIX = "bench-rec-"  # every video of the data set
SEED_VIDEO_PREFIX, SEED_HOT_VIDEO, SEED_USER_PREFIX = f"{PREFIX}v", f"{PREFIX}hot", "bench-r"


@dataclass(frozen=True)
class Plan:
    videos: int
    per_video: int
    hot: int
    users: int

    @property
    def relations(self) -> int:
        return self.videos * self.per_video + self.hot

    def video_ids(self) -> list[str]:
        return [video_id(i) for i in range(self.videos)]

    def rows(self, uids: list[int]):
        """(idx, user id, video, state, version) of every relation, the hot video's (LIKED v1) last."""
        for i in range(self.videos):
            for j in range(self.per_video):
                idx, ver = i * self.per_video + j, expected_version(self, i, j)
                yield idx, uids[idx % self.users], video_id(i), "LIKED" if ver % 2 else "UNLIKED", ver
        for j in range(self.hot):
            yield self.videos * self.per_video + j, uids[j], SEED_HOT_VIDEO, "LIKED", 1


def video_id(i: int) -> str:
    return f"{SEED_VIDEO_PREFIX}{i:06d}"


def plan_for(*, relations: int, hot: int, per_video: int) -> Plan:
    """`relations` in all: the hot video's `hot`, the rest in videos of `per_video`."""
    hot = min(hot, relations // 2)
    videos = max(1, (relations - hot) // per_video)
    return Plan(videos=videos, per_video=per_video, hot=hot, users=max(hot, 20 * per_video, 1000))


def expected_version(plan: Plan, i: int, j: int) -> int:
    m = (i * 31 + j * 17) % 20
    return 1 if m < 17 else 2 if m < 19 else 3


def users_ensure(n: int) -> list[int]:
    """`n` Django users bench-r0000000 ... (bulk, idempotent); their ids in name order."""
    ids = users_sql(SEED_USER_PREFIX, n)
    if len(ids) != n:
        raise RuntimeError(f"expected {n} seed users, found {len(ids)}")
    return ids


def seed(plan: Plan) -> dict:
    """The data set into emptied tables, three days old (before anything a command writes); what was written."""
    from counting.models import LikeCountProjection
    from relations.models import OutboxEvent
    t0 = time.monotonic()
    uids = users_ensure(plan.users)
    t_users = time.monotonic() - t0
    snapshots_insert("SELECT %s || lpad(i::text, 6, '0') FROM generate_series(0, %s - 1) AS i UNION ALL SELECT %s",
                     [SEED_VIDEO_PREFIX, plan.videos, SEED_HOT_VIDEO], author_id=author_id())
    out = load.load(plan.rows(uids), prefix=PREFIX, base_ms=int((time.time() - 3 * 86400) * 1000), step_ms=4)
    return {**out, "plan": plan.__dict__ | {"relations": plan.relations}, "users_s": round(t_users, 1),
            "events": out["rows"][table(OutboxEvent)], "projected": out["rows"][table(LikeCountProjection)],
            "buckets": sum(out["vbuckets_upserted"].values()), "seconds": round(time.monotonic() - t0, 1)}


def verify_sample(plan: Plan, *, rng: random.Random, n: int = 2000) -> dict:
    """`n` sampled relations on their shard, projection bucket, partition and stream, with the shape's version."""
    from counting import routing as count_routing
    from counting.models import LikeCountProjection
    from likes_project.eventlog import streams
    from relations import routing as relation_routing
    from relations.events import aggregate_key
    from relations.models import LikeRelation, OutboxEvent
    uids = users_ensure(plan.users)
    gen = count_routing.load_generation()
    wrong: Counter = Counter()
    picks = []
    for _ in range(n):
        if plan.hot and rng.random() < 0.1:
            j = rng.randrange(plan.hot)
            picks.append((uids[j], SEED_HOT_VIDEO, 1))
        else:
            i, j = rng.randrange(plan.videos), rng.randrange(plan.per_video)
            picks.append((uids[(i * plan.per_video + j) % plan.users], video_id(i), expected_version(plan, i, j)))
    for user_id, vid, ver in picks:
        alias, agg = relation_routing.alias_for_user(user_id), aggregate_key(user_id, vid)
        wrong["relation shard / version"] += rows(alias, f"SELECT relation_version FROM {table(LikeRelation)} WHERE "
                                                         "user_id = %s AND video_id = %s", [user_id, vid]) != [(ver,)]
        wrong["outbox rows / stream partition"] += rows(
            alias, f"SELECT count(*), count(DISTINCT stream_partition), min(stream_partition) FROM "
                   f"{table(OutboxEvent)} WHERE aggregate_key = %s", [agg]) != [(ver, 1, streams.partition_for(agg))]
        vb = count_routing.virtual_bucket(gen.space, vid, user_id)
        for part in partitions():
            found = rows(part, f"SELECT virtual_bucket, projected_version FROM {table(LikeCountProjection)} WHERE "
                               "generation = %s AND user_id = %s AND video_id = %s", [gen.generation, user_id, vid])
            wrong["projection bucket / partition"] += found != ([(vb, ver)] if part == gen.routes[vb].partition else [])
    wrong = {k: v for k, v in wrong.items() if v}
    return {"sampled": n, "wrong": wrong, "ok": not wrong}


