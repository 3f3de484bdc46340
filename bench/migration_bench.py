"""Benchmark driver for the online virtual-bucket migration of count partitions (issue 13 "Benchmark").

Run through ./bench/migration.sh, which does the setup (bench/env.sh), points every setting at this benchmark's own
databases (likes_bench_mig*, dropped and bootstrapped again by migrate_all) with three count partitions of which
two were bootstrapped (cnt_02 holds no routes). The run seeds `--scale` projection rows into the `--buckets` buckets
of cnt_00 that move (and `--rest-share` as many a bucket into every other bucket), with their vbuckets, in bulk
straight into the count partitions (bench/migration/seed.py: no relation facts for them), then:

  throughput  before the move: `--burst-rounds` backlogs of `--burst` events (new relations written as like
              commands leave them, published by the real publishers) applied by `--projectors` projector
              processes with nothing else running: events applied/s;
  big         the command load (`--procs` processes calling relation_set_state on videos of its own) and the
              pipeline running (one publisher per relation shard, the projectors, the display snapshot loop: the
              change log of the moving buckets is live during the copy); after a window of load alone, the
              migration of the buckets cnt_00 -> cnt_02 by the product (plan by one operator, approval by another,
              the ops job run to its end by a process of its own as a worker runs it): total and per-step
              durations, rows copied/s, the write pause (BucketMigration.write_pause_ms) and what it is made of,
              the commands and the projection lag during it;
  throughput  after the move (cnt_02 holds the moved buckets), the same backlogs;
  series      the load again: `--series` migrations moving `--series-buckets` of those buckets back and forth
              between cnt_02 and cnt_00 (the write pause p50 / p99), then the naive stop-the-world move (the
              projector stopped, the rows copied by executemany, the routes switched; rolled back) and the raw SQL
              ceiling (COPY TO STDOUT -> COPY FROM STDIN between the two databases; rolled back) of the big set's
              rows;
  again       the backlogs once more with the buckets on cnt_02; then, with nothing else running, the raw COPY
              ceiling of the same rows and the reverse migration of the buckets back to cnt_00 (the same move
              without the load), and the backlogs once more on the bootstrap's layout (2, 3, 3, 2 partitions);
  final       the load stopped and the pipeline drained: the seeded videos' routed sums are what the seed wrote;
              every load and backlog video's facts = Σ routed vbuckets = display snapshot; no acknowledged
              relation lost; one writer per bucket (INV-11); no rows left on a retired source.

Results: the tables on stdout and bench/migration/results-<scale>.json (gitignored; its "markdown" key holds the
generated part of the docs/benchmarks.md section, which this driver never writes). Nothing asserts on timings;
the exit code is 1 when a migration did not reach RETIRED with its VERIFY passed, or a final check failed.
"""

from __future__ import annotations

import argparse
import os
import sys

from bench import common, reconcile_bench
from bench.common import BENCH_DIR
from bench.migration import APPROVER, LOAD_VIDEO_PREFIX, OPERATOR, SEED_VIDEO_PREFIX, TARGET, check_own_databases, log

SHARED_OPTIONS = ("users", "procs", "projectors", "mix", "warmup", "snapshot_interval", "publish_idle", "project_idle")
OPTIONS = {
    "scale": (1_000_000, "projection rows seeded in the buckets that move (their vbuckets besides)"),
    "buckets": (256, "buckets moved cnt_00 -> cnt_02: the first N of those the bootstrap routed to cnt_00"),
    "per_video": (50, "seeded relations per video"),
    "rest_share": (0.25, "rows a bucket seeded in every other bucket, as a share of a moving bucket's"),
    **{name: reconcile_bench.OPTIONS[name] for name in SHARED_OPTIONS},
    "load_videos": (2000, "videos of the command load (their own: no seeded rows)"),
    "window": (10.0, "seconds of load alone before and after the migrations of a session"),
    "series": (10, "migrations in the write-pause series (0: none)"),
    "series_buckets": (0, "buckets each series migration moves (the first N of the moved ones; 0: all of them)"),
    "series_gap": (2.0, "seconds of load alone between two migrations of the series"),
    "burst": (20_000, "events of one throughput backlog"),
    "burst_rounds": (2, "throughput backlogs before and after the move (0: no throughput measurement)"),
    "retention_s": (0.0, "BUCKET_MIGRATION_RETENTION_S of the run: the source copy's cleanup runs in the job when 0"),
    "copy_chunk": (0, "BUCKET_MIGRATION_COPY_CHUNK of the run (0: the product's, 5000)"),
    "cutover_lag": (-1, "BUCKET_MIGRATION_CUTOVER_LAG of the run (-1: the product's, 2000)"),
    "naive_batch": (1000, "rows per executemany of the naive move"),
    "no_vacuum": (False, "no VACUUM (ANALYZE) stand-in after each migration, even when the server's autovacuum is "
                         "off"),
    "job_lease_s": (-1.0, "OPS_JOB_LEASE_S of every process of the run (-1: the product's, 60): a job that renews "
                          "nothing for this long loses its lease"),
    "statement_timeout_ms": (-1, "DB_STATEMENT_TIMEOUT_MS of every process of the run (0: none); -1: the product's"),
    "idle_tx_timeout_ms": (-1, "DB_IDLE_IN_TX_TIMEOUT_MS of every process of the run (0: none); -1: the product's"),
    "drain_timeout": (180.0, "bound on a drain and on one backlog's publish or replay, s"),
    "check_timeout": (3600.0, "bound on one migration, s"),
    "autovacuum_naptime": (60.0, "when the server's autovacuum is off: every this many seconds, VACUUM / ANALYZE "
                                 "the tables of every database of the run as autovacuum would "
                                 "(bench/migration/autovacuum.py); 0: never"),
    "skip": ("", "comma list of parts to skip: throughput, series, naive, ceiling, reverse"),
}
SKIPPABLE = ("throughput", "series", "naive", "ceiling", "reverse")


def result_path(scale: int):
    return BENCH_DIR / "migration" / f"results-{scale}.json"


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/migration.sh", __doc__, OPTIONS, seed=20261213, wait_quiet=180.0)
    args.mix_shares = common.parse_mix(p, args.mix)
    common.require_positive(p, args, ("scale", "buckets", "per_video", "users", "procs", "projectors", "load_videos",
                                      "burst", "naive_batch"))
    args.skip_set = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.skip_set - set(SKIPPABLE):
        p.error(f"--skip: some of {', '.join(SKIPPABLE)}")
    if not (1_000 <= args.scale <= 20_000_000 and 1 <= args.buckets <= 512 and 2 <= args.per_video <= 10_000
            and 0 <= args.rest_share <= 1 and 0 <= args.series <= 100 and 0 <= args.series_buckets <= args.buckets
            and 0 <= args.series_gap <= 60 and 0 <= args.burst_rounds <= 10 and args.retention_s >= 0
            and args.copy_chunk >= 0 and args.cutover_lag >= -1 and 1 <= args.window <= 120
            and 0 <= args.warmup <= 30 and 10 <= args.check_timeout <= 7200 and 10 <= args.drain_timeout <= 3600):
        p.error("out of range (scale 1,000-20,000,000, buckets 1-512, per-video 2-10,000, rest-share 0-1, series "
                "0-100, series-buckets up to --buckets, gap 0-60 s, burst rounds 0-10, window 1-120 s, warm-up "
                "0-30 s, check timeout 10-7200 s, drain timeout 10-3600 s)")
    return args


def _environment(args) -> None:
    """Before django.setup(): the settings read these; the spawned processes inherit them."""
    values = {"DB_STATEMENT_TIMEOUT_MS": args.statement_timeout_ms, "DB_IDLE_IN_TX_TIMEOUT_MS": args.idle_tx_timeout_ms,
              "BUCKET_MIGRATION_COPY_CHUNK": args.copy_chunk or -1, "BUCKET_MIGRATION_CUTOVER_LAG": args.cutover_lag}
    for name, value in values.items():
        if value >= 0:
            os.environ[name] = str(value)
    os.environ["BUCKET_MIGRATION_RETENTION_S"] = f"{args.retention_s:g}"
    if args.job_lease_s >= 0:
        os.environ["OPS_JOB_LEASE_S"] = f"{args.job_lease_s:g}"


def setup_data(args) -> tuple:
    """Users, operators, the load's videos; every table emptied; the data set seeded and read back."""
    from django.contrib.auth import get_user_model

    from bench.dataset import author_id, prepare, snapshots_insert
    from bench.migration import seed
    from bench.reconcile import seed as reconcile_seed
    from counting import routing

    users, _ = prepare(users=args.users, videos=0)
    for name in (OPERATOR, APPROVER):
        get_user_model().objects.get_or_create(username=name, defaults={"password": "!bench"})
    reconcile_seed.reset_all()  # the bench Redis namespace too
    snapshots_insert("SELECT %s || lpad(i::text, 5, '0') FROM generate_series(0, %s - 1) AS i",
                     [LOAD_VIDEO_PREFIX, args.load_videos], author_id=author_id())
    videos = [f"{LOAD_VIDEO_PREFIX}{i:05d}" for i in range(args.load_videos)]
    gen = routing.load_generation()
    moved = gen.buckets_on("cnt_00")[:args.buckets]
    log(f"seeding {args.scale:,} projection rows in {len(moved)} buckets of cnt_00 (+{args.rest_share:g} as many a "
        f"bucket elsewhere), {args.per_video} a video ...")
    data = seed.seed(scale=args.scale, per_video=args.per_video, rest_share=args.rest_share, moved=moved,
                     seed=args.seed)
    data["moved_buckets"] = {"count": len(moved), "first": moved[:4], "rows": seed.bucket_rows(moved)}
    seeded = seed.routed_sums(SEED_VIDEO_PREFIX)
    data["seeded_liked"] = sum(seeded.values())
    rows = data["moved_buckets"]["rows"]["cnt_00"]
    log(f"seeded {data['projection_rows']:,} projection rows and {data['vbuckets']:,} vbuckets in {data['seconds']}s; "
        f"the {len(moved)} moving buckets hold {rows['projection']:,} projection rows and {rows['vbuckets']:,} "
        f"vbuckets on cnt_00")
    return users, videos, moved, data, seeded


def main(argv=None) -> int:
    args = parse_args(argv)
    _environment(args)
    wall0 = common.start_driver()
    check_own_databases()
    from django.conf import settings
    from django.db import connections

    from bench.migration import checks, phases
    from bench.migration.autovacuum import AutoVacuum
    from bench.migration.pool import Pool
    from bench.migration.report import generated_section, print_report, summary
    from bench.reconcile import seed as reconcile_seed
    from bench.reconcile.phases import Harness
    from bench.reconcile.pool import Layout
    from bench.sampler import ResourceSampler
    from bench.snapshot.autoanalyze import server_autovacuum
    from likes_project.settings.databases import IDLE_IN_TX_TIMEOUT_MS, STATEMENT_TIMEOUT_MS
    from relations import routing

    common.refuse_nudges("migration", "migration.sh")
    connections.close_all()
    waited = common.wait_for_quiet(args.wait_quiet, tag="migration", log=log)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    autovacuum = server_autovacuum()
    args.vacuum = not args.no_vacuum and autovacuum == "off"
    users, videos, moved, data, seeded = setup_data(args)
    series_buckets = moved[:args.series_buckets] if args.series_buckets else moved
    user_ids = [u for u, _ in users]

    layout = Layout(procs=args.procs, projectors=args.projectors, shards=routing.all_aliases())
    result: dict = {"seed": data}
    pool = vacuumer = None
    code = checks.code_version()
    log(f"code measured: {code['commit']}" + (f", modified {code['modified']}" if code["modified"] else "")
        + f" (files {code['files_sha256']})")
    try:
        if autovacuum == "off" and args.autovacuum_naptime > 0:
            vacuumer = AutoVacuum(args.autovacuum_naptime)
            vacuumer.start()
            log(f"the server's autovacuum is off: stood in for every {args.autovacuum_naptime:g} s on every database "
                "of the run (--autovacuum-naptime 0: never)")
        pool = Pool(layout.size)
        h = Harness(pool, layout, ResourceSampler(client_pids=set()), args, users)
        if "throughput" not in args.skip_set and args.burst_rounds:
            log(f"projection throughput before the move ({args.burst_rounds} backlog(s) of {args.burst:,} events) ...")
            result["throughput_before"] = phases.phase_throughput(h, "before", user_ids)
        log(f"the migration of {len(moved)} buckets under the command load ({args.procs} processes) ...")
        result["big"] = phases.phase_big(h, videos, moved)
        if "throughput" not in args.skip_set and args.burst_rounds:
            log("projection throughput after the move ...")
            result["throughput_after"] = phases.phase_throughput(h, "after", user_ids)
        if "series" not in args.skip_set and args.series:
            log(f"write-pause series ({args.series} migrations of {len(series_buckets)} buckets) and the baselines "
                "under the load ...")
            result["series"] = phases.phase_series(h, videos, series_buckets, moved)
        throughput = "throughput" not in args.skip_set and args.burst_rounds
        if throughput and TARGET in phases._home(moved):
            log("projection throughput with the buckets on cnt_02, again ...")
            result["throughput_after2"] = phases.phase_throughput(h, "after, again", user_ids)
        if "reverse" not in args.skip_set:
            log(f"the {len(moved)} buckets moved back to cnt_00 with nothing else running ...")
            result["reverse"] = phases.phase_reverse(h, moved)
            if throughput and result["reverse"].get("migration"):
                log("projection throughput with the bootstrap's layout, again ...")
                result["throughput_before2"] = phases.phase_throughput(h, "before, again", user_ids)
        log("final state: the pipeline drained, then the checks ...")
        result["final_drain"] = phases.final_drain(h)
        lags = checks.EventLags()
        for r in [result["big"]["migration"], *result.get("series", {}).get("migrations", []),
                  *([result["reverse"]["migration"]] if result.get("reverse", {}).get("migration") else [])]:
            r["lag"] = {"during_job": lags.window(r["t_start"], r["t_end"])}
            if r.get("pause_window"):
                a, b = r["pause_window"]
                r["lag"]["around_pause"] = lags.window(a - 0.5, b + 0.5)
        for b in [v for k, v in result.get("series", {}).get("baselines", {}).items() if k != "vacuum"]:
            b["lag"] = {"during_job": lags.window(b["t_start"], b["t_end"])}
        for key in ("big", "series"):
            if key in result:
                result[key]["lag_alone"] = lags.window(*result[key]["pre"])
        home = checks.authorities()
        result["final"] = {**checks.final_check(h.acks, seeded), "routes": home, "stale_rows": checks.stale_rows(moved)}
    finally:
        if pool is not None:
            pool.close()
        if vacuumer is not None:
            result["autovacuum"] = vacuumer.stop()
    code_end = checks.code_version()
    reconcile_seed.reset_all()  # leave the databases small; the next run drops them anyway

    result["meta"] = {
        **common.run_times(wall0), "scale": args.scale, "buckets": len(moved), "series": args.series,
        "series_buckets": len(series_buckets), "series_gap_s": args.series_gap, "per_video": args.per_video,
        "rest_share": args.rest_share, "users": args.users, "procs": args.procs, "projectors": args.projectors,
        "publishers": len(layout.publishers), "mix": args.mix_shares, "warmup_s": args.warmup, "window_s": args.window,
        "load_videos": args.load_videos, "burst": args.burst, "burst_rounds": args.burst_rounds,
        "snapshot_interval_s": args.snapshot_interval, "naive_batch": args.naive_batch,
        "operator": OPERATOR, "approver": APPROVER, "skipped": sorted(args.skip_set),
        "loadavg_at_end": common.loadavg(), "waited_for_other_benchmarks_s": waited,
        "count_partitions": list(settings.COUNT_PARTITION_ALIASES),
        "bootstrap_partitions": list(settings.COUNT_BOOTSTRAP_PARTITIONS),
        "virtual_buckets": settings.COUNT_VIRTUAL_BUCKETS, "stream_partitions": settings.STREAM_PARTITIONS,
        "copy_chunk": settings.BUCKET_MIGRATION_COPY_CHUNK, "cutover_lag": settings.BUCKET_MIGRATION_CUTOVER_LAG,
        "catchup_passes_max": settings.BUCKET_MIGRATION_CATCHUP_PASSES,
        "retention_s": settings.BUCKET_MIGRATION_RETENTION_S, "count_projector_batch": settings.COUNT_PROJECTOR_BATCH,
        "server_autovacuum": autovacuum, "vacuum_stand_in": args.vacuum,
        "statement_timeout_ms": STATEMENT_TIMEOUT_MS, "idle_tx_timeout_ms": IDLE_IN_TX_TIMEOUT_MS,
        "job_lease_s": settings.OPS_JOB_LEASE_S, "job_lease_overridden": args.job_lease_s >= 0,
        "databases": settings.DATABASES["default"]["NAME"] + "*", "celery": False, "rate_limit_enabled": False,
        "nudges_enabled": False,
    }
    result["meta"]["code"] = code
    result["meta"]["code_at_end"] = code_end
    result["meta"]["autovacuum_naptime_s"] = args.autovacuum_naptime if vacuumer is not None else None
    result["machine"] = spec
    result["summary"] = summary(result)
    bad = list(result["summary"]["failures"])
    failure = f"FAILED: {'; '.join(bad)}" if bad else None
    result["warnings"] = list(result["summary"]["warnings"])
    result["markdown"] = generated_section(result)
    return common.finish_run(result, result_path(args.scale), report=print_report, docs=None, log=log,
                             clock="driver wall clock", failure=failure)


if __name__ == "__main__":
    sys.exit(main())
