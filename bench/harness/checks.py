"""The checks against the relation facts (Σ vbuckets, snapshots, served counts, acknowledged commands); what the
pipeline still has to do."""

from __future__ import annotations

from collections import Counter

from bench.harness.seed import partitions, rows, shards, table


def _by_video(aliases, sql: str, params: list) -> Counter:
    out: Counter = Counter()
    for alias in aliases:
        for v, n in rows(alias, sql, params, slow=True):
            out[v] += int(n)
    return out


def facts(prefix: str = "", *, users: list[int] | None = None) -> Counter:
    """video -> its LIKED relations over every relation shard (the videos of `prefix`; `users`: theirs only)."""
    from relations.models import LikeRelation
    mine = (" AND user_id = ANY(%s)", [users]) if users is not None else ("", [])
    return _by_video(shards(), f"SELECT video_id, count(*) FROM {table(LikeRelation)} WHERE state = 'LIKED' AND "
                     f"video_id LIKE %s{mine[0]} GROUP BY 1", [prefix + "%", *mine[1]])


def bucket_sums(prefix: str = "", *, routed: bool = True, videos: list[str] | None = None) -> Counter:
    """video -> Σ active_count of its vbuckets (`routed`: only those routed to their partition, as a display)."""
    from counting import routing
    from counting.models import VideoLikeCountVbucket
    gen = routing.load_generation()
    out: Counter = Counter()
    for alias in partitions():
        buckets = gen.buckets_on(alias) if routed else list(range(len(gen.routes)))
        where = "video_id = ANY(%s)" if videos is not None else "video_id LIKE %s"
        out.update(_by_video([alias], f"SELECT video_id, sum(active_count) FROM {table(VideoLikeCountVbucket)} WHERE "
                             f"generation = %s AND virtual_bucket = ANY(%s) AND {where} GROUP BY 1",
                             [gen.generation, buckets, videos if videos is not None else prefix + "%"]))
    return out


def displays(prefix: str = "") -> dict[str, int]:
    from counting.models import VideoDisplayCount
    return dict(VideoDisplayCount.objects.filter(video_id__startswith=prefix).values_list("video_id", "display_count"))


def mismatches(expected: Counter, got, videos) -> list[tuple]:
    return sorted((v, expected.get(v, 0), got.get(v, 0)) for v in videos if expected.get(v, 0) != got.get(v, 0))


def counts(prefix: str = "", *, served: bool = False, exclude: str | None = None) -> dict:
    """Every video's facts = Σ routed vbuckets = display snapshot (`served`: = display_counts_get, L1 cold)."""
    from django.db import connections
    f, b, d = facts(prefix), bucket_sums(prefix), displays(prefix)
    videos = {v for v in set(f) | set(b) | {v for v, n in d.items() if n} if not (exclude and v.startswith(exclude))}
    out = {"videos": len(videos), "liked": sum(f[v] for v in videos), "bucket_mismatches": mismatches(f, b, videos),
           "snapshot_mismatches": mismatches(f, d, videos)}
    if served:
        from counting.selectors import display_counts_get, display_l1
        display_l1().clear()
        got = display_counts_get(video_ids=sorted(videos))
        out["served_mismatches"] = mismatches(f, {v: got[v].display_count for v in videos}, videos)
        out["served_sources"] = dict(Counter(got[v].source for v in videos))
    out["exact"] = not any(out[k] for k in ("bucket_mismatches", "snapshot_mismatches", "served_mismatches")
                           if k in out)
    for k in ("bucket_mismatches", "snapshot_mismatches", "served_mismatches"):
        if k in out:
            out[k] = out[k][:10]
    connections.close_all()
    return out


def acknowledged(last: dict[tuple[int, str], str]) -> dict:
    """Every relation a command acknowledged (its last acknowledged state) is in that state in the facts."""
    from relations import routing
    from relations.models import LikeRelation
    by_alias: dict[str, list] = {}
    for (u, v), s in last.items():
        by_alias.setdefault(routing.alias_for_user(u), []).append((u, v, s))
    lost = []
    for alias, items in by_alias.items():
        sql = (f"SELECT user_id, video_id, state FROM {table(LikeRelation)} WHERE (user_id, video_id) IN (SELECT * "
               "FROM unnest(%s::bigint[], %s::text[]))")
        stored = {(u, v): s for u, v, s in rows(alias, sql, [[i[0] for i in items], [i[1] for i in items]])}
        lost += [(u, v, s, stored.get((u, v), "UNLIKED")) for u, v, s in items if stored.get((u, v), "UNLIKED") != s]
    return {"acknowledged": len(last), "acknowledged_lost": len(lost), "lost_examples": lost[:10]}


def pipeline_pending(*, active_only: bool = False, consumers: tuple[str, ...] = ()) -> dict:
    """What the pipeline has left: unsent outbox rows, partitions `count` (or `consumers`) lag on, dirty videos."""
    from counting import routing
    from counting.models import DirtyVideo
    from counting.services.projection import COUNT_CONSUMER
    from likes_project.eventlog import streams
    from likes_project.eventlog.models import ConsumerCheckpoint
    from relations.models import OutboxEvent
    outbox = sum(OutboxEvent.objects.using(a).filter(status__in=["NEW", "RETRY", "UNCERTAIN", "PUBLISHING"]).count()
                 for a in shards())
    if outbox:
        return {"outbox": outbox}
    for consumer in (*consumers, COUNT_CONSUMER):
        cps = dict(ConsumerCheckpoint.objects.filter(consumer=consumer).values_list("partition", "last_done_id"))
        behind = [p for p in streams.all_partitions()
                  if (last := streams.last_generated_id(p)) != "0-0" and cps.get(p) != last]
        if behind:
            return {f"{consumer}_partitions_behind": behind}
    dirty = DirtyVideo.objects.filter(generation=routing.load_generation().generation) if active_only else \
        DirtyVideo.objects.all()
    n = sum(dirty.using(a).count() for a in partitions())
    return {"dirty": n} if n else {}


def pg_deadlocks() -> int:
    """Deadlocks PostgreSQL detected so far in the bench databases (a backend reports within about a second)."""
    return int(rows("default", "SELECT coalesce(sum(deadlocks), 0) FROM pg_stat_database WHERE datname LIKE "
                               "'likes_bench%%'")[0][0])
