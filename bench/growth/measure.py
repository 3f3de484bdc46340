"""The growth benchmark's timed operations (in-process, one client, with their statements' plans) and the drain of
the pipeline after the commands."""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections import Counter

from bench.growth import plan as shape
from bench.harness.phases import check_inline
from bench.harness.report import pct
from bench.harness.sampler import count_io, proc_stat
from bench.harness.seed import author_id, make_log

log = make_log("growth")
ITEM_BOUND_S = 600.0  # no timed loop runs longer than this


def stats(times_ms: list[float]) -> dict:
    return {"p50_ms": pct(times_ms, 0.5, 3), "p99_ms": pct(times_ms, 0.99, 3), "n": len(times_ms),
            "mean_ms": round(sum(times_ms) / len(times_ms), 3) if times_ms else None,
            "max_ms": round(max(times_ms), 3) if times_ms else None}


def busy_cores(seconds: float) -> float:
    """Cores the whole machine kept busy over `seconds` (/proc/stat)."""
    t0, idle0, io0 = proc_stat()
    time.sleep(seconds)  # sampling the machine's idle time
    t1, idle1, io1 = proc_stat()
    return round((t1 - t0 - (idle1 - idle0) - (io1 - io0)) / os.sysconf("SC_CLK_TCK") / seconds, 2)


def wait_machine_quiet(max_wait_s: float, busy_below: float = 0.6) -> dict:
    """Wait (up to `max_wait_s`) for fewer than `busy_below` busy cores: no other load lands in one size only."""
    t0, seen = time.monotonic(), busy_cores(5.0)
    if seen >= busy_below:
        log(f"{seen} cores busy: waiting up to {max_wait_s:.0f}s (--quiet-wait) for the machine to go idle")
    while seen >= busy_below and time.monotonic() - t0 < max_wait_s:
        seen = busy_cores(5.0)
    return {"waited_s": round(time.monotonic() - t0, 1), "busy_cores_last": seen, "quiet": seen < busy_below}


def run_timed(fn, *, warmup: int, reps: int, label: str) -> tuple[dict, list]:
    """fn() `warmup` times untimed, then up to `reps` times timed; the stats and the timed calls' results."""
    for _ in range(warmup):
        fn()
    times, results, deadline, io = [], [], time.monotonic() + ITEM_BOUND_S, Counter()
    stop_counting = count_io(io)
    try:
        for _ in range(reps):
            if time.monotonic() > deadline:
                break
            t0 = time.perf_counter()
            results.append(fn())
            times.append((time.perf_counter() - t0) * 1000.0)
    finally:
        stop_counting()
    sql = sum(n for k, n in io.items() if k.startswith("sql:"))
    out = {**stats(times), "sql_per_call": round(sql / max(len(times), 1), 2)}
    log(f"  {label}: p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms ({out['n']} calls, {out['sql_per_call']} SQL)")
    return out, results


def captured_plans(fn, n: int = 4) -> list[dict]:
    """EXPLAIN (ANALYZE, BUFFERS) of each SELECT of the service's tables fn() sends, slowest first."""
    from django.db import connections, transaction
    from django.test.utils import CaptureQueriesContext
    with contextlib.ExitStack() as stack:
        caps = {a: stack.enter_context(CaptureQueriesContext(connections[a])) for a in connections}
        fn()
    plans, seen = [], set()
    for alias, cap in caps.items():
        for sql in (q["sql"] for q in cap.captured_queries):
            if not sql.lstrip().upper().startswith("SELECT") or (alias, sql) in seen or not any(
                    t in sql for t in ("relations_", "counting_", "auth_user")):
                continue
            seen.add((alias, sql))
            try:
                with transaction.atomic(using=alias), connections[alias].cursor() as cur:
                    cur.execute("SET LOCAL statement_timeout = 0")
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                    text = "\n".join(r[0] for r in cur.fetchall())
            except Exception as exc:  # a statement that cannot be replayed alone (e.g. a temp table)
                text = f"{exc.__class__.__name__}: {exc}"[:200]
            ms = re.search(r"Execution Time: ([0-9.]+) ms", text)
            plans.append({"alias": alias, "sql": sql[:1200], "execution_ms": float(ms.group(1)) if ms else None,
                          "text": text})
    return sorted(plans, key=lambda p: -(p["execution_ms"] or 0))[:n]


def run_commands(plan, users, n: int, *, reps: int, warmup: int, seed: int) -> dict:
    """relation_set_state on pairs (a core user whose history is loaded, a catalog video): LIKED, then UNLIKED."""
    from relations.services import commands
    rng, complete, catalog = random.Random(seed * 7 + n), plan.core_users_complete(n), plan.catalog(n)
    times, changed, errors, seq = {"like": [], "unlike": []}, Counter(), Counter(), 0
    deadline = time.monotonic() + ITEM_BOUND_S
    for i in range(warmup + reps):
        if time.monotonic() > deadline:
            break
        uid, vid = users.core[rng.randrange(complete)], shape.video_id(rng.randrange(catalog))
        for kind, desired in (("like", "LIKED"), ("unlike", "UNLIKED")):
            seq += 1
            t0 = time.perf_counter()
            try:
                res = commands.relation_set_state(user_id=uid, video_id=vid, desired_state=desired, device_id="bench",
                                                  operation_id=f"{shape.PREFIX}cmd-{n}-{seed}-{seq}")
            except Exception as exc:
                errors[exc.__class__.__name__] += 1
                continue
            if i >= warmup:
                times[kind].append((time.perf_counter() - t0) * 1000.0)
                changed[kind] += bool(res.changed)
    out = {**stats(times["like"] + times["unlike"]), "like": stats(times["like"]), "unlike": stats(times["unlike"]),
           "changed": dict(changed), "errors": dict(errors)}
    log(f"  command: p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms (like p50 {out['like']['p50_ms']}, unlike "
        f"{out['unlike']['p50_ms']}; errors {dict(errors)})")
    return out


def run_batch(plan, users, n: int, *, reps: int, warmup: int, seed: int, batch: int = 20) -> dict:
    """The batch query of `batch` ids for 20 core users (a third of each feed liked), caches warm, answers checked."""
    from django.db import connections

    from counting import selectors as count_selectors
    from counting.models import VideoDisplayCount
    from counting.services.count_cache.layers import count_cache_views_write
    from relations import routing, selectors
    from relations.models import LikeRelation
    from relations.services.relation_cache import relation_cache_repair
    rng, complete, feeds = random.Random(seed * 11 + n), plan.core_users_complete(n), []
    for _ in range(20):
        j = rng.randrange(complete)
        feed = list(dict.fromkeys([shape.video_id(v) for v in rng.sample(plan.core_videos(j), batch // 3)]
                                  + [shape.video_id(rng.randrange(plan.catalog(n))) for _ in range(batch * 2)]))[:batch]
        rng.shuffle(feed)
        with connections[routing.alias_for_user(uid := users.core[j])].cursor() as cur:
            cur.execute(f"SELECT video_id, state, relation_version FROM {LikeRelation._meta.db_table} WHERE user_id = "
                        "%s AND video_id = ANY(%s)", [uid, feed])
            feeds.append((uid, feed, {v: (s, ver) for v, s, ver in cur.fetchall()}))
        relation_cache_repair(user_id=uid, video_ids=feed)
    snaps = {v: (c, sid, at) for v, c, sid, at in VideoDisplayCount.objects.filter(
        video_id__in={v for _, f, _ in feeds for v in f}).values_list("video_id", "display_count", "snapshot_id",
                                                                      "generated_at")}
    count_cache_views_write(rows=[(v, c, sid, at.isoformat().replace("+00:00", "Z")) for v, (c, sid, at) in
                                  sorted(snaps.items())])
    turn, wrong = [0], Counter()

    def call():
        uid, feed, facts = feeds[turn[0] % len(feeds)]
        turn[0] += 1
        visible = selectors.videos_visible_to(user_id=uid, video_ids=feed)
        rels = selectors.relation_states_get(user_id=uid, video_ids=feed, min_versions={})
        counts = count_selectors.display_counts_get(video_ids=[v for v in feed if visible[v]])
        wrong["answers"] += sum(not visible[v] or (rels[v].state, rels[v].relation_version) != facts.get(
            v, ("UNLIKED", 0)) or counts[v].display_count != snaps.get(v, (0,))[0] for v in feed)
        return counts

    out, results = run_timed(call, warmup=warmup, reps=reps, label=f"batch query ({batch} ids, warm)")
    return {**out, "wrong": wrong["answers"], "ids": batch, "plans": captured_plans(call),
            "count_sources": dict(Counter(c.source for r in results for c in r.values()))}


def pages(page, *, name: str, key, reps: int, warmup: int, limit: int, deep: int, plans: bool = True) -> dict:
    """page(cursor) -> (page, next) walked to page `deep`, then page 1 and it timed (same full page) with `plans`."""
    t0, cursor = time.monotonic(), None
    for page_no in range(1, deep):
        _p, cursor = page(cursor)
        if cursor is None:
            raise RuntimeError(f"{name}: the list ended at page {page_no}")
    out = {"limit": limit, "deep_page": deep, "walk_seconds": round(time.monotonic() - t0, 1),
           "cursor_chars": len(cursor)}
    for label, cur in (("page1", None), ("deep", cursor)):
        s, results = run_timed(lambda c=cur: page(c), warmup=warmup, reps=reps, label=f"{name} {label}")
        if len({tuple(key(i) for i in p.items) for p, _ in results}) != 1 or len(results[0][0].items) != limit:
            raise RuntimeError(f"{name} {label}: different pages, or a short page")
        out[label] = {**s, "plans": captured_plans(lambda c=cur: page(c)) if plans else []}
    return out


def run_my_likes(users, *, reps: int, warmup: int, limit: int, deep: int) -> dict:
    from relations.selectors import my_likes as sel
    def page(cursor):
        p = sel.liked_page_list(user_id=users.heavy, limit=limit, after=None if cursor is None else
                                sel.list_cursor_decode(user_id=users.heavy, cursor=cursor))
        return p, None if p.next_key is None else sel.list_cursor_encode(user_id=users.heavy, key=p.next_key)

    return pages(page, name="my-likes", key=lambda i: i.video_id, reps=reps, warmup=warmup, limit=limit, deep=deep)


def run_likers(*, reps: int, warmup: int, limit: int, deep: int, video: str = shape.HOT_VIDEO,
               plans: bool = True) -> dict:
    """The likers page of `video` as its author reads it (bench/reverse.py's latency part too)."""
    from counting.selectors.likers import likers_cursor_encode, likers_page_list
    author = author_id()

    def page(cursor):
        p = likers_page_list(caller_id=author, video_id=video, limit=limit, cursor=cursor)
        return p, None if p.exhausted else likers_cursor_encode(caller_id=author, video_id=video, page=p)

    return pages(page, name="likers", key=lambda i: i.user_id, reps=reps, warmup=warmup, limit=limit, deep=deep,
                 plans=plans)


def run_exact(*, reps: int) -> dict:
    """Exact runs over the hot video through the ops job, inline: one untimed, then `reps` timed (PASSED, no diff)."""
    from counting import routing
    from reconciliation.services import evidence
    def check() -> dict:
        t0 = time.perf_counter()
        _done, run = check_inline("exact", {"videos": [shape.HOT_VIDEO]}, shape.OPERATOR)
        return {"ms": (time.perf_counter() - t0) * 1000, "status": run.status, "checked": run.checked,
                "diffs": run.diffs_found}

    runs = [check() for _ in range(reps + 1)]

    def reads():
        gen = routing.load_generation()
        evidence.source_relations([shape.HOT_VIDEO])
        evidence.projected_relations(gen, [shape.HOT_VIDEO])
        evidence.bucket_counts(gen, [shape.HOT_VIDEO])

    return {**stats([r["ms"] for r in runs[1:]]), "statuses": [r["status"] for r in runs],
            "plans": captured_plans(reads), "checked": runs[0]["checked"], "diffs": sum(r["diffs"] for r in runs)}


def pipeline_drain(bound_s: float = 600.0) -> dict:
    """Publish, run every consumer over every partition and refresh the displays until nothing is left (bounded)."""
    from django.conf import settings

    from counting.services.snapshots import display_snapshot_refresh
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition, projector_get
    from likes_project.eventlog.registry import CONSUMERS
    from relations.services.outbox import outbox_publish_batch
    t0, totals = time.monotonic(), Counter()
    for _ in range(shape.MAX_LOOP):
        if time.monotonic() - t0 > bound_s:
            raise RuntimeError(f"the pipeline did not drain within {bound_s:.0f} s: {dict(totals)}")
        moved = 0
        for alias in settings.RELATION_SHARD_ALIASES:
            moved += (sent := outbox_publish_batch(alias=alias, holder=f"growth-bench:{alias}").sent)
            totals["published"] += sent
        for name in CONSUMERS:
            for p in streams.all_partitions():
                rep = consume_partition(projector_get(name), partition=p, batch_size=200, ignore_backoff=True)
                moved += rep.dispatched
                totals.update({f"{name}_applied": rep.applied, f"{name}_dead": rep.dead_lettered})
        moved += (refreshed := display_snapshot_refresh().videos)
        totals["display_refreshed"] += refreshed
        if not moved:
            break
        time.sleep(0.01)  # between passes of the drain (bounded by bound_s)
    if any(v for k, v in totals.items() if k.endswith("_dead")):
        raise RuntimeError(f"dead letters while draining: {dict(totals)}")
    return {**totals, "seconds": round(time.monotonic() - t0, 1)}
