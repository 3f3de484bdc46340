"""1. The likers page of the reverse-index benchmark: one video with many likers bulk-loaded into the ACTIVE
reverse generation's tables, then counting.selectors.likers.likers_page_list timed at page 1 and a deep page;
and the reset of the reverse index between the phases and rounds."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

from bench.common import percentile
from bench.dataset import author_id, consumer_reset, snapshots_insert

LIKER_PREFIX = "rvl-"  # usernames of the 200,000 likers
PAGE_VIDEO = "rvb-page-hot"  # the video of the latency test


def reverse_tables() -> str:
    from counting.models import LikeReverseProjection, LikeReverseSort, ReverseEventReceipt

    return ", ".join(m._meta.db_table for m in (LikeReverseProjection, LikeReverseSort, ReverseEventReceipt))


def reverse_reset() -> int:
    """Truncate the reverse tables and receipts on every count partition, delete every stream key, the
    reverse consumer's checkpoints and its dead letters. Returns the stream keys deleted."""
    from django.conf import settings
    from django.db import connections

    from counting.services.reverse.projector import REVERSE_CONSUMER
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis

    tables = reverse_tables()
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {tables}")
    consumer_reset(REVERSE_CONSUMER)
    keys = [streams.stream_key(p) for p in streams.all_partitions()]
    return int(stream_redis().delete(*keys)) if keys else 0


def likers_load(args) -> dict:
    """200,000 auth_user rows (unusable passwords), their LIKED state rows and sort entries for PAGE_VIDEO
    on the ACTIVE generation's partitions, and the video's snapshot (public, by the bench author)."""
    from django.db import connections

    from counting import routing
    from counting.models import LikeReverseProjection, LikeReverseSort

    t0 = time.monotonic()
    gen = routing.reverse_active()
    with connections["default"].cursor() as cur:
        cur.execute(
            "INSERT INTO auth_user (password, last_login, is_superuser, username, first_name, last_name, email, "
            "is_staff, is_active, date_joined) SELECT '!bench', NULL, false, %s || lpad(i::text, 7, '0'), '', '', "
            "'', false, true, now() FROM generate_series(0, %s - 1) AS i ON CONFLICT (username) DO NOTHING",
            [LIKER_PREFIX, args.likers])
        cur.execute("SELECT id FROM auth_user WHERE username LIKE %s ORDER BY id LIMIT %s",
                    [LIKER_PREFIX + "%", args.likers])
        user_ids = [r[0] for r in cur.fetchall()]
    snapshots_insert("SELECT %s", [PAGE_VIDEO], author_id=author_id())
    t_users = time.monotonic() - t0
    rng = random.Random(args.seed)
    rng.shuffle(user_ids)  # liked_at order independent of the user id order
    base = datetime(2026, 1, 1, tzinfo=UTC)
    by_alias: dict[str, list[tuple[int, int, datetime]]] = {}
    per_shard = [0] * gen.shards
    for i, uid in enumerate(user_ids):
        s = gen.shard_of(uid)
        per_shard[s] += 1
        by_alias.setdefault(gen.placement[s], []).append((uid, s, base + timedelta(milliseconds=7 * i + 1)))
    sort_t, proj_t = LikeReverseSort._meta.db_table, LikeReverseProjection._meta.db_table
    for alias, rows in sorted(by_alias.items()):
        with connections[alias].cursor() as cur:
            for k in range(0, len(rows), 50_000):
                chunk = rows[k:k + 50_000]
                u, s, t = [r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk]
                cur.execute(
                    f"INSERT INTO {sort_t} (generation, video_id, reverse_shard, liked_at, user_id) "
                    "SELECT %s, %s, s, t, u FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[]) AS x(u, s, t)",
                    [gen.generation, PAGE_VIDEO, u, s, t])
                cur.execute(
                    f"INSERT INTO {proj_t} (generation, video_id, user_id, relation_version, state, liked_at, "
                    "reverse_shard, updated_at) SELECT %s, %s, u, 1, 'LIKED', t, s, now() "
                    "FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[]) AS x(u, s, t)",
                    [gen.generation, PAGE_VIDEO, u, s, t])
            cur.execute(f"ANALYZE {sort_t}")
            cur.execute(f"ANALYZE {proj_t}")
    return {"likers": len(user_ids), "generation": gen.generation, "shards": gen.shards,
            "placement": list(gen.placement), "per_shard": per_shard,
            "per_partition": {a: len(r) for a, r in sorted(by_alias.items())},
            "users_seconds": round(t_users, 1), "load_seconds": round(time.monotonic() - t0, 1)}


def _fetch(author: int, limit: int, cursor: str | None):
    from counting.selectors.likers import likers_cursor_encode, likers_page_list

    page = likers_page_list(caller_id=author, video_id=PAGE_VIDEO, limit=limit, cursor=cursor)
    nxt = None if page.exhausted else likers_cursor_encode(caller_id=author, video_id=PAGE_VIDEO, page=page)
    return page, nxt


def _timed(author: int, limit: int, cursor: str | None, reps: int) -> tuple[list[float], list[int]]:
    times, first = [], None
    for _ in range(3):  # warm-up
        _fetch(author, limit, cursor)
    for _ in range(reps):
        t0 = time.perf_counter()
        page, _nxt = _fetch(author, limit, cursor)
        times.append((time.perf_counter() - t0) * 1000)
        ids = [it.user_id for it in page.items]
        if first is None:
            first = ids
        elif ids != first:
            raise RuntimeError("the same cursor gave two different pages")
    return sorted(times), first or []


def run_latency(args, load: dict) -> dict:
    author = author_id()
    t0 = time.monotonic()
    cursor, walked, seen = None, 0, 0
    deep_cursor = None
    for page_no in range(1, args.deep_page):  # pages 1 .. deep-1 walked once
        page, cursor = _fetch(author, args.limit, cursor)
        walked += 1
        seen += len(page.items)
        if cursor is None:
            raise RuntimeError(f"the list ended at page {page_no}")
    deep_cursor = cursor
    walk_s = time.monotonic() - t0
    p1, ids1 = _timed(author, args.limit, None, args.reps)
    pd, idsd = _timed(author, args.limit, deep_cursor, args.reps)
    expected_offset = (args.deep_page - 1) * args.limit
    if seen != expected_offset or len(ids1) != args.limit or len(idsd) != args.limit:
        raise RuntimeError(f"wrong page sizes: walked {seen}, page1 {len(ids1)}, deep {len(idsd)}")

    def stats(v: list[float]) -> dict:
        return {"p50_ms": round(percentile(v, 0.5), 2), "p99_ms": round(percentile(v, 0.99), 2),
                "mean_ms": round(sum(v) / len(v), 2), "max_ms": round(v[-1], 2), "n": len(v)}

    s1, sd = stats(p1), stats(pd)
    return {"limit": args.limit, "deep_page": args.deep_page, "reps": args.reps, "walk_pages": walked,
            "walk_seconds": round(walk_s, 1), "page1": s1, "deep": sd,
            "ratio_p50": round(sd["p50_ms"] / s1["p50_ms"], 2), "ratio_p99": round(sd["p99_ms"] / s1["p99_ms"], 2),
            "cursor_chars": len(deep_cursor or "")}


def likers_unload() -> None:
    from django.conf import settings
    from django.db import connections

    from relations.models import VideoSnapshot

    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {reverse_tables()}")
    with connections["default"].cursor() as cur:
        cur.execute(f"DELETE FROM {VideoSnapshot._meta.db_table} WHERE video_id = %s", [PAGE_VIDEO])
        cur.execute("DELETE FROM auth_user WHERE username LIKE %s", [LIKER_PREFIX + "%"])
