"""The asynchronous count pipeline (issue #3; TEST-3): `bench/run.sh projection`. Each workload under a sustained load
with the pipeline's loops running, then its stream replayed by ours and by the naive counter (docs/benchmarks.md)."""

from __future__ import annotations

import datetime as dt
import secrets
import sys
import time
from collections import Counter

from bench.harness import checks, driver, seed
from bench.harness.phases import ROLE, Layout, Session, drain_wait, drained, window_times
from bench.harness.pool import Pool
from bench.harness.report import clients_pooled, fmt, md_table, pair, pct, pooled, ratio, resources_table
from bench.harness.roles import reset_connections
from bench.harness.sampler import ResourceSampler, sampled
from bench.projection import naive

NAME = "projection"
OPTIONS = {
    **driver.LOAD_OPTIONS, "users": (5000, "liking users", 1, 10**7),
    "videos": (2000, "videos in the uniform workload", 1, 10**7),
    "workloads": ("uniform,hot", "comma list of uniform,hot"), "duration": (15.0, "measured seconds", 0.1, 120),
    "probe_videos": (16, "probe videos", 1, 1000), "probe_interval": (0.05, "probe commit cadence, s", 0.001, 5),
    "probe_poll": (0.02, "probe poll interval, s", 0.001, 5),
    "probe_timeout": (10.0, "a probe not visible after this many s is a timeout", 0.5, 30),
    "drain_timeout": (90.0, "bound on the drain, s", 1, 240),
    "replay_rounds": (3, "backlog replays per variant, process count and workload (0 skips)", 0, 5),
    "replay_procs": ("", "process counts of the backlog replay (default: --projectors, and 8)"),
}
PROBE_VIDEO_PREFIX, PROBE_USER = "bench-probe-", "bench-probe-user"


def prepare_pipeline(args) -> tuple[list, list[str], int, dict[str, list[str]]]:
    """Users, videos, the naive tables; the probe user and its videos by workload (their relations stay disjoint)."""
    seed.flush_redis()
    users, videos = seed.prepare(users=args.users, videos=args.videos)
    sets = {w: [f"{PROBE_VIDEO_PREFIX}{w[0]}{i:02d}" for i in range(args.probe_videos)] for w in ("uniform", "hot")}
    all_videos = [*videos, seed.HOT_VIDEO, *sets["uniform"], *sets["hot"]]
    seed.videos_ensure(all_videos[len(videos) + 1:])
    naive.tables(all_videos)
    return users, videos, seed.named_users(PROBE_USER)[0], sets


def reset_workload() -> None:
    """Relations, the count state of both consumers, the display snapshots, the bench Redis namespace."""
    naive.reset()
    seed.reset_all()


def run_sustained(pool: Pool, layout: Layout, sampler: ResourceSampler, args, *, workload: str, users: list,
                  videos: list[str], probe_user: int, probe_videos: list[str], pipeline: str = "loops",
                  rate_per_s: float | None = None, job_settings: dict | None = None) -> dict:
    """One workload's window with every role running, then the drain: its row. `pipeline`: "loops", "celery" (the
    caller's, nudged per `job_settings`) or "none" (the commands alone: no consumer, no probe, no drain);
    `rate_per_s`: an open loop at this total rate (None: closed)."""
    run_id, deadlocks0, times = secrets.token_hex(3), checks.pg_deadlocks(), window_times(args, lead=1.0)
    t_measure, t_end = times["t_measure"], times["t_end"]
    times["hard_deadline"] = t_end + args.drain_timeout + args.probe_timeout + 30
    n, s = len(layout.commands), Session(pool, layout, args, users)
    for k, i in enumerate(layout.commands):
        pool.submit(i, {**times, "role": ROLE + "window", "layer": "service", "users": users[k::n],
                        "videos": [seed.HOT_VIDEO] if workload == "hot" else videos, "mix": args.mix_shares,
                        "seed": args.seed * 1000 + k + (500 if workload == "hot" else 0), "settings": job_settings,
                        "key_prefix": f"p{run_id}{workload[0]}{k}",
                        "rate_per_s": rate_per_s / n if rate_per_s else None})
    if pipeline == "loops":
        s.pipeline_start(times["hard_deadline"], times)
    if pipeline != "none":  # with no pipeline nothing converges: no probe
        pool.submit(layout.probe, {**times, "role": ROLE + "probe", "videos": probe_videos, "user_id": probe_user,
                                   "interval_s": args.probe_interval, "poll_s": args.probe_poll,
                                   "settings": job_settings, "timeout_s": args.probe_timeout,
                                   "key_prefix": f"probe{run_id}{workload[0]}"})
    cmd, resources = sampled(sampler, lambda: pool.collect(layout.commands, timeout=(t_end - time.time()) + 120),
                             layout.labels(pool), window=(t_measure, t_end))
    probe = ({"display_ms": [], "view_ms": [], "errors": 0} if pipeline == "none" else
             pool.collect([layout.probe], timeout=(t_end - time.time()) + args.probe_timeout + 60)[layout.probe])
    if pipeline == "loops":  # the loops run on until nothing is pending
        loops = s.pipeline_stop()
    elif pipeline == "none":  # the backlog stays; the next phase's reset_workload() drops it
        loops = {"drained": None, "pending": {}, "drain_s": None}
    else:
        pending, drain_s = drain_wait(args.drain_timeout)
        loops = {"drained": not pending, "pending": pending, "drain_s": drain_s}
    tot = clients_pooled(list(cmd.values()), ("ok", "changed"), ("errors",))
    ok, lat = tot["ok"], tot["latencies_ms"]
    time.sleep(max(0.0, t_end + 1.5 - time.time()))  # let the last window close before reading receipts
    durable = receipts_and_lags(t_measure, t_end)
    row = {"workload": workload, "pipeline": pipeline, "rate_per_s": rate_per_s,
           "commands_per_s": round(ok / args.duration, 1), "command_p50_ms": pct(lat, 0.5),
           "command_p99_ms": pct(lat, 0.99), "command_errors": sum(tot["errors"].values()),
           "changed_share": round(tot["changed"] / ok, 3) if ok else None,
           "events_produced_per_s": round(durable.pop("produced") / args.duration, 1),
           "events_applied_per_s": round(durable.pop("applied") / args.duration, 1), **durable,
           "display_p50_ms": pct(probe["display_ms"], 0.5, 1), "display_p99_ms": pct(probe["display_ms"], 0.99, 1),
           "display_samples": len(probe["display_ms"]), "display_timeouts": probe.get("timeouts", 0),
           "probe_errors": probe["errors"], "view_p50_ms": pct(probe["view_ms"], 0.5, 1),
           "view_p99_ms": pct(probe["view_ms"], 0.99, 1), "drain_s": loops["drain_s"], "drained": loops["drained"],
           "pg_deadlocks": checks.pg_deadlocks() - deadlocks0, "loops": loops, "resources": resources}
    driver.make_log(NAME)(
        f"  {workload}: {row['commands_per_s']} cmd/s, {row['events_applied_per_s']} applied/s, lag p50/p99 "
        f"{pair(row['lag_p50_ms'], row['lag_p99_ms'], 0)} ms, displayCount p50/p99 "
        f"{pair(row['display_p50_ms'], row['display_p99_ms'], 0)} ms ({row['display_samples']} probes, "
        f"{row['display_timeouts']} timeouts), drained in {row['drain_s']}s")
    return row


def receipts_and_lags(t_measure: float, t_end: float) -> dict:
    """From the durable records: events produced and applied in the window, the publish and projection lags."""
    from django.conf import settings

    from counting import routing
    from counting.models import CountEventReceipt
    from relations.models import OutboxEvent
    w0, w1 = (dt.datetime.fromtimestamp(t, tz=dt.UTC) for t in (t_measure, t_end))
    applied_at, produced, events = {}, 0, []
    for alias in settings.COUNT_PARTITION_ALIASES:
        applied_at.update(seed.rows(alias, f"SELECT event_id, created_at FROM {seed.table(CountEventReceipt)} WHERE "
                                           "generation = %s AND outcome = 'applied'", [routing.active().generation]))
    for alias in settings.RELATION_SHARD_ALIASES:
        for event_id, changed, created, published in seed.rows(
                alias, f"SELECT event_id::text, payload->>'stateChangedAt', created_at, published_at FROM "
                       f"{seed.table(OutboxEvent)}"):
            produced += w0 <= created < w1
            if w0 <= (changed_at := dt.datetime.fromisoformat(changed)) < w1:
                events.append((event_id, changed_at, published))
    reset_connections()
    project = [(applied_at[e] - c).total_seconds() * 1000 for e, c, _ in events if e in applied_at]
    publish = [(p - c).total_seconds() * 1000 for _, c, p in events if p is not None]
    return {"produced": produced, "applied": sum(w0 <= t < w1 for t in applied_at.values()),
            "lag_samples": len(project), "lag_unapplied": len(events) - len(project),
            "publish_lag_p50_ms": pct(publish, 0.5, 1), "publish_lag_p99_ms": pct(publish, 0.99, 1),
            "lag_p50_ms": pct(project, 0.5, 1), "lag_p99_ms": pct(project, 0.99, 1),
            "lag_max_ms": round(max(project), 1) if project else None}


def exactness() -> dict:
    """After a drain: checks.counts (facts = vbuckets = snapshot = served), dead letters and frozen buckets."""
    from django.conf import settings

    from counting.models import VideoLikeCountVbucket
    from counting.services.projection import COUNT_CONSUMER
    from likes_project.eventlog.models import DeadLetter
    out = checks.counts(served=True)
    out["dead_letters"] = DeadLetter.objects.filter(consumer__in=[COUNT_CONSUMER, naive.CONSUMER]).count()
    out["frozen_buckets"] = sum(VideoLikeCountVbucket.objects.using(a).filter(frozen=True).count()
                                for a in settings.COUNT_PARTITION_ALIASES)
    reset_connections()
    return out


def streams_save(after: dict[int, str]) -> tuple[dict[int, list], dict[int, str]]:
    """The entries of every partition after `after[p]` (the previous workload's last id), and the new last ids."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis
    client, saved, last = stream_redis(), {}, {}
    for p in streams.all_partitions():
        start, entries = after.get(p, "0-0"), []
        for _ in range(10_000):  # bounded paging
            rows = client.xrange(streams.stream_key(p), min=f"({start}", max="+", count=5000)
            if not rows:
                break
            entries += rows
            start = rows[-1][0].decode()
        saved[p], last[p] = entries, start
    return saved, last


def streams_load(saved: dict[int, list]) -> None:
    """Replace the live streams by the saved entries (same entry ids, same fields)."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis
    pipe = stream_redis().pipeline(transaction=False)
    for p in streams.all_partitions():
        pipe.delete(streams.stream_key(p))
    for p, entries in saved.items():
        for entry_id, fields in entries:
            pipe.xadd(streams.stream_key(p), fields, id=entry_id)
    pipe.execute()


def run_replay(pool: Pool, layout: Layout, sampler, *, variant: str, procs: int, own: set[str]) -> dict:
    """The stream projected again from empty by `procs` processes, checked against the workload's LIKED relations."""
    from likes_project.eventlog import streams
    seed.reset_count() if variant == "ours" else naive.reset()
    reset_connections()
    backlog = sum(streams.length(p) for p in streams.all_partitions())
    res, elapsed, resources = drained(pool, "count" if variant == "ours" else naive.FACTORY, procs, max_s=120,
                                      on=layout.replay_order, sampler=sampler, label=f"projectors ({variant})")
    applied = sum(r.get("applied", 0) for r in res)
    errors, statuses, logged = pooled(res, "errors", "statuses", "logged")
    facts = Counter({v: n for v, n in checks.facts().items() if v in own})
    got = checks.bucket_sums(routed=False) if variant == "ours" else naive.counts()
    bad = checks.mismatches(facts, got, set(facts) | set(got))
    return {"variant": variant, "procs": len(res), "backlog": backlog, "applied": applied,
            "held_back": sum(r.get("held_back", 0) for r in res),
            "elapsed_s": round(elapsed, 3) if elapsed else None,
            "applied_per_s": round(applied / elapsed, 1) if elapsed else None, "errors": dict(errors),
            "statuses": dict(statuses), "group_failures": sum(v for k, v in logged.items() if k.startswith("group")),
            "exact": not bad, "mismatches": bad[:5], "resources": resources}


def run_capacity(pool, layout, sampler, args, *, rows: list[dict], saved: dict, own_videos: dict) -> None:
    """The replays, a variant's hot and uniform back to back (a drift of the machine hits both alike)."""
    log = driver.make_log(NAME)
    by = {r["workload"]: r for r in rows}
    for r in rows:
        r["replays"] = []
    wl = [w for w in args.workload_list if w in saved]
    for rnd in range(args.replay_rounds):
        for j, procs in enumerate(args.replay_procs_list):
            seq = [(w, "ours") for w in wl] + [(w, "naive") for w in reversed(wl)]
            for workload, variant in seq[::-1] if (rnd + j) % 2 else seq:
                streams_load(saved[workload])
                deadlocks = checks.pg_deadlocks()
                rep = run_replay(pool, layout, sampler, variant=variant, procs=procs, own=set(own_videos[workload]))
                time.sleep(1.5)  # let the replay's backends report their deadlocks
                rep.update(round=rnd, pg_deadlocks=checks.pg_deadlocks() - deadlocks)
                by[workload]["replays"].append(rep)
                log(f"  replay {workload} {variant} x{rep['procs']}: {rep['applied']} of {rep['backlog']} events in "
                    f"{rep['elapsed_s']}s = {rep['applied_per_s']} applied/s, exact {rep['exact']}")
    for r in rows:
        r["capacity"] = {}
        for procs in args.replay_procs_list:
            r["capacity"][str(procs)] = {}
            for variant in ("ours", "naive"):
                mine = [x for x in r["replays"] if x["variant"] == variant and x["procs"] == procs and x["elapsed_s"]]
                seconds = sum(x["elapsed_s"] for x in mine)
                r["capacity"][str(procs)][variant] = {
                    "applied_per_s": round(sum(x["applied"] for x in mine) / seconds, 1) if seconds else None,
                    "per_round": [x["applied_per_s"] for x in mine], "backlog": mine[0]["backlog"] if mine else None}


def compute_ratios(rows: list[dict], pipeline_procs: int) -> dict:
    """hot ÷ uniform of the sustained window (commands/s, applied/s) and of the replays (per variant and processes)."""
    by = {r["workload"]: r for r in rows}
    out: dict = {"pipeline_procs": pipeline_procs, "capacity": {}}
    if "hot" not in by or "uniform" not in by:
        return out
    hot, uni = by["hot"], by["uniform"]
    out["commands_hot_over_uniform"] = ratio(hot["commands_per_s"], uni["commands_per_s"])
    out["ours_sustained_hot_over_uniform"] = ratio(hot["events_applied_per_s"], uni["events_applied_per_s"])
    for procs, hcell in hot.get("capacity", {}).items():
        ucell = uni.get("capacity", {}).get(procs)
        out["capacity"][procs] = {v: {"hot_over_uniform": ratio(hcell[v]["applied_per_s"], ucell[v]["applied_per_s"]),
                                      "per_round": [round(h / u, 3) for h, u in zip(hcell[v]["per_round"],
                                                                                    ucell[v]["per_round"], strict=False)
                                                    if h and u]} for v in ("ours", "naive")} if ucell else {}
    head = out["capacity"].get(str(pipeline_procs), {})
    out["ours_capacity_hot_over_uniform"] = head.get("ours", {}).get("hot_over_uniform")
    out["naive_capacity_hot_over_uniform"] = head.get("naive", {}).get("hot_over_uniform")
    return out


def verdict(x) -> str:
    return "n/a" if x is None else ("PASS (≥ 0.9)" if x >= 0.9 else "FAIL (< 0.9)")


def sustained_table(rows: list[dict]) -> str:
    return md_table(
        ["workload", "commands/s:", "events produced/s:", "events applied/s:", "projection lag p50 / p99 ms:",
         "publish lag p50 / p99 ms:", "commit→displayCount p50 / p99 ms (probes, timeouts):",
         "same without L1 p50 / p99 ms:", "drain s:", "exact"],
        [[r["workload"], fmt(r["commands_per_s"]), fmt(r["events_produced_per_s"]), fmt(r["events_applied_per_s"]),
          pair(r["lag_p50_ms"], r["lag_p99_ms"], 0), pair(r["publish_lag_p50_ms"], r["publish_lag_p99_ms"], 0),
          f"{pair(r['display_p50_ms'], r['display_p99_ms'], 0)} ({r['display_samples']}, {r['display_timeouts']})",
          pair(r["view_p50_ms"], r["view_p99_ms"], 0), fmt(r["drain_s"]),
          f"{'EXACT' if r['exactness']['exact'] else '**MISMATCH**'} ({r['exactness']['liked']:,} likes, "
          f"{r['exactness']['videos']:,} videos)"] for r in rows])


def capacity_table(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        for procs, cell in r.get("capacity", {}).items():
            mine = [x for x in r["replays"] if str(x["procs"]) == procs]

            def rate(v, cell=cell):
                return f"**{fmt(cell[v]['applied_per_s'], 0)}** ({', '.join(fmt(x, 0) for x in cell[v]['per_round'])})"

            def failures(v, mine=mine):
                reps = [x for x in mine if x["variant"] == v]
                return f"{sum(x['group_failures'] for x in reps)} / {sum(x.get('pg_deadlocks', 0) for x in reps)}"

            cells.append([r["workload"], procs, f"{cell['ours']['backlog'] or 0:,}", rate("ours"), rate("naive"),
                          failures("ours"), failures("naive"),
                          "EXACT" if all(x["exact"] for x in mine) else "**MISMATCH**"])
    return md_table(["workload", "processes:", "backlog events:", "ours applied/s (per round):",
                     "naive single-row applied/s (per round):", "ours: groups failed / PG deadlocks:",
                     "naive: same:", "exact after every replay"], cells)


def ratios_text(x: dict) -> str:
    lines = [f"- **ours, projection throughput hot/uniform at saturation with the pipeline's {x['pipeline_procs']} "
             f"projector processes: {fmt(x.get('ours_capacity_hot_over_uniform'), 2)} — "
             f"{verdict(x.get('ours_capacity_hot_over_uniform'))}**",
             f"- ours, events applied/s hot/uniform under the sustained load: "
             f"{fmt(x.get('ours_sustained_hot_over_uniform'), 2)} — {verdict(x.get('ours_sustained_hot_over_uniform'))}"
             f" (bounded by the arrival rate; commands/s hot/uniform {fmt(x.get('commands_hot_over_uniform'), 2)})"]
    for procs, cell in x.get("capacity", {}).items():
        if cell:
            lines.append(f"- {procs} processes: ours hot/uniform **{fmt(cell['ours']['hot_over_uniform'], 2)}** "
                         f"(paired rounds {', '.join(fmt(v, 2) for v in cell['ours']['per_round'])}); naive "
                         f"single-row counter **{fmt(cell['naive']['hot_over_uniform'], 2)}**")
    return "\n".join(lines)


def loops_text(rows: list[dict]) -> str:
    return "\n".join(
        f"- {r['workload']}: publishers sent {lo['published']:,} events in {lo['batches']:,} batches; projectors "
        f"applied {lo['applied']:,} (statuses {lo['projector_statuses']}, logged {lo['projector_logged'] or 0}); "
        f"snapshot loop {lo['snapshot_runs']} runs, p50/p99 {pair(lo['snapshot_p50_ms'], lo['snapshot_p99_ms'], 0)} "
        f"ms; dead letters {ex['dead_letters']}, frozen buckets {ex['frozen_buckets']}, PG deadlocks "
        f"{r['pg_deadlocks']}; command p50/p99 {pair(r['command_p50_ms'], r['command_p99_ms'])} ms, errors "
        f"{r['command_errors']}; loop errors {lo['loop_errors'] or 0}; served from {ex.get('served_sources')}"
        for r in rows if (lo := r["loops"]).get("published") is not None and (ex := r["exactness"]))


def report(result: dict) -> list[str]:
    rows = result["rows"]
    res = [(f"{r['workload']} sustained", r.get("resources")) for r in rows]
    res += [(f"{r['workload']} replay {x['variant']} x{x['procs']}", x["resources"]) for r in rows
            for x in r.get("replays", []) if x["round"] == 0]
    return ["**Sustained load with the pipeline running** (the measured window):", sustained_table(rows),
            "**Projection capacity: the workload's stream projected again from an empty state** (the same process "
            "count for both variants; applied/s = events ÷ time from the common start to the last progress):",
            capacity_table(rows), "**Ratios**\n\n" + ratios_text(result["ratios"]), "**The loops:**\n\n" +
            loops_text(rows), resources_table(res),
            f"**Final counts vs the relation facts: {'EXACT' if result['exact'] else 'MISMATCH'}**"]


def headline(result: dict) -> dict:
    x, pp = result["ratios"], str(result["ratios"]["pipeline_procs"])
    cap = next((r["capacity"].get(pp) for r in result["rows"] if r["workload"] == "hot"), None) or {}
    return {"goal": "projection hot ÷ uniform ≥ 0.9 at saturation",
            "figure": f"hot ÷ uniform {fmt(x.get('ours_capacity_hot_over_uniform'), 2)} ({pp} projectors; "
                      f"sustained {fmt(x.get('ours_sustained_hot_over_uniform'), 2)})",
            "ceiling": f"naive single-row counter hot ÷ uniform {fmt(x.get('naive_capacity_hot_over_uniform'), 2)}",
            "ratio": "ours ÷ naive on hot " + fmt(ratio(cap.get("ours", {}).get("applied_per_s"),
                                                        cap.get("naive", {}).get("applied_per_s")), 1)}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261130, wait_quiet=180.0)
    args = run.args
    args.workload_list = [w for w in args.workloads.split(",") if w in ("uniform", "hot")]
    args.replay_procs_list = list(dict.fromkeys(driver.int_list(args.replay_procs) or [args.projectors, 8]))
    users, videos, probe_user, probe_sets = prepare_pipeline(args)
    own_videos = {"uniform": [*videos, *probe_sets["uniform"]], "hot": [seed.HOT_VIDEO, *probe_sets["hot"]]}
    reset_workload()  # the workloads' relations are disjoint: nothing is emptied between them
    layout = Layout(args, probe=True, extra=max(args.replay_procs_list))
    rows, saved, last_ids, sampler = [], {}, {}, ResourceSampler()
    with Pool(layout.size, name="pipeline") as pool:
        for workload in args.workload_list:
            run.log(f"{workload}: sustained load {args.warmup:g}+{args.duration:g} s ...")
            row = run_sustained(pool, layout, sampler, args, workload=workload, users=users, videos=videos,
                                probe_user=probe_user, probe_videos=probe_sets[workload])
            row["exactness"] = exactness()
            run.log(f"  {workload}: {'EXACT' if row['exactness']['exact'] else 'MISMATCH'} {row['exactness']}")
            saved[workload], last_ids = streams_save(last_ids)
            rows.append(row)
        for r in rows:
            r["replays"], r["capacity"] = [], {}
        if args.replay_rounds:
            run_capacity(pool, layout, sampler, args, rows=rows, saved=saved, own_videos=own_videos)
    reset_workload()  # leave the bench databases small
    exact = all(r["exactness"]["exact"] and r["drained"] and all(x["exact"] for x in r["replays"]) for r in rows)
    result = {"rows": rows, "ratios": compute_ratios(rows, args.projectors), "exact": exact,
              "meta": {"mix": args.mix_shares, "replay_procs": args.replay_procs_list}}
    return driver.finish(run, result, report=report, headline=headline,
                         failure=None if exact else "MISMATCH: a count differs from the facts (or no drain)")


if __name__ == "__main__":
    sys.exit(main())
