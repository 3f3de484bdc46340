"""Benchmark driver for the reverse "who liked" index (issue 5 "Benchmark").

Run through ./bench/reverse.sh, which does the setup (bench/env.sh: the bench's own likes_bench* databases,
Redis db 14 with the prefix likes-bench, rate limiting off). One run:

  1. likers page latency: 200,000 likers of ONE video bulk-loaded with SQL into the ACTIVE reverse
     generation's tables (each user's reverse shard from relations.reverse_routing, rows on the count
     partition the generation's placement names, distinct liked_at, matching LIKED state rows), then
     relations.selectors_likers.likers_page_list (plus the cursor encoding the API does) called as the
     author with limit 20, timed at page 1 and at page 1,000 (the cursor walked once, then reused);
  2. reverse projector throughput: a backlog of N crafted LikeRelationChanged envelopes XADDed into the
     bench streams, once over many videos (uniform) and once for one video (hot), drained by
     consume_partition(ReverseIndexProjector(), partition=p) over every stream partition in 2 spawned
     processes; fresh data each round (reverse tables, receipts, stream keys and reverse checkpoints reset).

Results: a table on stdout, bench/results/reverse_latest.json and the "Reverse index (issue 5)" generated
section of docs/benchmarks.md. Every loop is bounded by a deadline and a count.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from bench import common
from bench.command_bench import AUTHOR_NAME
from bench.common import (
    DOCS_PATH,
    RESULTS_DIR,
    ROOT,
    ClientPool,
    _pg_conninfo,
    log_machine,
    machine_spec,
    other_connections,
    percentile,
    print_blocks,
    run_times,
    serve_jobs,
    start_driver,
    write_generated,
)

OUT_PATH = RESULTS_DIR / "reverse_latest.json"
DOC_BEGIN = "<!-- bench:reverse:generated:begin -->"
DOC_END = "<!-- bench:reverse:generated:end -->"
SECTION_TITLE = "## Reverse index (issue 5)"
APP_NAME = os.environ.get("PGAPPNAME", "likes-reverse-bench")

LIKER_PREFIX = "rvl-"  # usernames of the 200,000 likers
PAGE_VIDEO = "rvb-page-hot"  # the video of the latency test
PROJ_PREFIX = "rvb-p-"  # videos of the projector backlog
PROJ_USER_BASE = 9_000_000_000  # synthetic user ids of the projector events (the projector never reads users)
MAX_DRAIN_S = 240.0
CONSUMERS = 2


def _log(msg: str) -> None:
    print(f"[reverse-bench] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/reverse.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--likers", type=int, default=200_000, help="likers of the page video (default 200000)")
    p.add_argument("--limit", type=int, default=20, help="page size (default 20)")
    p.add_argument("--deep-page", type=int, default=1000, help="the deep page (default 1000)")
    p.add_argument("--reps", type=int, default=100, help="timed fetches per page (default 100)")
    p.add_argument("--events", type=int, default=20_000, help="backlog events per projector round (default 20000)")
    p.add_argument("--uniform-videos", type=int, default=5000, help="videos of the uniform backlog (default 5000)")
    p.add_argument("--event-users", type=int, default=20_000, help="users of the backlog events (default 20000)")
    p.add_argument("--rounds", type=int, default=3, help="projector rounds per workload (default 3)")
    p.add_argument("--batch-size", type=int, default=200, help="consume_partition batch_size (default 200)")
    p.add_argument("--wait-quiet", type=float, default=120.0)
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.likers < args.limit * args.deep_page:
        p.error("--likers must cover --limit * --deep-page")
    for name in ("limit", "deep_page", "reps", "events", "uniform_videos", "event_users", "rounds", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


# --- safety ----------------------------------------------------------------------------------------


def foreign_connections() -> int:
    """Connections to the likes_bench* databases not tagged with this run's application_name."""
    import psycopg

    with psycopg.connect(**_pg_conninfo("default"), autocommit=True, connect_timeout=5) as conn:
        return other_connections(conn, app_name=APP_NAME)


INTERFERENCE: list[dict] = []


def note_interference(phase: str) -> None:
    n = foreign_connections()
    if n:
        INTERFERENCE.append({"phase": phase, "connections": n, "at": time.strftime("%H:%M:%S")})
        _log(f"WARNING: {n} connections of another client on the bench databases during {phase}")


# --- state resets --------------------------------------------------------------------------------------


def _reverse_tables() -> str:
    from relations.models import LikeReverseProjection, LikeReverseSort, ReverseEventReceipt

    return ", ".join(m._meta.db_table for m in (LikeReverseProjection, LikeReverseSort, ReverseEventReceipt))


def reverse_reset() -> int:
    """Truncate the reverse tables and receipts on every count partition, delete every stream key and the
    reverse consumer checkpoints. Returns the stream keys deleted."""
    from django.conf import settings
    from django.db import connections

    from likes_project.eventlog import streams
    from likes_project.eventlog.models import ConsumerCheckpoint
    from likes_project.redis_client import stream_redis
    from relations.selectors_likers import REVERSE_CONSUMER

    tables = _reverse_tables()
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {tables}")
    ConsumerCheckpoint.objects.filter(consumer=REVERSE_CONSUMER).delete()
    keys = [streams.stream_key(p) for p in streams.all_partitions()]
    return int(stream_redis().delete(*keys)) if keys else 0


# --- 1. likers page latency ------------------------------------------------------------------------


def _author_id() -> int:
    from django.contrib.auth import get_user_model

    author, _ = get_user_model().objects.get_or_create(username=AUTHOR_NAME, defaults={"password": "!bench"})
    return author.pk


def likers_load(args) -> dict:
    """200,000 auth_user rows (unusable passwords), their LIKED state rows and sort entries for PAGE_VIDEO
    on the ACTIVE generation's partitions, and the video's snapshot (public, by the bench author)."""
    from django.db import connections

    from relations import reverse_routing
    from relations.models import LikeReverseProjection, LikeReverseSort, VideoSnapshot

    t0 = time.monotonic()
    gen = reverse_routing.active_generation()
    author = _author_id()
    with connections["default"].cursor() as cur:
        cur.execute(
            "INSERT INTO auth_user (password, last_login, is_superuser, username, first_name, last_name, email, "
            "is_staff, is_active, date_joined) SELECT '!bench', NULL, false, %s || lpad(i::text, 7, '0'), '', '', "
            "'', false, true, now() FROM generate_series(0, %s - 1) AS i ON CONFLICT (username) DO NOTHING",
            [LIKER_PREFIX, args.likers])
        cur.execute("SELECT id FROM auth_user WHERE username LIKE %s ORDER BY id LIMIT %s",
                    [LIKER_PREFIX + "%", args.likers])
        user_ids = [r[0] for r in cur.fetchall()]
        cur.execute(
            f"INSERT INTO {VideoSnapshot._meta.db_table} (video_id, author_id, visibility, status, version, "
            "updated_at) VALUES (%s, %s, 'public', 'active', 1, now()) ON CONFLICT (video_id) DO UPDATE SET "
            "author_id = EXCLUDED.author_id, visibility = 'public', status = 'active'", [PAGE_VIDEO, author])
    t_users = time.monotonic() - t0
    rng = random.Random(args.seed)
    rng.shuffle(user_ids)  # liked_at order independent of the user id order
    base = datetime(2026, 1, 1, tzinfo=UTC)
    by_alias: dict[str, list[tuple[int, int, datetime]]] = {}
    per_shard = [0] * gen.shards
    for i, uid in enumerate(user_ids):
        s = gen.shard_of(uid)
        per_shard[s] += 1
        by_alias.setdefault(gen.placement[s], []).append((uid, s, base + timedelta(milliseconds=7 * i + 1)))
    sort_t, proj_t = LikeReverseSort._meta.db_table, LikeReverseProjection._meta.db_table
    for alias, rows in sorted(by_alias.items()):
        with connections[alias].cursor() as cur:
            for k in range(0, len(rows), 50_000):
                chunk = rows[k:k + 50_000]
                u, s, t = [r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk]
                cur.execute(
                    f"INSERT INTO {sort_t} (generation, video_id, reverse_shard, liked_at, user_id) "
                    "SELECT %s, %s, s, t, u FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[]) AS x(u, s, t)",
                    [gen.generation, PAGE_VIDEO, u, s, t])
                cur.execute(
                    f"INSERT INTO {proj_t} (generation, video_id, user_id, relation_version, state, liked_at, "
                    "reverse_shard, updated_at) SELECT %s, %s, u, 1, 'LIKED', t, s, now() "
                    "FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[]) AS x(u, s, t)",
                    [gen.generation, PAGE_VIDEO, u, s, t])
            cur.execute(f"ANALYZE {sort_t}")
            cur.execute(f"ANALYZE {proj_t}")
    return {"likers": len(user_ids), "generation": gen.generation, "shards": gen.shards,
            "placement": list(gen.placement), "per_shard": per_shard,
            "per_partition": {a: len(r) for a, r in sorted(by_alias.items())},
            "users_seconds": round(t_users, 1), "load_seconds": round(time.monotonic() - t0, 1)}


def _fetch(author: int, limit: int, cursor: str | None):
    from relations.selectors_likers import likers_cursor_encode, likers_page_list

    page = likers_page_list(caller_id=author, video_id=PAGE_VIDEO, limit=limit, cursor=cursor)
    nxt = None if page.exhausted else likers_cursor_encode(caller_id=author, video_id=PAGE_VIDEO, page=page)
    return page, nxt


def _timed(author: int, limit: int, cursor: str | None, reps: int) -> tuple[list[float], list[int]]:
    times, first = [], None
    for _ in range(3):  # warm-up
        _fetch(author, limit, cursor)
    for _ in range(reps):
        t0 = time.perf_counter()
        page, _nxt = _fetch(author, limit, cursor)
        times.append((time.perf_counter() - t0) * 1000)
        ids = [it.user_id for it in page.items]
        if first is None:
            first = ids
        elif ids != first:
            raise RuntimeError("the same cursor gave two different pages")
    return sorted(times), first or []


def run_latency(args, load: dict) -> dict:
    author = _author_id()
    t0 = time.monotonic()
    cursor, walked, seen = None, 0, 0
    deep_cursor = None
    for page_no in range(1, args.deep_page):  # pages 1 .. deep-1 walked once
        page, cursor = _fetch(author, args.limit, cursor)
        walked += 1
        seen += len(page.items)
        if cursor is None:
            raise RuntimeError(f"the list ended at page {page_no}")
    deep_cursor = cursor
    walk_s = time.monotonic() - t0
    p1, ids1 = _timed(author, args.limit, None, args.reps)
    pd, idsd = _timed(author, args.limit, deep_cursor, args.reps)
    expected_offset = (args.deep_page - 1) * args.limit
    if seen != expected_offset or len(ids1) != args.limit or len(idsd) != args.limit:
        raise RuntimeError(f"wrong page sizes: walked {seen}, page1 {len(ids1)}, deep {len(idsd)}")

    def stats(v: list[float]) -> dict:
        return {"p50_ms": round(percentile(v, 0.5), 2), "p99_ms": round(percentile(v, 0.99), 2),
                "mean_ms": round(sum(v) / len(v), 2), "max_ms": round(v[-1], 2), "n": len(v)}

    s1, sd = stats(p1), stats(pd)
    return {"limit": args.limit, "deep_page": args.deep_page, "reps": args.reps, "walk_pages": walked,
            "walk_seconds": round(walk_s, 1), "page1": s1, "deep": sd,
            "ratio_p50": round(sd["p50_ms"] / s1["p50_ms"], 2), "ratio_p99": round(sd["p99_ms"] / s1["p99_ms"], 2),
            "cursor_chars": len(deep_cursor or "")}


def likers_unload() -> None:
    from django.conf import settings
    from django.db import connections

    from relations.models import VideoSnapshot

    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {_reverse_tables()}")
    with connections["default"].cursor() as cur:
        cur.execute(f"DELETE FROM {VideoSnapshot._meta.db_table} WHERE video_id = %s", [PAGE_VIDEO])
        cur.execute("DELETE FROM auth_user WHERE username LIKE %s", [LIKER_PREFIX + "%"])


# --- 2. projector throughput ------------------------------------------------------------------------


def backlog_events(args, kind: str, rnd: int) -> list[dict]:
    """N envelopes: pairs (user, video) drawn at random from N/2 pairs, versions 1, 2, ... per pair,
    odd versions LIKED and even UNLIKED (a like/unlike mix), stateChangedAt increasing."""
    rng = random.Random(args.seed * 31 + rnd * 7 + (kind == "hot"))
    n_pairs = max(1, args.events // 2)
    pairs = []
    for _ in range(n_pairs):
        user = PROJ_USER_BASE + rng.randrange(args.event_users)
        video = f"{PROJ_PREFIX}hot" if kind == "hot" else f"{PROJ_PREFIX}{rng.randrange(args.uniform_videos):05d}"
        pairs.append((user, video))
    versions: dict[tuple[int, str], int] = {}
    base = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=rnd)
    out = []
    for i in range(args.events):
        user, video = pairs[rng.randrange(n_pairs)]
        v = versions.get((user, video), 0) + 1
        versions[(user, video)] = v
        out.append({
            "eventType": "LikeRelationChanged", "eventId": str(uuid.uuid4()), "aggregateKey": f"{user}:{video}",
            "userId": user, "videoId": video, "relationVersion": v,
            "absoluteState": "LIKED" if v % 2 else "UNLIKED",
            "stateChangedAt": (base + timedelta(milliseconds=i)).isoformat().replace("+00:00", "Z"),
            "sourceCommitSeq": i + 1,
        })
    return out


def publish(events: list[dict]) -> float:
    from likes_project.eventlog.streams import publish_pipeline

    t0 = time.monotonic()
    for k in range(0, len(events), 1000):
        publish_pipeline(events[k:k + 1000])
    return time.monotonic() - t0


def run_drain_job(job: dict) -> dict:
    """Drain the given stream partitions with consume_partition(ReverseIndexProjector()) until every one
    returns nothing (bounded by a deadline)."""
    from likes_project.eventlog.consumer import consume_partition
    from relations.services.reverse_index import ReverseIndexProjector

    projector = ReverseIndexProjector()
    while time.time() < job["start_at"]:
        time.sleep(0.005)  # all consumers start at the same instant (pacing)
    t0 = time.time()
    deadline = t0 + job["max_seconds"]
    totals = {"dispatched": 0, "applied": 0, "duplicates": 0, "stale": 0, "dead": 0, "busy": 0, "passes": 0}
    pending = list(job["partitions"])
    for _ in range(100_000):
        if not pending or time.time() > deadline:
            break
        nxt = []
        for p in pending:
            rep = consume_partition(projector, partition=p, batch_size=job["batch_size"], max_batches=10)
            totals["passes"] += 1
            totals["dispatched"] += rep.dispatched
            totals["applied"] += rep.applied
            totals["duplicates"] += rep.duplicates
            totals["stale"] += rep.stale
            totals["dead"] += rep.dead_lettered
            if rep.status != "ok":
                totals["busy"] += 1
                nxt.append(p)
            elif rep.dispatched:
                nxt.append(p)
        pending = nxt
    return {**totals, "t0": t0, "t1": time.time(), "undrained": pending}


def drain_worker_main(index: int, tasks, results) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import django

    django.setup()
    serve_jobs(index, tasks, results, run_drain_job, lambda job: "drain")


def drain_pool() -> ClientPool:
    from bench import reverse_bench

    return ClientPool(CONSUMERS, reverse_bench.drain_worker_main, name="reverse-bench-consumer",
                      what="consumer", log=_log, raise_fatal=True)


def _sort_rows() -> int:
    from django.conf import settings
    from django.db import connections

    from relations.models import LikeReverseSort

    n = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {LikeReverseSort._meta.db_table}")
            n += cur.fetchone()[0]
    return n


def run_projector_round(args, pool: ClientPool, kind: str, rnd: int) -> dict:
    from django.db import connections

    from likes_project.eventlog import streams

    reverse_reset()
    events = backlog_events(args, kind, rnd)
    final: dict[tuple[int, str], str] = {}
    for ev in events:
        final[(ev["userId"], ev["videoId"])] = ev["absoluteState"]
    expected_liked = sum(1 for s in final.values() if s == "LIKED")
    pub_s = publish(events)
    parts = streams.all_partitions()
    connections.close_all()
    start_at = time.time() + 0.3
    jobs = [{"partitions": parts[i::CONSUMERS], "start_at": start_at, "max_seconds": MAX_DRAIN_S,
             "batch_size": args.batch_size} for i in range(CONSUMERS)]
    res = pool.run(jobs, timeout=MAX_DRAIN_S + 60)
    elapsed = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    applied = sum(r["applied"] for r in res)
    dispatched = sum(r["dispatched"] for r in res)
    undrained = [p for r in res for p in r["undrained"]]
    liked = _sort_rows()
    ok = not undrained and dispatched == len(events) and applied == len(events) and liked == expected_liked
    return {"kind": kind, "round": rnd + 1, "events": len(events), "videos": len({e["videoId"] for e in events}),
            "pairs": len(final), "publish_seconds": round(pub_s, 2), "drain_seconds": round(elapsed, 3),
            "events_per_s": round(len(events) / elapsed, 1), "dispatched": dispatched, "applied": applied,
            "duplicates": sum(r["duplicates"] for r in res), "stale": sum(r["stale"] for r in res),
            "dead": sum(r["dead"] for r in res), "busy_passes": sum(r["busy"] for r in res),
            "passes": sum(r["passes"] for r in res), "sort_rows": liked, "expected_liked": expected_liked,
            "undrained": undrained, "ok": ok}


def run_projector(args) -> dict:
    from likes_project.eventlog import streams
    from relations import reverse_routing

    live = reverse_routing.live_generations()
    pool = drain_pool()
    rounds: list[dict] = []
    try:
        for rnd in range(args.rounds):
            for kind in ("uniform", "hot"):
                note_interference(f"projector {kind} round {rnd + 1}")
                r = run_projector_round(args, pool, kind, rnd)
                _log(f"projector {kind} round {rnd + 1}: {r['events_per_s']:.0f} events/s "
                     f"({r['drain_seconds']} s, ok={r['ok']})")
                rounds.append(r)
    finally:
        pool.close()

    def med(kind: str) -> float:
        v = sorted(r["events_per_s"] for r in rounds if r["kind"] == kind)
        return round(percentile(v, 0.5), 1)

    summary = {k: {"median_events_per_s": med(k),
                   "rounds_events_per_s": [r["events_per_s"] for r in rounds if r["kind"] == k]}
               for k in ("uniform", "hot")}
    return {"rounds": rounds, "summary": summary,
            "hot_over_uniform": round(summary["hot"]["median_events_per_s"]
                                      / summary["uniform"]["median_events_per_s"], 2),
            "stream_partitions": len(streams.all_partitions()),
            "live_generations": [{"generation": g.generation, "status": g.status, "shards": g.shards,
                                  "placement": list(g.placement)} for g in live],
            "consumers": CONSUMERS, "batch_size": args.batch_size}


# --- reporting ---------------------------------------------------------------------------------------


def latency_table(lat: dict) -> str:
    rows = ["| Page | p50 (ms) | p99 (ms) | mean (ms) | max (ms) | fetches |", "|---|---:|---:|---:|---:|---:|"]
    for label, s in (("1", lat["page1"]), (f"{lat['deep_page']:,}", lat["deep"])):
        rows.append(f"| {label} | {s['p50_ms']} | {s['p99_ms']} | {s['mean_ms']} | {s['max_ms']} | {s['n']} |")
    rows.append(f"| page {lat['deep_page']:,} / page 1 | {lat['ratio_p50']}x | {lat['ratio_p99']}x | | | |")
    return "\n".join(rows)


def projector_table(pj: dict) -> str:
    rows = ["| Workload | videos | events/s per round | median events/s | applied / stale+dup | sort rows ok |",
            "|---|---:|---|---:|---|---|"]
    for kind in ("uniform", "hot"):
        rs = [r for r in pj["rounds"] if r["kind"] == kind]
        per_round = ", ".join(f"{r['events_per_s']:,.0f}" for r in rs)
        counts = ", ".join(f"{r['applied']}/{r['stale'] + r['duplicates']}" for r in rs)
        rows.append(f"| {kind} | {rs[0]['videos']:,} | {per_round} | "
                    f"{pj['summary'][kind]['median_events_per_s']:,.0f} | {counts} | {all(r['ok'] for r in rs)} |")
    rows.append(f"| hot / uniform | | | {pj['hot_over_uniform']}x | | |")
    return "\n".join(rows)


def generated_section(result: dict) -> str:
    meta, spec, load, lat, pj = (result["meta"], result["machine"], result["load"], result["latency"],
                                 result["projector"])
    r0 = pj["rounds"][0]
    gens = ", ".join(f"{g['generation']} {g['status']} R={g['shards']}" for g in pj["live_generations"])
    return "\n".join([
        DOC_BEGIN,
        "<!-- Written by bench/reverse_bench.py at the end of every run; edit the text outside these markers. -->",
        "",
        f"### Last run: {meta['finished_at']} ({meta['wall_seconds']:.0f} s wall clock for the whole run)",
        "",
        "**Machine:** "
        f"{spec.get('nproc')} CPUs ({spec.get('cpu_model', 'unknown model')}), {spec.get('memory_gib')} GiB RAM, "
        f"Linux {spec.get('kernel')}; PostgreSQL {spec.get('postgresql')} "
        f"(shared_buffers {spec.get('pg_shared_buffers')}, synchronous_commit {spec.get('pg_synchronous_commit')}); "
        f"Redis {spec.get('redis')}; Python {spec.get('python')}, Django {spec.get('django')}. Load average at "
        f"the start {spec.get('loadavg_at_start')}, at the end {meta.get('loadavg_at_end')}.",
        "",
        *(["**Interference:** another client was connected to the bench databases during: "
           + ", ".join(f"{i['phase']} ({i['connections']} connections)" for i in meta["interference"])
           + ". Figures of those phases are suspect.", ""] if meta.get("interference") else []),
        f"**1. Likers page, one video with {load['likers']:,} likers, limit {lat['limit']}**",
        "",
        f"Data: {load['likers']:,} `auth_user` rows (unusable passwords) inserted with one SQL statement; for each "
        f"user its reverse shard in generation {load['generation']} (R = {load['shards']}) from "
        "`relations.reverse_routing`, and one `LikeReverseSort` entry plus one LIKED `LikeReverseProjection` row "
        "(version 1) on the count partition `placement[shard]` names, with distinct `liked_at` values (7 ms apart, "
        f"in a shuffled user order), bulk-inserted with `unnest` (load {load['load_seconds']} s). Likers per "
        f"shard: {', '.join(f'{n:,}' for n in load['per_shard'])}; per partition: "
        f"{', '.join(f'{a} {n:,}' for a, n in load['per_partition'].items())}. A public `VideoSnapshot` by the "
        "bench author; no privacy, ban or block rows (nothing hidden).",
        "",
        "Method: `relations.selectors_likers.likers_page_list` plus `likers_cursor_encode` (what the API view does "
        "after its permission check), called in-process as the author. The cursor was walked once from page 1 to "
        f"page {lat['deep_page']:,} ({lat['walk_pages']} pages in {lat['walk_seconds']} s; the page-"
        f"{lat['deep_page']:,} cursor is {lat['cursor_chars']} characters), then each page was fetched 3 times "
        f"untimed and {lat['reps']} times timed, sequentially (each repeat checked to return the same {lat['limit']}"
        " likers).",
        "",
        latency_table(lat),
        "",
        f"**2. Reverse projector throughput, backlog of {r0['events']:,} events per round**",
        "",
        f"Data: {r0['events']:,} crafted `LikeRelationChanged` envelopes per round, XADDed with "
        f"`publish_pipeline` (1,000 per round trip) into the {pj['stream_partitions']} bench stream partitions "
        f"before the clock starts. Pairs (user, video) drawn at random from {r0['events'] // 2:,} pairs over "
        f"{meta['event_users']:,} synthetic users; versions 1, 2, ... per pair, odd LIKED and even UNLIKED; "
        f"`stateChangedAt` increasing 1 ms per event. Uniform: {meta['uniform_videos']:,} videos; hot: one video. "
        f"Live generations: {gens}.",
        "",
        f"Method: {pj['consumers']} spawned processes, each running `consume_partition(ReverseIndexProjector(), "
        f"partition=p, batch_size={pj['batch_size']}, max_batches=10)` over half of the stream partitions until "
        "every one of its partitions returns nothing; events/s = backlog / (last process end - first process "
        f"start). {meta['rounds']} rounds each, uniform and hot alternating, fresh data each round (reverse tables "
        "and receipts truncated, stream keys and reverse checkpoints deleted). Each round checked: every event "
        "dispatched and applied once, and the sort entries equal the pairs whose last state is LIKED.",
        "",
        projector_table(pj),
        "",
        DOC_END,
    ])


def print_report(result: dict) -> None:
    print_blocks(latency_table(result["latency"]), projector_table(result["projector"]))


def cleanup() -> None:
    from django.db import connections

    from likes_project.eventlog.models import DeadLetter
    from relations.selectors_likers import REVERSE_CONSUMER

    connections.close_all()
    keys = reverse_reset()
    likers_unload()
    DeadLetter.objects.filter(consumer=REVERSE_CONSUMER).delete()
    _log(f"cleanup: reverse tables truncated, {keys} stream keys and the reverse checkpoints deleted, "
         "likers and the page video deleted")


# --- main --------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = start_driver()
    from django.db import connections

    waited = common.wait_for_quiet(args.wait_quiet, foreign_connections, tag="reverse-bench", log=_log)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    spec = machine_spec()
    log_machine(spec, _log)
    result: dict = {}
    try:
        reverse_reset()
        note_interference("likers load")
        result["load"] = likers_load(args)
        _log(f"loaded {result['load']['likers']:,} likers in {result['load']['load_seconds']} s")
        connections.close_all()
        note_interference("likers latency")
        result["latency"] = run_latency(args, result["load"])
        _log(f"page 1 p50 {result['latency']['page1']['p50_ms']} ms, page {args.deep_page} p50 "
             f"{result['latency']['deep']['p50_ms']} ms")
        likers_unload()
        connections.close_all()
        result["projector"] = run_projector(args)
    finally:
        try:
            cleanup()
        except Exception as exc:
            _log(f"cleanup failed: {exc.__class__.__name__}: {exc}")
    result["meta"] = {**run_times(wall0), "waited_for_quiet_s": waited, "interference": INTERFERENCE,
                      "loadavg_at_end": [round(x, 2) for x in os.getloadavg()], "events": args.events,
                      "uniform_videos": args.uniform_videos, "event_users": args.event_users,
                      "rounds": args.rounds, "seed": args.seed}
    result["machine"] = spec
    OUT_PATH.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print_report(result)
    if not args.no_docs:
        write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                        heading=f"{SECTION_TITLE}\n\nRun `./bench/reverse.sh`. bench/reverse_bench.py rewrites the "
                                "text between the `bench:reverse:generated` markers at the end of every run.")
        _log(f"wrote {DOCS_PATH.relative_to(ROOT)}")
    _log(f"wrote {OUT_PATH.relative_to(ROOT)}; wall clock {result['meta']['wall_seconds']}s")
    bad = [r for r in result["projector"]["rounds"] if not r["ok"]]
    if bad:
        _log(f"ERROR: {len(bad)} projector rounds did not check out")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
