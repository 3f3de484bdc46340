"""1. The batch query of the read-path benchmark: its data (videos, feeds, relation facts, display snapshots and
their Redis views), the warm/cold/Redis-down windows at one layer, and a row per case from their rounds."""

from __future__ import annotations

import random
import time

from bench.common import percentile, pooled, rounded
from bench.dataset import author_id, relations_insert, scan_delete, snapshots_insert
from bench.procs import ClientPool
from bench.read import BQ_PREFIX, INTERFERENCE, log
from bench.read.clients import MAX_JOB_SECONDS
from bench.sampler import merge_resources


def relation_cache_flush() -> int:
    """Drop the bench's relation cache hashes (`likes-bench:rel:g*`, which includes the registry
    `rel:gens`), then re-mirror the registry so writes stay possible. The sentinels stay."""
    from django.conf import settings

    from relations.services.relation_cache import cache_generations_mirror

    n = scan_delete(f"{settings.LIKES_REDIS_PREFIX}:rel:g*")
    cache_generations_mirror()
    return n


def prepare_batch(args, bench_users: list[tuple[int, str]]) -> dict:
    """The batch-query data: `--videos` active public videos (rbq-v*), a feed of `--feed` of them per user,
    of which 30% LIKED (version 1 or 3) and 10% UNLIKED (version 2) as relation facts on the users' shards,
    and a durable display snapshot of every video (its LIKED count) with its Redis view in the ACTIVE
    count-cache generation."""
    from django.db import connections, transaction
    from django.utils import timezone

    from counting import routing as count_routing
    from counting.models import VideoDisplayCount
    from counting.services.count_cache.layers import count_cache_views_write
    from relations import routing

    t0 = time.monotonic()
    rng = random.Random(args.seed)
    videos = [f"{BQ_PREFIX}{i:05d}" for i in range(args.videos)]
    snapshots_insert("SELECT unnest(%s::text[])", [videos], author_id=author_id())
    users = []
    per_alias: dict[str, list[tuple[int, str, str, int]]] = {}
    counts = dict.fromkeys(videos, 0)
    n_liked, n_unliked = int(args.feed * 0.3), int(args.feed * 0.1)
    for uid, token in bench_users[:args.users]:
        feed = rng.sample(videos, args.feed)
        expected = {}
        for v in feed[:n_liked]:
            expected[v] = ("LIKED", rng.choice((1, 3)))
            counts[v] += 1
        for v in feed[n_liked:n_liked + n_unliked]:
            expected[v] = ("UNLIKED", 2)
        rng.shuffle(feed)
        users.append((uid, token, feed, {v: list(sv) for v, sv in expected.items()}))
        per_alias.setdefault(routing.alias_for_user(uid), []).extend(
            (uid, v, s, ver) for v, (s, ver) in expected.items())
    for alias, rows in sorted(per_alias.items()):
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            relations_insert(cur, "SELECT u, v, s, ver, 'rbq-seed', now() - interval '1 hour' "
                                  "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[]) AS x(u, v, s, ver)",
                             [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]])
    gen = count_routing.active()
    snapshot_id = int(time.time() * 1_000_000)
    now = timezone.now()
    with connections["default"].cursor() as cur:
        cur.execute(
            f"INSERT INTO {VideoDisplayCount._meta.db_table} (video_id, generation, manifest_id, raw_active_count, "
            "risk_hidden_count, policy_hidden_count, display_count, snapshot_id, generated_at, watermark) "
            "SELECT v, %s, %s, c, 0, 0, c, %s, %s, '{}'::jsonb FROM unnest(%s::text[], %s::bigint[]) AS x(v, c) "
            "ON CONFLICT (video_id) DO UPDATE SET generation = EXCLUDED.generation, "
            "manifest_id = EXCLUDED.manifest_id, raw_active_count = EXCLUDED.raw_active_count, "
            "risk_hidden_count = 0, policy_hidden_count = 0, display_count = EXCLUDED.display_count, "
            "snapshot_id = EXCLUDED.snapshot_id, generated_at = EXCLUDED.generated_at, watermark = '{}'::jsonb",
            [gen.generation, gen.manifest_id, snapshot_id, now, videos, [counts[v] for v in videos]])
    iso = now.isoformat().replace("+00:00", "Z")
    views = count_cache_views_write(rows=[(v, counts[v], snapshot_id, iso) for v in videos])
    relations = {a: len(r) for a, r in sorted(per_alias.items())}
    log(f"batch data: {len(users)} users x feed {args.feed}, relations {relations}, {len(videos)} videos with "
        f"display snapshots ({views} Redis views written) in {time.monotonic() - t0:.1f}s")
    return {"users": users, "counts": counts, "videos": videos, "relations_per_shard": relations,
            "count_views_written": views}


def _slices(seq: list, n: int) -> list[list]:
    return [seq[i::n] for i in range(n)]


def relation_cache_fill(pool: ClientPool, data: dict) -> dict:
    """Warm case: relation_cache_repair for every user's feed (done by the client processes in parallel)."""
    n = len(pool.procs)
    t0 = time.perf_counter()
    jobs = [{"kind": "repair", "users": [(u[0], u[2]) for u in part]} for part in _slices(data["users"], n)]
    res = pool.run(jobs, timeout=MAX_JOB_SECONDS + 30)
    out = {"entries": sum(r["written"] for r in res), "seconds": round(time.perf_counter() - t0, 2)}
    log(f"relation cache filled: {out['entries']} entries in {out['seconds']}s")
    return out


def measure_batch(ctx: dict, *, layer: str, case: str) -> dict:
    args, sampler = ctx["args"], ctx["sampler"]
    if layer == "service":
        pool = ctx["down_pool"] if case == "down" else ctx["pool"]
        n, port, gpid = args.procs, None, None
    else:
        server = ctx["servers"]["down" if case == "down" else "up"]
        pool, n, port, gpid = ctx["pool"], args.http_clients, server.port, server.proc.pid
    t_start = time.time() + 0.5
    t_measure = t_start + args.warmup
    t_end = t_measure + args.duration
    jobs = [{"kind": "batch", "layer": layer, "port": port, "users": part, "feed": args.feed, "batch": args.batch,
             "counts": ctx["data"]["counts"], "seed": args.seed * 1000 + i + 97 * ctx["window"],
             "t_start": t_start, "t_measure": t_measure, "t_end": t_end}
            for i, part in enumerate(_slices(ctx["data"]["users"], n))]
    ctx["window"] += 1
    sampler.start(t_measure, t_end, extra_pids={gpid} if gpid else set(), extra_label="gunicorn workers")
    try:
        results = pool.run(jobs, timeout=(t_end - time.time()) + 90)
    finally:
        resources = sampler.stop()
    errors, io, sources = pooled(results, "errors", "io", "count_sources")
    part = {"ok": sum(r["ok"] for r in results), "wrong": sum(r["wrong"] for r in results),
            "errors": errors, "io": io, "sources": sources,
            "latencies": [x for r in results for x in r["latencies_ms"]],
            "hits": sum(r["relcache_hits"] for r in results), "misses": sum(r["relcache_misses"] for r in results),
            "resources": resources}
    log(f"  {layer} {case}: {part['ok'] / args.duration:,.1f} req/s in this window, "
        f"{sum(part['errors'].values())} errors, {part['wrong']} wrong")
    return part


def aggregate_batch(parts: list[dict], args, *, layer: str, case: str) -> dict:
    lat = sorted(x for p in parts for x in p["latencies"])
    ok = sum(p["ok"] for p in parts)
    errors, io, sources = pooled(parts, "errors", "io", "sources")
    hits, misses = sum(p["hits"] for p in parts), sum(p["misses"] for p in parts)
    seconds = args.duration * len(parts)
    per_req = {k: round(v / ok, 2) for k, v in sorted(io.items())} if ok else {}
    shards = sum(v for k, v in per_req.items() if k.startswith("sql:rel_"))
    row = {
        "layer": layer, "case": case, "clients": args.procs if layer == "service" else args.http_clients,
        "requests_per_s": round(ok / seconds, 1), "ids_per_request": args.batch,
        "per_round_requests_per_s": [round(p["ok"] / args.duration, 1) for p in parts],
        "p50_ms": rounded(percentile(lat, 0.5)), "p99_ms": rounded(percentile(lat, 0.99)),
        "ok": ok, "errors": sum(errors.values()), "error_kinds": dict(errors.most_common(5)),
        "wrong": sum(p["wrong"] for p in parts), "measured_seconds": seconds,
        "relation_cache_hit_ratio": round(hits / (hits + misses), 3) if layer == "service" and hits + misses else None,
        "io_per_request": per_req if layer == "service" else None,
        "sql_shards_per_request": round(shards, 2) if layer == "service" else None,
        "sql_default_per_request": per_req.get("sql:default") if layer == "service" else None,
        "redis_round_trips_per_request": per_req.get("redis", 0.0) if layer == "service" else None,
        "count_sources": dict(sources),
        "resources": merge_resources([p["resources"] for p in parts]),
    }
    # CPU per request (app processes and the bench's PostgreSQL backends): far less sensitive to other load on
    # a shared machine than throughput.
    by = row["resources"].get("cores_by_process", {})
    app = by.get("bench clients" if layer == "service" else "gunicorn workers")
    rps = row["requests_per_s"]
    row["app_cpu_ms_per_request"] = round(app / rps * 1000, 2) if app and rps else None
    pg = by.get("postgres (bench backends)", 0.0)
    row["pg_backend_cpu_ms_per_request"] = round(pg / rps * 1000, 2) if rps else None
    log(f"{layer:<8} {case:<5} c={row['clients']}  {row['requests_per_s']:>8,.1f} req/s  p50 {row['p50_ms']} ms  "
        f"p99 {row['p99_ms']} ms  errors {row['errors']}  wrong {row['wrong']}")
    return row


def run_batch_layer(ctx: dict, layer: str) -> list[dict]:
    """`--rounds` windows of each case; the order alternates (warm, down, cold / cold, down, warm) so a drift of
    the machine's background load hits the cases alike. The cache is refilled before a warm window when a
    cold window emptied it."""
    args = ctx["args"]
    parts: dict[str, list[dict]] = {c: [] for c in ("warm", "cold", "down")}
    for rnd in range(args.rounds):
        order = ["warm", "down", "cold"] if rnd % 2 == 0 else ["cold", "down", "warm"]
        for case in order:
            if case == "warm" and not ctx["warm"]:
                ctx["fills"].append(relation_cache_fill(ctx["pool"], ctx["data"]))
                ctx["warm"] = True
            if case == "cold":
                n = relation_cache_flush()
                ctx["warm"] = False
                log(f"  cold: dropped {n} relation cache keys, registry re-mirrored")
            INTERFERENCE.note(f"{layer} {case} round {rnd + 1}")
            parts[case].append(measure_batch(ctx, layer=layer, case=case))
    return [aggregate_batch(parts[c], args, layer=layer, case=c) for c in ("warm", "cold", "down")]
