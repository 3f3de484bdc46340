"""The reverse "who liked" index (issue 5): `bench/run.sh reverse`. `--likers` likers of one video bulk-loaded into
the active reverse generation, the likers page (as the API calls it, as the author) timed at page 1 and page
`--deep-page`; then the reverse projector draining backlogs of crafted events (uniform and hot) in 2 processes,
each round checked: every event applied once, the sort entries = the pairs last LIKED."""

from __future__ import annotations

import random
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.harness import driver, seed
from bench.harness.phases import backlog_events, drained, publish
from bench.harness.pool import Pool
from bench.harness.report import fmt, md_table, pct, ratio
from bench.harness.seed import author_id, consumer_reset, snapshots_insert, streams_reset, table, users_sql

NAME = "reverse"
OPTIONS = {
    "likers": (200_000, "likers of the page video", 1, 10**7), "limit": (20, "page size", 1, 1000),
    "deep_page": (1000, "the deep page", 2, 10**6), "reps": (100, "timed fetches per page", 1, 10**5),
    "events": (20_000, "backlog events per projector round", 1, 10**7),
    "uniform_videos": (5000, "videos of the uniform backlog", 1, 99_999),
    "event_users": (20_000, "users of the backlog events", 1, 10**9), "rounds": (3, "rounds per workload", 1, 20),
    "batch_size": (200, "consume_partition batch_size", 1, 10_000),
}
LIKER_PREFIX, PAGE_VIDEO, PROJ_PREFIX, PROJ_USER_BASE, CONSUMERS = "rvl-", "rvb-page-hot", "rvb-p-", 9 * 10**9, 2


def reverse_reset() -> int:
    """Empty the reverse tables and receipts, delete every stream key, the reverse checkpoints and dead letters."""
    from django.conf import settings

    from bench.harness.seed import truncate
    from counting.models import LikeReverseProjection, LikeReverseSort, ReverseEventReceipt
    from counting.services.reverse.projector import REVERSE_CONSUMER
    truncate(settings.COUNT_PARTITION_ALIASES, LikeReverseProjection, LikeReverseSort, ReverseEventReceipt)
    consumer_reset(REVERSE_CONSUMER)
    return streams_reset()


def likers_load(args) -> dict:
    """`--likers` auth_user rows, their LIKED state rows and sort entries for PAGE_VIDEO on the active generation's
    partitions, and the video's snapshot (public, by the bench author)."""
    from django.db import connections

    from counting import routing
    from counting.models import LikeReverseProjection, LikeReverseSort
    t0 = time.monotonic()
    gen = routing.reverse_active()
    user_ids = users_sql(LIKER_PREFIX, args.likers)
    snapshots_insert("SELECT %s", [PAGE_VIDEO], author_id=author_id())
    random.Random(args.seed).shuffle(user_ids)  # liked_at order independent of the user id order
    base, by_alias, per_shard = datetime(2026, 1, 1, tzinfo=UTC), {}, [0] * gen.shards
    for i, uid in enumerate(user_ids):
        s = gen.shard_of(uid)
        per_shard[s] += 1
        by_alias.setdefault(gen.placement[s], []).append((uid, s, base + timedelta(milliseconds=7 * i + 1)))
    for alias, rows in sorted(by_alias.items()):
        with connections[alias].cursor() as cur:
            for k in range(0, len(rows), 50_000):
                u, s, t = (list(c) for c in zip(*rows[k:k + 50_000], strict=True))
                cur.execute(f"INSERT INTO {table(LikeReverseSort)} (generation, video_id, reverse_shard, liked_at, "
                            "user_id) SELECT %s, %s, s, t, u FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[]) "
                            "AS x(u, s, t)", [gen.generation, PAGE_VIDEO, u, s, t])
                cur.execute(f"INSERT INTO {table(LikeReverseProjection)} (generation, video_id, user_id, "
                            "relation_version, state, liked_at, reverse_shard, updated_at) SELECT %s, %s, u, 1, "
                            "'LIKED', t, s, now() FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[]) "
                            "AS x(u, s, t)",
                            [gen.generation, PAGE_VIDEO, u, s, t])
        seed.vacuum(alias, LikeReverseSort, LikeReverseProjection, analyze_only=True)
    return {"likers": len(user_ids), "generation": gen.generation, "shards": gen.shards, "per_shard": per_shard,
            "per_partition": {a: len(r) for a, r in sorted(by_alias.items())},
            "load_seconds": round(time.monotonic() - t0, 1)}


def likers_unload() -> None:
    from relations.models import VideoSnapshot
    reverse_reset()
    seed.rows("default", f"DELETE FROM {table(VideoSnapshot)} WHERE video_id = %s", [PAGE_VIDEO])
    seed.rows("default", "DELETE FROM auth_user WHERE username LIKE %s", [LIKER_PREFIX + "%"])


def run_latency(args) -> dict:
    from counting.selectors.likers import likers_cursor_encode, likers_page_list
    author = author_id()

    def fetch(cursor):
        page = likers_page_list(caller_id=author, video_id=PAGE_VIDEO, limit=args.limit, cursor=cursor)
        return page, None if page.exhausted else likers_cursor_encode(caller_id=author, video_id=PAGE_VIDEO, page=page)

    def timed(cursor) -> dict:
        for _ in range(3):  # warm-up
            fetch(cursor)
        times, pages = [], set()
        for _ in range(args.reps):
            t0 = time.perf_counter()
            page, _nxt = fetch(cursor)
            times.append((time.perf_counter() - t0) * 1000)
            pages.add(tuple(it.user_id for it in page.items))
        if len(pages) != 1 or len(next(iter(pages))) != args.limit:
            raise RuntimeError("the same cursor gave two different pages, or a short page")
        return {"p50_ms": pct(times, 0.5), "p99_ms": pct(times, 0.99), "mean_ms": round(sum(times) / len(times), 2),
                "max_ms": round(max(times), 2), "n": len(times)}

    t0, cursor = time.monotonic(), None
    for page_no in range(1, args.deep_page):  # pages 1 .. deep-1 walked once
        _page, cursor = fetch(cursor)
        if cursor is None:
            raise RuntimeError(f"the list ended at page {page_no}")
    walk_s = round(time.monotonic() - t0, 1)
    page1, deep = timed(None), timed(cursor)
    return {"limit": args.limit, "deep_page": args.deep_page, "walk_seconds": walk_s, "page1": page1, "deep": deep,
            "ratio_p50": ratio(deep["p50_ms"], page1["p50_ms"], 2), "cursor_chars": len(cursor or ""),
            "ratio_p99": ratio(deep["p99_ms"], page1["p99_ms"], 2)}


def projector_round(args, pool: Pool, kind: str, rnd: int) -> dict:
    from django.db import connections

    from counting.models import LikeReverseSort
    reverse_reset()
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
    lat, pj, load = result["latency"], result["projector"], result["load"]
    pages = (("1", lat["page1"]), (f"{lat['deep_page']:,}", lat["deep"]))
    return [f"**1. Likers page, one video with {load['likers']:,} likers, limit {lat['limit']}** (loaded in "
            f"{load['load_seconds']} s over {load['shards']} reverse shards; the cursor walked to page "
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
        reverse_reset()
        run.interference.note("likers load")
        result["load"] = likers_load(args)
        run.interference.note("likers latency")
        result["latency"] = run_latency(args)
        likers_unload()
        rounds = []
        with Pool(CONSUMERS, name="consumer") as pool:
            for rnd in range(args.rounds):
                for kind in ("uniform", "hot"):
                    run.interference.note(f"projector {kind} round {rnd + 1}")
                    rounds.append(projector_round(args, pool, kind, rnd))
                    run.log(f"projector {kind} round {rnd + 1}: {rounds[-1]['events_per_s']:.0f} events/s")
    finally:
        likers_unload()
    median = {k: pct([r["events_per_s"] for r in rounds if r["kind"] == k], 0.5, 1) for k in ("uniform", "hot")}
    result["projector"] = {"rounds": rounds, "median": median,
                           "hot_over_uniform": ratio(median["hot"], median["uniform"], 2)}
    bad = [r for r in rounds if not r["ok"]]
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"ERROR: {len(bad)} projector rounds did not check out" if bad else None)


if __name__ == "__main__":
    sys.exit(main())
