"""The bench data every benchmark shares: the users (with DRF tokens), the author and the videos of
bench/run.sh, the resets between workloads, the bench Redis namespace, and the bulk SQL inserts of bench
rows (the one place that spells their column lists). Only ever the likes_bench* databases and the
likes-bench Redis prefix: the drivers call common.check_environment() first."""

from __future__ import annotations

import time
from collections import Counter

from bench.common import bench_log

USER_PREFIX = "bench-u"
AUTHOR_NAME = "bench-author"
VIDEO_PREFIX = "bench-v"
HOT_VIDEO = "bench-hot"
NAIVE_VIDEO_TABLE = "bench_naive_video"  # bench/naive.py's counter row per video, in every relation shard

# The columns the bulk inserts below fill (the rest of each table keeps its defaults).
RELATION_COLUMNS = ("user_id", "video_id", "state", "relation_version", "last_operation_id", "state_changed_at",
                    "created_at", "updated_at")
SNAPSHOT_COLUMNS = ("video_id", "author_id", "visibility", "status", "version", "updated_at")


def _chunks(seq, n):
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


# --- bulk rows -----------------------------------------------------------------------------------------


def relations_insert(cursor, rows_sql: str, params: list) -> None:
    """Insert LikeRelation rows on the cursor's shard. `rows_sql` selects (user_id, video_id, state,
    relation_version, last_operation_id, at): the relation changed, was created and updated at `at`."""
    from relations.models import LikeRelation

    cursor.execute(f"INSERT INTO {LikeRelation._meta.db_table} ({', '.join(RELATION_COLUMNS)}) "
                   f"SELECT u, v, s, ver, op, at, at, at FROM ({rows_sql}) AS r(u, v, s, ver, op, at)", params)


def snapshots_insert(video_ids_sql: str, params: list, *, author_id: int) -> None:
    """Active public VideoSnapshot rows on `default` by `author_id` for the video ids `video_ids_sql` selects
    (bulk, idempotent: an existing row becomes active and public again)."""
    from django.db import connections

    from relations.models import VideoSnapshot

    t = VideoSnapshot._meta.db_table
    with connections["default"].cursor() as cur:
        cur.execute(
            f"INSERT INTO {t} ({', '.join(SNAPSHOT_COLUMNS)}) "
            f"SELECT v, %s, 'public', 'active', 1, now() FROM ({video_ids_sql}) AS s(v) "
            "ON CONFLICT (video_id) DO UPDATE SET author_id = EXCLUDED.author_id, visibility = 'public', "
            "status = 'active'", [author_id, *params])
        cur.execute(f"ANALYZE {t}")


def counter_rows(cursor, table: str, videos: list[str]) -> None:
    """A naive baseline's table of one counter row per video (created when missing), with a 0 row for each of
    `videos` that has none."""
    cursor.execute(f"CREATE TABLE IF NOT EXISTS {table} ("
                   " video_id varchar(64) PRIMARY KEY, like_count bigint NOT NULL DEFAULT 0)")
    cursor.execute(f"INSERT INTO {table} (video_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING", [videos])


# --- users and videos ----------------------------------------------------------------------------------


def author_id() -> int:
    from django.contrib.auth import get_user_model

    author, _ = get_user_model().objects.get_or_create(username=AUTHOR_NAME, defaults={"password": "!bench"})
    return author.pk


def videos_ensure(video_ids: list[str], *, author: int) -> int:
    """Public active videos (through video_snapshot_upsert, as the video service pushes them) for the ids that
    have no snapshot yet. Returns how many were created."""
    from likes_project.audit.services import Actor
    from relations.models import VideoSnapshot
    from relations.services.videos import video_snapshot_upsert

    have = set(VideoSnapshot.objects.filter(video_id__in=video_ids).values_list("video_id", flat=True))
    actor = Actor(name="bench", channel="cli")
    created = 0
    for vid in video_ids:
        if vid not in have:
            video_snapshot_upsert(video_id=vid, author_id=author, visibility="public", status="active",
                                  version=1, actor=actor)
            created += 1
    return created


def prepare(*, users: int, videos: int) -> tuple[list[tuple[int, str]], list[str]]:
    """`users` users with DRF tokens, one author, `videos` public videos plus the hot one, and the naive
    counter table in every relation shard. Idempotent. Returns [(user id, token)] and the video ids."""
    from django.contrib.auth import get_user_model
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from relations import routing

    t0 = time.monotonic()
    User = get_user_model()
    names = [f"{USER_PREFIX}{i:06d}" for i in range(users)]
    existing: set[str] = set()
    for chunk in _chunks(names, 5000):
        existing.update(User.objects.filter(username__in=chunk).values_list("username", flat=True))
    missing = [User(username=n, password="!bench") for n in names if n not in existing]
    if missing:
        User.objects.bulk_create(missing, batch_size=2000, ignore_conflicts=True)
    ids: dict[str, int] = {}
    for chunk in _chunks(names, 5000):
        ids.update(User.objects.filter(username__in=chunk).values_list("username", "pk"))
    uid_list = [ids[n] for n in names]
    tokens: dict[int, str] = {}
    for chunk in _chunks(uid_list, 5000):
        tokens.update(Token.objects.filter(user_id__in=chunk).values_list("user_id", "key"))
    new_tokens = [Token(user_id=uid, key=Token.generate_key()) for uid in uid_list if uid not in tokens]
    if new_tokens:
        Token.objects.bulk_create(new_tokens, batch_size=2000)
        for chunk in _chunks(uid_list, 5000):
            tokens.update(Token.objects.filter(user_id__in=chunk).values_list("user_id", "key"))
    pairs = [(uid, tokens[uid]) for uid in uid_list]

    video_ids = [f"{VIDEO_PREFIX}{i:05d}" for i in range(videos)]
    all_videos = [*video_ids, HOT_VIDEO]
    created = videos_ensure(all_videos, author=author_id())
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            counter_rows(cur, NAIVE_VIDEO_TABLE, all_videos)
    per_shard = Counter(routing.alias_for_user(uid) for uid, _ in pairs)
    bench_log(f"prepared {len(pairs)} users ({len(missing)} new, per shard {dict(per_shard)}), "
              f"{len(all_videos)} videos ({created} new) in {time.monotonic() - t0:.1f}s")
    return pairs, video_ids


# --- resets --------------------------------------------------------------------------------------------


def reset_state() -> None:
    """Empty the relation tables of every bench shard and zero the naive counters, so each workload
    starts from the same state."""
    from django.db import connections

    from relations import routing
    from relations.models import LikeCommand, LikeRelation, OutboxEvent

    tables = ", ".join(m._meta.db_table for m in (LikeRelation, LikeCommand, OutboxEvent))
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {tables}")
            cur.execute(f"UPDATE {NAIVE_VIDEO_TABLE} SET like_count = 0 WHERE like_count <> 0")
    connections.close_all()


def consumer_reset(consumer: str) -> None:
    """Forget a stream consumer's progress: its checkpoints and dead letters (its fences stay: lease tokens
    only grow)."""
    from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter

    ConsumerCheckpoint.objects.filter(consumer=consumer).delete()
    DeadLetter.objects.filter(consumer=consumer).delete()


def scan_delete(pattern: str) -> int:
    """Delete the keys of the bench Redis db that match `pattern` (a likes-bench:... pattern)."""
    from likes_project.redis_client import cache_redis

    client = cache_redis()
    deleted, batch = 0, []
    # scan_iter walks every node of a Cluster; UNLINK of many keys is split by slot there (issue 16)
    for key in client.scan_iter(match=pattern, count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            deleted += client.unlink(*batch)
            batch = []
    if batch:
        deleted += client.unlink(*batch)
    return deleted


def flush_bench_redis() -> None:
    """Drop the bench namespace (prefix likes-bench, bench Redis db) so caches start cold."""
    from django.conf import settings

    deleted = scan_delete(f"{settings.LIKES_REDIS_PREFIX}:*")
    bench_log(f"flushed {deleted} bench redis keys")
