"""The client processes of the read-path benchmark: the batch query of 20 ids at the service layer (the view's
three selector calls) or over HTTP, each answer checked against the prepared data, with the SQL statements and
Redis round trips it cost; and the relation-cache fill of the warm case."""

from __future__ import annotations

import http.client
import json
import os
import random
import time
from collections import Counter

from bench.procs import (
    HTTP_TIMEOUT_S,
    ClientPool,
    client_setup,
    error_kind,
    http_exchange,
    serve_jobs,
    wait_until,
)
from bench.read import log

# Safety bounds of the client processes.
MAX_JOB_SECONDS = 300.0
MAX_REQUESTS_PER_JOB = 2_000_000

_IO: Counter = Counter()  # per client process: SQL statements by alias, Redis round trips


def _instrument() -> None:
    """Count SQL statements per alias (Django's execute wrappers) and Redis round trips (direct commands
    and pipeline executions) in this client process."""
    import redis
    import redis.client
    from django.db import connections

    original = redis.Redis.execute_command
    original_pipe = redis.client.Pipeline.execute

    def counting_execute(self, *args, **kwargs):
        _IO["redis"] += 1
        return original(self, *args, **kwargs)

    def counting_pipe(self, *args, **kwargs):
        _IO["redis"] += 1
        return original_pipe(self, *args, **kwargs)

    redis.Redis.execute_command = counting_execute
    redis.client.Pipeline.execute = counting_pipe
    for alias in connections:
        def wrapper(execute, sql, params, many, context, alias=alias):
            _IO[f"sql:{alias}"] += 1
            return execute(sql, params, many, context)

        connections[alias].execute_wrappers.append(wrapper)


def _service_call():
    from counting import selectors as count_selectors

    def call(user_id: int, token: str, ids: list[str]) -> list[tuple]:
        # The body of counting.api.batch_views.BatchQueryView.post, without DRF.
        visible, rels, counts = count_selectors.feed_page_read(user_id=user_id, video_ids=ids, min_versions={})
        out = []
        for v in ids:
            c = counts.get(v) if visible[v] else None
            out.append((v, visible[v], rels[v].state, rels[v].relation_version,
                        c.display_count if c else None, c.source if c else None))
        return out

    return call, None


def _http_call(port: int):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)

    def call(user_id: int, token: str, ids: list[str]) -> list[tuple]:
        body = json.dumps({"videoIds": ids})
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        data = http_exchange(conn, "POST", "/v1/like-relations/batch-query", body=body, headers=headers)
        return [(it["videoId"], it["available"], it["myState"], it["relationVersion"], it["displayCount"], None)
                for it in json.loads(data)["items"]]

    return call, conn


def _wrong(items: list[tuple], ids: list[str], expected: dict, counts: dict) -> bool:
    """An answer that differs from the prepared data: order, availability, state/version or count."""
    if [it[0] for it in items] != ids:
        return True
    for vid, available, state, version, display, _src in items:
        if not available or [state, version] != list(expected.get(vid, ("UNLIKED", 0))) or display != counts[vid]:
            return True
    return False


def run_batch_job(job: dict) -> dict:
    from likes_project import metrics

    rng = random.Random(job["seed"])
    users, batch, counts = job["users"], job["batch"], job["counts"]
    pages = job["feed"] // batch
    call, conn = _service_call() if job["layer"] == "service" else _http_call(job["port"])
    t_measure, t_end = job["t_measure"], min(job["t_end"], time.time() + MAX_JOB_SECONDS)
    wait_until(job["t_start"])
    latencies: list[float] = []
    errors: Counter = Counter()
    io: Counter = Counter()
    sources: Counter = Counter()
    ok = wrong = sent = 0
    hits = misses = 0.0
    try:
        while sent < MAX_REQUESTS_PER_JOB:
            w0 = time.time()
            if w0 >= t_end:
                break
            user_id, token, feed, expected = users[rng.randrange(len(users))]
            p = rng.randrange(pages)
            ids = feed[p * batch:(p + 1) * batch]
            sent += 1
            io0 = Counter(_IO)
            h0 = metrics.value("likes_cache_hits_total", cache="relation")
            m0 = metrics.value("likes_cache_misses_total", cache="relation")
            t0 = time.perf_counter()
            try:
                items = call(user_id, token, ids)
                err = None
            except Exception as exc:
                err = error_kind(exc)
            elapsed_ms = (time.perf_counter() - t0) * 1000.0
            if w0 < t_measure or time.time() > t_end:
                continue  # warm-up, or finished after the window closed
            if err is not None:
                errors[err] += 1
                continue
            ok += 1
            latencies.append(round(elapsed_ms, 3))
            wrong += _wrong(items, ids, expected, counts)
            io.update(Counter(_IO) - io0)
            hits += metrics.value("likes_cache_hits_total", cache="relation") - h0
            misses += metrics.value("likes_cache_misses_total", cache="relation") - m0
            sources.update(it[5] for it in items if it[5])
    finally:
        if conn is not None:
            conn.close()
    return {"ok": ok, "wrong": wrong, "errors": dict(errors), "latencies_ms": latencies, "io": dict(io),
            "relcache_hits": hits, "relcache_misses": misses, "count_sources": dict(sources), "sent_total": sent}


def run_repair_job(job: dict) -> dict:
    """Fill the relation cache for these users' feeds through relation_cache_repair (floor, then Redis)."""
    from relations.services.relation_cache import relation_cache_repair

    t0 = time.perf_counter()
    deadline = time.time() + MAX_JOB_SECONDS
    written = 0
    for user_id, feed in job["users"]:
        if time.time() > deadline:
            break
        written += relation_cache_repair(user_id=user_id, video_ids=feed)
    return {"written": written, "seconds": round(time.perf_counter() - t0, 2)}


def read_worker_main(index: int, redis_url: str | None, tasks, results) -> None:
    """Entry point of one spawned client process (REDIS_URL is overridden before django.setup() for the
    Redis-down clients)."""
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
        os.environ["LOG_LEVEL"] = "ERROR"  # not one "cache read failed" warning per request on stderr
    client_setup()
    _instrument()

    def run(job: dict) -> dict:
        return run_repair_job(job) if job["kind"] == "repair" else run_batch_job(job)

    serve_jobs(index, tasks, results, run, lambda job: job["kind"])


def read_pool(size: int, *, redis_url: str | None, label: str) -> ClientPool:
    """Spawned client processes running read_worker_main (bench/command_bench.py's pool runs the command
    worker, this one read jobs)."""
    return ClientPool(size, read_worker_main, args=(redis_url,), name=f"read-bench-{label}",
                      what=f"{label} client", log=log, raise_fatal=True)
