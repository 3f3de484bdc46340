"""2. The reverse projector throughput of the reverse-index benchmark: a backlog of crafted LikeRelationChanged
envelopes in the bench streams, drained by consume_partition(ReverseIndexProjector()) in spawned processes,
and checked against the pairs whose last state is LIKED."""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime, timedelta

from bench.common import percentile, tally
from bench.procs import ClientPool, client_setup, serve_jobs, wait_until
from bench.reverse import INTERFERENCE, log
from bench.reverse.likers import reverse_reset

PROJ_PREFIX = "rvb-p-"  # videos of the projector backlog
PROJ_USER_BASE = 9_000_000_000  # synthetic user ids of the projector events (the projector never reads users)
MAX_DRAIN_S = 240.0
CONSUMERS = 2


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
    from counting.services.reverse.projector import ReverseIndexProjector
    from likes_project.eventlog.consumer import consume_partition

    projector = ReverseIndexProjector()
    wait_until(job["start_at"])
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
            totals["dead"] += rep.dead_lettered
            tally(totals, rep, ("dispatched", "applied", "duplicates", "stale"))
            if rep.status != "ok":
                totals["busy"] += 1
                nxt.append(p)
            elif rep.dispatched:
                nxt.append(p)
        pending = nxt
    return {**totals, "t0": t0, "t1": time.time(), "undrained": pending}


def drain_worker_main(index: int, tasks, results) -> None:
    client_setup()
    serve_jobs(index, tasks, results, run_drain_job, lambda job: "drain")


def drain_pool() -> ClientPool:
    return ClientPool(CONSUMERS, drain_worker_main, name="reverse-bench-consumer", what="consumer", log=log,
                      raise_fatal=True)


def _sort_rows() -> int:
    from django.conf import settings
    from django.db import connections

    from counting.models import LikeReverseSort

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
    from counting import routing
    from likes_project.eventlog import streams

    live = routing.reverse_live()
    pool = drain_pool()
    rounds: list[dict] = []
    try:
        for rnd in range(args.rounds):
            for kind in ("uniform", "hot"):
                INTERFERENCE.note(f"projector {kind} round {rnd + 1}")
                r = run_projector_round(args, pool, kind, rnd)
                log(f"projector {kind} round {rnd + 1}: {r['events_per_s']:.0f} events/s "
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
