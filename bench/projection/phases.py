"""The phases of the count-pipeline benchmark: a workload's sustained load with the whole pipeline running,
its drain and exactness check, and the backlog replays that measure the projectors at saturation."""

from __future__ import annotations

import secrets
import time

from bench.common import percentile, pooled, rounded
from bench.dataset import HOT_VIDEO
from bench.projection import log
from bench.projection.naive import reset_naive
from bench.projection.pool import Layout, RolePool, partition_shares
from bench.projection.state import (
    exactness,
    pg_deadlocks,
    pipeline_pending,
    receipts_and_lags,
    reset_ours,
    streams_load,
)
from bench.sampler import ResourceSampler


def run_sustained(pool: RolePool, layout: Layout, sampler: ResourceSampler, args, *, workload: str,
                  users: list, videos: list[str], probe_user: int, probe_videos: list[str],
                  pipeline: str = "loops", rate_per_s: float | None = None, job_settings: dict | None = None
                  ) -> dict:
    """One workload's warm-up and measured window with every role running, then the drain; its row.
    `pipeline`: "loops" runs the publishers, projectors and snapshot as this pool's loops; "celery" leaves
    them to a Celery worker and beat the caller started (the commands and the probe then nudge them,
    `job_settings`). `rate_per_s`: the command load as an open loop at this total rate (None: closed loop)."""
    run_id = secrets.token_hex(3)
    deadlocks0 = pg_deadlocks()
    t_start = time.time() + 1.0
    t_measure = t_start + args.warmup
    t_end = t_measure + args.duration
    hard = t_end + args.drain_timeout + args.probe_timeout + 30
    times = {"t_start": t_start, "t_measure": t_measure, "t_end": t_end, "hard_deadline": hard}
    n = len(layout.commands)
    for k, i in enumerate(layout.commands):
        pool.submit(i, {**times, "role": "commands", "tag": f"cmd-{workload}", "layer": "service", "naive": False,
                        "port": None, "users": users[k::n], "videos": [HOT_VIDEO] if workload == "hot" else videos,
                        "mix": args.mix_shares, "seed": args.seed * 1000 + k + (500 if workload == "hot" else 0),
                        "key_prefix": f"p{run_id}{workload[0]}{k}", "settings": job_settings,
                        "rate_per_s": rate_per_s / n if rate_per_s else None})
    loops = pipeline == "loops"
    if loops:
        for alias, i in layout.publishers.items():
            pool.submit(i, {**times, "role": "publisher", "tag": f"pub-{alias}", "alias": alias,
                            "idle_s": args.publish_idle})
    shares = partition_shares(len(layout.projectors)) if loops else []
    for share, i in zip(shares, layout.projectors, strict=False):
        pool.submit(i, {**times, "role": "projector", "tag": "proj", "variant": "ours", "mode": "sustained",
                        "partitions": share, "idle_s": args.project_idle})
    proj_used = layout.projectors[:len(shares)]
    if loops:
        pool.submit(layout.snapshot, {**times, "role": "snapshot", "tag": "snap",
                                      "interval_s": args.snapshot_interval})
    pool.submit(layout.probe, {**times, "role": "probe", "tag": "probe", "videos": probe_videos,
                               "user_id": probe_user, "interval_s": args.probe_interval, "poll_s": args.probe_poll,
                               "timeout_s": args.probe_timeout, "key_prefix": f"probe{run_id}{workload[0]}",
                               "settings": job_settings})
    sampler.start(t_measure, t_end, pid_labels=layout.labels(pool))
    try:
        cmd = pool.collect(layout.commands, timeout=(t_end - time.time()) + 120)
    finally:
        resources = sampler.stop()
    probe = pool.collect([layout.probe], timeout=(t_end - time.time()) + args.probe_timeout + 60)[layout.probe]

    # Drain: the loops keep running until nothing is pending, then they are stopped.
    t_drain0 = time.time()
    pending = {"not checked": True}
    for _ in range(100_000):
        pending = pipeline_pending()
        if not pending or time.time() - t_drain0 > args.drain_timeout:
            break
        time.sleep(0.25)  # poll the drain (bounded by --drain-timeout)
    drain_s = time.time() - t_drain0
    pool.stop.set()
    try:
        done = pool.collect([*layout.publishers.values(), *proj_used, layout.snapshot], timeout=60) if loops else {}
    finally:
        pool.stop.clear()
    if pending:
        log(f"  {workload}: the pipeline did NOT drain within {args.drain_timeout:.0f}s: {pending}")
    pubs = [done[i] for i in layout.publishers.values()] if loops else []
    projs = [done[i] for i in proj_used]
    snap = done[layout.snapshot] if loops else {}

    ok = sum(r["ok"] for r in cmd.values())
    lat = sorted(x for r in cmd.values() for x in r["latencies_ms"])
    (cmd_errors,) = pooled(cmd.values(), "errors")
    durable = receipts_and_lags(t_measure, t_end)
    time.sleep(max(0.0, t_end + 1.5 - time.time()))  # let the last window close before reading receipts
    deadlocks = pg_deadlocks() - deadlocks0
    display = sorted(probe["display_ms"])
    view = sorted(probe["view_ms"])
    row = {
        "workload": workload, "duration_s": args.duration, "pipeline": pipeline, "rate_per_s": rate_per_s,
        "commands_per_s": round(ok / args.duration, 1), "command_p50_ms": rounded(percentile(lat, 0.5), 2),
        "command_p99_ms": rounded(percentile(lat, 0.99), 2), "command_errors": sum(cmd_errors.values()),
        "command_error_kinds": dict(cmd_errors.most_common(5)),
        "changed_share": round(sum(r["changed"] for r in cmd.values()) / ok, 3) if ok else None,
        "events_produced_per_s": round(durable["events_produced_window"] / args.duration, 1),
        "events_published_per_s": round(sum(p.get("sent_window", 0) for p in pubs) / args.duration, 1),
        "events_applied_per_s": round(durable["events_applied_window"] / args.duration, 1),
        "events_applied_per_s_reported": round(sum(p.get("applied_window", 0) for p in projs) / args.duration, 1),
        **{k: durable[k] for k in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "lag_samples", "lag_unapplied",
                                   "publish_lag_p50_ms", "publish_lag_p99_ms")},
        "display_p50_ms": rounded(percentile(display, 0.5), 1), "display_p99_ms": rounded(percentile(display, 0.99), 1),
        "display_max_ms": rounded(display[-1] if display else None, 1), "display_samples": len(display),
        "display_timeouts": probe.get("timeouts", 0), "probe_errors": probe["errors"],
        "view_p50_ms": rounded(percentile(view, 0.5), 1), "view_p99_ms": rounded(percentile(view, 0.99), 1),
        "view_path": probe.get("view_path"),
        "drain_s": round(drain_s, 1), "drained": not pending, "pending_at_stop": pending, "pg_deadlocks": deadlocks,
        "publishers": pubs, "projectors": [{k: v for k, v in p.items() if k not in ("t_first", "t_last_progress")}
                                           for p in projs],
        "snapshot_loop": snap, "resources": resources,
    }
    log(f"  {workload}: {row['commands_per_s']} cmd/s, {row['events_applied_per_s']} applied/s, lag p50/p99 "
        f"{row['lag_p50_ms']}/{row['lag_p99_ms']} ms, displayCount p50/p99 {row['display_p50_ms']}/"
        f"{row['display_p99_ms']} ms ({row['display_samples']} probes, {row['display_timeouts']} timeouts), "
        f"drained in {row['drain_s']}s")
    return row


def run_replay(pool: RolePool, layout: Layout, sampler: ResourceSampler, *, variant: str, procs: int,
               idle_s: float) -> dict:
    """Project the whole stream again from an empty state, with `procs` processes each owning every
    procs-th partition: the projector's own throughput, not the arrival rate."""
    from likes_project.eventlog import streams

    if variant == "ours":
        reset_ours()
    else:
        reset_naive()
    from django.db import connections

    connections.close_all()
    backlog = sum(streams.length(p) for p in streams.all_partitions())
    shares = partition_shares(procs)
    used = layout.replay_order[:len(shares)]
    t0 = time.time() + 0.5
    for share, i in zip(shares, used, strict=True):
        pool.submit(i, {"role": "projector", "tag": f"replay-{variant}", "variant": variant, "mode": "replay",
                        "partitions": share, "idle_s": idle_s, "t_start": t0, "hard_deadline": t0 + 120})
    sampler.start(t0, t0 + 120, pid_labels={pool.pid(i): f"projectors ({variant})" for i in used})
    try:
        res = pool.collect(used, timeout=180)
    finally:
        resources = sampler.stop()
    applied = sum(r.get("applied", 0) for r in res.values())
    ends = [r["t_last_progress"] for r in res.values() if r.get("t_last_progress")]
    elapsed = (max(ends) - t0) if ends else None
    errors, statuses, logged = pooled(res.values(), "errors", "statuses", "logged")
    return {"variant": variant, "group_failures": {k: v for k, v in logged.items() if k.startswith("group")},
            "logged": dict(logged), "procs": len(used), "backlog": backlog, "applied": applied,
            "dispatched": sum(r.get("dispatched", 0) for r in res.values()),
            "held_back": sum(r.get("held_back", 0) for r in res.values()),
            "elapsed_s": round(elapsed, 3) if elapsed else None,
            "applied_per_s": round(applied / elapsed, 1) if elapsed else None,
            "errors": dict(errors), "statuses": dict(statuses), "resources": resources}


def run_workload(pool, layout, sampler, args, *, workload, users, videos, probe_user, probe_videos,
                 all_videos) -> dict:
    """The sustained phase of one workload, its drain and the exactness check over every video."""
    log(f"{workload}: sustained load {args.warmup:g}+{args.duration:g} s ...")
    row = run_sustained(pool, layout, sampler, args, workload=workload, users=users, videos=videos,
                        probe_user=probe_user, probe_videos=probe_videos)
    row["exactness"] = exactness(all_videos, check_snapshots=True)
    ex = row["exactness"]
    verdict = "EXACT" if ex["buckets_exact"] and ex["snapshot_exact"] else "MISMATCH"
    log(f"  {workload}: {verdict} over {ex['videos_checked']} videos ({ex['liked_total']} LIKED relations): "
        f"vbuckets {'ok' if ex['buckets_exact'] else ex['bucket_mismatches']}, snapshots "
        f"{'ok' if ex['snapshot_exact'] else ex['snapshot_mismatches']}, served "
        f"{'ok' if ex['served_exact'] else ex['served_mismatches']}")
    return row


def run_capacity(pool, layout, sampler, args, *, rows: list[dict], saved: dict, own_videos: dict,
                 all_videos: list[str]) -> None:
    """The backlog replays, after every workload's sustained phase, so that the hot and the uniform
    replay of a variant run back to back (background load on a shared machine then hits both alike).
    Each replay rebuilds the live streams with the entries of one workload only (same entry ids), empties
    the variant's state and projects it from the start; the counts are then checked against that
    workload's LIKED relations (every other video must be 0)."""
    by = {r["workload"]: r for r in rows}
    for r in rows:
        r["replays"] = []
    wl = [w for w in args.workload_list if w in saved]
    previous: dict | None = None
    deadlocks = pg_deadlocks()
    for rnd in range(args.replay_rounds):
        for j, procs in enumerate(args.replay_procs_list):
            seq = [(w, "ours") for w in wl] + [(w, "naive") for w in reversed(wl)]
            if (rnd + j) % 2:
                seq.reverse()  # u-ours h-ours h-naive u-naive, then u-naive h-naive h-ours u-ours, ...
            for workload, variant in seq:
                streams_load(saved[workload])
                now_deadlocks = pg_deadlocks()  # reported after the previous replay had time to flush its stats
                if previous is not None:
                    previous["pg_deadlocks"] = now_deadlocks - deadlocks
                deadlocks = now_deadlocks
                rep = previous = run_replay(pool, layout, sampler, variant=variant, procs=procs,
                                            idle_s=args.project_idle)
                check = exactness(all_videos, check_snapshots=False, only=own_videos[workload])
                rep["exact"] = check["buckets_exact"] if variant == "ours" else check["naive_exact"]
                rep["mismatches"] = (check["bucket_mismatches"] if variant == "ours"
                                     else check["naive_mismatches"])[:5]
                rep["round"] = rnd
                by[workload]["replays"].append(rep)
                log(f"  replay {workload} {variant} x{rep['procs']}: {rep['applied']} of {rep['backlog']} events in "
                    f"{rep['elapsed_s']}s = {rep['applied_per_s']} applied/s, held back {rep['held_back']}, "
                    f"group failures {rep['group_failures'] or 0}, {'EXACT' if rep['exact'] else 'MISMATCH'}")
    if previous is not None:
        time.sleep(1.5)  # let the previous round's backends exit
        previous["pg_deadlocks"] = pg_deadlocks() - deadlocks
    for r in rows:
        r["capacity"] = {}
        for procs in args.replay_procs_list:
            cell = {}
            for variant in ("ours", "naive"):
                mine = [x for x in r["replays"] if x["variant"] == variant and x["procs"] == procs and x["elapsed_s"]]
                applied = sum(x["applied"] for x in mine)
                seconds = sum(x["elapsed_s"] for x in mine)
                cell[variant] = {"applied_per_s": round(applied / seconds, 1) if seconds else None,
                                 "per_round": [x["applied_per_s"] for x in mine],
                                 "backlog": mine[0]["backlog"] if mine else None}
            r["capacity"][str(procs)] = cell
