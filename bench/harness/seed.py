"""The bench data: users, videos, bulk inserts of bench rows (the one place that spells their column lists), resets.
Only ever the likes_bench* databases and the likes-bench Redis prefix: the drivers call check_environment() first."""

from __future__ import annotations

import re
import time
from collections import Counter

from bench.harness.driver import make_log

log = make_log("bench")
USER_PREFIX = "bench-u"
AUTHOR_NAME = "bench-author"
VIDEO_PREFIX = "bench-v"
HOT_VIDEO = "bench-hot"
NAIVE_VIDEO_TABLE = "bench_naive_video"  # the command benchmark's counter row per video, in every relation shard


def table(model) -> str:
    return model._meta.db_table


def shards() -> list[str]:
    from django.conf import settings
    return list(settings.RELATION_SHARD_ALIASES)


def partitions() -> list[str]:
    from django.conf import settings
    return list(settings.COUNT_PARTITION_ALIASES)


def rows(alias: str, sql: str, params=None, *, slow: bool = False) -> list[tuple]:
    """What `sql` returns on `alias` (`slow`: the statement timeout lifted, for a bench's scans and bulk work)."""
    from django.db import connections
    with connections[alias].cursor() as cur:
        if slow:
            cur.execute("SET statement_timeout = 0")
        cur.execute(sql, params)
        out = cur.fetchall() if cur.description else []
        if slow:
            cur.execute("SET statement_timeout = DEFAULT")
    return out


def vacuum(alias: str, *models, analyze_only: bool = False) -> None:
    """VACUUM (ANALYZE), or ANALYZE alone, of `models` on `alias` (the bench server's autovacuum is off)."""
    for model in models:
        rows(alias, f"{'ANALYZE' if analyze_only else 'VACUUM (ANALYZE)'} {table(model)}", slow=True)


def relations_insert(cursor, rows_sql: str, params: list) -> None:
    """LikeRelation rows; `rows_sql` selects (user_id, video_id, state, relation_version, last_operation_id, at)."""
    from relations.models import LikeRelation
    cursor.execute(f"INSERT INTO {table(LikeRelation)} (user_id, video_id, state, relation_version, last_operation_id,"
                   " state_changed_at, created_at, updated_at) SELECT u, v, s, ver, op, at, at, at "
                   f"FROM ({rows_sql}) AS r(u, v, s, ver, op, at)", params)


def snapshots_insert(video_ids_sql: str, params: list, *, author_id: int) -> None:
    """Active public VideoSnapshot rows by `author_id` for the ids `video_ids_sql` selects (bulk, idempotent)."""
    from django.db import connections

    from relations.models import VideoSnapshot
    with connections["default"].cursor() as cur:
        cur.execute(f"INSERT INTO {table(VideoSnapshot)} (video_id, author_id, visibility, status, version, "
                    f"updated_at) SELECT v, %s, 'public', 'active', 1, now() FROM ({video_ids_sql}) AS s(v) "
                    "ON CONFLICT (video_id) DO UPDATE SET author_id = EXCLUDED.author_id, visibility = 'public', "
                    "status = 'active'",
                    [author_id, *params])
        cur.execute(f"ANALYZE {table(VideoSnapshot)}")


def displays_upsert(counts: dict[str, int], *, snapshot_id: int | None = None, watermark: str = "{}") -> int:
    """Durable display snapshots (raw = display = the count; nothing hidden) in the active count generation."""
    from django.db import connections, transaction
    from django.utils import timezone

    from counting import routing
    from counting.models import VideoDisplayCount
    gen = routing.active()
    videos = sorted(counts)
    with transaction.atomic(using="default"), connections["default"].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        cur.execute(
            f"INSERT INTO {table(VideoDisplayCount)} (video_id, generation, manifest_id, raw_active_count, "
            "risk_hidden_count, policy_hidden_count, display_count, snapshot_id, generated_at, watermark) "
            "SELECT v, %s, %s, c, 0, 0, c, %s, %s, %s::jsonb FROM unnest(%s::text[], %s::bigint[]) AS x(v, c) "
            "ON CONFLICT (video_id) DO UPDATE SET generation = EXCLUDED.generation, manifest_id = EXCLUDED.manifest_id,"
            " raw_active_count = EXCLUDED.raw_active_count, risk_hidden_count = 0, policy_hidden_count = 0, "
            "display_count = EXCLUDED.display_count, snapshot_id = EXCLUDED.snapshot_id, "
            "generated_at = EXCLUDED.generated_at, watermark = EXCLUDED.watermark",
            [gen.generation, gen.manifest_id, snapshot_id or int(time.time() * 1_000_000), timezone.now(), watermark,
             videos, [counts[v] for v in videos]])
        return cur.rowcount


def counter_rows(cursor, name: str, videos: list[str]) -> None:
    """A naive baseline's table of one counter row per video (made when missing), a 0 row for each of `videos`."""
    cursor.execute(f"CREATE TABLE IF NOT EXISTS {name} (video_id varchar(64) PRIMARY KEY, "
                   "like_count bigint NOT NULL DEFAULT 0)")
    cursor.execute(f"INSERT INTO {name} (video_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING", [videos])


def users_sql(prefix: str, n: int, start: int = 0, digits: int = 7) -> list[int]:
    """auth_user rows PREFIX0000000 ... (unusable passwords) in one statement (idempotent); their ids by name."""
    from django.db import connections
    with connections["default"].cursor() as cur:
        cur.execute(
            "INSERT INTO auth_user (password, last_login, is_superuser, username, first_name, last_name, email, "
            f"is_staff, is_active, date_joined) SELECT '!bench', NULL, false, %s || lpad(i::text, {digits}, '0'), '', "
            "'', '', false, true, now() FROM generate_series(%s, %s - 1) AS i ON CONFLICT (username) DO NOTHING",
            [prefix, start, n])
        cur.execute("SELECT id FROM auth_user WHERE username ~ %s AND username >= %s ORDER BY username LIMIT %s",
                    [f"^{re.escape(prefix)}[0-9]{{{digits}}}$", f"{prefix}{start:0{digits}d}", n - start])
        return [r[0] for r in cur.fetchall()]


def named_users(*names: str) -> list[int]:
    """Django users by name (the operators who plan, approve and request, the author, a probe); their ids."""
    from django.contrib.auth import get_user_model
    return established([get_user_model().objects.get_or_create(username=name, defaults={"password": "!bench"})[0].pk
                        for name in names])


def established(uids: list[int]) -> list[int]:
    """`uids` as established accounts, as most of a platform's are: made today they would all be `young_account` to
    the risk scorer (issue 32), which then judges, down-weights and hides every liker of a load. A risk level an
    earlier run's scorer gave them is not this run's either."""
    from django.db import connections

    from relations.models import AccountStatus
    with connections["default"].cursor() as cur:
        cur.execute(f"UPDATE auth_user SET date_joined = now() - interval '{ESTABLISHED_AGE}' WHERE id = ANY(%s) "
                    f"AND date_joined > now() - interval '30 days'", [uids])
    AccountStatus.objects.filter(user_id__in=uids).delete()
    return uids


def author_id() -> int:
    return named_users(AUTHOR_NAME)[0]


def videos_ensure(video_ids: list[str]) -> int:
    """Public videos through video_snapshot_upsert, for the ids without a snapshot; how many were created."""
    from likes_project.audit.services import Actor
    from relations.models import VideoSnapshot
    from relations.services.videos import video_snapshot_upsert
    have = set(VideoSnapshot.objects.filter(video_id__in=video_ids).values_list("video_id", flat=True))
    author, actor = author_id(), Actor(name="bench", channel="cli")
    missing = [v for v in video_ids if v not in have]
    for vid in missing:
        video_snapshot_upsert(video_id=vid, author_id=author, visibility="public", status="active", version=1,
                              actor=actor)
    return len(missing)


ESTABLISHED_AGE = "400 days"  # the load's users' age (bench/traffic.py's honest users are as old)


def prepare(*, users: int, videos: int) -> tuple[list[tuple[int, str]], list[str]]:
    """Users with tokens, `videos` videos and the hot one, the naive counter tables: ([(user id, token)], videos)."""
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from relations import routing
    t0 = time.monotonic()
    uids = established(users_sql(USER_PREFIX, users, digits=6))
    with connections["default"].cursor() as cur:
        cur.execute(f"INSERT INTO {table(Token)} (key, created, user_id) SELECT substr(md5(random()::text) || "
                    "md5(random()::text), 1, 40), now(), u FROM unnest(%s::bigint[]) AS u ON CONFLICT DO NOTHING",
                    [uids])
        new = cur.rowcount
        cur.execute(f"SELECT user_id, key FROM {table(Token)} WHERE user_id = ANY(%s)", [uids])
        tokens = dict(cur.fetchall())
    video_ids = [f"{VIDEO_PREFIX}{i:05d}" for i in range(videos)]
    created = videos_ensure([*video_ids, HOT_VIDEO])
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            counter_rows(cur, NAIVE_VIDEO_TABLE, [*video_ids, HOT_VIDEO])
    per_shard = Counter(routing.alias_for_user(uid) for uid in uids)
    log(f"prepared {len(uids)} users ({new} new tokens, per shard {dict(per_shard)}), {videos + 1} videos "
        f"({created} new) in {time.monotonic() - t0:.1f}s")
    return [(uid, tokens[uid]) for uid in uids], video_ids


def truncate(aliases, *models) -> None:
    for alias in aliases:
        rows(alias, f"TRUNCATE {', '.join(table(m) for m in models)}", slow=True)


def reset_state() -> None:
    """Empty the relation tables of every shard and zero the naive counters: each workload starts alike."""
    from django.db import connections

    from relations import routing
    from relations.models import LikeCommand, LikeRelation, OutboxEvent
    truncate(routing.all_aliases(), LikeRelation, LikeCommand, OutboxEvent)
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            counter_rows(cur, NAIVE_VIDEO_TABLE, [])
            cur.execute(f"UPDATE {NAIVE_VIDEO_TABLE} SET like_count = 0 WHERE like_count <> 0")
    connections.close_all()


def consumer_reset(consumer: str) -> None:
    """Forget a stream consumer's progress: its checkpoints and dead letters (its fences stay: tokens only grow)."""
    from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter
    ConsumerCheckpoint.objects.filter(consumer=consumer).delete()
    DeadLetter.objects.filter(consumer=consumer).delete()


def reset_count() -> None:
    """Empty the count projection's partition state and the `count` consumer's checkpoints and dead letters."""
    from django.conf import settings

    from counting.models import CountEventReceipt, DirtyVideo, LikeCountProjection, VideoLikeCountVbucket
    from counting.services.projection import COUNT_CONSUMER
    truncate(settings.COUNT_PARTITION_ALIASES, LikeCountProjection, VideoLikeCountVbucket, CountEventReceipt,
             DirtyVideo)
    consumer_reset(COUNT_CONSUMER)


def scan_delete(pattern: str) -> int:
    """Delete the keys of the bench Redis db matching `pattern` (scan_iter walks every node of a Cluster)."""
    from likes_project.redis_client import cache_redis
    client, deleted, batch = cache_redis(), 0, []
    for key in client.scan_iter(match=pattern, count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            deleted, batch = deleted + client.unlink(*batch), []
    return deleted + (client.unlink(*batch) if batch else 0)


def flush_redis() -> None:
    """Drop the bench namespace (prefix likes-bench) so caches start cold, and this process's L1 caches; then
    put back the caches' generation registries and sentinels, as a fresh deployment's bootstrap has them: cold,
    but whole. Without them every cache write was refused (the write scripts read the registry) and, with a beat
    running, the loss detectors found the sentinels gone and started rebuilds in the middle of the measurement."""
    from django.conf import settings

    from likes_project import l1cache
    log(f"flushed {scan_delete(f'{settings.LIKES_REDIS_PREFIX}:*')} bench redis keys")
    l1cache.clear_all()
    caches_whole()


def caches_whole() -> None:
    """The count cache's and the relation cache's registries mirrored from their durable generations, and the
    ACTIVE generations' sentinels set (what the suite's `caches_mirrored` and `private_cache` do)."""
    from counting import cache as count_cache
    from counting.selectors import count_cache_generations_get
    from counting.services.count_cache.layers import count_cache_generations_mirror
    from relations.models import RelationCacheGeneration
    from relations.services.relation_cache import cache_generations_mirror

    count_cache_generations_mirror()
    active = count_cache_generations_get(fresh=True).active
    if active is not None:
        count_cache.sentinel_set(active)
    relation_active = (RelationCacheGeneration.objects.filter(status="ACTIVE")
                       .values_list("generation", flat=True).first())
    cache_generations_mirror(sentinel_for=relation_active)


def streams_reset() -> int:
    """Delete every stream partition's key. Returns the keys deleted."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis
    return int(stream_redis().delete(*[streams.stream_key(p) for p in streams.all_partitions()]))


def reset_all() -> None:
    """Empty relations, commands, the outbox and its archive, the count projection, displays, bench Redis keys."""
    from django.conf import settings
    from django.db import connections

    from counting.models import VideoDisplayCount
    from relations.models import OutboxArchive
    reset_state()
    truncate(settings.RELATION_SHARD_ALIASES, OutboxArchive)
    reset_count()
    truncate(["default"], VideoDisplayCount)
    flush_redis()
    connections.close_all()
