"""Benchmark driver for the like command path (issue #2 "Benchmark"; spec TEST-2, TEST-3, TEST-4).

Run through ./bench/run.sh, which does the setup and points every setting at the bench databases.
In one run it measures, each for a fixed window after a warm-up, with concurrent clients:

  service layer  processes calling relations.services.commands.relation_set_state() directly
  HTTP           PUT /v1/videos/<id>/like-relation against gunicorn (sync workers) on 127.0.0.1
  naive          both of the above plus `UPDATE bench_naive_video SET like_count = like_count +/- 1` in the
                 command transaction (bench/naive.py wraps outbox_event_write; production code is untouched)
  pgbench        the same statements as raw SQL on one relation shard (the ceiling), and the naive hot variant

for two workloads: `uniform` (users x many videos, random pairs) and `hot` (the same users x one video).
Results: a table on stdout, bench/results/latest.json, and the generated section of docs/benchmarks.md
(bench/command/runs.py measures, bench/command/report.py writes the report). Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

from bench import common
from bench.command.report import compute_ratios, print_report, write_docs
from bench.command.runs import client_pool, run_layer, run_pgbench, run_probe
from bench.dataset import HOT_VIDEO, flush_bench_redis, prepare, reset_state
from bench.procs import Gunicorn
from bench.sampler import ResourceSampler

log = common.bench_log
# The options of bench/run.sh beside --wait-quiet, --seed and --no-docs: name -> (default, help).
OPTIONS = {
    "users": (5000, "liking users"),
    "videos": (2000, "videos in the uniform workload"),
    "warmup": (2.0, "seconds of warm-up before each window"),
    "duration": (3.0, "seconds measured per workload and round"),
    "rounds": (4, "rounds per layer, in ABBA order; a row pools its rounds (default 4, so 12 s per row)"),
    "procs": (8, "service-layer client processes"),
    "http_clients": (8, "HTTP client processes"),
    "gunicorn_workers": (4, "gunicorn sync workers"),
    "mix": ("like=55,unlike=30,noop=10,replay=5", "command mix in percent"),
    "pgbench_clients": ("8,16,32", "pgbench client counts"),
    "pgbench_naive_clients": ("8,32", "naive hot pgbench client counts"),
    "pgbench_duration": (8, "seconds per pgbench run"),
    "probe_commands": (300, "commands of the single-client cost probe (default 300; 0 skips it)"),
    "skip_http": (False, ""), "skip_naive": (False, ""), "skip_pgbench": (False, ""),
}
RESULT_PATH = common.RESULTS_DIR / "latest.json"


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """The checks and derived values of the options this driver shares with bench/levers.py."""
    args.mix_shares = common.parse_mix(p, args.mix)
    args.pgbench_clients_list = common.int_list(args.pgbench_clients)
    common.require_positive(p, args, ("users", "videos", "procs", "http_clients", "gunicorn_workers", "rounds"))
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 1 <= args.pgbench_duration <= 120):
        p.error("durations out of range (duration 0-120 s, warm-up 0-30 s, pgbench 1-120 s)")
    return args


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/run.sh", __doc__, OPTIONS, seed=20261129)
    args.pgbench_naive_clients_list = common.int_list(args.pgbench_naive_clients)
    return check_args(p, args)


# --- main ----------------------------------------------------------------------------------------


def start_run(args: argparse.Namespace, *, tag: str):
    """The start this driver shares with bench/levers.py: the driver's frame, the wait for a quiet machine,
    a work directory, the machine spec and the bench data. Returns (wall0, waited, workdir, spec, users, videos)."""
    wall0 = common.start_driver()
    from django.db import connections

    connections.close_all()
    waited = common.wait_for_quiet(args.wait_quiet, tag=tag, log=log)
    workdir = Path(tempfile.mkdtemp(prefix=f"likes-{tag}-"))
    spec = common.machine_spec()
    common.log_machine(spec, log)
    flush_bench_redis()
    users, videos = prepare(users=args.users, videos=args.videos)
    connections.close_all()
    return wall0, waited, workdir, spec, users, videos


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0, waited, workdir, spec, users, videos = start_run(args, tag="bench")

    rows: list[dict] = []
    probe: dict | None = None
    pool = None
    try:
        pool = client_pool(max(args.procs, 1 if args.skip_http else args.http_clients))
        sampler = ResourceSampler(client_pids=pool.pids)
        variants = [False] if args.skip_naive else [False, True]
        rows += run_layer(pool, sampler, args, layer="service", variants=variants, users=users, videos=videos)
        if args.probe_commands > 0:
            probe = run_probe(pool, args, users=users, videos=videos)
        if not args.skip_http:
            # Both servers run side by side (an idle one costs no CPU), so the rounds can alternate.
            with contextlib.ExitStack() as stack:
                servers = {}
                for naive in variants:
                    app = "bench.naive_wsgi:application" if naive else "likes_project.wsgi:application"
                    servers[naive] = stack.enter_context(Gunicorn(app, args.gunicorn_workers, workdir))
                rows += run_layer(pool, sampler, args, layer="http", variants=variants, users=users,
                                  videos=videos, servers=servers)
        pool.close()
        pool = None
        if not args.skip_pgbench and not (shutil.which("pgbench") or Path("/usr/bin/pgbench").exists()):
            log("pgbench not found (Debian package postgresql-client); skipping the raw SQL ceiling")
            args.skip_pgbench = True
        if not args.skip_pgbench:
            for c in args.pgbench_clients_list:
                rows.append(run_pgbench(args, sampler, naive_hot=False, clients=c, workdir=workdir))
            if not args.skip_naive:
                for c in args.pgbench_naive_clients_list:
                    rows.append(run_pgbench(args, sampler, naive_hot=True, clients=c, workdir=workdir))
        reset_state()
    finally:
        if pool is not None:
            pool.close()
        shutil.rmtree(workdir, ignore_errors=True)

    result = {
        "meta": {
            **common.run_times(wall0), "waited_for_quiet_s": waited,
            "users": args.users, "videos": args.videos, "hot_video": HOT_VIDEO, "mix": args.mix_shares,
            "warmup_s": args.warmup, "duration_s": args.duration, "rounds": args.rounds, "procs": args.procs,
            "http_clients": args.http_clients, "gunicorn_workers": args.gunicorn_workers,
            "pgbench_duration_s": args.pgbench_duration, "rate_limit_enabled": False,
            "error_definition": "service: relation_set_state raised; HTTP: status other than 200, connection "
                                "error or 10 s timeout; pgbench: failed transactions. Latencies are of "
                                "successful commands in the measured window.",
        },
        "machine": spec,
        "rows": rows,
        "ratios": compute_ratios(rows),
        "single_client_probe": probe,
    }
    return common.finish_run(result, RESULT_PATH, report=print_report, docs=None if args.no_docs else write_docs,
                             log=log, clock="driver wall clock")


if __name__ == "__main__":
    sys.exit(main())
