"""Benchmark driver for recovery snapshots and the restore from them (issue 12 "Benchmark").

Run through ./bench/snapshot.sh, which does the setup (bench/env.sh), points every setting at the bench databases
and the snapshot storage at a directory of the bench's own. The run empties the tables, seeds `--relations`
relations into every layer in bulk SQL (bench/reconcile/seed.py: so as many projection rows, their vbuckets, the
relation shards, the SENT outbox, the display snapshots, the `count` checkpoints), checks the seed (the routing
on a sample; an identity run on a sample of videos), then:

  idle     a snapshot as `manage.py snapshot_create` takes it (the ops job, run by a process of its own as a
           worker runs it), against the naive baseline (a stop-the-world snapshot: dispatch stopped for the whole
           dump, one JSON line per row through the ORM, gzip) and the raw SQL ceiling (the minimal cut, then a raw
           COPY of both tables into /dev/null), `--idle-rounds` rounds in ABC / CBA order: build time, artifact
           rows and bytes per kind;
  builds   `--procs` processes calling relation_set_state and the pipeline running (one publisher per relation
           shard, `--projectors` projectors, the display snapshot loop: bench/reconcile's processes); after a
           window of load alone, `--snapshots` builds of ours (the dispatch pause p50 / p99 from
           RecoverySnapshot.dispatch_paused_ms, the build time, the commands during the builds), then
           `--baseline-runs` rounds of the ceiling and the naive build under the same load, then `--after`
           seconds of load whose events the restore replays;
  restore  the command load stopped (its events after the last snapshot are what the restore replays; with
           --recover-under-load it keeps running), the pipeline running: every projection row and vbucket of
           one count partition deleted by hand; repairs from the facts (`--facts-batches` scopes of
           `--facts-batch` videos, requested by one operator, approved by another, run by the system's job),
           extrapolated to every video when not all were repaired (the output says which); the restore of the
           last sealed snapshot through the same flow (`repair_request --source snapshot:<id>`: verify, load,
           replay from each nextOffset[p], identity and coverage, the fenced switch, then the exact run over
           every video); the restore's load against a raw COPY FROM of the same rows and an ORM bulk_create of
           the naive dump (both rolled back);
  final    the load stopped and the pipeline drained: every video's facts = Σ vbuckets = display snapshot, and
           every relation a command acknowledged is in that state in the facts.

Results: the tables on stdout and bench/results/snapshot_latest.json (its "markdown" key holds the generated part
of a docs/benchmarks.md section; this driver never writes docs/benchmarks.md, so --no-docs changes nothing). The
parts are in bench/snapshot/. Nothing here asserts on timings; the exit code is 1 when a count is wrong, an
acknowledged relation is lost, or a repair or the restore did not succeed.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

from bench import common, reconcile_bench
from bench.dataset import prepare
from bench.reconcile import APPROVER, OPERATOR, seed
from bench.reconcile.phases import Harness, _pooled_windows, command_figures, final_state
from bench.reconcile.pool import Layout, Pool
from bench.sampler import ResourceSampler
from bench.snapshot import log, phases, storage_dir, storage_reset
from bench.snapshot.autoanalyze import AutoAnalyze, server_autovacuum
from bench.snapshot.report import generated_section, print_report, summary

# The options of bench/snapshot.sh beside --wait-quiet, --seed and --no-docs: name -> (default, help). The command
# load's and the pipeline loops' are bench/reconcile_bench.py's, with its defaults.
SHARED_OPTIONS = ("users", "procs", "projectors", "mix", "warmup", "snapshot_interval", "publish_idle", "project_idle")
OPTIONS = {
    "relations": (1_000_000, "relations seeded in all (each one projection row)"),
    "per_video": (50, "relations per video"),
    "hot_likes": (0, "LIKED relations of one hot video besides (bench/reconcile's seed; at most half)"),
    **{name: reconcile_bench.OPTIONS[name] for name in SHARED_OPTIONS},
    "window": (10.0, "seconds of load alone before the first build under load"),
    "idle_rounds": (1, "idle rounds of ours / naive / ceiling (ABC, then CBA, ...); 0: none"),
    "snapshots": (20, "builds of ours under the command load (the dispatch pause p50 / p99)"),
    "snapshot_gap": (1.0, "seconds of load alone between two builds"),
    "baseline_runs": (1, "rounds of the ceiling and the naive build under the load; 0: none"),
    "after": (10.0, "seconds of load after the builds, before the damage (events the restore replays)"),
    "recover_under_load": (False, "keep the command load running through the repairs and the restore (by default it "
                                  "stops before the damage; its events after the snapshot are replayed)"),
    "damage_partition": ("", "count partition alias whose rows are deleted (default: the last)"),
    "facts_batch": (200, "videos per repair from the facts"),
    "facts_batches": (3, "repairs from the facts measured, spread over the videos; 0: every video (no "
                         "extrapolation)"),
    "autoanalyze_naptime": (60.0, "when the server's autovacuum is off: every this many seconds, ANALYZE the count "
                                  "partitions' tables as autovacuum would (bench/snapshot/autoanalyze.py); 0: never"),
    "statement_timeout_ms": (-1, "DB_STATEMENT_TIMEOUT_MS of every process of the run (0: none); -1: the product's "
                                 "(5000 unless the environment says otherwise)"),
    "idle_tx_timeout_ms": (-1, "DB_IDLE_IN_TX_TIMEOUT_MS of every process of the run (0: none); -1: the product's "
                               "(30000 unless the environment says otherwise)"),
    "identity_sample": (400, "videos of the identity run right after the seed"),
    "drain_timeout": (120.0, "bound on the drain after the load, s"),
    "check_timeout": (3600.0, "bound on one build, repair or restore, s"),
    "skip": ("", "comma list of parts to skip: idle, naive"),
}
RESULT_PATH = common.RESULTS_DIR / "snapshot_latest.json"
SKIPPABLE = ("idle", "naive")


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/snapshot.sh", __doc__, OPTIONS, seed=20261212, wait_quiet=180.0)
    args.mix_shares = common.parse_mix(p, args.mix)
    common.require_positive(p, args, ("relations", "per_video", "users", "procs", "projectors", "snapshots",
                                      "facts_batch"))
    args.skip_set = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.skip_set - set(SKIPPABLE):
        p.error(f"--skip: some of {', '.join(SKIPPABLE)}")
    if not (1_000 <= args.relations <= 20_000_000 and 2 <= args.per_video <= 10_000 and args.hot_likes >= 0
            and 0 <= args.warmup <= 30 and 1 <= args.window <= 120 and args.snapshots <= 200
            and 0 <= args.idle_rounds <= 5 and 0 <= args.baseline_runs <= 10 and 0 <= args.snapshot_gap <= 60
            and 0 <= args.after <= 600 and args.facts_batches >= 0 and 10 <= args.check_timeout <= 7200
            and 0 <= args.autoanalyze_naptime <= 3600 and args.statement_timeout_ms >= -1
            and args.idle_tx_timeout_ms >= -1):
        p.error("out of range (relations 1,000-20,000,000, per-video 2-10,000, warm-up 0-30 s, window 1-120 s, "
                "snapshots up to 200, idle rounds 0-5, baseline runs 0-10, gap 0-60 s, after 0-600 s, check "
                "timeout 10-7200 s, autoanalyze naptime 0-3600 s)")
    for name in ("snapshot_interval", "publish_idle", "project_idle"):
        if not 0 < getattr(args, name) <= 5:
            p.error(f"--{name.replace('_', '-')} must be in (0, 5] s")
    return args


def snapshots_forget() -> None:
    """Earlier runs' snapshots: their artifacts are gone with the storage directory, so they are expired
    (sealed) or failed (left building); the rows stay for the audit trail."""
    from reconciliation.models import RecoverySnapshot, SnapshotStatus

    RecoverySnapshot.objects.filter(status=SnapshotStatus.SEALED).update(status=SnapshotStatus.EXPIRED, artifacts=[])
    RecoverySnapshot.objects.filter(status=SnapshotStatus.BUILDING).update(
        status=SnapshotStatus.FAILED, failure="bench/snapshot.sh: left building by an earlier run")


def seed_data(args) -> tuple:
    """The users of the command load and the operators, every table emptied, then the data set seeded and its
    routing checked on a sample. Returns the plan, the users, {seed, seed_check}, the videos, the identity sample."""
    users, _ = prepare(users=args.users, videos=0)
    reconcile_bench.operators()
    seed.reset_all()  # the bench Redis namespace too
    storage_reset()
    snapshots_forget()
    plan = seed.plan_for(relations=args.relations, hot=args.hot_likes, per_video=args.per_video)
    log(f"seeding {plan.relations:,} relations: {plan.videos:,} videos x {plan.per_video}"
        + (f" + a hot video's {plan.hot:,}" if plan.hot else "") + f" ({plan.users:,} users) ...")
    data = {"seed": seed.seed(plan)}
    rng = random.Random(args.seed)
    data["seed_check"] = seed.verify_sample(plan, rng=rng)
    all_videos = plan.video_ids()
    log(f"seeded in {data['seed']['seconds']}s; the routing of a sample: "
        f"{'ok' if data['seed_check']['ok'] else data['seed_check']['wrong']}")
    return plan, users, data, all_videos, sorted(rng.sample(all_videos, min(args.identity_sample, len(all_videos))))


def identity_checked(h: Harness, sample: list[str], data: dict) -> dict:
    """An identity run (the ops job) on the sampled videos: the seeded state must be consistent."""
    run = h.check("check", mode="identity", scope={"videos": sample}, timeout=h.args.check_timeout)
    log(f"identity run on {len(sample)} sampled videos: {run['status']}, {run['diffs']} diffs")
    if run["status"] != "PASSED" or not data["seed_check"]["ok"]:
        raise SystemExit("[snapshot] the seeded data set is not consistent; nothing measured")
    return {**data, "identity_sample": run}


def command_phases(rows: list[tuple], result: dict) -> dict:
    """The commands of the load session: load alone, during the builds of each variant, the repairs, the restore."""
    builds = result["builds"]
    out = {"load_alone": command_figures(rows, *builds["pre"]),
           "during_ours": _pooled_windows(rows, [(r["t_start"], r["t_end"]) for r in builds["ours"]])}
    for v in ("ceiling", "naive"):
        runs = [r for r in builds["baselines"] if r["variant"] == v]
        if runs:
            out[f"during_{v}"] = _pooled_windows(rows, [(r["t_start"], r["t_end"]) for r in runs])
    rest = result.get("restore")
    if rest:  # without --recover-under-load no command runs then
        if rest["facts"]:
            out["during_facts_repairs"] = _pooled_windows(rows, [(r["t_start"], r["t_end"]) for r in rest["facts"]])
        out["during_restore"] = command_figures(rows, rest["restore"]["t_start"], rest["restore"]["t_end"])
    return {k: v for k, v in out.items() if v and v.get("commands")}


def main(argv=None) -> int:
    args = parse_args(argv)
    # Before django.setup(): the settings read them; the spawned processes inherit them.
    for name, value in (("DB_STATEMENT_TIMEOUT_MS", args.statement_timeout_ms),
                        ("DB_IDLE_IN_TX_TIMEOUT_MS", args.idle_tx_timeout_ms)):
        if value >= 0:
            os.environ[name] = str(value)
    wall0 = common.start_driver()
    from django.conf import settings
    from django.db import connections

    from likes_project.settings.databases import IDLE_IN_TX_TIMEOUT_MS, STATEMENT_TIMEOUT_MS
    from relations import routing

    common.refuse_nudges("snapshot", "snapshot.sh")
    storage_dir()  # refuses anything but the bench's own directory before anything is emptied
    connections.close_all()
    waited = common.wait_for_quiet(args.wait_quiet, tag="snapshot", log=log)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    plan, users, data, videos, sample = seed_data(args)
    batches = phases.facts_batches(videos, args.facts_batch, args.facts_batches)

    layout = Layout(procs=args.procs, projectors=args.projectors, shards=routing.all_aliases())
    result: dict = {}
    pool = None
    autovacuum = server_autovacuum()
    analyzer = AutoAnalyze(args.autoanalyze_naptime) if autovacuum == "off" and args.autoanalyze_naptime > 0 else None
    if analyzer is not None:
        log(f"the server's autovacuum is off: its ANALYZE is stood in for every {args.autoanalyze_naptime:g} s on the "
            "count partitions (--autoanalyze-naptime 0: never)")
        analyzer.start()
    try:
        pool = Pool(layout.size)
        h = Harness(pool, layout, ResourceSampler(client_pids=set()), args, users)
        result.update(identity_checked(h, sample, data))
        if "idle" not in args.skip_set and args.idle_rounds:
            log(f"builds with nothing else running ({args.idle_rounds} round(s) of {phases.variants_wanted(h)}) ...")
            result["idle"] = phases.phase_idle(h)
        log(f"builds under the command load ({args.procs} processes): {args.snapshots} of ours, then "
            f"{args.baseline_runs} round(s) of the baselines ...")
        load = phases.load_start(h, videos, batches=len(batches))
        result["builds"] = phases.phase_builds(h, load)
        sealed = result["builds"]["sealed_id"]
        cmds = None
        if not args.recover_under_load:
            log("stopping the command load (its events after the last snapshot stay to be replayed) ...")
            cmds = h.commands_stop()
        if sealed is None:
            log("  no build under load was SEALED: nothing to restore")
        else:
            log(f"restore of snapshot {sealed} against {len(batches)} repair(s) from the facts of "
                f"{args.facts_batch} videos, {'the command load running' if args.recover_under_load else 'no commands'}"
                " ...")
            result["restore"] = phases.phase_restore(h, videos, sealed, batches)
        log("stopping the load and draining the pipeline ...")
        cmds, loops = phases.load_stop(h, cmds)
        result["commands"] = command_phases(cmds["rows"], result)
        result["loops"] = loops
        log("final state ...")
        result["final"] = final_state(h.acks)
    finally:
        if pool is not None:
            pool.close()
        if analyzer is not None:
            result["autoanalyze"] = analyzer.stop()
    # Leave the bench databases and the storage directory small: the next run starts from nothing anyway.
    seed.reset_all()
    storage_reset()

    result["meta"] = {
        **common.run_times(wall0), "snapshots": args.snapshots, "snapshot_gap_s": args.snapshot_gap,
        "baseline_runs": args.baseline_runs, "idle_rounds": args.idle_rounds, "after_s": args.after,
        "recover_under_load": args.recover_under_load, "facts_batch": args.facts_batch,
        "facts_batches": len(batches), "facts_batches_wanted": args.facts_batches, "relations": plan.relations,
        "plan": plan.__dict__, "users": args.users, "procs": args.procs, "projectors": args.projectors,
        "publishers": len(layout.publishers), "mix": args.mix_shares, "warmup_s": args.warmup, "window_s": args.window,
        "snapshot_interval_s": args.snapshot_interval, "operator": OPERATOR, "approver": APPROVER,
        "skipped": sorted(args.skip_set), "loadavg_at_end": common.loadavg(), "waited_for_other_benchmarks_s": waited,
        "count_partitions": list(settings.COUNT_PARTITION_ALIASES), "stream_partitions": settings.STREAM_PARTITIONS,
        "snapshot_keep": settings.SNAPSHOT_KEEP, "snapshot_replay_fence_lag": settings.SNAPSHOT_REPLAY_FENCE_LAG,
        "drain_max_s": settings.RECONCILE_DRAIN_MAX_S, "reconcile_batch_videos": settings.RECONCILE_BATCH_VIDEOS,
        "barrier_video_locks_max": settings.RECONCILE_BARRIER_VIDEO_LOCKS_MAX,
        "count_projector_batch": settings.COUNT_PROJECTOR_BATCH, "server_autovacuum": autovacuum,
        "autoanalyze_naptime_s": args.autoanalyze_naptime if analyzer is not None else None,
        "statement_timeout_ms": STATEMENT_TIMEOUT_MS, "idle_tx_timeout_ms": IDLE_IN_TX_TIMEOUT_MS,
        "db_timeouts_overridden": args.statement_timeout_ms >= 0 or args.idle_tx_timeout_ms >= 0,
        "storage": "local directory (filesystem backend)",
        "celery": False, "rate_limit_enabled": False, "nudges_enabled": False,
        "error_definition": (
            "a snapshot of ours not SEALED; a repair or the restore not SUCCEEDED; final: any video whose Σ routed "
            "vbuckets or display snapshot differs from its LIKED relations, or an acknowledged relation not in the "
            "facts. Commands: relation_set_state raised anything but WriteBarrierHeld (503 counted on its own)."),
    }
    result["machine"] = spec
    result["summary"] = summary(result)
    warnings = list(result["summary"]["warnings"])
    final = result["final"]
    rest = result.get("restore") or {}
    failure = None
    bad = [f"facts repair {r['batch'] + 1}: {r['status']}" for r in rest.get("facts", []) if r["status"] != "SUCCEEDED"]
    if rest and rest["restore"]["status"] != "SUCCEEDED":
        bad.append(f"restore: {rest['restore']['status']} {rest['restore']['error']}")
    if not rest:
        bad.append("no snapshot was restored")
    if not (final["buckets_exact"] and final["snapshots_exact"]) or final["acknowledged_lost"] or bad:
        failure = ("MISMATCH: a count differs from the facts, an acknowledged relation was lost, or a repair / the "
                   f"restore failed ({'; '.join(bad) or 'counts'})")
    result["warnings"] = warnings
    result["markdown"] = generated_section(result)
    return common.finish_run(result, RESULT_PATH, report=print_report, docs=None, log=log,
                             clock="driver wall clock", failure=failure)


if __name__ == "__main__":
    sys.exit(main())
