"""Benchmark driver for reconciliation and repair (issue 11 "Benchmark").

Run through ./bench/reconcile.sh, which does the setup (bench/env.sh) and points every setting at the bench
databases. The run empties the tables, seeds `--relations` relations into every layer in bulk SQL (bench/reconcile/
seed.py: relation rows on both shards, their SENT outbox rows, the projection rows and vbuckets on the count
partitions, the display snapshots, the `count` checkpoints), checks the seed (the SQL hashing against the Python
routing on a sample; an identity run on a sample of videos), then:

  coverage (idle)  a coverage run over every video, as `manage.py reconcile --mode coverage --all` runs it (the
                   ops job, in a process of its own), against the naive baseline (COUNT(*) of LIKED facts vs
                   LIKED projection rows per video, no versions) and the raw SQL ceiling (one GROUP BY per
                   database with a per-video digest of every row), `--coverage-rounds` rounds in ABC / CBA order;
  coverage (load)  the same three in turn while `--procs` processes call relation_set_state and the pipeline runs
                   (one publisher per relation shard, `--projectors` projectors, the display snapshot loop: the
                   plain loops of bench/projection), between `--window` seconds of load alone before and after:
                   relations/s under load, and commands/s with and without a check running;
  exact            `--exact-runs` exact runs over `--exact-videos` videos while commands flow on them: the barrier
                   hold (CheckRun.barrier_held_ms), the time to the verdict, the commands that waited at the
                   barrier or got 503 write_barrier (and that none failed otherwise);
  repair           `--repair-rounds` times: `--damage` projection rows of the hot video (`--hot-likes` likes)
                   removed by hand in SQL with their buckets decremented, found by a coverage run, a repair from
                   the facts requested by one operator and approved by another, the system's ops job run: the
                   time from approval to display_count_get showing the facts' count, and the repair's barrier;
  final            every video's facts = Σ vbuckets = display snapshot, and every relation a command acknowledged
                   is in that state in the facts.

Results: the tables on stdout, bench/results/reconcile_latest.json, and the generated part of the "Reconciliation"
section of docs/benchmarks.md. The parts are in bench/reconcile/. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import random
import sys

from bench import common
from bench.dataset import flush_bench_redis, prepare
from bench.reconcile import APPROVER, OPERATOR, SEED_HOT_VIDEO, log, phases, seed
from bench.reconcile.pool import Layout, Pool
from bench.reconcile.report import coverage_summary, print_report, write_docs
from bench.sampler import ResourceSampler

# The options of bench/reconcile.sh beside --wait-quiet, --seed and --no-docs: name -> (default, help).
OPTIONS = {
    "relations": (1_000_000, "relations seeded in all, the hot video's included"),
    "hot_likes": (100_000, "LIKED relations of the hot video (at most half of --relations)"),
    "per_video": (50, "relations per regular video"),
    "users": (5000, "users of the command load (bench/dataset.py's)"),
    "procs": (4, "command processes"),
    "projectors": (2, "projector processes, each owning every n-th stream partition"),
    "mix": ("like=60,unlike=40", "command mix in percent, kinds like/unlike/noop/replay"),
    "warmup": (3.0, "seconds of load before anything is measured"),
    "window": (10.0, "seconds of load alone before and after the checks"),
    "coverage_rounds": (1, "idle rounds of ours / naive / ceiling (ABC, then CBA, ...)"),
    "exact_videos": (10_000, "videos in the scope of an exact run"),
    "exact_runs": (20, "exact runs"),
    "exact_gap": (1.0, "seconds of load alone between two exact runs"),
    "exact_budget": (200.0, "no exact run starts after this many seconds of the phase; 0: no bound"),
    "repair_rounds": (2, "repairs of the hot video"),
    "damage": (1000, "projection rows of the hot video removed by hand per repair round"),
    "identity_sample": (400, "videos of the identity run right after the seed (plus the hot one)"),
    "snapshot_interval": (0.2, "display snapshot cadence, s"),
    "publish_idle": (0.01, "publisher sleep after an empty claim, s"),
    "project_idle": (0.01, "projector sleep when no partition it owns has new entries, s"),
    "drain_timeout": (90.0, "bound on the drain after a phase, s"),
    "check_timeout": (900.0, "bound on one check or repair, s"),
    "poll": (0.02, "poll interval of the served count during a repair, s"),
    "skip": ("", "comma list of phases to skip: load, exact, repair"),
}
RESULT_PATH = common.RESULTS_DIR / "reconcile_latest.json"
PHASES = ("load", "exact", "repair")


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/reconcile.sh", __doc__, OPTIONS, seed=20261201, wait_quiet=180.0)
    args.mix_shares = common.parse_mix(p, args.mix)
    common.require_positive(p, args, ("relations", "hot_likes", "per_video", "users", "procs", "projectors",
                                      "coverage_rounds", "exact_videos", "exact_runs", "damage"))
    args.skip_set = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.skip_set - set(PHASES):
        p.error(f"--skip: some of {', '.join(PHASES)}")
    if not (1_000 <= args.relations <= 20_000_000 and 2 <= args.per_video <= 10_000 and 0 <= args.warmup <= 30
            and 1 <= args.window <= 120 and args.exact_runs <= 200 and 0 <= args.repair_rounds <= 10
            and args.exact_budget >= 0 and 0 <= args.exact_gap <= 30 and 10 <= args.check_timeout <= 3600):
        p.error("out of range (relations 1,000-20,000,000, per-video 2-10,000, warm-up 0-30 s, window 1-120 s, "
                "exact runs up to 200, repair rounds 0-10, check timeout 10-3600 s)")
    for name in ("snapshot_interval", "publish_idle", "project_idle", "poll"):
        if not 0 < getattr(args, name) <= 5:
            p.error(f"--{name.replace('_', '-')} must be in (0, 5] s")
    return args


def operators() -> None:
    """The two Django users the repair's maker and checker are (the services take their names)."""
    from django.contrib.auth import get_user_model

    for name in (OPERATOR, APPROVER):
        get_user_model().objects.get_or_create(username=name, defaults={"password": "!bench"})


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    from django.conf import settings
    from django.db import connections

    from relations import routing

    common.refuse_nudges("reconcile", "reconcile.sh")
    connections.close_all()
    waited = common.wait_for_quiet(args.wait_quiet, tag="reconcile", log=log)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    flush_bench_redis()
    users, _ = prepare(users=args.users, videos=0)
    operators()
    seed.reset_all()
    plan = seed.plan_for(relations=args.relations, hot=args.hot_likes, per_video=args.per_video)
    log(f"seeding {plan.relations:,} relations: {plan.videos:,} videos x {plan.per_video} + the hot video's "
        f"{plan.hot:,} ({plan.users:,} users) ...")
    seeded = seed.seed(plan)
    log(f"seeded in {seeded['seconds']}s; checking the routing on a sample ...")
    rng = random.Random(args.seed)
    seed_check = seed.verify_sample(plan, rng=rng)
    videos = plan.video_ids()
    exact_scope = videos[:args.exact_videos]
    if len(exact_scope) < args.exact_videos:
        log(f"only {len(exact_scope):,} regular videos: the exact scope is all of them")
    sample = [*sorted(rng.sample(videos, min(args.identity_sample, len(videos)))), SEED_HOT_VIDEO]

    layout = Layout(procs=args.procs, projectors=args.projectors, shards=routing.all_aliases())
    result: dict = {}
    warnings: list[str] = []
    pool = None
    try:
        pool = Pool(layout.size)
        h = phases.Harness(pool, layout, ResourceSampler(client_pids=set()), args, users)
        identity = h.check("check", mode="identity", scope={"videos": sample}, timeout=args.check_timeout)
        log(f"identity on {len(sample)} videos: {identity['status']} ({identity['diffs']} diffs); routing sample "
            f"{'ok' if seed_check['ok'] else seed_check['wrong']}")
        result.update(seed=seeded, seed_check=seed_check, identity_sample=identity)
        if identity["status"] != "PASSED" or not seed_check["ok"]:
            raise SystemExit("[reconcile] the seeded state is not consistent; nothing measured")
        log("coverage, idle ...")
        result["coverage_idle"] = phases.phase_coverage_idle(h)
        if "load" not in args.skip_set:
            log(f"coverage under the command load ({args.procs} processes) ...")
            result["coverage_load"] = phases.phase_coverage_load(h, videos)
        if "exact" not in args.skip_set:
            log(f"exact mode on {len(exact_scope):,} videos while commands flow ({args.exact_runs} runs) ...")
            result["exact"] = phases.phase_exact(h, exact_scope)
        if "repair" not in args.skip_set and args.repair_rounds:
            log(f"repair of {SEED_HOT_VIDEO} ({plan.hot:,} likes), {args.repair_rounds} round(s) ...")
            result["repair"] = phases.phase_repair(h, videos)
        log("final state ...")
        result["final"] = phases.final_state(h.acks)
    finally:
        if pool is not None:
            pool.close()
    # Leave the bench databases small: the next run (of any benchmark) starts from nothing anyway.
    seed.reset_all()

    for r in result["coverage_idle"]:
        if (r["variant"] == "ours" and r["status"] != "PASSED") or r.get("mismatched_videos"):
            warnings.append(f"idle {r['variant']} round {r['round'] + 1} did not pass on the seeded state")
    for r in (result.get("coverage_load") or {}).get("checks") or []:
        if r["variant"] == "ours" and r["status"] != "PASSED":
            warnings.append(f"coverage under load was {r['status']} ({r['diffs']} diffs, layers {r['diff_layers']}) "
                            "where the final check found the state exact: events in flight taken for damage")
    if result.get("exact") and set(result["exact"]["statuses"]) - {"PASSED"}:
        warnings.append(f"exact runs: {result['exact']['statuses']}")
    bad_repairs = [r for r in (result.get("repair") or {}).get("rounds", []) if r["status"] != "SUCCEEDED"
                   or r["served_after"] != r["facts_after"]]
    final = result["final"]
    failure = None
    if not (final["buckets_exact"] and final["snapshots_exact"]) or final["acknowledged_lost"] or bad_repairs:
        failure = "MISMATCH: a count differs from the facts, an acknowledged relation was lost, or a repair failed"
    result["meta"] = {
        **common.run_times(wall0), "loadavg_at_end": common.loadavg(), "waited_for_other_benchmarks_s": waited,
        "relations": plan.relations, "plan": plan.__dict__, "users": args.users, "procs": args.procs,
        "projectors": args.projectors, "publishers": len(layout.publishers), "mix": args.mix_shares,
        "warmup_s": args.warmup, "window_s": args.window, "coverage_rounds": args.coverage_rounds,
        "exact_videos": len(exact_scope), "exact_runs": args.exact_runs, "exact_gap_s": args.exact_gap,
        "exact_budget_s": args.exact_budget, "repair_rounds": args.repair_rounds, "damage": args.damage,
        "snapshot_interval_s": args.snapshot_interval, "operator": OPERATOR, "approver": APPROVER,
        "reconcile_batch_videos": settings.RECONCILE_BATCH_VIDEOS,
        "coverage_settle_s": settings.RECONCILE_COVERAGE_SETTLE_S, "barrier_max_ms": settings.RECONCILE_BARRIER_MAX_MS,
        "barrier_video_locks_max": settings.RECONCILE_BARRIER_VIDEO_LOCKS_MAX,
        "drain_max_s": settings.RECONCILE_DRAIN_MAX_S, "skipped_phases": sorted(args.skip_set),
        "celery": False, "rate_limit_enabled": False, "nudges_enabled": False,
        "error_definition": (
            "commands: relation_set_state raised anything but WriteBarrierHeld (503 write_barrier is counted on its "
            "own); checks: a run not PASSED on a consistent state, a baseline finding a difference; repair: not "
            "SUCCEEDED, or the served count not the facts' afterwards; final: any video whose vbucket sum or display "
            "snapshot differs from its LIKED relations, or an acknowledged relation not in the facts."),
    }
    result["machine"] = spec
    result["coverage_summary"] = coverage_summary(result)
    result["warnings"] = warnings
    return common.finish_run(result, RESULT_PATH, report=print_report, docs=None if args.no_docs else write_docs,
                             log=log, clock="driver wall clock", failure=failure)


if __name__ == "__main__":
    sys.exit(main())
