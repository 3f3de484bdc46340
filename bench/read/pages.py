"""The read benchmark's parts 2 and 3: the my-likes page 1 and a deep page, ours (keyset) against LIMIT/OFFSET;
relation_cache_rebuild() end to end over synthetic relations, its time and Redis memory."""

from __future__ import annotations

import json
import os
import time

from bench.harness import load
from bench.harness.report import pct, ratio
from bench.harness.sampler import ResourceSampler, sampled
from bench.harness.seed import author_id, make_log, relations_insert, rows, scan_delete, snapshots_insert, table, vacuum

log = make_log("read")
LIST_PREFIX, REB_PREFIX = "rbl-v", "rbr-v"  # the my-likes user's liked videos; the rebuild relations' videos
REB_USER_BASE, REB_VIDEOS, REB_PER_USER = 8_000_000_000, 5000, 50  # synthetic users (the shards have no FK)


def relation_cache_flush() -> int:
    """Drop the relation cache hashes (the registry included), then mirror the registry so writes stay possible."""
    from django.conf import settings

    from relations.services.relation_cache import cache_generations_mirror
    n = scan_delete(f"{settings.LIKES_REDIS_PREFIX}:rel:g*")
    cache_generations_mirror()
    return n


def explain(alias: str, sql: str, params: list) -> dict:
    from django.db import connections
    with connections[alias].cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        raw = cur.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    scans = []

    def walk(node):
        if "Index" in node.get("Node Type", "") or "Scan" in node.get("Node Type", ""):
            scans.append(f"{node['Node Type']} {node.get('Index Name') or ''} {node.get('Actual Rows')} rows")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return {"execution_ms": plan.get("Execution Time"), "scans": scans,
            "buffers_hit": plan["Plan"].get("Shared Hit Blocks")}


def run_list(args, user_id: int) -> dict:
    """Page 1 and page `--list-page` of `--list-likes` likes: ours, OFFSET, OFFSET + our filter, interleaved."""
    from django.db import connections, transaction

    from relations import routing
    from relations.models import LikeRelation
    from relations.selectors import my_likes as sel
    alias, t = routing.alias_for_user(user_id), table(LikeRelation)
    n, limit, deep = args.list_likes, args.list_limit, args.list_page
    snapshots_insert(f"SELECT %s || lpad(i::text, 6, '0') FROM generate_series(0, {int(n) - 1}) AS i", [LIST_PREFIX],
                     author_id=author_id())
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = '120s'")
        cur.execute(f"DELETE FROM {t} WHERE user_id = %s", [user_id])
        # Newest first is i = 0: updated_at = state_changed_at = base - i seconds (all distinct).
        relations_insert(cur, "SELECT %s, %s || lpad(i::text, 6, '0'), 'LIKED', 1, 'rbl-seed-' || i, now() - interval "
                              "'1 day' - i * interval '1 second' FROM generate_series(0, %s) AS i",
                         [user_id, LIST_PREFIX, n - 1])
    with connections[alias].cursor() as cur:
        cur.execute(f"ANALYZE {t}")

    def ours(cursor: str | None):
        page = sel.liked_page_list(user_id=user_id, limit=limit, after=None if cursor is None else
                                   sel.list_cursor_decode(user_id=user_id, cursor=cursor))
        if page.next_key is not None:
            sel.list_cursor_encode(user_id=user_id, key=page.next_key)
        return page

    offset_sql = (f"SELECT updated_at, video_id, state_changed_at, relation_version FROM {t} WHERE user_id = %s AND "
                  "state = 'LIKED' ORDER BY updated_at DESC, video_id DESC LIMIT %s OFFSET %s")

    def offset(page_no: int, filtered: bool = False):
        with connections[alias].cursor() as cur:
            cur.execute(offset_sql, [user_id, limit, (page_no - 1) * limit])
            rows = cur.fetchall()
        if filtered:  # the same visibility filter ours applies (one snapshot query on default)
            listed = sel.listed_video_ids([r[1] for r in rows])
            rows = [r for r in rows if r[1] in listed]
        return rows

    page, cursor = ours(None), None
    for _ in range(deep - 1):  # walk the cursor to the deep page once, keep its cursor
        cursor = sel.list_cursor_encode(user_id=user_id, key=page.next_key)
        page = ours(cursor)
    if [i.video_id for i in page.items] != [r[1] for r in offset(deep)] or len(page.items) != limit:
        raise RuntimeError(f"page {deep} of ours and OFFSET disagree")
    variants = {("ours", 1): lambda: ours(None), ("ours", deep): lambda: ours(cursor),
                ("offset", 1): lambda: offset(1), ("offset", deep): lambda: offset(deep),
                ("offset+filter", 1): lambda: offset(1, True), ("offset+filter", deep): lambda: offset(deep, True)}
    lat: dict = {k: [] for k in variants}
    warm, deadline = max(5, args.list_reps // 10), time.time() + 120
    for rep in range(warm + args.list_reps):
        if time.time() > deadline:
            break
        for key, fn in list(variants.items())[::1 if rep % 2 == 0 else -1]:
            t1 = time.perf_counter()
            fn()
            if rep >= warm:
                lat[key].append((time.perf_counter() - t1) * 1000.0)
    rows = [{"variant": v, "page": p, "p50_ms": pct(x, 0.5, 3), "p99_ms": pct(x, 0.99, 3), "fetches": len(x)}
            for (v, p), x in lat.items()]
    by = {(r["variant"], r["page"]): r for r in rows}
    ours_sql, ours_params = sel.liked_rows_scan_queryset(
        alias=alias, user_id=user_id, after=sel.list_cursor_decode(user_id=user_id, cursor=cursor),
        count=limit + 1).query.sql_with_params()
    out = {"likes": n, "limit": limit, "deep_page": deep, "shard": alias, "rows": rows,
           "ratio_p50_deep_over_1": {v: ratio(by[(v, deep)]["p50_ms"], by[(v, 1)]["p50_ms"], 2) for v in
                                     ("ours", "offset", "offset+filter")},
           "explain": {"ours": explain(alias, ours_sql, list(ours_params)),
                       "offset": explain(alias, offset_sql, [user_id, limit, (deep - 1) * limit])}}
    log(f"my-likes: p50 deep ÷ page 1: {out['ratio_p50_deep_over_1']}")
    return out


def _redis_memory() -> dict:
    from likes_project.redis_client import cache_redis, role_nodes
    nodes = role_nodes(cache_redis())  # the one server, or every primary of a Cluster: summed
    return {"used_memory": sum(int(n.info("memory")["used_memory"]) for n in nodes),
            "dbsize": sum(int(n.dbsize()) for n in nodes)}


def _insert(n_users: int) -> dict:
    """n_users synthetic users x 50 videos on their shards: LIKED v1 for two thirds, UNLIKED v2 for one third."""
    from django.db import connections, transaction

    from relations import routing
    from relations.models import LikeRelation
    by_alias: dict[str, list] = {}
    for k in range(n_users):
        by_alias.setdefault(routing.alias_for_user(REB_USER_BASE + k), []).append((REB_USER_BASE + k, k))
    per_shard = {}
    for alias, pairs in sorted(by_alias.items()):
        for i in range(0, len(pairs), 2000):  # 100,000 rows a statement
            chunk = pairs[i:i + 2000]
            with transaction.atomic(using=alias), connections[alias].cursor() as cur:
                cur.execute("SET LOCAL statement_timeout = '300s'")
                relations_insert(
                    cur, f"SELECT u, %s || lpad(((k + j * 100) %% {REB_VIDEOS})::text, 5, '0'), CASE WHEN (k + j) "
                         "%% 3 = 0 THEN 'UNLIKED' ELSE 'LIKED' END, CASE WHEN (k + j) %% 3 = 0 THEN 2 ELSE 1 END, "
                         "'rbr-seed', now() - interval '1 day' - j * interval '1 second' FROM unnest(%s::bigint[], "
                         f"%s::int[]) AS x(u, k), generate_series(0, {REB_PER_USER - 1}) AS j",
                    [REB_PREFIX, [p[0] for p in chunk], [p[1] for p in chunk]])
        vacuum(alias, LikeRelation, analyze_only=True)
        per_shard[alias] = rows(alias, f"SELECT count(*) FROM {table(LikeRelation)}")[0][0]
    return per_shard


def _timed_rebuild(label: str):
    from relations.services.relation_cache_rebuild import relation_cache_rebuild
    last = [time.monotonic()]

    def progress(msg: str) -> None:
        if "scanned" not in msg or time.monotonic() - last[0] >= 10:
            last[0] = time.monotonic()
            log(f"  {label}: {msg.strip()}")

    t0 = time.perf_counter()
    return relation_cache_rebuild(progress=progress), time.perf_counter() - t0


def run_rebuild(args) -> dict:
    """`--rebuild-relations` rebuilt (auto: 1,000,000, or 250,000 when a calibration projects over the budget)."""
    out: dict = {"relations_per_user": REB_PER_USER}
    target = args.rebuild_relations
    if target == "auto":
        relation_cache_flush()
        report, secs = _timed_rebuild("calibration")
        projected = 1_000_000 * secs / report.scanned if report.scanned else float("inf")
        target = 1_000_000 if projected <= args.rebuild_budget else 250_000
        out["calibration"] = {"relations": report.scanned, "seconds": round(secs, 2),
                              "projected_1m_s": round(projected), "budget_s": args.rebuild_budget}
    target = int(target)
    load.unload(REB_PREFIX)  # the relations, floors and caches of the calibration
    t0 = time.monotonic()
    per_shard = _insert(target // REB_PER_USER)
    out.update(relations=sum(per_shard.values()), users=target // REB_PER_USER, per_shard=per_shard,
               insert_seconds=round(time.monotonic() - t0, 1))
    log(f"rebuild data: {out['relations']:,} relations ({per_shard}) in {out['insert_seconds']}s")
    mem0 = _redis_memory()
    (report, secs), resources = sampled(ResourceSampler(), lambda: _timed_rebuild("rebuild"),
                                        {os.getpid(): "driver (runs the rebuild)"})
    mem1 = _redis_memory()
    out.update(generation=report.generation, status=report.status, scanned=report.scanned, sampled=report.sampled,
               mismatches=report.mismatches, seconds=round(secs, 1), relations_per_s=round(report.scanned / secs),
               extrapolated_1m_s=None if out["relations"] >= 1_000_000 else round(secs * 1e6 / out["relations"]),
               redis_used_memory_delta_bytes=mem1["used_memory"] - mem0["used_memory"],
               redis_keys_delta=mem1["dbsize"] - mem0["dbsize"], resources=resources)
    log(f"rebuild: {report.scanned:,} relations in {secs:.1f}s, status {report.status}, sample {report.sampled}/"
        f"{report.mismatches} mismatches")
    return out
