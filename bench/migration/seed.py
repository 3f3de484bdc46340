"""The migration benchmark's data: `seed` the seeded videos' history, `burst` one throughput backlog (new relations and
their NEW outbox rows, as like commands leave them)."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import defaultdict

from bench.harness import load
from bench.harness.seed import rows, table

SEED_VIDEO_PREFIX, BURST_VIDEO_PREFIX = "bench-mig-v", "bench-mig-burst-"
SEED_USER_BASE, SEED_USERS = 3_000_000_000, 200_000  # far above any Django user id of the run


def seed(*, scale: int, per_video: int, rest_share: float, moved: list[int], seed: int) -> dict:
    """Relations of the seeded videos through the harness loader, three days old: `scale` in the `moved` buckets and,
    in every other bucket, a `rest_share` of the candidates at random."""
    from counting import routing
    from counting.models import LikeCountProjection
    gen, rng, moved_set, t0 = routing.load_generation(), random.Random(seed), set(moved), time.monotonic()

    def relations():
        kept = 0
        for idx in range(scale * max(1, gen.space.virtual_buckets // max(len(moved), 1)) * 4 + 1_000_000):
            if kept >= scale:
                return
            i, j = divmod(idx, per_video)
            vid, user = f"{SEED_VIDEO_PREFIX}{i:07d}", SEED_USER_BASE + idx % SEED_USERS
            if routing.virtual_bucket(gen.space, vid, user) in moved_set:
                kept += 1
            elif rng.random() >= rest_share:
                continue
            m = (i * 31 + j * 17) % 20
            yield idx, user, vid, "UNLIKED" if 17 <= m < 19 else "LIKED", 1 if m < 17 else 2 if m < 19 else 3

    out = load.load(relations(), prefix=SEED_VIDEO_PREFIX, base_ms=int((time.time() - 3 * 86400) * 1000), step_ms=4)
    return {**out, "projection_rows": out["rows"].get(table(LikeCountProjection), 0),
            "vbuckets": sum(out["vbuckets_upserted"].values()), "seconds": round(time.monotonic() - t0, 1)}


def bucket_rows(buckets: list[int]) -> dict:
    """Projection rows (and how many LIKED) and vbuckets of `buckets` on every count partition."""
    from django.conf import settings

    from counting import routing
    from counting.models import LikeCountProjection, VideoLikeCountVbucket
    gen, out = routing.load_generation(), {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        ((proj, liked),) = rows(alias, f"SELECT count(*), count(*) FILTER (WHERE projected_state = 'LIKED') FROM "
                                       f"{table(LikeCountProjection)} WHERE generation = %s AND virtual_bucket = "
                                       "ANY(%s)", [gen.generation, buckets])
        out[alias] = {"projection": proj, "liked": liked, "vbuckets": rows(
            alias, f"SELECT count(*) FROM {table(VideoLikeCountVbucket)} WHERE generation = %s AND virtual_bucket = "
                   "ANY(%s)", [gen.generation, buckets])[0][0]}
    return out


def burst(n: int, tag: str, user_ids: list[int], per_video: int = 20) -> int:
    """`n` new relations LIKED v1 with their NEW outbox rows, as like commands write them; the relations written."""
    from django.db import connections, transaction
    from django.utils import timezone

    from relations import events, routing
    from relations.models import LikeRelation, OutboxEvent
    from relations.selectors import UNLIKED_V0
    per_video, by_shard = min(per_video, len(user_ids)), defaultdict(set)
    for idx in range(n):
        uid = user_ids[(idx * 7 + idx // per_video) % len(user_ids)]
        by_shard[routing.alias_for_user(uid)].add((uid, f"{BURST_VIDEO_PREFIX}{tag}-{idx // per_video:05d}"))
    for alias, pairs in sorted(by_shard.items()):
        now = timezone.now()
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute("SELECT pg_current_xact_id()::text::bigint")
            xact = cur.fetchone()[0]
            with cur.cursor.copy(f"COPY {table(LikeRelation)} (user_id, video_id, state, relation_version, "
                                 "last_operation_id, state_changed_at, created_at, updated_at) FROM STDIN") as cp:
                for uid, vid in sorted(pairs):
                    cp.write_row((uid, vid, "LIKED", 1, f"burst-{tag}-{uid}-{vid}", now, now, now))
            with cur.cursor.copy(f"COPY {table(OutboxEvent)} (event_id, aggregate_key, relation_version, event_type, "
                                 "schema_version, payload, xact_id, status, retry_count, next_retry_at, claimed_by, "
                                 "last_error, stream_key, stream_entry_id, created_at) FROM STDIN") as cp:
                for uid, vid in sorted(pairs):
                    payload = events.event_payload(event_id=(eid := uuid.uuid4()), alias=alias, user_id=uid,
                                                   video_id=vid, operation_id=f"burst-{tag}-{uid}-{vid}",
                                                   previous=UNLIKED_V0, new_state="LIKED", new_version=1,
                                                   changed_at=now)
                    cp.write_row((eid, events.aggregate_key(uid, vid), 1, events.EVENT_TYPE,
                                  events.EVENT_SCHEMA_VERSION, json.dumps(payload), xact, "NEW", 0, now, "", "", "",
                                  "", now))
    connections.close_all()
    return sum(len(p) for p in by_shard.values())
