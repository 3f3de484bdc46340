"""The read path (issue #4; TEST-3): `bench/run.sh read`, the batch query warm, cold and with Redis down, the my-likes
page against OFFSET, the relation-cache rebuild (docs/benchmarks.md, "Read path"). Exit 1 when an answer was wrong."""

from __future__ import annotations

import contextlib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import driver, load, seed
from bench.harness.phases import clients_run, window_times
from bench.harness.pool import Gunicorn, Pool
from bench.harness.report import clients_pooled, fmt, md_table, pct, resources_table
from bench.harness.sampler import ResourceSampler, merge
from bench.read.pages import LIST_PREFIX, relation_cache_flush, run_list, run_rebuild

NAME = "read"
OPTIONS = {
    "procs": (4, "service-layer client processes", 1, 64), "http_clients": (4, "HTTP client processes", 1, 64),
    "gunicorn_workers": (3, "gunicorn sync workers", 1, 64), "users": (400, "users sending batch queries", 1, 5000),
    "videos": (2000, "videos the feeds are drawn from", 1, 99_999), "feed": (100, "video ids in each user's feed", 1,
                                                                             99_999),
    "batch": (20, "ids per batch query", 1, 1000), "warmup": (1.5, "seconds of warm-up before each window", 0, 30),
    "duration": (4.0, "seconds measured per window", 0.1, 60), "rounds": (2, "windows per case and layer", 1, 50),
    "list_likes": (50_000, "likes of the my-likes user", 1, 10**7), "list_limit": (100, "page size", 1, 1000),
    "list_page": (500, "the deep page", 1, 100_000), "list_reps": (150, "timed fetches per page and variant", 1, 10**5),
    "rebuild_relations": ("auto", "relations for the rebuild: a number, or auto = 1000000 unless a calibration "
                                  "projects more than --rebuild-budget seconds, then 250000"),
    "rebuild_budget": (240.0, "seconds the 1,000,000 rebuild may take in auto mode", 1, 3600),
    "skip_http": (False, ""), "skip_list": (False, ""), "skip_rebuild": (False, ""),
}
BQ_PREFIX = "rbq-v"
DOWN_REDIS_URL = "redis://127.0.0.1:1/14"  # nothing listens there: connection refused at once
REDIS_DOWN = {"REDIS_URL": DOWN_REDIS_URL, "LOG_LEVEL": "ERROR"}  # the Redis-down clients' and gunicorn's
ROLE = "bench.read.clients:"


def prepare_batch(args, bench_users: list[tuple[int, str]]) -> dict:
    """`--videos` videos, a feed of `--feed` per user (30% LIKED, 10% UNLIKED), displays and their Redis views."""
    from django.db import connections, transaction

    from counting.services.count_cache.layers import count_cache_views_write
    from relations import routing
    rng = random.Random(args.seed)
    videos = [f"{BQ_PREFIX}{i:05d}" for i in range(args.videos)]
    seed.snapshots_insert("SELECT unnest(%s::text[])", [videos], author_id=seed.author_id())
    users, per_alias, counts = [], {}, dict.fromkeys(videos, 0)
    n_liked, n_unliked = int(args.feed * 0.3), int(args.feed * 0.1)
    for uid, token in bench_users[:args.users]:
        feed = rng.sample(videos, args.feed)
        expected = {v: ["LIKED", rng.choice((1, 3))] for v in feed[:n_liked]}
        expected |= {v: ["UNLIKED", 2] for v in feed[n_liked:n_liked + n_unliked]}
        for v in feed[:n_liked]:
            counts[v] += 1
        rng.shuffle(feed)
        users.append((uid, token, feed, expected))
        per_alias.setdefault(routing.alias_for_user(uid), []).extend((uid, v, s, ver) for v, (s, ver) in
                                                                     expected.items())
    for alias, rows in sorted(per_alias.items()):
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            seed.relations_insert(cur, "SELECT u, v, s, ver, 'rbq-seed', now() - interval '1 hour' FROM unnest("
                                       "%s::bigint[], %s::text[], %s::text[], %s::bigint[]) AS x(u, v, s, ver)",
                                  [list(c) for c in zip(*rows, strict=True)])
    snapshot_id = int(time.time() * 1_000_000)
    seed.displays_upsert(counts, snapshot_id=snapshot_id)
    iso = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    views = count_cache_views_write(rows=[(v, counts[v], snapshot_id, iso) for v in videos])
    return {"users": users, "counts": counts, "relations_per_shard": {a: len(r) for a, r in sorted(per_alias.items())},
            "count_views_written": views}


def cleanup() -> None:
    """Nothing of a run left (harness/load.py's unload of its videos), the my-likes videos' snapshots included."""
    from relations.models import VideoSnapshot
    load.unload(BQ_PREFIX)
    seed.rows("default", f"DELETE FROM {seed.table(VideoSnapshot)} WHERE video_id LIKE %s", [LIST_PREFIX + "%"])


def measure(ctx: dict, *, layer: str, case: str) -> dict:
    args, sampler, data = ctx["args"], ctx["sampler"], ctx["data"]
    server = ctx["servers"]["down" if case == "down" else "up"] if layer == "http" else None
    pool = ctx["down_pool"] if layer == "service" and case == "down" else ctx["pool"]
    n = args.procs if layer == "service" else args.http_clients
    ctx["window"] += 1
    jobs = [{"role": ROLE + "batch", "layer": layer, "port": server and server.port, "users": data["users"][i::n],
             "feed": args.feed, "batch": args.batch, "counts": data["counts"],
             "seed": args.seed * 1000 + i + 97 * ctx["window"]} for i in range(n)]
    results, resources = clients_run(pool, sampler, jobs, window_times(args), server)
    part = clients_pooled(results, ("ok", "wrong", "hits", "misses"), ("errors", "io", "count_sources"),
                          resources=resources)
    errors = part["errors"]
    driver.make_log(NAME)(f"  {layer} {case}: {part['ok'] / args.duration:,.1f} req/s, {sum(errors.values())} errors, "
                          f"{part['wrong']} wrong")
    return part


def aggregate(parts: list[dict], args, *, layer: str, case: str) -> dict:
    tot = clients_pooled(parts, ("ok", "wrong", "hits", "misses"), ("errors", "io", "count_sources"))
    ok, errors, hits, misses, lat = tot["ok"], tot["errors"], tot["hits"], tot["misses"], tot["latencies_ms"]
    sources = tot["count_sources"]
    per_req = {k: round(v / ok, 2) for k, v in sorted(tot["io"].items())} if ok else {}
    service = layer == "service"
    row = {"layer": layer, "case": case, "clients": args.procs if service else args.http_clients,
           "requests_per_s": round(ok / (args.duration * len(parts)), 1), "p50_ms": pct(lat, 0.5),
           "p99_ms": pct(lat, 0.99), "ok": ok, "errors": sum(errors.values()),
           "error_kinds": dict(errors.most_common(5)), "wrong": tot["wrong"], "count_sources": dict(sources),
           "relation_cache_hit_ratio": round(hits / (hits + misses), 3) if service and hits + misses else None,
           "sql_shards_per_request": round(sum(v for k, v in per_req.items() if k.startswith("sql:rel_")), 2)
           if service else None, "sql_default_per_request": per_req.get("sql:default") if service else None,
           "redis_round_trips_per_request": per_req.get("redis", 0.0) if service else None,
           "resources": merge([p["resources"] for p in parts])}
    # CPU per request: far less sensitive to other load on a shared machine than throughput.
    by, rps = row["resources"].get("cores_by_process", {}), row["requests_per_s"]
    app = by.get("bench clients" if service else "gunicorn workers")
    row["app_cpu_ms_per_request"] = round(app / rps * 1000, 2) if app and rps else None
    row["pg_cpu_ms_per_request"] = round(by.get("postgres (bench backends)", 0.0) / rps * 1000, 2) if rps else None
    return row


def run_layer(ctx: dict, layer: str) -> list[dict]:
    """`--rounds` windows of each case in alternating order; the cache refilled for a warm window after a cold one."""
    args, parts = ctx["args"], {c: [] for c in ("warm", "cold", "down")}
    for rnd in range(args.rounds):
        for case in ["warm", "down", "cold"] if rnd % 2 == 0 else ["cold", "down", "warm"]:
            if case == "warm" and not ctx["warm"]:
                n = len(ctx["pool"].procs)
                res = ctx["pool"].run([{"role": ROLE + "repair", "users": [(u[0], u[2]) for u in ctx["data"]["users"]
                                                                           [i::n]]} for i in range(n)], timeout=330)
                ctx["fills"].append(sum(r["written"] for r in res))
                ctx["warm"] = True
            if case == "cold":
                relation_cache_flush()
                ctx["warm"] = False
            ctx["interference"].note(f"{layer} {case} round {rnd + 1}")
            parts[case].append(measure(ctx, layer=layer, case=case))
    return [aggregate(parts[c], args, layer=layer, case=c) for c in ("warm", "cold", "down")]


def report(result: dict) -> list[str]:
    rows, lst, rb = result["batch"], result.get("list"), result.get("rebuild")
    out = [md_table(["layer", "case", "clients:", "requests/s:", "p50 ms:", "p99 ms:", "errors:", "wrong:",
                     "relation cache hits:", "SQL/request shards + default", "Redis round trips/request:",
                     "app CPU ms/request:", "PG CPU ms/request:"],
                    [[r["layer"], r["case"], r["clients"], fmt(r["requests_per_s"]), fmt(r["p50_ms"], 2),
                      fmt(r["p99_ms"], 2), r["errors"], r["wrong"],
                      "-" if r["relation_cache_hit_ratio"] is None else f"{r['relation_cache_hit_ratio']:.0%}",
                      "-" if r["sql_shards_per_request"] is None else
                      f"{r['sql_shards_per_request']:.2f} + {r['sql_default_per_request'] or 0:.2f}",
                      fmt(r["redis_round_trips_per_request"], 2), fmt(r["app_cpu_ms_per_request"], 2),
                      fmt(r["pg_cpu_ms_per_request"], 2)] for r in rows]),
           resources_table((f"{r['layer']} {r['case']}", r["resources"]) for r in rows),
           "Relation cache fills for the warm case: " + (", ".join(f"{n:,} entries" for n in result["fills"]) or "-")]
    if lst:
        names = {"ours": "ours: liked_page_list + cursor", "offset": "OFFSET baseline (raw SQL)",
                 "offset+filter": "OFFSET + the same visibility filter"}
        e, d = lst["explain"], lst["deep_page"]
        out += [f"**2. My-likes page, a user with {lst['likes']:,} likes, limit {lst['limit']}**\n\n" + md_table(
            ["variant", "page:", "p50 ms:", "p99 ms:", "timed fetches:"],
            [[names[r["variant"]], r["page"], fmt(r["p50_ms"], 3), fmt(r["p99_ms"], 3), r["fetches"]]
             for r in lst["rows"]]),
            f"Page {d} ÷ page 1 (p50): " + ", ".join(f"{k} **{fmt(v, 2)}**" for k, v in
                                                     lst["ratio_p50_deep_over_1"].items()) +
            f". EXPLAIN ANALYZE of page {d}: ours {fmt(e['ours']['execution_ms'], 3)} ms "
            f"({'; '.join(e['ours']['scans'])}); OFFSET {fmt(e['offset']['execution_ms'], 3)} ms "
            f"({'; '.join(e['offset']['scans'])})."]
    if rb:
        mib = 2 ** 20
        out.append("**3. Relation-cache rebuild** (`relation_cache_rebuild()` end to end)\n\n" + md_table(
            ["relations:", "per shard", "rebuild s:", "relations/s:", "status", "sample check",
             "Redis used_memory delta:", "Redis keys delta:"],
            [[f"{rb['relations']:,}", ", ".join(f"{a} {n:,}" for a, n in rb["per_shard"].items()), rb["seconds"],
              f"{rb['relations_per_s']:,}", rb["status"], f"{rb['sampled']} sampled, {rb['mismatches']} mismatches",
              f"{rb['redis_used_memory_delta_bytes'] / mib:.1f} MiB", f"{rb['redis_keys_delta']:,}"]])
            + (f"\n\n**1,000,000 relations were not run**: extrapolated from {rb['relations']:,}, the rebuild would "
               f"take about **{rb['extrapolated_1m_s']} s**." if rb.get("extrapolated_1m_s") else ""))
        out.append(resources_table([("the rebuild", rb.get("resources"))]))
    return out


def headline(result: dict) -> dict:
    by = {(r["layer"], r["case"]): r for r in result["batch"]}
    warm, down = by.get(("service", "warm"), {}), by.get(("service", "down"), {})
    lst = result.get("list") or {"ratio_p50_deep_over_1": {}}
    return {"goal": "batch query p99 flat warm / cold / Redis down; deep page ≈ page 1",
            "figure": f"batch warm {fmt(warm.get('requests_per_s'), 0)} req/s p99 {fmt(warm.get('p99_ms'), 1)} ms, "
                      f"Redis down p99 {fmt(down.get('p99_ms'), 1)} ms",
            "ceiling": f"OFFSET deep ÷ page 1: {fmt(lst['ratio_p50_deep_over_1'].get('offset'), 1)}",
            "ratio": f"ours deep ÷ page 1: {fmt(lst['ratio_p50_deep_over_1'].get('ours'), 2)}"}


def options_wrong(args) -> str | None:
    if args.rebuild_relations != "auto" and not args.rebuild_relations.isdigit():
        return "--rebuild-relations: a number or auto"
    if not args.skip_list and args.list_likes < args.list_page * args.list_limit:
        return "--list-likes must hold --list-page pages of --list-limit"
    return None


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261130, check=options_wrong)
    args = run.args
    from django.db import connections
    bench_users, _ = seed.prepare(users=5000, videos=2000)  # the users (and tokens) of the command benchmark
    cleanup()
    result: dict = {"batch": [], "fills": [], "list": None, "rebuild": None}
    workdir = Path(tempfile.mkdtemp(prefix="likes-read-"))
    try:
        data = prepare_batch(args, bench_users)
        connections.close_all()
        with Pool(max(args.procs, 1 if args.skip_http else args.http_clients), name="client") as pool, \
                Pool(args.procs, name="redis-down client", env=REDIS_DOWN) as down_pool:
            ctx = {"args": args, "data": data, "pool": pool, "down_pool": down_pool, "window": 0, "warm": False,
                   "fills": result["fills"], "sampler": ResourceSampler(), "interference": run.interference}
            result["batch"] += run_layer(ctx, "service")
            if not args.skip_http:
                with contextlib.ExitStack() as stack:
                    app = "likes_project.wsgi:application"
                    ctx["servers"] = {"up": stack.enter_context(Gunicorn(app, args.gunicorn_workers, workdir)),
                                      "down": stack.enter_context(Gunicorn(app, args.gunicorn_workers, workdir,
                                                                           env=REDIS_DOWN))}
                    result["batch"] += run_layer(ctx, "http")
        if not args.skip_list:
            run.interference.note("my-likes")
            result["list"] = run_list(args, bench_users[-1][0])
        if not args.skip_rebuild:
            run.interference.note("rebuild")
            result["rebuild"] = run_rebuild(args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        cleanup()
    result["meta"] = {"redis_down_url": DOWN_REDIS_URL}
    wrong = sum(r["wrong"] for r in result["batch"])
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"ERROR: {wrong} wrong answers" if wrong else None)


if __name__ == "__main__":
    sys.exit(main())
