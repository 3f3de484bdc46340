"""Benchmark driver of the count projector at saturation (issue 15 §3; spec TEST-3).

Run through ./bench/projector.sh, which does the setup (bench/env.sh: the bench's own likes_bench* databases,
Redis db 14 with the prefix likes-bench, rate limiting off) and turns the nudges off. One run:

  1. a backlog of --events crafted LikeRelationChanged envelopes (pairs drawn from --events/2 (user, video)
     pairs, versions 1, 2, ... per pair, odd LIKED and even UNLIKED: a like/unlike mix with ~25% of the
     events flipping a relation back) XADDed into the bench stream partitions, for many videos (uniform) and
     for one video (hot);
  2. the backlog drained from an empty projection by --procs spawned processes, each running
     consume_partition over every n-th stream partition until a whole pass finds nothing: ours
     (counting.services.projection.CountProjector, batch COUNT_PROJECTOR_BATCH) and the naive single-row
     counter (bench/projection/naive.py), ABBA order; every drain checked exactly against the backlog's
     final states (ours: the sum of each video's vbuckets; naive: its counter row);
  3. the raw SQL ceiling: bench/pgbench/count_group.sql, one projector group (the statements of
     _apply_group, batch / count partitions events each) with pgbench on cnt_00, for each client count;
     ceiling events/s = transactions/s x events per group.

Results: a table on stdout, bench/results/projector_latest.json and the generated section "Count projector at
saturation" of docs/benchmarks.md. Every loop is bounded by a deadline and a count. Nothing asserts on
timings; the exit code is non-zero only when the harness fails or a drain is not exact.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common
from bench.common import Interference, make_log, md_table, percentile, pgbench_argv
from bench.procs import ClientPool, client_setup, serve_jobs, wait_until
from bench.sampler import ResourceSampler, cpu_text, waits_text

log = make_log("projector-bench")
APP_NAME = os.environ.get("PGAPPNAME", "likes-projector-bench")
INTERFERENCE = Interference(APP_NAME, log)

OPTIONS = {
    "events": (60_000, "backlog events per drain"),
    "event_users": (200_000, "users of the backlog events"),
    "uniform_videos": (5000, "videos of the uniform backlog"),
    "rounds": (3, "drains per workload, variant and process count"),
    "procs": ("2,8", "projector process counts"),
    "pgbench_clients": ("2,4,8", "pgbench client counts of the ceiling"),
    "pgbench_duration": (10, "seconds per pgbench run"),
    "skip_naive": (False, ""), "skip_pgbench": (False, ""),
}
OUT_PATH = common.RESULTS_DIR / "projector_latest.json"
PGBENCH_SCRIPT = common.BENCH_DIR / "pgbench" / "count_group.sql"
VIDEO_PREFIX = "pjb-"
PGBENCH_VIDEO_PREFIX = "pjc-"
USER_BASE = 8_000_000_000  # synthetic user ids (the projector never reads users)
MAX_DRAIN_S = 600.0
BEGIN, END = "<!-- bench:projector:generated:begin -->", "<!-- bench:projector:generated:end -->"
_TPS_RE = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/projector.sh", __doc__, OPTIONS, seed=20261203)
    common.require_positive(p, args, ("events", "event_users", "uniform_videos", "rounds", "pgbench_duration"))
    args.procs_list = common.int_list(args.procs)
    args.pgbench_clients_list = common.int_list(args.pgbench_clients)
    if not 1 <= args.pgbench_duration <= 120:
        p.error("--pgbench-duration must be 1..120 s")
    return args


# --- data ------------------------------------------------------------------------------------------


def backlog(args, kind: str, rnd: int) -> list[dict]:
    """The envelopes of one backlog (bench/reverse/projector.py's generator, on this run's videos and users)."""
    from bench.reverse.projector import backlog_events

    spec = argparse.Namespace(seed=args.seed, events=args.events, event_users=args.event_users,
                              uniform_videos=args.uniform_videos)
    events = backlog_events(spec, kind, rnd)
    for ev in events:
        ev["userId"] = USER_BASE + (ev["userId"] % args.event_users)
        ev["videoId"] = VIDEO_PREFIX + ev["videoId"].rsplit("-", 1)[-1]
        ev["aggregateKey"] = f"{ev['userId']}:{ev['videoId']}"
    return events


def expected_counts(events: list[dict]) -> dict[str, int]:
    final: dict[tuple[int, str], str] = {}
    for ev in events:
        final[(ev["userId"], ev["videoId"])] = ev["absoluteState"]
    out: dict[str, int] = dict.fromkeys({v for _u, v in final}, 0)
    for (_u, v), state in final.items():
        out[v] += state == "LIKED"
    return out


def streams_reset() -> None:
    """Empty stream partitions, no checkpoints of either consumer, empty projection and naive tables."""
    from bench.dataset import consumer_reset
    from bench.projection.naive import NAIVE_CONSUMER, reset_naive
    from bench.projection.state import reset_ours
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis

    stream_redis().delete(*[streams.stream_key(p) for p in streams.all_partitions()])
    reset_ours()
    consumer_reset(NAIVE_CONSUMER)
    reset_naive()


def publish(events: list[dict]) -> float:
    from likes_project.eventlog.streams import publish_pipeline

    t0 = time.monotonic()
    for k in range(0, len(events), 1000):
        publish_pipeline(events[k:k + 1000])
    return time.monotonic() - t0


def counts_now(variant: str, videos: list[str]) -> dict[str, int]:
    """Ours: the sum of each video's vbuckets in the ACTIVE generation over every count partition; naive:
    its counter row."""
    from django.conf import settings
    from django.db import connections

    from bench.projection.naive import NAIVE_COUNT_TABLE, naive_alias
    from counting import routing
    from counting.models import VideoLikeCountVbucket

    out: dict[str, int] = dict.fromkeys(videos, 0)
    if variant == "naive":
        with connections[naive_alias()].cursor() as cur:
            cur.execute(f"SELECT video_id, like_count FROM {NAIVE_COUNT_TABLE} WHERE video_id = ANY(%s)", [videos])
            out.update(dict(cur.fetchall()))
        return out
    g = routing.active().generation
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, sum(active_count) FROM {VideoLikeCountVbucket._meta.db_table} "
                        "WHERE generation = %s AND video_id = ANY(%s) GROUP BY video_id", [g, videos])
            for v, n in cur.fetchall():
                out[v] += int(n)
    return out


# --- drains ----------------------------------------------------------------------------------------


def run_drain_job(job: dict) -> dict:
    """Drain the given stream partitions with consume_partition until every one returns nothing."""
    from django.conf import settings

    from bench.projection.naive import make_projector
    from likes_project.eventlog.consumer import consume_partition

    # The backlog is old by construction: the projector's "lag over target" warnings say nothing here.
    logging.getLogger("counting.services.projection").setLevel(logging.ERROR)
    projector = make_projector(job["variant"])
    batch = int(getattr(settings, "COUNT_PROJECTOR_BATCH", 500))
    wait_until(job["start_at"])
    t0 = time.time()
    deadline = t0 + job["max_seconds"]
    totals = {"dispatched": 0, "applied": 0, "duplicates": 0, "stale": 0, "dead": 0, "not_ok": 0, "passes": 0}
    last_progress = t0
    pending = list(job["partitions"])
    for _ in range(1_000_000):
        if not pending or time.time() > deadline:
            break
        nxt = []
        for p in pending:
            rep = consume_partition(projector, partition=p, batch_size=batch, max_batches=10)
            totals["passes"] += 1
            totals["dead"] += rep.dead_lettered
            common.tally(totals, rep, ("dispatched", "applied", "duplicates", "stale"))
            if rep.status != "ok":
                totals["not_ok"] += 1
                nxt.append(p)
            elif rep.dispatched:
                last_progress = time.time()
                nxt.append(p)
        pending = nxt
    return {**totals, "t0": t0, "t_last": last_progress, "undrained": pending}


def drain_worker_main(index: int, tasks, results) -> None:
    client_setup()
    serve_jobs(index, tasks, results, run_drain_job, lambda job: "drain")


def drain(pool: ClientPool, sampler: ResourceSampler, *, variant: str, procs: int, events: list[dict],
          expected: dict[str, int]) -> dict:
    """One drain of the backlog in the streams by `procs` of the pool's processes, from an empty state."""
    from django.db import connections

    from bench.dataset import consumer_reset
    from bench.projection.naive import NAIVE_CONSUMER, reset_naive
    from bench.projection.state import reset_ours
    from likes_project.eventlog import streams

    if variant == "ours":
        reset_ours()
    else:
        consumer_reset(NAIVE_CONSUMER)
        reset_naive()
    parts = streams.all_partitions()
    connections.close_all()
    start_at = time.time() + 0.5
    jobs = [{"variant": variant, "partitions": parts[i::procs], "start_at": start_at, "max_seconds": MAX_DRAIN_S}
            for i in range(procs)]
    sampler.start(start_at, start_at + MAX_DRAIN_S)
    try:
        res = pool.run(jobs, timeout=MAX_DRAIN_S + 60)
    finally:
        resources = sampler.stop()
    elapsed = max(r["t_last"] for r in res) - start_at
    got = counts_now(variant, sorted(expected))
    wrong = sum(1 for v, n in expected.items() if got.get(v) != n)
    undrained = [p for r in res for p in r["undrained"]]
    applied = sum(r["applied"] for r in res)
    dead = sum(r["dead"] for r in res)
    return {"variant": variant, "procs": procs, "events": len(events), "seconds": round(elapsed, 3),
            "events_per_s": round(len(events) / elapsed, 1), "applied": applied,
            "duplicates": sum(r["duplicates"] for r in res), "stale": sum(r["stale"] for r in res), "dead": dead,
            "not_ok_passes": sum(r["not_ok"] for r in res), "passes": sum(r["passes"] for r in res),
            "wrong_videos": wrong, "undrained": undrained,
            "exact": not wrong and not undrained and not dead, "resources": resources}


# --- the ceiling -------------------------------------------------------------------------------------


def pgbench_ceiling(args, sampler: ResourceSampler, *, kind: str, clients: int, workdir: Path) -> dict:
    """bench/pgbench/count_group.sql for --pgbench-duration seconds with `clients` clients on cnt_00, from an
    empty projection: transactions/s and events/s (x events per group)."""
    from django.conf import settings

    from bench.projection.state import reset_ours
    from counting import routing

    reset_ours()
    gen = routing.active()
    alias = settings.COUNT_PARTITION_ALIASES[0]
    vbs = [vb for vb, r in enumerate(gen.routes) if r.partition == alias]
    per_group = max(1, int(getattr(settings, "COUNT_PROJECTOR_BATCH", 500)) // len(settings.COUNT_PARTITION_ALIASES))
    cmd, env = pgbench_argv(alias, ["-M", "simple", "-f", str(PGBENCH_SCRIPT), "-D", f"batch={per_group}",
                                    "-D", f"gen={gen.generation}", "-D", f"space={gen.space.version}",
                                    "-D", "vbs='{" + ",".join(map(str, vbs)) + "}'", "-D", f"nvbs={len(vbs)}",
                                    "-D", f"videos={args.uniform_videos if kind == 'uniform' else 1}"],
                            clients=clients, seconds=args.pgbench_duration)
    t0 = time.time()
    sampler.start(t0 + min(1.0, args.pgbench_duration / 4), t0 + args.pgbench_duration)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.pgbench_duration + 120,
                              cwd=workdir)
    finally:
        resources = sampler.stop()
    out = proc.stdout + proc.stderr
    tps = _TPS_RE.search(out)
    if proc.returncode != 0 or not tps:
        raise RuntimeError(f"pgbench count_group failed (rc={proc.returncode}):\n{out[-2000:]}")
    row = {"kind": kind, "clients": clients, "tps": round(float(tps.group(1)), 1), "events_per_group": per_group,
           "events_per_s": round(float(tps.group(1)) * per_group, 1), "resources": resources}
    log(f"pgbench {kind} c={clients}: {row['tps']} groups/s = {row['events_per_s']:,.0f} events/s")
    return row


# --- report --------------------------------------------------------------------------------------------


def summarize(result: dict) -> dict:
    out = {}
    for kind in ("uniform", "hot"):
        cells = {}
        for d in result["drains"]:
            if d["kind"] == kind:
                cells.setdefault(f"{d['variant']} x{d['procs']}", []).append(d["events_per_s"])
        med = {k: round(percentile(sorted(v), 0.5), 1) for k, v in cells.items()}
        ceiling = max((r["events_per_s"] for r in result["pgbench"] if r["kind"] == kind), default=None)
        ours = max((v for k, v in med.items() if k.startswith("ours")), default=None)
        naive = max((v for k, v in med.items() if k.startswith("naive")), default=None)
        out[kind] = {"median_events_per_s": med, "rounds": cells, "ceiling_events_per_s": ceiling,
                     "ours_best": ours, "naive_best": naive,
                     "ours_over_ceiling": common.ratio(ours, ceiling),
                     "naive_over_ceiling": common.ratio(naive, ceiling)}
    return out


def tables(result: dict) -> list[str]:
    summ = result["summary"]
    rows = []
    for kind in ("uniform", "hot"):
        s = summ[kind]
        for cell, vals in s["rounds"].items():
            rows.append([kind, cell, f"**{s['median_events_per_s'][cell]:,.0f}**",
                         ", ".join(f"{v:,.0f}" for v in vals),
                         common.fmt(common.ratio(s["median_events_per_s"][cell], s["ceiling_events_per_s"]), 2)])
        for r in result["pgbench"]:
            if r["kind"] == kind:
                rows.append([kind, f"pgbench count_group.sql c={r['clients']} ({r['events_per_group']} events a "
                                   f"transaction, {r['tps']:,.1f} tps)", f"{r['events_per_s']:,.0f}", "", "ceiling"
                             if r["events_per_s"] == s["ceiling_events_per_s"] else ""])
    main = md_table(["workload", "variant x processes", "events/s (median)", "per round", "/ ceiling"], rows)
    ratios = ["**Ratios (goal: ours ≥ 0.5 of the ceiling)**", ""]
    for kind in ("uniform", "hot"):
        s = summ[kind]
        ratios.append(f"- {kind}: ours best {common.fmt(s['ours_best'], 0)} events/s / ceiling "
                      f"{common.fmt(s['ceiling_events_per_s'], 0)} = **{common.fmt(s['ours_over_ceiling'], 2)}**; "
                      f"naive single-row best {common.fmt(s['naive_best'], 0)} = "
                      f"{common.fmt(s['naive_over_ceiling'], 2)}")
    res_rows = []
    for d in result["drains"]:
        if d["round"] == 1 and d.get("resources"):
            r = d["resources"]
            res_rows.append([f"{d['kind']} {d['variant']} x{d['procs']}", f"{r['cores_busy']:.2f}",
                             cpu_text(r, 0.05), waits_text(r, 3)])
    for r in result["pgbench"]:
        if r.get("resources"):
            res_rows.append([f"pgbench {r['kind']} c={r['clients']}", f"{r['resources']['cores_busy']:.2f}",
                             cpu_text(r["resources"], 0.05), waits_text(r["resources"], 3)])
    res = md_table(["phase (round 1)", "machine busy (cores)", "CPU by process (cores)",
                    "top bench-DB backend states"], res_rows)
    exact = all(d["exact"] for d in result["drains"])
    checks = (f"**Exactness:** {'EXACT' if exact else 'NOT EXACT'}: after every drain each video's count (ours: the "
              "sum of its vbuckets; naive: its counter row) equals the LIKED relations of the backlog's final "
              f"states; {sum(d['dead'] for d in result['drains'])} dead letters.")
    return [main, "\n".join(ratios), "**Where the time went:**\n\n" + res, checks]


def print_report(result: dict) -> None:
    common.print_blocks(*tables(result))


def write_docs(result: dict) -> None:
    meta, m = result["meta"], result["machine"]
    machine = common.machine_text(m, pg=("shared_buffers", "synchronous_commit", "fsync"), stack=("python", "django"),
                                  load=f"Load average when the run started: {m.get('loadavg_at_start')}.")
    params = (f"**Parameters:** backlog of {meta['events']:,} events per drain ({meta['event_users']:,} users; "
              f"uniform: {meta['uniform_videos']:,} videos, hot: 1 video); batch {meta['batch']} "
              f"({meta['events_per_group']} per count-partition group); {meta['rounds']} rounds per cell; "
              f"pgbench {meta['pgbench_duration_s']} s per row on {meta['pgbench_alias']}.")
    section = common.doc_section(BEGIN, END, writer="bench/projector_bench.py", meta=meta, machine=machine,
                                 blocks=[params, *tables(result), *common.interference_blocks(meta)])
    common.write_generated(section, BEGIN, END, heading="## Count projector at saturation (issue 15 §3)")


# --- main --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    from django.conf import settings
    from django.db import connections

    from bench.projection.naive import naive_tables

    waited = common.wait_for_quiet(args.wait_quiet, tag="projector-bench", log=log, app_name=APP_NAME)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    if not args.skip_pgbench and not shutil.which("pgbench"):
        log("pgbench not found (Debian package postgresql-client); skipping the raw SQL ceiling")
        args.skip_pgbench = True
    videos = [f"{VIDEO_PREFIX}{i:05d}" for i in range(args.uniform_videos)] + [f"{VIDEO_PREFIX}hot"]
    naive_tables(videos)
    connections.close_all()
    pool = ClientPool(max(args.procs_list), drain_worker_main, name="projector-bench", what="projector", log=log,
                      raise_fatal=True)
    sampler = ResourceSampler(client_pids=pool.pids)
    workdir = Path(tempfile.mkdtemp(prefix="likes-projector-bench-"))
    result: dict = {"drains": [], "pgbench": []}
    variants = ["ours"] if args.skip_naive else ["ours", "naive"]
    try:
        for rnd in range(args.rounds):
            for kind in ("uniform", "hot"):
                streams_reset()
                events = backlog(args, kind, rnd)
                expected = expected_counts(events)
                pub = publish(events)
                order = variants if rnd % 2 == 0 else variants[::-1]
                for procs in args.procs_list:
                    for variant in order:
                        INTERFERENCE.note(f"{kind} {variant} x{procs} round {rnd + 1}")
                        d = drain(pool, sampler, variant=variant, procs=procs, events=events, expected=expected)
                        d.update({"kind": kind, "round": rnd + 1, "publish_seconds": round(pub, 2)})
                        result["drains"].append(d)
                        log(f"{kind} {variant} x{procs} round {rnd + 1}: {d['events_per_s']:,.0f} events/s "
                            f"({d['seconds']} s, exact={d['exact']})")
        if not args.skip_pgbench:
            streams_reset()
            for kind in ("uniform", "hot"):
                for c in args.pgbench_clients_list:
                    INTERFERENCE.note(f"pgbench {kind} c={c}")
                    result["pgbench"].append(pgbench_ceiling(args, sampler, kind=kind, clients=c, workdir=workdir))
    finally:
        pool.close()
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            streams_reset()
        except Exception as exc:
            log(f"cleanup failed: {exc.__class__.__name__}: {exc}")
    batch = int(getattr(settings, "COUNT_PROJECTOR_BATCH", 500))
    result["meta"] = {**common.run_times(wall0), "waited_for_quiet_s": waited, "interference": INTERFERENCE.records,
                      "loadavg_at_end": common.loadavg(), "events": args.events, "event_users": args.event_users,
                      "uniform_videos": args.uniform_videos, "rounds": args.rounds, "procs": args.procs_list,
                      "batch": batch, "events_per_group": batch // len(settings.COUNT_PARTITION_ALIASES),
                      "pgbench_duration_s": args.pgbench_duration, "pgbench_alias": settings.COUNT_PARTITION_ALIASES[0],
                      "seed": args.seed}
    result["machine"] = spec
    result["summary"] = summarize(result)
    bad = [d for d in result["drains"] if not d["exact"]]
    return common.finish_run(result, OUT_PATH, report=print_report, docs=None if args.no_docs else write_docs,
                             log=log, failure=f"ERROR: {len(bad)} drains were not exact" if bad else None)


if __name__ == "__main__":
    sys.exit(main())
