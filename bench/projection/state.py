"""The data, resets and checks of the count-pipeline benchmark (all in the driver): the probe user and videos,
the resets between workloads and replays, what the pipeline still has to do, exactness against the relation
facts, the durable lags, and the saved streams of each workload for the backlog replays."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from bench.common import BENCH_DB_PREFIX, percentile, rounded
from bench.dataset import HOT_VIDEO, author_id, consumer_reset, flush_bench_redis, reset_state, videos_ensure
from bench.projection.naive import NAIVE_CONSUMER, NAIVE_COUNT_TABLE, naive_alias, naive_tables, reset_naive

PROBE_VIDEO_PREFIX = "bench-probe-"
PROBE_USER = "bench-probe-user"


def _t(model) -> str:
    return model._meta.db_table


def prepare_pipeline(args, videos: list[str]) -> tuple[int, dict[str, list[str]], list[str]]:
    """The probe user and the probe videos (a set per workload, so the workloads' relations stay
    disjoint), and the naive baseline's tables in one count partition with a counter row for every video of
    the run. Returns the probe user id, the probe videos by workload, and every video of the run."""
    from django.contrib.auth import get_user_model

    probe_user, _ = get_user_model().objects.get_or_create(username=PROBE_USER, defaults={"password": "!bench"})
    probe_sets = {w: [f"{PROBE_VIDEO_PREFIX}{w[0]}{i:02d}" for i in range(args.probe_videos)]
                  for w in ("uniform", "hot")}
    all_videos = [*videos, HOT_VIDEO, *(v for vids in probe_sets.values() for v in vids)]
    videos_ensure(all_videos[len(videos) + 1:], author=author_id())
    naive_tables(all_videos)
    return probe_user.pk, probe_sets, all_videos


def reset_ours() -> None:
    """Empty the count projection's partition-side state (projection rows, vbuckets, receipts, dirty
    marks) and the `count` consumer's checkpoints and dead letters. Route and consumer fences stay (lease
    tokens only grow). Only ever the likes_bench_* databases (check_environment ran)."""
    from django.conf import settings
    from django.db import connections

    from counting.models import CountEventReceipt, DirtyVideo, LikeCountProjection, VideoLikeCountVbucket
    from counting.services.projection import COUNT_CONSUMER

    tables = ", ".join(_t(m) for m in (LikeCountProjection, VideoLikeCountVbucket, CountEventReceipt, DirtyVideo))
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {tables}")
    consumer_reset(COUNT_CONSUMER)


def reset_workload() -> None:
    """Every workload starts from nothing: relations/commands/outbox (dataset.reset_state), the
    count state of both consumers, the display snapshots, and the bench Redis namespace (streams, views,
    caches, and every per-process cache of the driver)."""
    from django.db import connections

    from counting.models import VideoDisplayCount
    from likes_project import l1cache

    reset_state()
    reset_ours()
    reset_naive()
    with connections["default"].cursor() as cur:
        cur.execute(f"TRUNCATE {_t(VideoDisplayCount)}")
    flush_bench_redis()
    l1cache.clear_all()
    connections.close_all()


# --- measurements after a phase ------------------------------------------------------------------


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def pg_deadlocks() -> int:
    """Deadlocks PostgreSQL detected so far in the bench databases (pg_stat_database; a backend reports
    its counters within about a second)."""
    from django.db import connections

    with connections["default"].cursor() as cur:
        cur.execute("SELECT coalesce(sum(deadlocks), 0) FROM pg_stat_database WHERE datname LIKE %s",
                    [BENCH_DB_PREFIX + "%"])
        return int(cur.fetchone()[0])


def pipeline_pending() -> dict:
    """What the pipeline still has to do: outbox rows not yet SENT, partitions whose `count`
    checkpoint is behind the stream's last id, dirty videos."""
    from django.conf import settings

    from counting.models import DirtyVideo
    from counting.services.projection import COUNT_CONSUMER
    from likes_project.eventlog import streams
    from likes_project.eventlog.models import ConsumerCheckpoint
    from relations.models import OutboxEvent

    outbox = sum(OutboxEvent.objects.using(a).filter(status__in=["NEW", "RETRY", "UNCERTAIN", "PUBLISHING"])
                 .count() for a in settings.RELATION_SHARD_ALIASES)
    if outbox:
        return {"outbox": outbox}
    cps = dict(ConsumerCheckpoint.objects.filter(consumer=COUNT_CONSUMER).values_list("partition", "last_done_id"))
    behind = [p for p in streams.all_partitions()
              if (last := streams.last_generated_id(p)) != "0-0" and cps.get(p) != last]
    if behind:
        return {"partitions_behind": behind}
    dirty = sum(DirtyVideo.objects.using(a).count() for a in settings.COUNT_PARTITION_ALIASES)
    return {"dirty": dirty} if dirty else {}


def exactness(videos: list[str], *, check_snapshots: bool, only: list[str] | None = None) -> dict:
    """For every video: sum of its vbuckets (the bucket_sum logic of tests/counting/helpers.py) and the
    durable display snapshot against the LIKED relations in the shards; also the served value
    (display_counts_get, fresh L1: the Redis view, else the snapshot) and the naive counter. With `only`
    (after a replay of one workload's stream) the expected value is the facts for those videos and 0 for
    every other one."""
    from django.conf import settings
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import VideoDisplayCount, VideoLikeCountVbucket
    from counting.selectors import display_counts_get, display_l1
    from counting.services.projection import COUNT_CONSUMER
    from likes_project.eventlog.models import DeadLetter
    from relations.models import LikeRelation

    facts: Counter = Counter()
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, count(*) FROM {_t(LikeRelation)} WHERE state = 'LIKED' GROUP BY video_id")
            for v, n in cur.fetchall():
                facts[v] += int(n)
    gen = count_routing.active()
    buckets: Counter = Counter()
    frozen = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, SUM(active_count), count(*) FILTER (WHERE frozen) "
                        f"FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s GROUP BY video_id", [gen.generation])
            for v, s, f in cur.fetchall():
                buckets[v] += int(s)
                frozen += int(f)
    with connections[naive_alias()].cursor() as cur:
        cur.execute(f"SELECT video_id, like_count FROM {NAIVE_COUNT_TABLE} WHERE like_count <> 0")
        naive = {v: int(n) for v, n in cur.fetchall()}
    if only is not None:
        keep = set(only)
        facts = Counter({v: n for v, n in facts.items() if v in keep})
    everything = sorted(set(videos) | set(facts) | set(buckets) | set(naive))
    out: dict = {"videos_checked": len(everything), "liked_total": sum(facts.values()),
                 "frozen_buckets": frozen,
                 "dead_letters": DeadLetter.objects.filter(consumer__in=[COUNT_CONSUMER, NAIVE_CONSUMER]).count()}
    bucket_bad = [(v, facts[v], buckets[v]) for v in everything if facts[v] != buckets[v]]
    out["buckets_exact"] = not bucket_bad
    out["bucket_mismatches"] = bucket_bad[:20]
    naive_bad = [(v, facts[v], naive.get(v, 0)) for v in everything if facts[v] != naive.get(v, 0)]
    out["naive_exact"] = not naive_bad
    out["naive_mismatches"] = naive_bad[:20]
    if check_snapshots:
        snaps = dict(VideoDisplayCount.objects.values_list("video_id", "display_count"))
        snap_bad = [(v, facts[v], snaps.get(v, 0)) for v in everything if facts[v] != snaps.get(v, 0)]
        out["snapshot_exact"] = not snap_bad
        out["snapshot_mismatches"] = snap_bad[:20]
        display_l1().clear()
        served = display_counts_get(video_ids=everything)
        served_bad = [(v, facts[v], served[v].display_count) for v in everything
                      if facts[v] != served[v].display_count]
        out["served_exact"] = not served_bad
        out["served_mismatches"] = served_bad[:20]
        out["served_sources"] = dict(Counter(served[v].source for v in everything))
    connections.close_all()
    return out


def receipts_and_lags(t_measure: float, t_end: float) -> dict:
    """From the durable records, after the drain: events produced (outbox rows created in the window),
    events applied by the projector (`applied` receipts created in the window) and, for every event whose
    stateChangedAt is in the window, the publish lag (published_at - stateChangedAt) and the projection
    lag (receipt created_at - stateChangedAt), joined by event id across databases."""
    from django.conf import settings
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import CountEventReceipt
    from relations.models import OutboxEvent

    w0, w1 = _utc(t_measure), _utc(t_end)
    gen = count_routing.active()
    applied_at: dict[str, dt.datetime] = {}
    applied_window = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT event_id, created_at FROM {_t(CountEventReceipt)} "
                        "WHERE generation = %s AND outcome = 'applied'", [gen.generation])
            for event_id, created in cur.fetchall():
                applied_at[event_id] = created
                applied_window += w0 <= created < w1
    produced_window = 0
    events = []
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT event_id::text, payload->>'stateChangedAt', created_at, published_at "
                        f"FROM {_t(OutboxEvent)}")
            for event_id, changed, created, published in cur.fetchall():
                produced_window += w0 <= created < w1
                changed_at = dt.datetime.fromisoformat(changed)
                if w0 <= changed_at < w1:
                    events.append((event_id, changed_at, published))
    connections.close_all()
    publish = sorted((p - c).total_seconds() * 1000 for _, c, p in events if p is not None)
    project = sorted((applied_at[e] - c).total_seconds() * 1000 for e, c, _ in events if e in applied_at)
    return {
        "events_produced_window": produced_window, "events_applied_window": applied_window,
        "events_in_window": len(events), "lag_samples": len(project),
        "lag_unapplied": sum(1 for e, _, _ in events if e not in applied_at),
        "publish_lag_p50_ms": rounded(percentile(publish, 0.5), 1),
        "publish_lag_p99_ms": rounded(percentile(publish, 0.99), 1),
        "lag_p50_ms": rounded(percentile(project, 0.5), 1), "lag_p99_ms": rounded(percentile(project, 0.99), 1),
        "lag_max_ms": rounded(project[-1] if project else None, 1),
    }


# --- the saved streams of each workload ------------------------------------------------------------


def streams_save(after: dict[int, str]) -> tuple[dict[int, list], dict[int, str]]:
    """The entries of every partition after `after[p]` (the previous workload's last id), and the new
    last ids."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis

    client = stream_redis()
    saved: dict[int, list] = {}
    last: dict[int, str] = {}
    for p in streams.all_partitions():
        start = after.get(p, "0-0")
        entries: list = []
        for _ in range(10_000):  # bounded paging
            rows = client.xrange(streams.stream_key(p), min=f"({start}", max="+", count=5000)
            if not rows:
                break
            entries += rows
            start = rows[-1][0].decode()
        saved[p] = entries
        last[p] = start
    return saved, last


def streams_load(saved: dict[int, list]) -> None:
    """Replace the live streams by the saved entries (same entry ids, same fields)."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis

    pipe = stream_redis().pipeline(transaction=False)
    for p in streams.all_partitions():
        pipe.delete(streams.stream_key(p))
    for p, entries in saved.items():
        for entry_id, fields in entries:
            pipe.xadd(streams.stream_key(p), fields, id=entry_id)
    pipe.execute()
