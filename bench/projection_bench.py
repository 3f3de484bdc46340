"""Benchmark driver for the asynchronous count pipeline (issue #3 "Benchmark"; spec TEST-3).

Run through ./bench/projection.sh, which does the setup (bench/env.sh) and points every setting at the
bench databases. The run starts from empty tables and streams; the two workloads, `uniform` (users x many
videos) and `hot` (every like on one video), then share it (their relations are disjoint). For each:

  sustained  `--procs` processes call relations.services.commands.relation_set_state() (like/unlike mix,
             fresh operation ids) while, in the same window and in processes of their own, the pipeline
             runs as plain loops (no Celery, no broker): one publisher per relation shard
             (outbox_publish_batch with a unique holder), `--projectors` projector processes each owning
             a share of the stream partitions (consume_partition(CountProjector(), partition=p), the
             shared consumer framework with its leases and checkpoints), one display snapshot loop
             (display_snapshot_refresh every `--snapshot-interval` s), and one probe that commits a like
             or an unlike on a probe video every `--probe-interval` s and polls
             counting.selectors.display_count_get until the count shows it;
  drain      the load stops; the loops run on until the outbox has no pending row, every partition's
             `count` checkpoint is at the stream end and no video is dirty;
  exactness  for every video: sum of its vbuckets == durable display snapshot == LIKED relations in the
             shards (printed EXACT, or the mismatches; a mismatch makes the run exit non-zero).

And after both workloads:

  capacity   backlog replay: a workload's whole stream (kept when its phase ended) is loaded back into the
             emptied streams and projected again from the start, by our projector (count-partition state
             emptied first) and by a naive single-row counter (bench/projection/naive.py: consumer
             `naive-count`, its own checkpoints), with the same number of processes for both
             (`--replay-procs`: the pipeline's `--projectors`, and 8 = one per stream partition),
             a variant's hot and uniform replays back to back (the order alternating), so the projectors'
             own throughput is measured at saturation rather than the arrival rate of the load (which the
             sustained figures are bounded by).

Results: a table on stdout, bench/results/projection_latest.json, and the generated part of the
"Count projection pipeline" section of docs/benchmarks.md. The parts are in bench/projection/. Nothing here
asserts on timings.
"""

from __future__ import annotations

import argparse
import sys

from bench import common
from bench.dataset import HOT_VIDEO, flush_bench_redis, prepare
from bench.projection import log
from bench.projection.phases import run_capacity, run_workload
from bench.projection.pool import Layout, RolePool
from bench.projection.report import compute_ratios, exact_overall, print_report, write_docs
from bench.projection.state import prepare_pipeline, reset_workload, streams_save
from bench.sampler import ResourceSampler

# The options of bench/projection.sh beside --wait-quiet, --seed and --no-docs: name -> (default, help).
OPTIONS = {
    "users": (5000, "liking users"),
    "videos": (2000, "videos in the uniform workload"),
    "workloads": ("uniform,hot", "comma list of uniform,hot (default both)"),
    "warmup": (3.0, "seconds of load before the window"),
    "duration": (15.0, "measured seconds per workload"),
    "procs": (4, "command processes"),
    "projectors": (2, "projector processes, each owning every n-th stream partition"),
    "mix": ("like=60,unlike=40", "command mix in percent, kinds like/unlike/noop/replay"),
    "snapshot_interval": (0.2, "display snapshot cadence, s"),
    "publish_idle": (0.01, "publisher sleep after an empty claim, s"),
    "project_idle": (0.01, "projector sleep when no partition it owns has new entries, s"),
    "probe_videos": (16, "probe videos"),
    "probe_interval": (0.05, "probe commit cadence, s"),
    "probe_poll": (0.02, "probe poll interval, s"),
    "probe_timeout": (10.0, "a probe not visible after this many s is a timeout"),
    "drain_timeout": (90.0, "bound on the drain, s"),
    "replay_rounds": (3, "backlog replays per projector variant, process count and workload, alternating "
                         "which variant goes first (default 3; 0 skips)"),
    "replay_procs": ("", "process counts of the backlog replay (default: --projectors, and 8 = one per "
                         "partition)"),
}
RESULT_PATH = common.RESULTS_DIR / "projection_latest.json"


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/projection.sh", __doc__, OPTIONS, seed=20261130, wait_quiet=180.0)
    args.mix_shares = common.parse_mix(p, args.mix)
    args.workload_list = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not args.workload_list or any(w not in ("uniform", "hot") for w in args.workload_list):
        p.error("--workloads: uniform and/or hot")
    common.require_positive(p, args, ("users", "videos", "procs", "projectors", "probe_videos"))
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 1 <= args.drain_timeout <= 240
            and 0.5 <= args.probe_timeout <= 30 and 0 <= args.replay_rounds <= 5):
        p.error("out of range (duration 0-120 s, warm-up 0-30 s, drain 1-240 s, probe timeout 0.5-30 s, "
                "replay rounds 0-5)")
    for name in ("snapshot_interval", "publish_idle", "project_idle", "probe_interval", "probe_poll"):
        if not 0 < getattr(args, name) <= 5:
            p.error(f"--{name.replace('_', '-')} must be in (0, 5] s")
    procs = common.int_list(args.replay_procs) or [args.projectors, 8]
    if any(not 1 <= n <= 16 for n in procs):
        p.error("--replay-procs: counts between 1 and 16")
    args.replay_procs_list = list(dict.fromkeys(procs))
    return args


# --- main ----------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    from django.conf import settings
    from django.db import connections

    from likes_project.eventlog import streams
    from relations import routing

    common.refuse_nudges("projection", "projection.sh")
    connections.close_all()
    waited = common.wait_for_quiet(args.wait_quiet, tag="projection", log=log)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    flush_bench_redis()
    users, videos = prepare(users=args.users, videos=args.videos)
    probe_user, probe_sets, all_videos = prepare_pipeline(args, videos)
    shards = routing.all_aliases()
    n_partitions = len(streams.all_partitions())
    # The relations of the two workloads are disjoint (other videos, other probe videos), so they can share
    # the run: nothing is emptied between the workloads, and each one's stream entries are kept for the
    # replays, which then run with the hot and the uniform backlog back to back.
    own_videos = {"uniform": [*videos, *probe_sets["uniform"]], "hot": [HOT_VIDEO, *probe_sets["hot"]]}
    reset_workload()

    layout = Layout(args, shards)
    rows: list[dict] = []
    saved: dict[str, dict] = {}
    last_ids: dict[int, str] = {}
    pool = None
    try:
        pool = RolePool(layout.size)
        sampler = ResourceSampler(client_pids=set())
        for workload in args.workload_list:
            row = run_workload(pool, layout, sampler, args, workload=workload, users=users, videos=videos,
                               probe_user=probe_user, probe_videos=probe_sets[workload], all_videos=all_videos)
            saved[workload], last_ids = streams_save(last_ids)
            row["stream_entries"] = sum(len(e) for e in saved[workload].values())
            rows.append(row)
        if args.replay_rounds:
            log("backlog replays ...")
            run_capacity(pool, layout, sampler, args, rows=rows, saved=saved, own_videos=own_videos,
                         all_videos=all_videos)
        else:
            for r in rows:
                r["replays"], r["capacity"] = [], {}
    finally:
        if pool is not None:
            pool.close()
    # Leave the bench databases small: the next run (of either benchmark) starts from nothing anyway.
    reset_workload()

    result = {
        "meta": {
            **common.run_times(wall0),
            "loadavg_at_end": common.loadavg(),
            "waited_for_other_benchmarks_s": waited,
            "users": args.users, "videos": args.videos, "hot_video": HOT_VIDEO, "mix": args.mix_shares,
            "warmup_s": args.warmup, "duration_s": args.duration, "procs": args.procs,
            "publishers": len(shards), "projectors": args.projectors, "stream_partitions": n_partitions,
            "projector_batch": settings.COUNT_PROJECTOR_BATCH, "snapshot_interval_s": args.snapshot_interval,
            "count_hot_refresh_s": settings.COUNT_HOT_REFRESH_S, "probe_videos": args.probe_videos,
            "probe_interval_s": args.probe_interval, "probe_poll_s": args.probe_poll,
            "probe_timeout_s": args.probe_timeout, "replay_rounds": args.replay_rounds,
            "replay_procs": args.replay_procs_list,
            "publish_idle_s": args.publish_idle, "project_idle_s": args.project_idle,
            "celery": False, "rate_limit_enabled": False, "nudges_enabled": False,
            "error_definition": (
                "commands: relation_set_state raised; publisher: outbox_publish_batch raised, or rows went "
                "RETRY/UNCERTAIN/DEAD; projector: consume_partition raised or returned other than ok, dead "
                "letters, frozen buckets; probe: the commit raised, or the count did not show it within the "
                "probe timeout; exactness: any video whose vbucket sum or display snapshot differs from its "
                "LIKED relations after the drain (or whose counts differ after a replay)."),
        },
        "machine": spec,
        "rows": rows,
        "ratios": compute_ratios(rows, args.projectors),
    }
    result["exact"] = exact_overall(rows)
    return common.finish_run(
        result, RESULT_PATH, report=print_report, docs=None if args.no_docs else write_docs, log=log,
        clock="driver wall clock",
        failure=None if result["exact"] else "MISMATCH: a count differs from the relation facts (or the pipeline "
                                             "did not drain)")


if __name__ == "__main__":
    sys.exit(main())
