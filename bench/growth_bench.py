"""Benchmark driver for costs that do not grow with history (issue 15 §5, P7).

Run through ./bench/growth.sh, which does the setup (bench/env.sh: the lock, the bench's own likes_bench*
databases, Redis db 14 with the prefix likes-bench, rate limiting off) and sets LIKES_NUDGE_ENABLED=false. The
run loads the first size of history (default 1,000,000 relations) with COPY into every store the service
keeps (relation facts, commands and SENT outbox rows on the relation shards; count projection, vbuckets,
reverse index and recent likers on the count partitions; users, video and display snapshots and consumer
checkpoints on default), then measures in-process, one client, sequentially:

  1. the like command (relation_set_state), like/unlike pairs on random core users and catalog videos;
  2. the batch query of 20 ids with the relation cache and count views warm;
  3. the my-likes page 1 and a deep page (500 at limit 100) of the heavy user;
  4. the likers page 1 and a deep page (1,000 at limit 20) of the hot video, as its author;
  5. an exact reconciliation of the hot video (the ops job `manage.py reconcile --mode exact` runs),
then drains the pipeline (the commands' events published and projected), grows the SAME history to the next
size (default 10,000,000) and measures again. Results: the table (each figure per size, the ratio last / first
size, disk used and load time per size, the plans of the items above 1.2x) on stdout,
bench/results/growth_latest.json and the "Growth" generated section of docs/benchmarks.md. The parts are in
bench/growth/. Every loop is bounded by a deadline and a count. Nothing here asserts on timings: the exit code
is non-zero only when the harness fails or a correctness check fails (an exact run not PASSED, a wrong batch
answer, loaded counts that do not add up).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import time
import traceback

from bench import common
from bench.growth import APP_NAME, INTERFERENCE, PREFIX, log

# The options of bench/growth.sh beside --wait-quiet, --seed and --no-docs: name -> (default, help).
OPTIONS = {
    "sizes": ("1000000,10000000", "relation counts to grow the history to, increasing"),
    "reps": (400, "timed repetitions per item (commands: reps / 2 like/unlike pairs)"),
    "warmup": (20, "untimed repetitions before each item"),
    "reconcile_reps": (3, "timed exact reconciliations after one untimed"),
    "heavy_likes": (55_000, "LIKED relations of the heavy user"),
    "hot_likes": (200_000, "likers (LIKED relations) of the hot video"),
    "list_limit": (100, "my-likes page size"),
    "list_page": (500, "my-likes deep page"),
    "likers_limit": (20, "likers page size"),
    "likers_page": (1000, "likers deep page"),
    "bytes_per_relation": (3500, "disk estimate per relation before the first size is loaded (later sizes use "
                                 "the measured one)"),
    "quiet_wait": (900.0, "seconds to wait, before each size's measurements, for the machine to go idle (another "
                          "load on the 2 cores lands in one size's figures only)"),
    "keep": (False, "keep the loaded data at the end (default: drop it, so the other benchmarks find the bench "
                    "databases as they expect)"),
}
OUT_PATH = common.RESULTS_DIR / "growth_latest.json"


def parse_args(argv=None) -> argparse.Namespace:
    from bench.growth.plan import MAX_RELATIONS

    p, args = common.parse_options(argv, "bench/growth.sh", __doc__, OPTIONS, seed=20261203, wait_quiet=180.0)
    try:
        args.size_list = common.int_list(args.sizes)
    except ValueError:
        p.error("--sizes: comma-separated relation counts")
    if not args.size_list or any(b <= a for a, b in zip(args.size_list, args.size_list[1:], strict=False)):
        p.error("--sizes must be increasing")
    if args.size_list[0] < 2000 or args.size_list[-1] > MAX_RELATIONS:
        p.error(f"--sizes between 2,000 and {MAX_RELATIONS:,}")
    common.require_positive(p, args, ("reps", "reconcile_reps", "heavy_likes", "hot_likes", "list_limit", "list_page",
                                      "likers_limit", "likers_page", "bytes_per_relation"))
    if args.reps < 2 or args.warmup < 0:
        p.error("--reps at least 2, --warmup at least 0")
    return args


def shape(args):
    """The plan, scaled down when the first size cannot hold the heavy user and the hot video (a smoke run), and
    the deep pages clamped to what the heavy user and the hot video hold. Returns (plan, notes)."""
    from bench.growth.plan import Plan

    notes = []
    plan = Plan(heavy_likes=args.heavy_likes, hot_likes=args.hot_likes)
    room = args.size_list[0] // 2
    if plan.core_start > room:
        f = room / plan.core_start
        plan = Plan(heavy_likes=max(args.list_limit * 3, int(args.heavy_likes * f)),
                    hot_likes=max(args.likers_limit * 3, int(args.hot_likes * f)))
        notes.append(f"the first size ({args.size_list[0]:,}) cannot hold the heavy user and the hot video: both "
                     f"scaled by {f:.3f} (heavy user {plan.heavy_likes:,} likes, hot video {plan.hot_likes:,} likers)")
    s = plan.summary(args.size_list[0])
    list_page = min(args.list_page, s["heavy_liked"] // args.list_limit - 1)
    likers_page = min(args.likers_page, s["hot_liked"] // args.likers_limit - 1)
    if (list_page, likers_page) != (args.list_page, args.likers_page):
        notes.append(f"deep pages clamped to my-likes page {list_page:,} and likers page {likers_page:,}")
    args.list_page, args.likers_page = max(2, list_page), max(2, likers_page)
    return plan, notes


def reset_all() -> None:
    """Empty every table this run writes on the shards and partitions (as bench/reconcile's reset does, plus the
    reverse index, the recent likers, the relation-cache floors and every consumer's checkpoints), and delete
    this run's videos, snapshots and users on default. Only ever the likes_bench* databases."""
    from django.conf import settings
    from django.db import connections

    from bench.dataset import consumer_reset
    from bench.read.rebuild import truncate_floors
    from bench.reconcile.seed import reset_all as reconcile_reset
    from bench.reverse.likers import reverse_reset
    from counting.models import LikeReverseRecent, VideoDisplayCount
    from likes_project.eventlog.registry import CONSUMERS
    from relations.models import VideoSnapshot
    from relations.services.relation_cache import cache_generations_mirror

    connections.close_all()
    reconcile_reset()  # relations, commands, outbox (+ archive), count projection state, displays, bench Redis
    reverse_reset()
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {LikeReverseRecent._meta.db_table}")
    truncate_floors()
    for consumer in CONSUMERS:
        consumer_reset(consumer)
    with connections["default"].cursor() as cur:
        cur.execute("SET statement_timeout = 0")
        cur.execute(f"DELETE FROM {VideoDisplayCount._meta.db_table} WHERE video_id LIKE %s", [PREFIX + "%"])
        cur.execute(f"DELETE FROM {VideoSnapshot._meta.db_table} WHERE video_id LIKE %s", [PREFIX + "%"])
        cur.execute("DELETE FROM auth_user WHERE username LIKE %s AND NOT EXISTS "
                    "(SELECT 1 FROM authtoken_token t WHERE t.user_id = auth_user.id)", [PREFIX + "%"])
    cache_generations_mirror()  # the flush dropped the relation cache's registry: writes need it back
    connections.close_all()


def free_bytes() -> int:
    from django.db import connections

    with connections["default"].cursor() as cur:
        cur.execute("SHOW data_directory")
        path = cur.fetchone()[0]
    try:
        return shutil.disk_usage(path).free
    except OSError:  # the data directory is not readable from here: the root filesystem's
        return shutil.disk_usage("/").free


def code_version() -> dict:
    """The commit measured and the files that differed from it (the working tree is what ran)."""
    import subprocess

    out: dict = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(common.ROOT)]
        out["head"] = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     timeout=10).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "--", "relations", "counting", "reconciliation",
                                 "likes_project", "requirements.txt"], capture_output=True, text=True, timeout=10)
        out["modified"] = [line[3:] for line in status.stdout.splitlines()]
    return out


def measure_size(args, plan, users, n: int) -> dict:
    from bench.growth import measure

    m: dict = {"machine": measure.wait_machine_quiet(args.quiet_wait)}
    INTERFERENCE.note(f"batch {n}")
    m["batch"] = measure.run_batch(plan, users, n, reps=args.reps, warmup=args.warmup, seed=args.seed)
    INTERFERENCE.note(f"my-likes {n}")
    m["my_likes"] = measure.run_my_likes(users, reps=args.reps, warmup=args.warmup, limit=args.list_limit,
                                         deep=args.list_page)
    INTERFERENCE.note(f"likers {n}")
    m["likers"] = measure.run_likers(reps=args.reps, warmup=args.warmup, limit=args.likers_limit,
                                     deep=args.likers_page)
    INTERFERENCE.note(f"exact {n}")
    m["exact"] = measure.run_exact(reps=args.reconcile_reps)
    INTERFERENCE.note(f"commands {n}")
    m["commands"] = measure.run_commands(plan, users, n, reps=max(1, args.reps // 2),
                                         warmup=max(1, args.warmup // 2), seed=args.seed)
    m["drain"] = measure.pipeline_drain()
    return m


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    from django.db import connections

    from bench.growth.load import Users, disk_used, grow
    from bench.growth.measure import hot_counts

    common.refuse_nudges("growth-bench", "growth.sh")
    waited = common.wait_for_quiet(args.wait_quiet, tag="growth-bench", log=log, app_name=APP_NAME)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    plan, notes = shape(args)
    for note in notes:
        log(f"NOTE: {note}")
    reset_all()
    users = Users()
    result: dict = {"sizes": []}
    warnings: list[str] = list(notes)
    failure = None
    prev, per_relation = 0, float(args.bytes_per_relation)
    try:
        for n in args.size_list:
            need = int((n - prev) * per_relation * 1.3)
            free = free_bytes()
            if need > free - 10 * 1024 ** 3:
                failure = (f"not enough disk for {n:,} relations: about {need / 1024 ** 3:.1f} GiB needed, "
                           f"{free / 1024 ** 3:.1f} GiB free; stopped after {prev:,}")
                break
            log(f"growing the history {prev:,} -> {n:,} relations ({free / 1024 ** 3:.0f} GiB free) ...")
            INTERFERENCE.note(f"load {n}")
            before = disk_used()["total"]
            load = grow(plan, users, prev, n)
            disk = disk_used()
            per_relation = max(1000.0, (disk["total"] - before) / max(1, n - prev))
            hot = hot_counts(plan)
            entry = {"relations": n, "load": load, "disk": disk, "hot": hot, "free_bytes_before": free}
            log(f"at {n:,}: {disk['total'] / 1024 ** 3:.2f} GiB in the bench databases; hot video {hot}")
            if load["bucket_mismatches"] or not hot["ok"]:
                failure = (f"the loaded data does not add up at {n:,}: {load['bucket_mismatches']} videos whose "
                           f"vbuckets differ from the loaded relations, hot video {hot}")
                result["failed_load"] = entry
                break
            connections.close_all()
            entry["measure"] = measure_size(args, plan, users, n)
            result["sizes"].append(entry)
            if not entry["measure"]["machine"]["quiet"]:
                warnings.append(f"at {n:,} the machine was still busy ({entry['measure']['machine']['busy_cores_last']}"
                                " cores) when the measurements started")
            ex, bq = entry["measure"]["exact"], entry["measure"]["batch"]
            if set(ex["statuses"]) != {"PASSED"} or ex["diffs"] or bq["wrong"]:
                failure = (f"correctness at {n:,}: exact verdicts {ex['statuses']} with {ex['diffs']} diffs, "
                           f"{bq['wrong']} wrong batch answers")
                break
            prev = n
    except Exception as exc:
        failure = f"harness error: {exc.__class__.__name__}: {exc}"
        traceback.print_exc()
    finally:
        if args.keep:
            log("--keep: the loaded data stays in the bench databases (the next run of any benchmark resets it)")
        else:
            t0 = time.monotonic()
            try:
                reset_all()
                log(f"cleanup: loaded data dropped in {time.monotonic() - t0:.0f}s")
            except Exception as exc:
                log(f"cleanup failed: {exc.__class__.__name__}: {exc}")
    result["sizes"] = [s for s in result["sizes"] if s.get("measure")]
    done = [s["relations"] for s in result["sizes"]]
    if done != args.size_list:
        warnings.append(f"measured sizes {done} of the {args.size_list} asked")
    from bench.growth.report import over_goal, ratios

    result["ratios"] = ratios(result)
    result["over_goal"] = over_goal(result)
    result["meta"] = {**common.run_times(wall0), "waited_for_quiet_s": waited, "interference": INTERFERENCE.records,
                      "loadavg_at_end": common.loadavg(), "sizes": args.size_list, "sizes_done": done,
                      "reps": args.reps, "warmup": args.warmup, "reconcile_reps": args.reconcile_reps,
                      "list_limit": args.list_limit, "list_page": args.list_page, "likers_limit": args.likers_limit,
                      "likers_page": args.likers_page, "kept": args.keep, "seed": args.seed, "warnings": warnings,
                      "plan": plan.summary(done[-1] if done else args.size_list[0]), "failure": failure,
                      "nudge_enabled": False, "rate_limit_enabled": False}
    result["machine"] = spec
    result["code"] = code_version()
    from bench.growth.report import print_report, write_docs

    with contextlib.suppress(Exception):
        connections.close_all()
    return common.finish_run(result, OUT_PATH, report=print_report,
                             docs=None if args.no_docs or not done else write_docs, log=log,
                             failure=f"ERROR: {failure}" if failure else None)


if __name__ == "__main__":
    sys.exit(main())
