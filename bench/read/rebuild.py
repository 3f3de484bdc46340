"""3. The relation-cache rebuild of the read-path benchmark: relation_cache_rebuild() end to end over synthetic
relations (generate_series on both shards), with where its time went and the Redis memory it used."""

from __future__ import annotations

import os
import time

from bench.dataset import relations_insert, reset_state
from bench.read import REB_PREFIX, log
from bench.read.batch import relation_cache_flush
from bench.sampler import ResourceSampler

REB_USER_BASE = 8_000_000_000  # synthetic user ids of the rebuild data (no auth rows: the shards have no FK)
REB_VIDEOS = 5000
REB_PER_USER = 50


def _redis_memory() -> dict:
    from likes_project.redis_client import cache_redis, role_nodes

    nodes = role_nodes(cache_redis())  # the one server, or every primary of a Cluster: summed
    return {"used_memory": sum(int(n.info("memory")["used_memory"]) for n in nodes),
            "dbsize": sum(int(n.dbsize()) for n in nodes)}


def truncate_floors() -> None:
    from django.db import connections

    from relations import routing
    from relations.models import LikeRelationCacheProjection

    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {LikeRelationCacheProjection._meta.db_table}")


def _insert_rebuild_relations(n_users: int) -> dict:
    """n_users synthetic users x 50 videos each, via generate_series, on the shard each user routes to.
    State mixed: LIKED v1 for two thirds, UNLIKED v2 for one third; updated_at a day back (before the scan)."""
    from django.db import connections, transaction

    from relations import routing
    from relations.models import LikeRelation

    t = LikeRelation._meta.db_table
    by_alias: dict[str, list[tuple[int, int]]] = {}
    for k in range(n_users):
        uid = REB_USER_BASE + k
        by_alias.setdefault(routing.alias_for_user(uid), []).append((uid, k))
    per_shard = {}
    for alias, pairs in sorted(by_alias.items()):
        for i in range(0, len(pairs), 2000):  # 100,000 rows per statement
            chunk = pairs[i:i + 2000]
            with transaction.atomic(using=alias), connections[alias].cursor() as cur:
                cur.execute("SET LOCAL statement_timeout = '300s'")
                relations_insert(
                    cur, f"SELECT u, %s || lpad(((k + j * 100) %% {REB_VIDEOS})::text, 5, '0'), "
                         "CASE WHEN (k + j) %% 3 = 0 THEN 'UNLIKED' ELSE 'LIKED' END, "
                         "CASE WHEN (k + j) %% 3 = 0 THEN 2 ELSE 1 END, 'rbr-seed', "
                         "now() - interval '1 day' - j * interval '1 second' "
                         "FROM unnest(%s::bigint[], %s::int[]) AS x(u, k), "
                         f"generate_series(0, {REB_PER_USER - 1}) AS j",
                    [REB_PREFIX, [p[0] for p in chunk], [p[1] for p in chunk]])
        with connections[alias].cursor() as cur:
            cur.execute(f"ANALYZE {t}")
            cur.execute(f"SELECT count(*) FROM {t}")
            per_shard[alias] = cur.fetchone()[0]
    return per_shard


def _gen_keys_memory(generation: int, sample: int = 2000) -> dict:
    """Key count of one relation-cache generation (SCAN) and MEMORY USAGE of a sample of its keys."""
    from django.conf import settings

    from likes_project.redis_client import cache_redis

    client = cache_redis()
    pattern = f"{settings.LIKES_REDIS_PREFIX}:rel:g{generation}:*"
    keys, sampled = 0, []
    for key in client.scan_iter(match=pattern, count=5000):  # every node of a Cluster
        keys += 1
        if len(sampled) < sample:
            sampled.append(key)
    pipe = client.pipeline(transaction=False)
    for k in sampled:
        pipe.memory_usage(k, samples=0)
    sizes = [s for s in pipe.execute() if s]
    avg = sum(sizes) / len(sizes) if sizes else 0
    return {"keys": keys, "sampled_keys": len(sizes), "avg_key_bytes": round(avg), "estimated_bytes": round(avg * keys)}


def _timed_rebuild(label: str) -> tuple[object, float]:
    from relations.services.relation_cache_rebuild import relation_cache_rebuild

    last = [time.monotonic()]

    def progress(msg: str) -> None:
        if "scanned" not in msg or time.monotonic() - last[0] >= 10:
            last[0] = time.monotonic()
            log(f"  {label}: {msg.strip()}")

    t0 = time.perf_counter()
    report = relation_cache_rebuild(progress=progress)
    return report, time.perf_counter() - t0


def run_rebuild(args) -> dict:
    from django.db import connections

    from relations import routing
    from relations.models import LikeRelation, LikeRelationCacheProjection

    out: dict = {"relations_per_user": REB_PER_USER, "videos": REB_VIDEOS}
    target = args.rebuild_relations
    if target == "auto":
        # Calibration on what the shards hold now (the batch and my-likes data).
        relation_cache_flush()
        report, secs = _timed_rebuild("calibration")
        rate = report.scanned / secs if secs else 0
        projected = 1_000_000 / rate if rate else float("inf")
        target = 1_000_000 if projected <= args.rebuild_budget else 250_000
        out["calibration"] = {"relations": report.scanned, "seconds": round(secs, 2), "status": report.status,
                              "relations_per_s": round(rate), "projected_1m_seconds": round(projected, 1),
                              "budget_seconds": args.rebuild_budget}
        log(f"rebuild calibration: {report.scanned} relations in {secs:.1f}s ({rate:,.0f}/s); 1,000,000 projected "
            f"at {projected:.0f}s (budget {args.rebuild_budget:.0f}s) -> running {target:,}")
    n_users = target // REB_PER_USER
    reset_state()
    truncate_floors()
    relation_cache_flush()
    t0 = time.monotonic()
    per_shard = _insert_rebuild_relations(n_users)
    out.update({"relations": sum(per_shard.values()), "users": n_users, "per_shard": per_shard,
                "insert_seconds": round(time.monotonic() - t0, 1)})
    log(f"rebuild data: {out['relations']:,} relations ({per_shard}) inserted in {out['insert_seconds']}s")
    mem0 = _redis_memory()
    # Where the time goes: CPU by process (this driver runs the rebuild) and the bench backends' states.
    sampler = ResourceSampler(client_pids=set())
    sampler.start(time.time(), time.time() + 3600, pid_labels={os.getpid(): "driver (runs the rebuild)"})
    try:
        report, secs = _timed_rebuild("rebuild")
    finally:
        resources = sampler.stop()
    mem1 = _redis_memory()
    gen_mem = _gen_keys_memory(report.generation)
    floors = {}
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute("SELECT pg_total_relation_size(%s), pg_total_relation_size(%s)",
                        [LikeRelationCacheProjection._meta.db_table, LikeRelation._meta.db_table])
            floors[alias] = dict(zip(("floor_table_bytes", "relation_table_bytes"), cur.fetchone(), strict=True))
    rate = report.scanned / secs if secs else 0
    out.update({
        "generation": report.generation, "status": report.status, "scanned": report.scanned,
        "caught_up": report.caught_up, "sampled": report.sampled, "mismatches": report.mismatches,
        "seconds": round(secs, 1), "relations_per_s": round(rate),
        "extrapolated_1m_seconds": (None if out["relations"] >= 1_000_000
                                    else round(secs * 1_000_000 / out["relations"])),
        "redis_before": mem0, "redis_after": mem1,
        "redis_used_memory_delta_bytes": mem1["used_memory"] - mem0["used_memory"],
        "redis_keys_delta": mem1["dbsize"] - mem0["dbsize"], "generation_keys": gen_mem, "tables": floors,
        "resources": resources,
    })
    log(f"rebuild: {report.scanned:,} relations in {secs:.1f}s ({rate:,.0f}/s), status {report.status}, "
        f"sample {report.sampled}/{report.mismatches} mismatches, "
        f"Redis +{out['redis_used_memory_delta_bytes'] / 2**20:.1f} MiB used_memory, {gen_mem['keys']:,} keys "
        f"(~{gen_mem['estimated_bytes'] / 2**20:.1f} MiB by MEMORY USAGE)")
    return out
