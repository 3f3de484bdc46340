"""The read benchmark's client roles: the batch query (service layer or HTTP), each answer checked, with its SQL
statements and Redis round trips; the relation-cache fill of the warm case."""

from __future__ import annotations

import http.client
import json
import random
import time
from collections import Counter

from bench.harness.roles import HTTP_TIMEOUT_S, error_kind, http_exchange
from bench.harness.sampler import count_io

MAX_JOB_SECONDS = 300.0
_IO: Counter = Counter()  # this process's SQL statements by alias and Redis round trips (pipelines as one)
_COUNTING: list = []  # once this process counts: the function that would stop it


def _call(job: dict):
    if job["layer"] == "service":
        from counting import selectors
        def call(user_id, token, ids):  # the body of counting.api.batch_views.BatchQueryView.post, without DRF
            visible, rels, counts = selectors.feed_page_read(user_id=user_id, video_ids=ids, min_versions={})
            return [(v, visible[v], rels[v].state, rels[v].relation_version,
                     *((c.display_count, c.source) if (c := counts.get(v) if visible[v] else None) else (None, None)))
                    for v in ids]

        return call, None
    conn = http.client.HTTPConnection("127.0.0.1", job["port"], timeout=HTTP_TIMEOUT_S)

    def call(user_id, token, ids):
        data = http_exchange(conn, "POST", "/v1/like-relations/batch-query", body=json.dumps({"videoIds": ids}),
                             headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
        return [(it["videoId"], it["available"], it["myState"], it["relationVersion"], it["displayCount"], None)
                for it in json.loads(data)["items"]]

    return call, conn


def batch(job: dict, ctl) -> dict:
    """Batch queries of random feed pages over [t_start, t_end], measured from t_measure, each answer checked."""
    from likes_project import metrics
    if not _COUNTING:
        _COUNTING.append(count_io(_IO, pipelines=True))
    rng, users, size, counts = random.Random(job["seed"]), job["users"], job["batch"], job["counts"]
    call, conn = _call(job)
    t_measure, t_end = job["t_measure"], min(job["t_end"], time.time() + MAX_JOB_SECONDS)
    latencies, errors, io, sources, c = [], Counter(), Counter(), Counter(), Counter(ok=0, wrong=0)
    hits = misses = 0.0
    ctl.sleep_until(job["t_start"])
    try:
        for _ in range(2_000_000):
            w0 = time.time()
            if w0 >= t_end:
                break
            user_id, token, feed, expected = users[rng.randrange(len(users))]
            page = rng.randrange(job["feed"] // size)
            ids = feed[page * size:(page + 1) * size]
            io0 = Counter(_IO)
            h0, m0 = (metrics.value(f"likes_cache_{k}_total", cache="relation") for k in ("hits", "misses"))
            t0 = time.perf_counter()
            try:
                items, err = call(user_id, token, ids), None
            except Exception as exc:
                err = error_kind(exc)
            ms = (time.perf_counter() - t0) * 1000.0
            if w0 < t_measure or time.time() > t_end:
                continue  # warm-up, or finished after the window closed
            if err is not None:
                errors[err] += 1
                continue
            c["ok"] += 1
            latencies.append(round(ms, 3))
            c["wrong"] += [it[0] for it in items] != ids or any(
                not available or [state, version] != list(expected.get(vid, ("UNLIKED", 0))) or display != counts[vid]
                for vid, available, state, version, display, _src in items)
            io.update(Counter(_IO) - io0)
            hits += metrics.value("likes_cache_hits_total", cache="relation") - h0
            misses += metrics.value("likes_cache_misses_total", cache="relation") - m0
            sources.update(it[5] for it in items if it[5])
    finally:
        if conn is not None:
            conn.close()
    return {**c, "errors": dict(errors), "latencies_ms": latencies, "io": dict(io), "hits": hits, "misses": misses,
            "count_sources": dict(sources)}


def repair(job: dict, ctl) -> dict:
    """Fill the relation cache for these users' feeds through relation_cache_repair (floor, then Redis)."""
    from relations.services.relation_cache import relation_cache_repair
    deadline, written = time.time() + MAX_JOB_SECONDS, 0
    for user_id, feed in job["users"]:
        if time.time() > deadline:
            break
        written += relation_cache_repair(user_id=user_id, video_ids=feed)
    return {"written": written}
