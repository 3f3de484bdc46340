"""The reverse "who liked" index (issue 5): `bench/run.sh reverse`. `--likers` likers of one video bulk-loaded, the
likers page (as its author) timed at page 1 and page `--deep-page`; the reverse projector draining crafted backlogs
(uniform, hot) in 2 processes, each round checked: every event applied once, the sort entries = the pairs LIKED."""

from __future__ import annotations

import random
import sys
import time
from datetime import UTC, datetime

from bench.growth.measure import run_likers
from bench.harness import driver, load, seed
from bench.harness.phases import backlog_events, drained, publish
from bench.harness.pool import Pool
from bench.harness.report import fmt, md_table, pct, ratio
from bench.harness.seed import author_id, snapshots_insert, table, users_sql

NAME = "reverse"
OPTIONS = {
    "likers": (200_000, "likers of the page video", 1, 10**7), "limit": (20, "page size", 1, 1000),
    "deep_page": (1000, "the deep page", 2, 10**6), "reps": (100, "timed fetches per page", 1, 10**5),
    "events": (20_000, "backlog events per projector round", 1, 10**7),
    "uniform_videos": (5000, "videos of the uniform backlog", 1, 99_999),
    "event_users": (20_000, "users of the backlog events", 1, 10**9), "rounds": (3, "rounds per workload", 1, 20),
    "batch_size": (200, "consume_partition batch_size", 1, 10_000),
}
PREFIX, PROJ_PREFIX, PROJ_USER_BASE, CONSUMERS = "rvb-page-", "rvb-p-", 9 * 10**9, 2  # PREFIX: the page's video, users
LIKER_PREFIX, PAGE_VIDEO = f"{PREFIX}u", f"{PREFIX}hot"


def likers_load(args) -> dict:
    """`--likers` users liking PAGE_VIDEO, loaded into every store (harness/load.py), and the video's snapshot."""
    from counting import routing
    t0 = time.monotonic()
    user_ids = users_sql(LIKER_PREFIX, args.likers)
    snapshots_insert("SELECT %s", [PAGE_VIDEO], author_id=author_id())
    random.Random(args.seed).shuffle(user_ids)  # liked_at order independent of the user id order
    out = load.load(((i, uid, PAGE_VIDEO, "LIKED", 1) for i, uid in enumerate(user_ids)), prefix=PREFIX,
                    base_ms=int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000), step_ms=7)
    return {"likers": len(user_ids), "shards": routing.reverse_active().shards, "rows": out["rows"],
            "load_seconds": round(time.monotonic() - t0, 1)}


def projector_round(args, pool: Pool, kind: str, rnd: int) -> dict:
    from django.db import connections

    from counting.models import LikeReverseSort
    load.unload(PREFIX)  # the reverse index, the streams and their consumers' checkpoints
    events = backlog_events(seed=args.seed, events=args.events, users=args.event_users, videos=args.uniform_videos,
                            kind=kind, rnd=rnd, video_prefix=PROJ_PREFIX, user_base=PROJ_USER_BASE)
    final = {(ev["userId"], ev["videoId"]): ev["absoluteState"] for ev in events}
    publish(events)
    connections.close_all()
    res, _, _ = drained(pool, "reverse", CONSUMERS, max_s=240, lead=0.3, batch_size=args.batch_size)
    elapsed = max(r["t_end"] for r in res) - min(r["t_first"] for r in res)
    liked = sum(seed.rows(a, f"SELECT count(*) FROM {table(LikeReverseSort)}")[0][0] for a in seed.partitions())
    dispatched, applied = sum(r.get("dispatched", 0) for r in res), sum(r.get("applied", 0) for r in res)
    return {"kind": kind, "round": rnd + 1, "events": len(events), "videos": len({e["videoId"] for e in events}),
            "seconds": round(elapsed, 3), "events_per_s": round(len(events) / elapsed, 1), "applied": applied,
            "stale_dup": sum(r.get("stale", 0) + r.get("duplicates", 0) for r in res), "sort_rows": liked,
            "ok": not any(r["undrained"] for r in res) and dispatched == applied == len(events)
            and liked == sum(s == "LIKED" for s in final.values())}


def report(result: dict) -> list[str]:
    lat, pj, loaded = result["latency"], result["projector"], result["load"]
    pages = (("1", lat["page1"]), (f"{lat['deep_page']:,}", lat["deep"]))
    return [f"**1. Likers page, one video with {loaded['likers']:,} likers, limit {lat['limit']}** (loaded in "
            f"{loaded['load_seconds']} s over {loaded['shards']} reverse shards; the cursor walked to page "
            f"{lat['deep_page']:,} in {lat['walk_seconds']} s, {lat['cursor_chars']} characters)\n\n" + md_table(
                ["page", "p50 ms:", "p99 ms:", "mean ms:", "max ms:", "fetches:"],
                [*([label, s["p50_ms"], s["p99_ms"], s["mean_ms"], s["max_ms"], s["n"]] for label, s in pages),
                 [f"page {lat['deep_page']:,} ÷ page 1", f"{lat['ratio_p50']}x", f"{lat['ratio_p99']}x", None, None,
                  None]]),
            f"**2. Reverse projector throughput**, {CONSUMERS} processes draining a backlog of "
            f"{pj['rounds'][0]['events']:,} events a round, fresh data each round\n\n" + md_table(
                ["workload", "videos:", "events/s per round", "median events/s:", "applied / stale+dup", "checks"],
                [*([k, f"{rs[0]['videos']:,}", ", ".join(fmt(r["events_per_s"], 0) for r in rs),
                    fmt(pj["median"][k], 0), ", ".join(f"{r['applied']}/{r['stale_dup']}" for r in rs),
                    "ok" if all(r["ok"] for r in rs) else "**FAILED**"]
                   for k in ("uniform", "hot") if (rs := [r for r in pj["rounds"] if r["kind"] == k])),
                 ["hot ÷ uniform", None, None, f"{pj['hot_over_uniform']}x", None, None]])]


def headline(result: dict) -> dict:
    lat, pj = result["latency"], result["projector"]
    return {"goal": "deep likers page ≈ page 1; hot projection ≈ uniform",
            "figure": f"page 1 p50 {fmt(lat['page1']['p50_ms'], 2)} ms, page {lat['deep_page']:,} "
                      f"{fmt(lat['deep']['p50_ms'], 2)} ms; projector {fmt(pj['median']['uniform'], 0)} events/s",
            "ceiling": "-", "ratio": f"deep ÷ 1: {lat['ratio_p50']}; hot ÷ uniform {pj['hot_over_uniform']}"}


def options_wrong(args) -> str | None:
    return "--likers must cover --limit * --deep-page" if args.likers < args.limit * args.deep_page else None


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261129, check=options_wrong)
    args = run.args
    result: dict = {}
    try:
        load.unload(PREFIX)
        run.interference.note("likers load")
        result["load"] = likers_load(args)
        run.interference.note("likers latency")
        lat = run_likers(reps=args.reps, warmup=3, limit=args.limit, deep=args.deep_page, video=PAGE_VIDEO, plans=False)
        result["latency"] = {**lat, **{f"ratio_{q}": ratio(lat["deep"][f"{q}_ms"], lat["page1"][f"{q}_ms"], 2)
                                       for q in ("p50", "p99")}}
        rounds = []
        with Pool(CONSUMERS, name="consumer") as pool:
            for rnd in range(args.rounds):
                for kind in ("uniform", "hot"):
                    run.interference.note(f"projector {kind} round {rnd + 1}")
                    rounds.append(projector_round(args, pool, kind, rnd))
                    run.log(f"projector {kind} round {rnd + 1}: {rounds[-1]['events_per_s']:.0f} events/s")
    finally:
        load.unload(PREFIX)
    median = {k: pct([r["events_per_s"] for r in rounds if r["kind"] == k], 0.5, 1) for k in ("uniform", "hot")}
    result["projector"] = {"rounds": rounds, "median": median,
                           "hot_over_uniform": ratio(median["hot"], median["uniform"], 2)}
    bad = [r for r in rounds if not r["ok"]]
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"ERROR: {len(bad)} projector rounds did not check out" if bad else None)


if __name__ == "__main__":
    sys.exit(main())
