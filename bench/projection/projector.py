"""The count projector at saturation against the raw SQL ceiling of its own statements (issue 15 §3; TEST-3):
`bench/run.sh projector` (docs/benchmarks.md, "Count projector at saturation")."""

from __future__ import annotations

import sys

from bench.harness import checks, driver
from bench.harness.driver import BENCH_DIR
from bench.harness.phases import backlog_events, drained, expected_liked, pgbench, pgbench_found, publish
from bench.harness.pool import Pool
from bench.harness.report import fmt, md_table, pct, ratio, resources_table
from bench.harness.roles import reset_connections
from bench.harness.sampler import ResourceSampler
from bench.harness.seed import reset_count, streams_reset
from bench.projection import naive

NAME = "projector"
OPTIONS = {
    "events": (60_000, "backlog events per drain", 1, 10**7), "event_users": (200_000, "users of the events", 1, 10**9),
    "uniform_videos": (5000, "videos of the uniform backlog", 1, 99_999),
    "rounds": (3, "drains per workload, variant and process count", 1, 20), "procs": ("2,8", "projector processes"),
    "pgbench_clients": ("2,4,8", "pgbench client counts of the ceiling"),
    "pgbench_duration": (10, "seconds per pgbench run", 1, 120), "skip_naive": (False, ""), "skip_pgbench": (False, ""),
}
PGBENCH_SCRIPT = BENCH_DIR / "pgbench" / "count_group.sql"
VIDEO_PREFIX, USER_BASE, MAX_DRAIN_S = "pjb-", 8_000_000_000, 600.0


def backlog(args, kind: str, rnd: int) -> list[dict]:
    return backlog_events(seed=args.seed, events=args.events, users=args.event_users, videos=args.uniform_videos,
                          kind=kind, rnd=rnd, video_prefix=VIDEO_PREFIX, user_base=USER_BASE)


def reset_all() -> None:
    """Empty streams, no checkpoints of either consumer, empty projection and naive tables."""
    streams_reset()
    reset_count()
    naive.reset()


def drain(pool: Pool, sampler, *, variant: str, procs: int, events: int, expected: dict[str, int]) -> dict:
    """One drain of the backlog in the streams by `procs` of the pool's processes, from an empty state."""
    reset_count() if variant == "ours" else naive.reset()
    reset_connections()
    res, seconds, resources = drained(pool, "count" if variant == "ours" else naive.FACTORY, procs, max_s=MAX_DRAIN_S,
                                      sampler=sampler)
    elapsed = max(seconds or 0.0, 1e-3)
    got = checks.bucket_sums(videos=sorted(expected)) if variant == "ours" else naive.counts(sorted(expected))
    wrong = sum(1 for v, n in expected.items() if got.get(v, 0) != n)
    undrained = [p for r in res for p in r["undrained"]]
    dead = sum(r.get("dead_lettered", 0) for r in res)
    return {"variant": variant, "procs": procs, "events": events, "seconds": round(elapsed, 3),
            "events_per_s": round(events / elapsed, 1), "applied": sum(r.get("applied", 0) for r in res),
            "dead": dead, "wrong_videos": wrong, "undrained": undrained, "exact": not (wrong or undrained or dead),
            "resources": resources}


def pgbench_ceiling(args, sampler, *, kind: str, clients: int) -> dict:
    """count_group.sql on cnt_00 from an empty projection: groups/s and events/s (x events per group)."""
    from django.conf import settings

    from counting import routing
    reset_count()
    gen, alias = routing.active(), settings.COUNT_PARTITION_ALIASES[0]
    vbs = [vb for vb, r in enumerate(gen.routes) if r.partition == alias]
    per_group = max(1, settings.COUNT_PROJECTOR_BATCH // len(settings.COUNT_PARTITION_ALIASES))
    res = pgbench(alias, ["-M", "simple", "-f", str(PGBENCH_SCRIPT), "-D", f"batch={per_group}", "-D",
                          f"gen={gen.generation}", "-D", f"space={gen.space.version}", "-D",
                          "vbs='{" + ",".join(map(str, vbs)) + "}'", "-D", f"nvbs={len(vbs)}",
                          "-D", f"videos={args.uniform_videos if kind == 'uniform' else 1}"],
                  clients=clients, seconds=args.pgbench_duration, sampler=sampler)
    row = {"kind": kind, "clients": clients, "tps": res["tps"], "events_per_group": per_group,
           "events_per_s": round(res["tps"] * per_group, 1), "resources": res["resources"]}
    driver.make_log(NAME)(f"pgbench {kind} c={clients}: {row['tps']} groups/s = {row['events_per_s']:,.0f} events/s")
    return row


def summarize(result: dict) -> dict:
    out = {}
    for kind in ("uniform", "hot"):
        cells: dict[str, list] = {}
        for d in result["drains"]:
            if d["kind"] == kind:
                cells.setdefault(f"{d['variant']} x{d['procs']}", []).append(d["events_per_s"])
        med = {k: pct(v, 0.5, 1) for k, v in cells.items()}
        ceiling = max((r["events_per_s"] for r in result["pgbench"] if r["kind"] == kind), default=None)
        ours = max((v for k, v in med.items() if k.startswith("ours")), default=None)
        naive_best = max((v for k, v in med.items() if k.startswith("naive")), default=None)
        out[kind] = {"median_events_per_s": med, "rounds": cells, "ceiling_events_per_s": ceiling, "ours_best": ours,
                     "naive_best": naive_best, "ours_over_ceiling": ratio(ours, ceiling),
                     "naive_over_ceiling": ratio(naive_best, ceiling)}
    return out


def report(result: dict) -> list[str]:
    summ, rows = result["summary"], []
    for kind in ("uniform", "hot"):
        s = summ[kind]
        rows += [[kind, cell, f"**{fmt(s['median_events_per_s'][cell], 0)}**", ", ".join(fmt(v, 0) for v in vals),
                  fmt(ratio(s["median_events_per_s"][cell], s["ceiling_events_per_s"]), 2)]
                 for cell, vals in s["rounds"].items()]
        rows += [[kind, f"pgbench count_group.sql c={r['clients']} ({r['events_per_group']} events a transaction, "
                        f"{fmt(r['tps'])} tps)", fmt(r["events_per_s"], 0), "",
                  "ceiling" if r["events_per_s"] == s["ceiling_events_per_s"] else ""]
                 for r in result["pgbench"] if r["kind"] == kind]
    ratios = [f"- {kind}: ours best {fmt(s['ours_best'], 0)} events/s ÷ ceiling {fmt(s['ceiling_events_per_s'], 0)} ="
              f" **{fmt(s['ours_over_ceiling'], 2)}**; naive single-row best {fmt(s['naive_best'], 0)} = "
              f"{fmt(s['naive_over_ceiling'], 2)}" for kind, s in summ.items()]
    exact = all(d["exact"] for d in result["drains"])
    res = [(f"{d['kind']} {d['variant']} x{d['procs']}", d["resources"]) for d in result["drains"] if d["round"] == 1]
    res += [(f"pgbench {r['kind']} c={r['clients']}", r["resources"]) for r in result["pgbench"]]
    return [md_table(["workload", "variant x processes", "events/s (median):", "per round", "÷ ceiling:"], rows),
            "**Ratios (goal: ours ≥ 0.5 of the ceiling)**\n\n" + "\n".join(ratios), resources_table(res),
            f"**Exactness:** {'EXACT' if exact else 'NOT EXACT'}: after every drain each video's count (ours: Σ "
            "vbuckets; naive: its counter row) equals the LIKED relations of the backlog's final states; "
            f"{sum(d['dead'] for d in result['drains'])} dead letters."]


def headline(result: dict) -> dict:
    u, h = result["summary"]["uniform"], result["summary"]["hot"]
    return {"goal": "ours ≥ 0.5 of the raw SQL ceiling",
            "figure": f"{fmt(u['ours_best'], 0)} events/s uniform, {fmt(h['ours_best'], 0)} hot (naive hot "
                      f"{fmt(h['naive_best'], 0)})",
            "ceiling": f"{fmt(u['ceiling_events_per_s'], 0)} / {fmt(h['ceiling_events_per_s'], 0)} events/s",
            "ratio": f"{fmt(u['ours_over_ceiling'], 2)} / {fmt(h['ours_over_ceiling'], 2)}"}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261203)
    args = run.args
    procs_list = driver.int_list(args.procs)
    from django.conf import settings
    naive.tables([f"{VIDEO_PREFIX}{i:05d}" for i in range(args.uniform_videos)] + [f"{VIDEO_PREFIX}hot"])
    reset_connections()
    result: dict = {"drains": [], "pgbench": []}
    variants, sampler = ["ours"] if args.skip_naive else ["ours", "naive"], ResourceSampler()
    try:
        with Pool(max(procs_list), name="projector") as pool:
            for rnd in range(args.rounds):
                for kind in ("uniform", "hot"):
                    reset_all()
                    events = backlog(args, kind, rnd)
                    expected, pub = expected_liked(events), publish(events)
                    for procs in procs_list:
                        for variant in variants if rnd % 2 == 0 else variants[::-1]:
                            run.interference.note(f"{kind} {variant} x{procs} round {rnd + 1}")
                            d = drain(pool, sampler, variant=variant, procs=procs, events=len(events),
                                      expected=expected)
                            d.update(kind=kind, round=rnd + 1, publish_seconds=round(pub, 2))
                            result["drains"].append(d)
                            run.log(f"{kind} {variant} x{procs} round {rnd + 1}: {d['events_per_s']:,.0f} events/s "
                                    f"({d['seconds']} s, exact={d['exact']})")
        if not args.skip_pgbench and pgbench_found(run):
            reset_all()
            result["pgbench"] = [pgbench_ceiling(args, sampler, kind=kind, clients=c) for kind in ("uniform", "hot")
                                 for c in driver.int_list(args.pgbench_clients)]
    finally:
        reset_all()
    batch = settings.COUNT_PROJECTOR_BATCH
    result["meta"] = {"batch": batch, "events_per_group": batch // len(settings.COUNT_PARTITION_ALIASES),
                      "pgbench_alias": settings.COUNT_PARTITION_ALIASES[0]}
    result["summary"] = summarize(result)
    bad = [d for d in result["drains"] if not d["exact"]]
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"ERROR: {len(bad)} drains were not exact" if bad else None)


if __name__ == "__main__":
    sys.exit(main())
