"""Benchmark driver for the reverse "who liked" index (issue 5 "Benchmark").

Run through ./bench/reverse.sh, which does the setup (bench/env.sh: the bench's own likes_bench* databases,
Redis db 14 with the prefix likes-bench, rate limiting off). One run:

  1. likers page latency: 200,000 likers of ONE video bulk-loaded with SQL into the ACTIVE reverse
     generation's tables (each user's reverse shard from counting.routing, rows on the count partition
     the generation's placement names, distinct liked_at, matching LIKED state rows), then
     counting.selectors.likers.likers_page_list (plus the cursor encoding the API does) called as the
     author with limit 20, timed at page 1 and at page 1,000 (the cursor walked once, then reused);
  2. reverse projector throughput: a backlog of N crafted LikeRelationChanged envelopes XADDed into the
     bench streams, once over many videos (uniform) and once for one video (hot), drained by
     consume_partition(ReverseIndexProjector(), partition=p) over every stream partition in 2 spawned
     processes; fresh data each round (reverse tables, receipts, stream keys and reverse checkpoints reset).

Results: a table on stdout, bench/results/reverse_latest.json and the "Reverse index (issue 5)" generated
section of docs/benchmarks.md; the parts are in bench/reverse/. Every loop is bounded by a deadline and a count.
"""

from __future__ import annotations

import argparse
import sys

from bench import common
from bench.reverse import APP_NAME, INTERFERENCE, log
from bench.reverse.likers import likers_load, likers_unload, reverse_reset, run_latency
from bench.reverse.projector import run_projector
from bench.reverse.report import print_report, write_docs

# The options of bench/reverse.sh beside --wait-quiet, --seed and --no-docs: name -> (default, help).
OPTIONS = {
    "likers": (200_000, "likers of the page video"),
    "limit": (20, "page size"),
    "deep_page": (1000, "the deep page"),
    "reps": (100, "timed fetches per page"),
    "events": (20_000, "backlog events per projector round"),
    "uniform_videos": (5000, "videos of the uniform backlog"),
    "event_users": (20_000, "users of the backlog events"),
    "rounds": (3, "projector rounds per workload"),
    "batch_size": (200, "consume_partition batch_size"),
}
OUT_PATH = common.RESULTS_DIR / "reverse_latest.json"


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/reverse.sh", __doc__, OPTIONS, seed=20261129)
    if args.likers < args.limit * args.deep_page:
        p.error("--likers must cover --limit * --deep-page")
    common.require_positive(p, args, ("limit", "deep_page", "reps", "events", "uniform_videos", "event_users",
                                      "rounds", "batch_size"))
    return args


def cleanup() -> None:
    from django.db import connections

    connections.close_all()
    keys = reverse_reset()
    likers_unload()
    log(f"cleanup: reverse tables truncated, {keys} stream keys and the reverse checkpoints deleted, "
        "likers and the page video deleted")


# --- main --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    from django.db import connections

    waited = common.wait_for_quiet(args.wait_quiet, tag="reverse-bench", log=log, app_name=APP_NAME)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    result: dict = {}
    try:
        reverse_reset()
        INTERFERENCE.note("likers load")
        result["load"] = likers_load(args)
        log(f"loaded {result['load']['likers']:,} likers in {result['load']['load_seconds']} s")
        connections.close_all()
        INTERFERENCE.note("likers latency")
        result["latency"] = run_latency(args, result["load"])
        log(f"page 1 p50 {result['latency']['page1']['p50_ms']} ms, page {args.deep_page} p50 "
            f"{result['latency']['deep']['p50_ms']} ms")
        likers_unload()
        connections.close_all()
        result["projector"] = run_projector(args)
    finally:
        try:
            cleanup()
        except Exception as exc:
            log(f"cleanup failed: {exc.__class__.__name__}: {exc}")
    result["meta"] = {**common.run_times(wall0), "waited_for_quiet_s": waited, "interference": INTERFERENCE.records,
                      "loadavg_at_end": common.loadavg(), "events": args.events,
                      "uniform_videos": args.uniform_videos, "event_users": args.event_users,
                      "rounds": args.rounds, "seed": args.seed}
    result["machine"] = spec
    bad = [r for r in result["projector"]["rounds"] if not r["ok"]]
    return common.finish_run(result, OUT_PATH, report=print_report, docs=None if args.no_docs else write_docs,
                             log=log, failure=f"ERROR: {len(bad)} projector rounds did not check out" if bad else None)


if __name__ == "__main__":
    sys.exit(main())
