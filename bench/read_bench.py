"""Benchmark driver for the read path (issue #4 "Benchmark"; spec TEST-3).

Run through ./bench/read.sh, which does the setup (bench/env.sh: the bench's own likes_bench* databases,
Redis db 14 with the prefix likes-bench, rate limiting off) and sets LIKES_NUDGE_ENABLED=false. One run:

  1. batch query of 20 ids (what POST /v1/like-relations/batch-query does) for a fixed window with
     concurrent clients, in three cases: warm relation cache, cold relation cache, Redis down;
     at the service layer (spawned processes calling videos_visible_to + relation_states_get +
     display_counts_get, the functions the view calls) and over HTTP against gunicorn;
  2. the my-likes page (relations.selectors_my_likes.liked_page_list) of a user with 50,000 likes at page 1
     and page 500, next to an OFFSET baseline in the same run;
  3. relation_cache_rebuild() end to end over 1,000,000 relations (or 250,000, extrapolated, when a
     calibration says 1,000,000 would take longer than the budget), with the Redis memory it uses.

Results: a table on stdout, bench/results/read_latest.json and the "Read path" generated section of
docs/benchmarks.md. Every loop is bounded by a deadline and a count. Nothing here asserts on timings;
the exit code is non-zero only when the harness fails or an answer was wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import common
from bench.command_bench import AUTHOR_NAME, prepare, reset_state
from bench.common import (
    DOCS_PATH,
    RESULTS_DIR,
    ROOT,
    ClientPool,
    Gunicorn,
    HttpStatusError,
    ResourceSampler,
    _pg_conninfo,
    log_machine,
    machine_spec,
    merge_resources,
    other_connections,
    percentile,
    print_blocks,
    run_times,
    serve_jobs,
    start_driver,
    write_generated,
)

OUT_PATH = RESULTS_DIR / "read_latest.json"
DOC_BEGIN = "<!-- bench:read:generated:begin -->"
DOC_END = "<!-- bench:read:generated:end -->"
SECTION_TITLE = "## Read path (issue #4)"

BQ_PREFIX = "rbq-v"  # the batch-query videos
LIST_PREFIX = "rbl-v"  # the 50,000 liked videos of the my-likes user
REB_PREFIX = "rbr-v"  # the videos of the rebuild relations
REB_USER_BASE = 8_000_000_000  # synthetic user ids of the rebuild data (no auth rows: the shards have no FK)
REB_VIDEOS = 5000
REB_PER_USER = 50
DOWN_REDIS_URL = "redis://127.0.0.1:1/14"
APP_NAME = os.environ.get("PGAPPNAME", "likes-read-bench")  # nothing listens there: connection refused at once

# Safety bounds of the client processes.
MAX_JOB_SECONDS = 300.0
MAX_REQUESTS_PER_JOB = 2_000_000
HTTP_TIMEOUT_S = 10.0


def _log(msg: str) -> None:
    print(f"[read-bench] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/read.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=4, help="service-layer client processes (default 4)")
    p.add_argument("--http-clients", type=int, default=4, help="HTTP client processes (default 4)")
    p.add_argument("--gunicorn-workers", type=int, default=3, help="gunicorn sync workers (default 3)")
    p.add_argument("--users", type=int, default=400, help="users sending batch queries (default 400)")
    p.add_argument("--videos", type=int, default=2000, help="videos the feeds are drawn from (default 2000)")
    p.add_argument("--feed", type=int, default=100, help="video ids in each user's feed (default 100)")
    p.add_argument("--batch", type=int, default=20, help="ids per batch query (default 20)")
    p.add_argument("--warmup", type=float, default=1.5, help="seconds of warm-up before each window (default 1.5)")
    p.add_argument("--duration", type=float, default=4.0, help="seconds measured per window (default 4)")
    p.add_argument("--rounds", type=int, default=2, help="windows per case and layer (default 2)")
    p.add_argument("--list-likes", type=int, default=50_000, help="likes of the my-likes user (default 50000)")
    p.add_argument("--list-limit", type=int, default=100, help="page size (default 100)")
    p.add_argument("--list-page", type=int, default=500, help="the deep page (default 500)")
    p.add_argument("--list-reps", type=int, default=150, help="timed fetches per page and variant (default 150)")
    p.add_argument("--rebuild-relations", default="auto",
                   help="relations for the rebuild: a number, or auto = 1000000 unless a calibration "
                        "projects more than --rebuild-budget seconds, then 250000 (default auto)")
    p.add_argument("--rebuild-budget", type=float, default=240.0,
                   help="seconds the 1,000,000 rebuild may take in auto mode (default 240)")
    p.add_argument("--wait-quiet", type=float, default=120.0,
                   help="seconds to wait for other clients of the likes_bench databases to go (default 120)")
    p.add_argument("--seed", type=int, default=20261130)
    p.add_argument("--skip-http", action="store_true")
    p.add_argument("--skip-list", action="store_true")
    p.add_argument("--skip-rebuild", action="store_true")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = p.parse_args(argv)
    for name in ("procs", "http_clients", "gunicorn_workers", "users", "videos", "batch", "rounds", "list_limit",
                 "list_page", "list_reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.feed < args.batch or args.feed > args.videos:
        p.error("--feed must be between --batch and --videos")
    if not (0 < args.duration <= 60 and 0 <= args.warmup <= 30):
        p.error("durations out of range (duration 0-60 s, warm-up 0-30 s)")
    if args.list_likes < args.list_limit * args.list_page:
        p.error("--list-likes must hold --list-page pages of --list-limit")
    if args.rebuild_relations != "auto":
        try:
            args.rebuild_relations = int(args.rebuild_relations)
        except ValueError:
            p.error("--rebuild-relations: a number or auto")
        if not 1000 <= args.rebuild_relations <= 2_000_000:
            p.error("--rebuild-relations must be 1000 .. 2000000")
    return args


# --- safety ----------------------------------------------------------------------------------------


def foreign_connections() -> int:
    """Connections to the likes_bench* databases that are not this run's. Every process of the run carries
    application_name = $PGAPPNAME (bench/read.sh sets it; libpq reads it), so anything else is another
    benchmark (bench/run.sh and bench/projection.sh TRUNCATE the same tables and flush the same Redis
    namespace) or a stray client."""
    import psycopg

    with psycopg.connect(**_pg_conninfo("default"), autocommit=True, connect_timeout=5) as conn:
        return other_connections(conn, app_name=APP_NAME)


def wait_for_quiet(max_wait: float) -> int:
    """Wait until no other client is connected to a likes_bench* database, or refuse. Returns the seconds
    waited."""
    return common.wait_for_quiet(max_wait, foreign_connections, tag="read-bench", log=_log)


INTERFERENCE: list[dict] = []


def note_interference(phase: str) -> None:
    """Record (and say) when another client is on the bench databases while this run measures."""
    n = foreign_connections()
    if n:
        INTERFERENCE.append({"phase": phase, "connections": n, "at": time.strftime("%H:%M:%S")})
        _log(f"WARNING: {n} connections of another client on the bench databases during {phase}")


@contextlib.contextmanager
def _env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- Redis helpers -----------------------------------------------------------------------------------


def _scan_delete(pattern: str) -> int:
    from likes_project.redis_client import cache_redis

    client = cache_redis()
    deleted, cursor = 0, 0
    for _ in range(100_000):  # bounded SCAN
        cursor, keys = client.scan(cursor=cursor, match=pattern, count=5000)
        if keys:
            deleted += client.unlink(*keys)
        if cursor == 0:
            break
    return deleted


def relation_cache_flush() -> int:
    """Drop the bench's relation cache hashes (`likes-bench:rel:g*`, which includes the registry
    `rel:gens`), then re-mirror the registry so writes stay possible. The sentinels stay."""
    from django.conf import settings

    from relations.services.relation_cache import cache_generations_mirror

    n = _scan_delete(f"{settings.LIKES_REDIS_PREFIX}:rel:g*")
    cache_generations_mirror()
    return n


def _redis_memory() -> dict:
    from likes_project.redis_client import cache_redis

    info = cache_redis().info("memory")
    return {"used_memory": int(info["used_memory"]), "dbsize": int(cache_redis().dbsize())}


# --- client processes ----------------------------------------------------------------------------------

_IO: Counter = Counter()  # per client process: SQL statements by alias, Redis round trips


def _instrument() -> None:
    """Count SQL statements per alias (Django's execute wrappers) and Redis round trips (direct commands
    and pipeline executions) in this client process."""
    import redis
    import redis.client
    from django.db import connections

    original = redis.Redis.execute_command
    original_pipe = redis.client.Pipeline.execute

    def counting_execute(self, *args, **kwargs):
        _IO["redis"] += 1
        return original(self, *args, **kwargs)

    def counting_pipe(self, *args, **kwargs):
        _IO["redis"] += 1
        return original_pipe(self, *args, **kwargs)

    redis.Redis.execute_command = counting_execute
    redis.client.Pipeline.execute = counting_pipe
    for alias in connections:
        def wrapper(execute, sql, params, many, context, alias=alias):
            _IO[f"sql:{alias}"] += 1
            return execute(sql, params, many, context)

        connections[alias].execute_wrappers.append(wrapper)


def _service_call():
    from counting import selectors as count_selectors
    from relations import selectors

    def call(user_id: int, token: str, ids: list[str]) -> list[tuple]:
        # The body of relations.api.batch_views.BatchQueryView.post, without DRF.
        visible = selectors.videos_visible_to(user_id=user_id, video_ids=ids)
        rels = selectors.relation_states_get(user_id=user_id, video_ids=ids, min_versions={})
        counts = count_selectors.display_counts_get(video_ids=[v for v in ids if visible[v]])
        out = []
        for v in ids:
            c = counts.get(v) if visible[v] else None
            out.append((v, visible[v], rels[v].state, rels[v].relation_version,
                        c.display_count if c else None, c.source if c else None))
        return out

    return call, None


def _http_call(port: int):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)

    def call(user_id: int, token: str, ids: list[str]) -> list[tuple]:
        body = json.dumps({"videoIds": ids})
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        try:
            conn.request("POST", "/v1/like-relations/batch-query", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()  # the next request reconnects
            raise
        if resp.status != 200:
            raise HttpStatusError(resp.status, data)
        return [(it["videoId"], it["available"], it["myState"], it["relationVersion"], it["displayCount"], None)
                for it in json.loads(data)["items"]]

    return call, conn


def _wrong(items: list[tuple], ids: list[str], expected: dict, counts: dict) -> bool:
    """An answer that differs from the prepared data: order, availability, state/version or count."""
    if [it[0] for it in items] != ids:
        return True
    for vid, available, state, version, display, _src in items:
        if not available or [state, version] != list(expected.get(vid, ("UNLIKED", 0))) or display != counts[vid]:
            return True
    return False


def run_batch_job(job: dict) -> dict:
    from likes_project import metrics

    rng = random.Random(job["seed"])
    users, batch, counts = job["users"], job["batch"], job["counts"]
    pages = job["feed"] // batch
    call, conn = _service_call() if job["layer"] == "service" else _http_call(job["port"])
    t_start, t_measure = job["t_start"], job["t_measure"]
    t_end = min(job["t_end"], time.time() + MAX_JOB_SECONDS)
    delay = t_start - time.time()
    if delay > 0:
        time.sleep(min(delay, 30.0))  # all clients start at the same instant (pacing)
    latencies: list[float] = []
    errors: Counter = Counter()
    io: Counter = Counter()
    sources: Counter = Counter()
    ok = wrong = sent = 0
    hits = misses = 0.0
    try:
        while sent < MAX_REQUESTS_PER_JOB:
            w0 = time.time()
            if w0 >= t_end:
                break
            user_id, token, feed, expected = users[rng.randrange(len(users))]
            p = rng.randrange(pages)
            ids = feed[p * batch:(p + 1) * batch]
            sent += 1
            io0 = Counter(_IO)
            h0 = metrics.value("likes_cache_hits_total", cache="relation")
            m0 = metrics.value("likes_cache_misses_total", cache="relation")
            t0 = time.perf_counter()
            try:
                items = call(user_id, token, ids)
                err = None
            except Exception as exc:
                err = exc.__class__.__name__ + (f":{exc.status}" if isinstance(exc, HttpStatusError) else "")
            elapsed_ms = (time.perf_counter() - t0) * 1000.0
            if w0 < t_measure or time.time() > t_end:
                continue  # warm-up, or finished after the window closed
            if err is not None:
                errors[err] += 1
                continue
            ok += 1
            latencies.append(round(elapsed_ms, 3))
            wrong += _wrong(items, ids, expected, counts)
            io.update(Counter(_IO) - io0)
            hits += metrics.value("likes_cache_hits_total", cache="relation") - h0
            misses += metrics.value("likes_cache_misses_total", cache="relation") - m0
            sources.update(it[5] for it in items if it[5])
    finally:
        if conn is not None:
            conn.close()
    return {"ok": ok, "wrong": wrong, "errors": dict(errors), "latencies_ms": latencies, "io": dict(io),
            "relcache_hits": hits, "relcache_misses": misses, "count_sources": dict(sources), "sent_total": sent}


def run_repair_job(job: dict) -> dict:
    """Fill the relation cache for these users' feeds through relation_cache_repair (floor, then Redis)."""
    from relations.services.relation_cache import relation_cache_repair

    t0 = time.perf_counter()
    deadline = time.time() + MAX_JOB_SECONDS
    written = 0
    for user_id, feed in job["users"]:
        if time.time() > deadline:
            break
        written += relation_cache_repair(user_id=user_id, video_ids=feed)
    return {"written": written, "seconds": round(time.perf_counter() - t0, 2)}


def read_worker_main(index: int, redis_url: str | None, tasks, results) -> None:
    """Entry point of one spawned client process (REDIS_URL is overridden before django.setup() for the
    Redis-down clients)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops us
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
        os.environ["LOG_LEVEL"] = "ERROR"  # not one "cache read failed" warning per request on stderr
    import django

    django.setup()
    _instrument()

    def run(job: dict) -> dict:
        return run_repair_job(job) if job["kind"] == "repair" else run_batch_job(job)

    serve_jobs(index, tasks, results, run, lambda job: job["kind"])


def read_pool(size: int, *, redis_url: str | None, label: str) -> ClientPool:
    """Spawned client processes running read_worker_main (bench/command_bench.py's pool runs the command
    worker, this one read jobs)."""
    from bench import read_bench  # by its importable name, so that spawn can find the target

    return ClientPool(size, read_bench.read_worker_main, args=(redis_url,), name=f"read-bench-{label}",
                      what=f"{label} client", log=_log, raise_fatal=True)


# --- 1. batch query ------------------------------------------------------------------------------------


def _author_id() -> int:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=AUTHOR_NAME).pk


def _snapshots_insert(video_ids_sql: str, params: list) -> None:
    """Active public VideoSnapshot rows on `default`, by the author of the bench (bulk, idempotent)."""
    from django.db import connections

    from relations.models import VideoSnapshot

    t = VideoSnapshot._meta.db_table
    with connections["default"].cursor() as cur:
        cur.execute(
            f"INSERT INTO {t} (video_id, author_id, visibility, status, version, updated_at) "
            f"SELECT v, %s, 'public', 'active', 1, now() FROM ({video_ids_sql}) AS s(v) "
            "ON CONFLICT (video_id) DO UPDATE SET author_id = EXCLUDED.author_id, visibility = 'public', "
            "status = 'active'", [_author_id(), *params])
        cur.execute(f"ANALYZE {t}")


def prepare_batch(args, bench_users: list[tuple[int, str]]) -> dict:
    """The batch-query data: `--videos` active public videos (rbq-v*), a feed of `--feed` of them per user,
    of which 30% LIKED (version 1 or 3) and 10% UNLIKED (version 2) as relation facts on the users' shards,
    and a durable display snapshot of every video (its LIKED count) with its Redis view in the ACTIVE
    count-cache generation."""
    from django.db import connections, transaction
    from django.utils import timezone

    from counting import routing as count_routing
    from counting.models import VideoDisplayCount
    from counting.services import count_cache
    from relations import routing
    from relations.models import LikeRelation

    t0 = time.monotonic()
    rng = random.Random(args.seed)
    videos = [f"{BQ_PREFIX}{i:05d}" for i in range(args.videos)]
    _snapshots_insert("SELECT unnest(%s::text[])", [videos])
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
    t = LikeRelation._meta.db_table
    for alias, rows in sorted(per_alias.items()):
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute(
                f"INSERT INTO {t} (user_id, video_id, state, relation_version, last_operation_id, state_changed_at, "
                "created_at, updated_at) SELECT u, v, s, ver, 'rbq-seed', now() - interval '1 hour', "
                "now() - interval '1 hour', now() - interval '1 hour' "
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
    views = count_cache.count_cache_views_write(rows=[(v, counts[v], snapshot_id, iso) for v in videos])
    relations = {a: len(r) for a, r in sorted(per_alias.items())}
    _log(f"batch data: {len(users)} users x feed {args.feed}, relations {relations}, {len(videos)} videos with "
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
    _log(f"relation cache filled: {out['entries']} entries in {out['seconds']}s")
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
    part = {"ok": sum(r["ok"] for r in results), "wrong": sum(r["wrong"] for r in results),
            "errors": Counter(), "io": Counter(), "sources": Counter(),
            "latencies": [x for r in results for x in r["latencies_ms"]],
            "hits": sum(r["relcache_hits"] for r in results), "misses": sum(r["relcache_misses"] for r in results),
            "resources": resources}
    for r in results:
        part["errors"].update(r["errors"])
        part["io"].update(r["io"])
        part["sources"].update(r["count_sources"])
    _log(f"  {layer} {case}: {part['ok'] / args.duration:,.1f} req/s in this window, "
         f"{sum(part['errors'].values())} errors, {part['wrong']} wrong")
    return part


def _r(x, nd=2):
    return None if x is None else round(x, nd)


def aggregate_batch(parts: list[dict], args, *, layer: str, case: str) -> dict:
    lat = sorted(x for p in parts for x in p["latencies"])
    ok = sum(p["ok"] for p in parts)
    errors: Counter = Counter()
    io: Counter = Counter()
    sources: Counter = Counter()
    for p in parts:
        errors.update(p["errors"])
        io.update(p["io"])
        sources.update(p["sources"])
    hits, misses = sum(p["hits"] for p in parts), sum(p["misses"] for p in parts)
    seconds = args.duration * len(parts)
    per_req = {k: round(v / ok, 2) for k, v in sorted(io.items())} if ok else {}
    shards = sum(v for k, v in per_req.items() if k.startswith("sql:rel_"))
    row = {
        "layer": layer, "case": case, "clients": args.procs if layer == "service" else args.http_clients,
        "requests_per_s": round(ok / seconds, 1), "ids_per_request": args.batch,
        "per_round_requests_per_s": [round(p["ok"] / args.duration, 1) for p in parts],
        "p50_ms": _r(percentile(lat, 0.5)), "p99_ms": _r(percentile(lat, 0.99)),
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
    _log(f"{layer:<8} {case:<5} c={row['clients']}  {row['requests_per_s']:>8,.1f} req/s  p50 {row['p50_ms']} ms  "
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
                _log(f"  cold: dropped {n} relation cache keys, registry re-mirrored")
            note_interference(f"{layer} {case} round {rnd + 1}")
            parts[case].append(measure_batch(ctx, layer=layer, case=case))
    return [aggregate_batch(parts[c], args, layer=layer, case=c) for c in ("warm", "cold", "down")]


# --- 2. my-likes pages --------------------------------------------------------------------------------


def _explain(alias: str, sql: str, params: list) -> dict:
    from django.db import connections

    with connections[alias].cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        raw = cur.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    scanned = []

    def walk(node):
        if "Index" in node.get("Node Type", "") or "Scan" in node.get("Node Type", ""):
            scanned.append((node["Node Type"], node.get("Index Name"), node.get("Actual Rows")))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    top = plan["Plan"]
    return {"execution_ms": _r(plan.get("Execution Time"), 3), "scan_nodes": scanned,
            "shared_buffers_hit": top.get("Shared Hit Blocks"), "shared_buffers_read": top.get("Shared Read Blocks")}


def run_list(args, user_id: int) -> dict:
    """The my-likes page at page 1 and page `--list-page` (limit `--list-limit`) of a user with `--list-likes`
    LIKED relations: ours (keyset, relations.selectors_my_likes) against LIMIT/OFFSET, interleaved in one run."""
    from django.db import connections, transaction

    from relations import routing, selectors_my_likes
    from relations.models import LikeRelation

    alias = routing.alias_for_user(user_id)
    t = LikeRelation._meta.db_table
    n, limit, deep = args.list_likes, args.list_limit, args.list_page
    t0 = time.monotonic()
    _snapshots_insert(f"SELECT %s || lpad(i::text, 6, '0') FROM generate_series(0, {int(n) - 1}) AS i", [LIST_PREFIX])
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = '120s'")
        cur.execute(f"DELETE FROM {t} WHERE user_id = %s", [user_id])
        # Newest first is i = 0: updated_at = state_changed_at = base - i seconds (all distinct).
        cur.execute(
            f"INSERT INTO {t} (user_id, video_id, state, relation_version, last_operation_id, state_changed_at, "
            "created_at, updated_at) SELECT %s, %s || lpad(i::text, 6, '0'), 'LIKED', 1, 'rbl-seed-' || i, "
            "ts, ts, ts FROM generate_series(0, %s) AS i, "
            "LATERAL (SELECT now() - interval '1 day' - i * interval '1 second' AS ts) AS x",
            [user_id, LIST_PREFIX, n - 1])
    with connections[alias].cursor() as cur:
        cur.execute(f"ANALYZE {t}")
    prep_s = round(time.monotonic() - t0, 2)
    _log(f"my-likes data: user {user_id} on {alias}, {n} LIKED relations + snapshots in {prep_s}s")

    def ours(cursor: str | None):
        after = None if cursor is None else selectors_my_likes.list_cursor_decode(user_id=user_id, cursor=cursor)
        page = selectors_my_likes.liked_page_list(user_id=user_id, limit=limit, after=after)
        if page.next_key is not None:
            selectors_my_likes.list_cursor_encode(user_id=user_id, key=page.next_key)
        return page

    offset_sql = (f"SELECT updated_at, video_id, state_changed_at, relation_version FROM {t} "
                  "WHERE user_id = %s AND state = 'LIKED' ORDER BY updated_at DESC, video_id DESC LIMIT %s OFFSET %s")

    def offset(page_no: int):
        with connections[alias].cursor() as cur:
            cur.execute(offset_sql, [user_id, limit, (page_no - 1) * limit])
            return cur.fetchall()

    # Walk the cursor to page `deep` once and keep that page's cursor.
    t0 = time.perf_counter()
    page = ours(None)
    cursor = None
    for _ in range(deep - 1):
        if page.next_key is None:
            raise RuntimeError("the list ended before the deep page")
        cursor = selectors_my_likes.list_cursor_encode(user_id=user_id, key=page.next_key)
        page = ours(cursor)
    walk_s = time.perf_counter() - t0
    want_first = f"{LIST_PREFIX}{(deep - 1) * limit:06d}"
    off_rows = offset(deep)
    consistent = (len(page.items) == limit and page.items[0].video_id == want_first
                  and [i.video_id for i in page.items] == [r[1] for r in off_rows])
    if not consistent:
        first = page.items[0].video_id if page.items else None
        raise RuntimeError(f"page {deep} of ours and OFFSET disagree (first {first}, expected {want_first})")

    def offset_filtered(page_no: int):
        # The OFFSET page plus the same visibility filter ours applies (one snapshot query on default).
        rows = offset(page_no)
        listed = selectors_my_likes.listed_video_ids([r[1] for r in rows])
        return [r for r in rows if r[1] in listed]

    variants = {("ours", 1): lambda: ours(None), ("ours", deep): lambda: ours(cursor),
                ("offset", 1): lambda: offset(1), ("offset", deep): lambda: offset(deep),
                ("offset+filter", 1): lambda: offset_filtered(1),
                ("offset+filter", deep): lambda: offset_filtered(deep)}
    lat: dict[tuple[str, int], list[float]] = {k: [] for k in variants}
    warm = max(5, args.list_reps // 10)
    deadline = time.time() + 120
    for rep in range(warm + args.list_reps):
        if time.time() > deadline:
            _log("my-likes: stopped at the 120 s bound")
            break
        order = list(variants.items()) if rep % 2 == 0 else list(reversed(variants.items()))
        for key, fn in order:
            t1 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t1) * 1000.0
            if rep >= warm:
                lat[key].append(ms)
    rows = []
    for (variant, page_no), vals in lat.items():
        vals.sort()
        rows.append({"variant": variant, "page": page_no, "p50_ms": _r(percentile(vals, 0.5), 3),
                     "p99_ms": _r(percentile(vals, 0.99), 3), "fetches": len(vals)})
    by = {(r["variant"], r["page"]): r for r in rows}

    def ratio(v, q):
        a, b = by[(v, deep)][q], by[(v, 1)][q]
        return round(a / b, 2) if a and b else None

    key_deep = selectors_my_likes.list_cursor_decode(user_id=user_id, cursor=cursor)
    ours_sql, ours_params = selectors_my_likes.liked_rows_scan_queryset(
        alias=alias, user_id=user_id, after=key_deep, count=limit + 1).query.sql_with_params()
    explain = {"ours_page_deep": _explain(alias, ours_sql, list(ours_params)),
               "offset_page_deep": _explain(alias, offset_sql, [user_id, limit, (deep - 1) * limit])}
    out = {"user_id": user_id, "shard": alias, "likes": n, "limit": limit, "deep_page": deep, "prep_seconds": prep_s,
           "walk_seconds": round(walk_s, 2), "walk_ms_per_page": round(walk_s * 1000 / deep, 2),
           "warmup_fetches": warm, "rows": rows, "consistent_with_offset": consistent,
           "ratio_p50_deep_over_1": {v: ratio(v, "p50_ms") for v in ("ours", "offset", "offset+filter")},
           "ratio_p99_deep_over_1": {v: ratio(v, "p99_ms") for v in ("ours", "offset", "offset+filter")},
           "explain": explain}
    _log(f"my-likes: p50 page1/page{deep} ours {by[('ours', 1)]['p50_ms']}/{by[('ours', deep)]['p50_ms']} ms, "
         f"offset {by[('offset', 1)]['p50_ms']}/{by[('offset', deep)]['p50_ms']} ms; "
         f"ratio ours {out['ratio_p50_deep_over_1']['ours']}, offset {out['ratio_p50_deep_over_1']['offset']}")
    return out


# --- 3. relation-cache rebuild ----------------------------------------------------------------------


def _truncate_floors() -> None:
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
                cur.execute(
                    f"INSERT INTO {t} (user_id, video_id, state, relation_version, last_operation_id, "
                    "state_changed_at, created_at, updated_at) "
                    f"SELECT u, %s || lpad(((k + j * 100) %% {REB_VIDEOS})::text, 5, '0'), "
                    "CASE WHEN (k + j) %% 3 = 0 THEN 'UNLIKED' ELSE 'LIKED' END, "
                    "CASE WHEN (k + j) %% 3 = 0 THEN 2 ELSE 1 END, 'rbr-seed', ts, ts, ts "
                    "FROM unnest(%s::bigint[], %s::int[]) AS x(u, k), "
                    f"generate_series(0, {REB_PER_USER - 1}) AS j, "
                    "LATERAL (SELECT now() - interval '1 day' - j * interval '1 second' AS ts) AS y",
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
    keys, sampled, cursor = 0, [], 0
    for _ in range(100_000):  # bounded SCAN
        cursor, batch = client.scan(cursor=cursor, match=pattern, count=5000)
        keys += len(batch)
        if len(sampled) < sample:
            sampled.extend(batch[:sample - len(sampled)])
        if cursor == 0:
            break
    pipe = client.pipeline(transaction=False)
    for k in sampled:
        pipe.memory_usage(k, samples=0)
    sizes = [s for s in pipe.execute() if s]
    avg = sum(sizes) / len(sizes) if sizes else 0
    return {"keys": keys, "sampled_keys": len(sizes), "avg_key_bytes": round(avg), "estimated_bytes": round(avg * keys)}


def _timed_rebuild(label: str) -> tuple[object, float]:
    from relations.services.relation_cache import relation_cache_rebuild

    last = [time.monotonic()]

    def progress(msg: str) -> None:
        if "scanned" not in msg or time.monotonic() - last[0] >= 10:
            last[0] = time.monotonic()
            _log(f"  {label}: {msg.strip()}")

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
        _log(f"rebuild calibration: {report.scanned} relations in {secs:.1f}s ({rate:,.0f}/s); 1,000,000 projected "
             f"at {projected:.0f}s (budget {args.rebuild_budget:.0f}s) -> running {target:,}")
    n_users = target // REB_PER_USER
    reset_state()
    _truncate_floors()
    relation_cache_flush()
    t0 = time.monotonic()
    per_shard = _insert_rebuild_relations(n_users)
    out.update({"relations": sum(per_shard.values()), "users": n_users, "per_shard": per_shard,
                "insert_seconds": round(time.monotonic() - t0, 1)})
    _log(f"rebuild data: {out['relations']:,} relations ({per_shard}) inserted in {out['insert_seconds']}s")
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
    _log(f"rebuild: {report.scanned:,} relations in {secs:.1f}s ({rate:,.0f}/s), status {report.status}, "
         f"sample {report.sampled}/{report.mismatches} mismatches, "
         f"Redis +{out['redis_used_memory_delta_bytes'] / 2**20:.1f} MiB used_memory, {gen_mem['keys']:,} keys "
         f"(~{gen_mem['estimated_bytes'] / 2**20:.1f} MiB by MEMORY USAGE)")
    return out


# --- cleanup ---------------------------------------------------------------------------------------------


def cleanup() -> None:
    """Leave the bench databases as the other benchmarks expect them: empty relation tables and floors,
    no relation-cache hashes, none of this run's videos, snapshots or views."""
    from django.conf import settings
    from django.db import connections

    from counting.models import VideoDisplayCount
    from relations.models import VideoSnapshot

    with contextlib.suppress(Exception):
        connections.close_all()
    reset_state()
    _truncate_floors()
    keys = relation_cache_flush()
    with connections["default"].cursor() as cur:
        cur.execute(f"DELETE FROM {VideoDisplayCount._meta.db_table} WHERE video_id LIKE %s", [BQ_PREFIX + "%"])
        cur.execute(f"DELETE FROM {VideoSnapshot._meta.db_table} WHERE video_id LIKE %s OR video_id LIKE %s",
                    [BQ_PREFIX + "%", LIST_PREFIX + "%"])
    p = settings.LIKES_REDIS_PREFIX
    other = (_scan_delete(f"{p}:count:view:*{{{BQ_PREFIX}*") + _scan_delete(f"{p}:vis:v1:{{{BQ_PREFIX}*")
             + _scan_delete(f"{p}:vis:v1:{{{LIST_PREFIX}*"))
    _log(f"cleanup: relation tables and floors truncated, {keys} relation cache keys and {other} other keys dropped, "
         "run videos and snapshots deleted")


# --- reporting -----------------------------------------------------------------------------------------


def _fmt(x, nd=1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def batch_table(rows: list[dict]) -> str:
    lines = ["| layer | case | clients | requests/s | p50 ms | p99 ms | errors | wrong | relation cache hits "
             "| SQL/request shards + default | Redis round trips/request | app CPU ms/request "
             "| PG backend CPU ms/request | CPU (cores) by process |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        res = r.get("resources") or {}
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in (res.get("cores_by_process") or {}).items() if v >= 0.1)
        hit = "-" if r["relation_cache_hit_ratio"] is None else f"{r['relation_cache_hit_ratio'] * 100:.0f}%"
        sql = ("-" if r["sql_shards_per_request"] is None
               else f"{r['sql_shards_per_request']:.2f} + {r['sql_default_per_request'] or 0:.2f}")
        lines.append(f"| {r['layer']} | {r['case']} | {r['clients']} | {_fmt(r['requests_per_s'])} | "
                     f"{_fmt(r['p50_ms'], 2)} | {_fmt(r['p99_ms'], 2)} | {r['errors']} | {r['wrong']} | {hit} | "
                     f"{sql} | "
                     f"{_fmt(r['redis_round_trips_per_request'], 2)} | {_fmt(r.get('app_cpu_ms_per_request'), 2)} | "
                     f"{_fmt(r.get('pg_backend_cpu_ms_per_request'), 2)} | "
                     f"{cpu} (machine busy {res.get('cores_busy', 0):.2f}) |")
    return "\n".join(lines)


def list_table(lst: dict | None) -> str:
    if not lst:
        return "(not run)"
    lines = ["| variant | page | p50 ms | p99 ms | timed fetches |", "|---|---:|---:|---:|---:|"]
    for r in lst["rows"]:
        name = {"ours": "ours: liked_page_list + cursor decode/encode", "offset": "OFFSET baseline (raw SQL)",
                "offset+filter": "OFFSET + the same visibility filter"}[r["variant"]]
        lines.append(f"| {name} | {r['page']} | {_fmt(r['p50_ms'], 3)} | {_fmt(r['p99_ms'], 3)} | {r['fetches']} |")
    d = lst["deep_page"]
    rp50, rp99 = lst["ratio_p50_deep_over_1"], lst["ratio_p99_deep_over_1"]
    e = lst["explain"]

    def rows_read(x):
        return ", ".join(f"{t} {i or ''} {n} rows".replace("  ", " ") for t, i, n in x["scan_nodes"])

    lines += ["", f"Page {d} / page 1: ours **{_fmt(rp50['ours'], 2)}** (p50), {_fmt(rp99['ours'], 2)} (p99); "
                  f"OFFSET **{_fmt(rp50['offset'], 2)}** (p50), {_fmt(rp99['offset'], 2)} (p99); OFFSET + filter "
                  f"{_fmt(rp50['offset+filter'], 2)} (p50), {_fmt(rp99['offset+filter'], 2)} (p99).",
              "",
              f"EXPLAIN ANALYZE of page {d}: ours {e['ours_page_deep']['execution_ms']} ms, "
              f"{rows_read(e['ours_page_deep'])}, {e['ours_page_deep']['shared_buffers_hit']} buffer hits; "
              f"OFFSET {e['offset_page_deep']['execution_ms']} ms, {rows_read(e['offset_page_deep'])}, "
              f"{e['offset_page_deep']['shared_buffers_hit']} buffer hits."]
    return "\n".join(lines)


def rebuild_text(rb: dict | None) -> str:
    if not rb:
        return "(not run)"
    mib = 2 ** 20
    gk = rb["generation_keys"]
    delta = rb["redis_used_memory_delta_bytes"]
    lines = ["| relations | users x videos | per shard | rebuild s | relations/s | status | sample check "
             "| Redis used_memory delta | generation keys (MEMORY USAGE estimate) |",
             "|---:|---|---|---:|---:|---|---|---:|---|",
             f"| {rb['relations']:,} | {rb['users']:,} x {rb['relations_per_user']} | "
             f"{', '.join(f'{a} {n:,}' for a, n in rb['per_shard'].items())} | {rb['seconds']} | "
             f"{rb['relations_per_s']:,} | {rb['status']} | {rb['sampled']} sampled, {rb['mismatches']} mismatches | "
             f"{delta / mib:.1f} MiB ({delta / max(1, rb['relations']):.0f} B/relation) | "
             f"{gk['keys']:,} hashes, ~{gk['estimated_bytes'] / mib:.1f} MiB ({gk['avg_key_bytes']} B each) |"]
    if rb.get("extrapolated_1m_seconds"):
        lines += ["", f"**1,000,000 relations were not run**: extrapolated linearly from {rb['relations']:,}, the "
                      f"rebuild would take about **{rb['extrapolated_1m_seconds']} s**."]
    if rb.get("calibration"):
        c = rb["calibration"]
        lines += ["", f"Calibration first (auto mode): {c['relations']:,} relations rebuilt in {c['seconds']} s "
                      f"({c['relations_per_s']:,}/s), projecting {c['projected_1m_seconds']} s for 1,000,000 against "
                      f"a budget of {c['budget_seconds']:.0f} s."]
    res = rb.get("resources") or {}
    if res:
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in res["cores_by_process"].items() if v >= 0.05)
        waits = ", ".join(f"{w['wait']} {w['share'] * 100:.0f}%" for w in res.get("top_waits", [])[:4])
        lines += ["", f"Where the rebuild's time went (CPU in cores over the rebuild, machine busy "
                      f"{res['cores_busy']:.2f} of {os.cpu_count()}): {cpu}. Bench backend states: {waits or 'n/a'}."]
    floor = sum(v["floor_table_bytes"] for v in rb["tables"].values())
    lines += ["", f"Data insert (generate_series, both shards): {rb['insert_seconds']} s. The rebuild also wrote the "
                  f"durable floor (LIKE_RELATION_CACHE_PROJECTION) on the shards: {floor / mib:.0f} MiB with indexes. "
                  f"Redis db size grew by {rb['redis_keys_delta']:,} keys."]
    return "\n".join(lines)


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    return "\n".join([
        DOC_BEGIN,
        "<!-- Written by bench/read_bench.py at the end of every run; edit the text outside these markers. -->",
        "",
        f"### Last run: {meta['finished_at']} ({meta['wall_seconds']:.0f} s wall clock for the whole run)",
        "",
        "**Machine:** "
        f"{spec.get('nproc')} CPUs ({spec.get('cpu_model', 'unknown model')}), {spec.get('memory_gib')} GiB RAM, "
        f"Linux {spec.get('kernel')}; PostgreSQL {spec.get('postgresql')} "
        f"(shared_buffers {spec.get('pg_shared_buffers')}, "
        f"synchronous_commit {spec.get('pg_synchronous_commit')}); Redis {spec.get('redis')}; Python "
        f"{spec.get('python')}, Django {spec.get('django')}, DRF {spec.get('drf')}. Load average at the start "
        f"{spec.get('loadavg_at_start')}, at the end {meta.get('loadavg_at_end')}.",
        "",
        f"**Parameters:** {meta['users']} users, each with a feed of {meta['feed']} of {meta['videos']} videos "
        f"(30% LIKED, 10% UNLIKED, 60% never acted on); {meta['batch']} ids per request; warm-up "
        f"{meta['warmup_s']:g} s before each {meta['duration_s']:g} s window; {meta['rounds']} windows per row; "
        f"service layer {meta['procs']} processes, HTTP {meta['http_clients']} client processes against gunicorn "
        f"--workers {meta['gunicorn_workers']}. LIKES_NUDGE_ENABLED=false, rate limiting off.",
        "",
        *(["**Interference:** another client was connected to the bench databases during: "
           + ", ".join(f"{i['phase']} ({i['connections']} connections)" for i in meta["interference"])
           + ". Figures of those phases are suspect.", ""] if meta.get("interference") else []),
        "**1. Batch query (20 ids)**",
        "",
        batch_table(result["batch"]["rows"]),
        "",
        "Relation cache fills for the warm case (relation_cache_repair of every feed): "
        + (", ".join(f"{f['entries']:,} entries in {f['seconds']} s" for f in result["batch"]["fills"]) or "none"),
        "",
        f"**2. My-likes page, user with {result['list']['likes']:,} likes, limit {result['list']['limit']}**"
        if result.get("list") else "**2. My-likes page** (not run)",
        "",
        list_table(result.get("list")),
        "",
        "**3. Relation-cache rebuild** (`relation_cache_rebuild()` end to end)",
        "",
        rebuild_text(result.get("rebuild")),
        "",
        DOC_END,
    ])


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                    heading=f"{SECTION_TITLE}\n\nRun `./bench/read.sh`.")


def print_report(result: dict) -> None:
    print_blocks(batch_table(result["batch"]["rows"]), list_table(result.get("list")),
                 rebuild_text(result.get("rebuild")))


# --- main --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = start_driver()
    from django.conf import settings
    from django.db import connections

    if settings.LIKES_NUDGE_ENABLED:
        raise SystemExit("[read-bench] refusing: LIKES_NUDGE_ENABLED must be false (use ./bench/read.sh)")
    waited = wait_for_quiet(args.wait_quiet)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    spec = machine_spec()
    log_machine(spec, _log)
    bench_users, _ = prepare(argparse.Namespace(users=5000, videos=2000))  # the users (and tokens) of bench/run.sh
    reset_state()
    _truncate_floors()
    relation_cache_flush()
    connections.close_all()

    result: dict = {"batch": {"rows": [], "fills": []}, "list": None, "rebuild": None}
    data = None
    pools: list[ClientPool] = []
    workdir = Path(tempfile.mkdtemp(prefix="likes-read-bench-"))
    try:
        data = prepare_batch(args, bench_users)
        connections.close_all()
        pool = read_pool(max(args.procs, 1 if args.skip_http else args.http_clients), redis_url=None, label="client")
        pools.append(pool)
        down_pool = read_pool(args.procs, redis_url=DOWN_REDIS_URL, label="redis-down client")
        pools.append(down_pool)
        ctx = {"args": args, "data": data, "pool": pool, "down_pool": down_pool, "window": 0, "warm": False,
               "fills": result["batch"]["fills"], "sampler": ResourceSampler(client_pids=pool.pids | down_pool.pids)}
        result["batch"]["rows"] += run_batch_layer(ctx, "service")
        if not args.skip_http:
            with contextlib.ExitStack() as stack:
                up = stack.enter_context(Gunicorn("likes_project.wsgi:application", args.gunicorn_workers, workdir))
                with _env(REDIS_URL=DOWN_REDIS_URL, LOG_LEVEL="ERROR"):
                    down = stack.enter_context(Gunicorn("likes_project.wsgi:application", args.gunicorn_workers,
                                                        workdir))
                ctx["servers"] = {"up": up, "down": down}
                result["batch"]["rows"] += run_batch_layer(ctx, "http")
        for p in pools:
            p.close()
        pools = []
        connections.close_all()
        if not args.skip_list:
            note_interference("my-likes")
            result["list"] = run_list(args, bench_users[-1][0])
        if not args.skip_rebuild:
            note_interference("rebuild")
            result["rebuild"] = run_rebuild(args)
    finally:
        for p in pools:
            p.close()
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            cleanup()
        except Exception as exc:
            _log(f"cleanup failed: {exc.__class__.__name__}: {exc}")

    result["meta"] = {
        **run_times(wall0), "waited_for_quiet_s": waited,
        "interference": INTERFERENCE,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "users": args.users, "videos": args.videos, "feed": args.feed, "batch": args.batch,
        "warmup_s": args.warmup, "duration_s": args.duration, "rounds": args.rounds, "procs": args.procs,
        "http_clients": args.http_clients, "gunicorn_workers": args.gunicorn_workers,
        "nudge_enabled": False, "rate_limit_enabled": False, "redis_down_url": DOWN_REDIS_URL,
        "error_definition": "service: one of videos_visible_to / relation_states_get / display_counts_get raised "
                            "(e.g. DegradedOverloaded from the fallback limiter); HTTP: a status other than 200, a "
                            "connection error or a 10 s timeout. 'wrong': a 200 answer whose order, availability, "
                            "myState/relationVersion or displayCount differs from the prepared data. Latencies are "
                            "of successful requests that started after the warm-up and ended inside the window.",
    }
    result["machine"] = spec
    result["batch"]["data"] = {"relations_per_shard": data["relations_per_shard"] if data else None,
                               "count_views_written": data["count_views_written"] if data else None}
    OUT_PATH.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print_report(result)
    if not args.no_docs:
        write_docs(result)
        _log(f"wrote {DOCS_PATH.relative_to(ROOT)}")
    _log(f"wrote {OUT_PATH.relative_to(ROOT)}; wall clock {result['meta']['wall_seconds']}s")
    wrong = sum(r["wrong"] for r in result["batch"]["rows"])
    if wrong:
        _log(f"ERROR: {wrong} wrong answers")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
