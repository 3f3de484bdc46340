"""The migration benchmark's data, written in bulk straight into the databases.

seed      projection rows and their vbuckets, straight into the count partitions (COPY, then one INSERT … SELECT
          per partition for the vbuckets): `scale` rows in the buckets that move, and `rest_share` as many rows a
          bucket in every other bucket. Each row's virtual bucket is the product's own (counting.routing.
          virtual_bucket over the active bucket space) and it sits on the partition its bucket is routed to; each
          (video, bucket) row's `active_count` is the number of its LIKED projection rows (REC-1 holds), its
          `bucket_version` the sum of their versions. There are NO relation facts, outbox rows or display
          snapshots for these rows (issue 13's benchmark measures the migration, not reconciliation): the command
          load works on videos of its own, and the check after the run compares these videos' routed sums with
          what the seed wrote. Shape (deterministic): video i holds `per_video` relations, user (idx mod
          SEED_USERS) above SEED_USER_BASE, state by (31 i + 17 j) mod 20 (85% LIKED v1, 10% UNLIKED v2, 5% LIKED
          v3), as bench/reconcile/seed.py shapes its relations.
burst     the backlog of one throughput measurement: `n` new relations (LIKED v1) of the load's users on videos
          of the burst's own, written as a like command leaves them (the LikeRelation row on the user's shard and
          a NEW outbox row with the payload relations.events.event_payload builds, in one transaction per shard),
          for the real publishers to publish and the real projectors to apply.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
import uuid
from collections import Counter, defaultdict

from bench.migration import BURST_VIDEO_PREFIX, SEED_USER_BASE, SEED_USERS, SEED_VIDEO_PREFIX, log


def _t(model) -> str:
    return model._meta.db_table


def video_id(i: int) -> str:
    return f"{SEED_VIDEO_PREFIX}{i:07d}"


def state_of(i: int, j: int) -> tuple[str, int]:
    m = (i * 31 + j * 17) % 20
    return ("LIKED", 1) if m < 17 else ("UNLIKED", 2) if m < 19 else ("LIKED", 3)


def generate(*, scale: int, per_video: int, rest_share: float, moved: set[int], seed: int) -> tuple[dict, dict]:
    """The rows of the data set by partition: relations in generation order, kept when their bucket moves, and
    with probability `rest_share` otherwise, until `scale` rows are in the moving buckets."""
    from counting import routing

    gen = routing.load_generation()
    rng = random.Random(seed)
    out: dict[str, list[tuple]] = defaultdict(list)
    kept_moved = kept_rest = candidates = 0
    idx = 0
    limit = scale * max(1, gen.space.virtual_buckets // max(len(moved), 1)) * 4 + 1_000_000
    while kept_moved < scale and idx < limit:
        i, j = divmod(idx, per_video)
        vid, user = video_id(i), SEED_USER_BASE + idx % SEED_USERS
        idx += 1
        vb = routing.virtual_bucket(gen.space, vid, user)
        if vb in moved:
            kept_moved += 1
        elif rng.random() < rest_share:
            kept_rest += 1
        else:
            continue
        state, version = state_of(i, j)
        out[gen.routes[vb].partition].append((user, vid, state, version, vb))
    candidates = idx
    return out, {"candidates": candidates, "moved_rows": kept_moved, "other_rows": kept_rest,
                 "videos": (candidates + per_video - 1) // per_video, "generation": gen.generation,
                 "bucket_space_version": gen.space.version}


def _write_partition(alias: str, rows: list[tuple], *, generation: int, space_version: int, at) -> dict:
    from django.db import connections, transaction

    from counting.models import LikeCountProjection, VideoLikeCountVbucket

    t0 = time.monotonic()
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        with cur.cursor.copy(f"COPY {_t(LikeCountProjection)} (generation, user_id, video_id, projected_state, "
                             "projected_version, bucket_space_version, virtual_bucket, updated_at) FROM STDIN") as cp:
            for user, vid, state, version, vb in rows:
                cp.write_row((generation, user, vid, state, version, space_version, vb, at))
        t_copy = time.monotonic() - t0
        cur.execute(
            f"INSERT INTO {_t(VideoLikeCountVbucket)} (generation, video_id, virtual_bucket, bucket_space_version, "
            "active_count, bucket_version, frozen, updated_at) "
            "SELECT generation, video_id, virtual_bucket, bucket_space_version, "
            "count(*) FILTER (WHERE projected_state = 'LIKED'), sum(projected_version), false, max(updated_at) "
            f"FROM {_t(LikeCountProjection)} WHERE generation = %s AND video_id LIKE %s "
            "GROUP BY generation, video_id, virtual_bucket, bucket_space_version ORDER BY video_id, virtual_bucket",
            [generation, SEED_VIDEO_PREFIX + "%"])
        vbuckets = cur.rowcount
    with connections[alias].cursor() as cur:  # autocommit: VACUUM runs outside a transaction
        cur.execute("SET statement_timeout = 0")
        for model in (LikeCountProjection, VideoLikeCountVbucket):
            cur.execute(f"VACUUM ANALYZE {_t(model)}")
        cur.execute("RESET statement_timeout")
    return {"projection_rows": len(rows), "vbuckets": vbuckets, "copy_s": round(t_copy, 1),
            "s": round(time.monotonic() - t0, 1)}


def seed(*, scale: int, per_video: int, rest_share: float, moved: list[int], seed: int) -> dict:
    """Generate and write the data set (the tables are empty: bench/migration.sh made the databases)."""
    t0 = time.monotonic()
    rows, shape = generate(scale=scale, per_video=per_video, rest_share=rest_share, moved=set(moved), seed=seed)
    t_gen = time.monotonic() - t0
    at = dt.datetime.now(tz=dt.UTC) - dt.timedelta(days=3)
    parts = {}
    for alias in sorted(rows):
        parts[alias] = _write_partition(alias, rows[alias], generation=shape["generation"],
                                        space_version=shape["bucket_space_version"], at=at)
        log(f"  seeded {alias}: {parts[alias]['projection_rows']:,} projection rows, {parts[alias]['vbuckets']:,} "
            f"vbuckets in {parts[alias]['s']}s")
    from django.db import connections

    connections.close_all()
    return {**shape, "per_video": per_video, "rest_share": rest_share, "partitions": parts,
            "projection_rows": sum(p["projection_rows"] for p in parts.values()),
            "vbuckets": sum(p["vbuckets"] for p in parts.values()), "generate_s": round(t_gen, 1),
            "seconds": round(time.monotonic() - t0, 1)}


# --- what the seed wrote, read back ---------------------------------------------------------------------


def bucket_rows(buckets: list[int]) -> dict:
    """Projection rows and vbuckets of `buckets` on every count partition (active generation), and the
    number of those projection rows that are LIKED."""
    from django.conf import settings
    from django.db import connections

    from counting import routing
    from counting.models import LikeCountProjection, VideoLikeCountVbucket

    gen = routing.load_generation()
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT count(*), count(*) FILTER (WHERE projected_state = 'LIKED') FROM "
                        f"{_t(LikeCountProjection)} WHERE generation = %s AND virtual_bucket = ANY(%s)",
                        [gen.generation, buckets])
            proj, liked = cur.fetchone()
            cur.execute(f"SELECT count(*) FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s AND "
                        "virtual_bucket = ANY(%s)", [gen.generation, buckets])
            out[alias] = {"projection": int(proj), "liked": int(liked), "vbuckets": int(cur.fetchone()[0])}
    return out


def routed_sums(prefix: str) -> dict[str, int]:
    """Per video whose id starts with `prefix`: Σ active_count of its vbuckets over the partitions their buckets
    are routed to (what a display snapshot sums)."""
    from django.conf import settings
    from django.db import connections

    from counting import routing
    from counting.models import VideoLikeCountVbucket

    gen = routing.load_generation()
    sums: Counter = Counter()
    for alias in settings.COUNT_PARTITION_ALIASES:
        buckets = gen.buckets_on(alias)
        if not buckets:
            continue
        with connections[alias].cursor() as cur:
            cur.execute("SET statement_timeout = 0")
            cur.execute(f"SELECT video_id, sum(active_count) FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s "
                        "AND virtual_bucket = ANY(%s) AND video_id LIKE %s GROUP BY 1",
                        [gen.generation, buckets, prefix + "%"])
            for v, n in cur.fetchall():
                sums[v] += int(n)
            cur.execute("RESET statement_timeout")
    return dict(sums)


# --- the throughput backlog --------------------------------------------------------------------------------


def burst(n: int, tag: str, user_ids: list[int], *, per_video: int = 20) -> dict:
    """`n` new relations LIKED v1 with their NEW outbox rows, as like commands write them (see the module)."""
    from django.db import connections, transaction
    from django.utils import timezone

    from relations import events, routing
    from relations.models import LikeRelation, OutboxEvent
    from relations.selectors import UNLIKED_V0

    per_video = min(per_video, len(user_ids))
    by_shard: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for idx in range(n):
        vid = f"{BURST_VIDEO_PREFIX}{tag}-{idx // per_video:05d}"
        uid = user_ids[(idx * 7 + idx // per_video) % len(user_ids)]
        by_shard[routing.alias_for_user(uid)].append((uid, vid))
    t0 = time.monotonic()
    written = {}
    for alias, pairs in sorted(by_shard.items()):
        pairs = sorted(set(pairs))
        now = timezone.now()
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute("SELECT pg_current_xact_id()::text::bigint")
            xact = cur.fetchone()[0]
            with cur.cursor.copy(f"COPY {_t(LikeRelation)} (user_id, video_id, state, relation_version, "
                                 "last_operation_id, state_changed_at, created_at, updated_at) FROM STDIN") as cp:
                for uid, vid in pairs:
                    cp.write_row((uid, vid, "LIKED", 1, f"burst-{tag}-{uid}-{vid}", now, now, now))
            with cur.cursor.copy(f"COPY {_t(OutboxEvent)} (event_id, aggregate_key, relation_version, event_type, "
                                 "schema_version, payload, xact_id, status, retry_count, next_retry_at, claimed_by, "
                                 "last_error, stream_key, stream_entry_id, created_at) FROM STDIN") as cp:
                for uid, vid in pairs:
                    eid = uuid.uuid4()
                    payload = events.event_payload(event_id=eid, alias=alias, user_id=uid, video_id=vid,
                                                   operation_id=f"burst-{tag}-{uid}-{vid}", previous=UNLIKED_V0,
                                                   new_state="LIKED", new_version=1, changed_at=now)
                    cp.write_row((eid, events.aggregate_key(uid, vid), 1, events.EVENT_TYPE,
                                  events.EVENT_SCHEMA_VERSION, json.dumps(payload), xact, "NEW", 0, now, "", "", "",
                                  "", now))
        written[alias] = len(pairs)
    connections.close_all()
    return {"tag": tag, "relations": sum(written.values()), "by_shard": written,
            "videos": (n + per_video - 1) // per_video, "write_s": round(time.monotonic() - t0, 2)}
