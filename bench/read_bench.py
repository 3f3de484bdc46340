"""Benchmark driver for the read path (issue #4 "Benchmark"; spec TEST-3).

Run through ./bench/read.sh, which does the setup (bench/env.sh: the bench's own likes_bench* databases,
Redis db 14 with the prefix likes-bench, rate limiting off) and sets LIKES_NUDGE_ENABLED=false. One run:

  1. batch query of 20 ids (what POST /v1/like-relations/batch-query does) for a fixed window with
     concurrent clients, in three cases: warm relation cache, cold relation cache, Redis down;
     at the service layer (spawned processes calling counting.selectors.feed_page_read, what the view
     calls) and over HTTP against gunicorn;
  2. the my-likes page (relations.selectors.my_likes.liked_page_list) of a user with 50,000 likes at page 1
     and page 500, next to an OFFSET baseline in the same run;
  3. relation_cache_rebuild() end to end over 1,000,000 relations (or 250,000, extrapolated, when a
     calibration says 1,000,000 would take longer than the budget), with the Redis memory it uses.

Results: a table on stdout, bench/results/read_latest.json and the "Read path" generated section of
docs/benchmarks.md; the parts are in bench/read/. Every loop is bounded by a deadline and a count. Nothing
here asserts on timings; the exit code is non-zero only when the harness fails or an answer was wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench import common
from bench.dataset import prepare, reset_state, scan_delete
from bench.procs import ClientPool, Gunicorn
from bench.read import APP_NAME, BQ_PREFIX, INTERFERENCE, LIST_PREFIX, log
from bench.read.batch import prepare_batch, relation_cache_flush, run_batch_layer
from bench.read.clients import read_pool
from bench.read.my_likes import run_list
from bench.read.rebuild import run_rebuild, truncate_floors
from bench.read.report import print_report, write_docs
from bench.sampler import ResourceSampler

# The options of bench/read.sh beside --wait-quiet, --seed and --no-docs: name -> (default, help).
OPTIONS = {
    "procs": (4, "service-layer client processes"),
    "http_clients": (4, "HTTP client processes"),
    "gunicorn_workers": (3, "gunicorn sync workers"),
    "users": (400, "users sending batch queries"),
    "videos": (2000, "videos the feeds are drawn from"),
    "feed": (100, "video ids in each user's feed"),
    "batch": (20, "ids per batch query"),
    "warmup": (1.5, "seconds of warm-up before each window"),
    "duration": (4.0, "seconds measured per window"),
    "rounds": (2, "windows per case and layer"),
    "list_likes": (50_000, "likes of the my-likes user"),
    "list_limit": (100, "page size"),
    "list_page": (500, "the deep page"),
    "list_reps": (150, "timed fetches per page and variant"),
    "rebuild_relations": ("auto", "relations for the rebuild: a number, or auto = 1000000 unless a calibration "
                                  "projects more than --rebuild-budget seconds, then 250000 (default auto)"),
    "rebuild_budget": (240.0, "seconds the 1,000,000 rebuild may take in auto mode"),
    "skip_http": (False, ""), "skip_list": (False, ""), "skip_rebuild": (False, ""),
}
OUT_PATH = common.RESULTS_DIR / "read_latest.json"
DOWN_REDIS_URL = "redis://127.0.0.1:1/14"  # nothing listens there: connection refused at once


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/read.sh", __doc__, OPTIONS, seed=20261130)
    common.require_positive(p, args, ("procs", "http_clients", "gunicorn_workers", "users", "videos", "batch", "rounds",
                               "list_limit", "list_page", "list_reps"))
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
    truncate_floors()
    keys = relation_cache_flush()
    with connections["default"].cursor() as cur:
        cur.execute(f"DELETE FROM {VideoDisplayCount._meta.db_table} WHERE video_id LIKE %s", [BQ_PREFIX + "%"])
        cur.execute(f"DELETE FROM {VideoSnapshot._meta.db_table} WHERE video_id LIKE %s OR video_id LIKE %s",
                    [BQ_PREFIX + "%", LIST_PREFIX + "%"])
    p = settings.LIKES_REDIS_PREFIX
    other = (scan_delete(f"{p}:count:view:*{{{BQ_PREFIX}*") + scan_delete(f"{p}:vis:v1:{{{BQ_PREFIX}*")
             + scan_delete(f"{p}:vis:v1:{{{LIST_PREFIX}*"))
    log(f"cleanup: relation tables and floors truncated, {keys} relation cache keys and {other} other keys dropped, "
        "run videos and snapshots deleted")


# --- main --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    from django.db import connections

    common.refuse_nudges("read-bench", "read.sh")
    waited = common.wait_for_quiet(args.wait_quiet, tag="read-bench", log=log, app_name=APP_NAME)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    bench_users, _ = prepare(users=5000, videos=2000)  # the users (and tokens) of bench/run.sh
    reset_state()
    truncate_floors()
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
            INTERFERENCE.note("my-likes")
            result["list"] = run_list(args, bench_users[-1][0])
        if not args.skip_rebuild:
            INTERFERENCE.note("rebuild")
            result["rebuild"] = run_rebuild(args)
    finally:
        for p in pools:
            p.close()
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            cleanup()
        except Exception as exc:
            log(f"cleanup failed: {exc.__class__.__name__}: {exc}")

    result["meta"] = {
        **common.run_times(wall0), "waited_for_quiet_s": waited,
        "interference": INTERFERENCE.records,
        "loadavg_at_end": common.loadavg(),
        "users": args.users, "videos": args.videos, "feed": args.feed, "batch": args.batch,
        "warmup_s": args.warmup, "duration_s": args.duration, "rounds": args.rounds, "procs": args.procs,
        "http_clients": args.http_clients, "gunicorn_workers": args.gunicorn_workers,
        "nudge_enabled": False, "rate_limit_enabled": False, "redis_down_url": DOWN_REDIS_URL,
        "error_definition": "service: feed_page_read raised "
                            "(e.g. DegradedOverloaded from the fallback limiter); HTTP: a status other than 200, a "
                            "connection error or a 10 s timeout. 'wrong': a 200 answer whose order, availability, "
                            "myState/relationVersion or displayCount differs from the prepared data. Latencies are "
                            "of successful requests that started after the warm-up and ended inside the window.",
    }
    result["machine"] = spec
    result["batch"]["data"] = {"relations_per_shard": data["relations_per_shard"] if data else None,
                               "count_views_written": data["count_views_written"] if data else None}
    wrong = sum(r["wrong"] for r in result["batch"]["rows"])
    return common.finish_run(result, OUT_PATH, report=print_report, docs=None if args.no_docs else write_docs,
                             log=log, failure=f"ERROR: {wrong} wrong answers" if wrong else None)


if __name__ == "__main__":
    sys.exit(main())
