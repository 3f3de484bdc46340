"""2. The my-likes page of the read-path benchmark: page 1 and a deep page of a user with many likes, ours
(keyset, relations.selectors.my_likes) against LIMIT/OFFSET in the same run, with the plans of the deep page."""

from __future__ import annotations

import json
import time

from bench.common import percentile, rounded
from bench.dataset import author_id, relations_insert, snapshots_insert
from bench.read import LIST_PREFIX, log


def _explain(alias: str, sql: str, params: list) -> dict:
    from django.db import connections

    with connections[alias].cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
        raw = cur.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    scanned = []

    def walk(node):
        if "Index" in node.get("Node Type", "") or "Scan" in node.get("Node Type", ""):
            scanned.append((node["Node Type"], node.get("Index Name"), node.get("Actual Rows")))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    top = plan["Plan"]
    return {"execution_ms": rounded(plan.get("Execution Time"), 3), "scan_nodes": scanned,
            "shared_buffers_hit": top.get("Shared Hit Blocks"), "shared_buffers_read": top.get("Shared Read Blocks")}


def run_list(args, user_id: int) -> dict:
    """The my-likes page at page 1 and page `--list-page` (limit `--list-limit`) of a user with `--list-likes`
    LIKED relations: ours (keyset, relations.selectors.my_likes) against LIMIT/OFFSET, interleaved in one run."""
    from django.db import connections, transaction

    from relations import routing
    from relations.models import LikeRelation
    from relations.selectors import my_likes as selectors_my_likes

    alias = routing.alias_for_user(user_id)
    t = LikeRelation._meta.db_table
    n, limit, deep = args.list_likes, args.list_limit, args.list_page
    t0 = time.monotonic()
    snapshots_insert(f"SELECT %s || lpad(i::text, 6, '0') FROM generate_series(0, {int(n) - 1}) AS i", [LIST_PREFIX],
                     author_id=author_id())
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = '120s'")
        cur.execute(f"DELETE FROM {t} WHERE user_id = %s", [user_id])
        # Newest first is i = 0: updated_at = state_changed_at = base - i seconds (all distinct).
        relations_insert(cur, "SELECT %s, %s || lpad(i::text, 6, '0'), 'LIKED', 1, 'rbl-seed-' || i, "
                              "now() - interval '1 day' - i * interval '1 second' FROM generate_series(0, %s) AS i",
                         [user_id, LIST_PREFIX, n - 1])
    with connections[alias].cursor() as cur:
        cur.execute(f"ANALYZE {t}")
    prep_s = round(time.monotonic() - t0, 2)
    log(f"my-likes data: user {user_id} on {alias}, {n} LIKED relations + snapshots in {prep_s}s")

    def ours(cursor: str | None):
        after = None if cursor is None else selectors_my_likes.list_cursor_decode(user_id=user_id, cursor=cursor)
        page = selectors_my_likes.liked_page_list(user_id=user_id, limit=limit, after=after)
        if page.next_key is not None:
            selectors_my_likes.list_cursor_encode(user_id=user_id, key=page.next_key)
        return page

    offset_sql = (f"SELECT updated_at, video_id, state_changed_at, relation_version FROM {t} "
                  "WHERE user_id = %s AND state = 'LIKED' ORDER BY updated_at DESC, video_id DESC LIMIT %s OFFSET %s")

    def offset(page_no: int):
        with connections[alias].cursor() as cur:
            cur.execute(offset_sql, [user_id, limit, (page_no - 1) * limit])
            return cur.fetchall()

    # Walk the cursor to page `deep` once and keep that page's cursor.
    t0 = time.perf_counter()
    page = ours(None)
    cursor = None
    for _ in range(deep - 1):
        if page.next_key is None:
            raise RuntimeError("the list ended before the deep page")
        cursor = selectors_my_likes.list_cursor_encode(user_id=user_id, key=page.next_key)
        page = ours(cursor)
    walk_s = time.perf_counter() - t0
    want_first = f"{LIST_PREFIX}{(deep - 1) * limit:06d}"
    off_rows = offset(deep)
    consistent = (len(page.items) == limit and page.items[0].video_id == want_first
                  and [i.video_id for i in page.items] == [r[1] for r in off_rows])
    if not consistent:
        first = page.items[0].video_id if page.items else None
        raise RuntimeError(f"page {deep} of ours and OFFSET disagree (first {first}, expected {want_first})")

    def offset_filtered(page_no: int):
        # The OFFSET page plus the same visibility filter ours applies (one snapshot query on default).
        rows = offset(page_no)
        listed = selectors_my_likes.listed_video_ids([r[1] for r in rows])
        return [r for r in rows if r[1] in listed]

    variants = {("ours", 1): lambda: ours(None), ("ours", deep): lambda: ours(cursor),
                ("offset", 1): lambda: offset(1), ("offset", deep): lambda: offset(deep),
                ("offset+filter", 1): lambda: offset_filtered(1),
                ("offset+filter", deep): lambda: offset_filtered(deep)}
    lat: dict[tuple[str, int], list[float]] = {k: [] for k in variants}
    warm = max(5, args.list_reps // 10)
    deadline = time.time() + 120
    for rep in range(warm + args.list_reps):
        if time.time() > deadline:
            log("my-likes: stopped at the 120 s bound")
            break
        order = list(variants.items()) if rep % 2 == 0 else list(reversed(variants.items()))
        for key, fn in order:
            t1 = time.perf_counter()
            fn()
            ms = (time.perf_counter() - t1) * 1000.0
            if rep >= warm:
                lat[key].append(ms)
    rows = []
    for (variant, page_no), vals in lat.items():
        vals.sort()
        rows.append({"variant": variant, "page": page_no, "p50_ms": rounded(percentile(vals, 0.5), 3),
                     "p99_ms": rounded(percentile(vals, 0.99), 3), "fetches": len(vals)})
    by = {(r["variant"], r["page"]): r for r in rows}

    def ratio(v, q):
        a, b = by[(v, deep)][q], by[(v, 1)][q]
        return round(a / b, 2) if a and b else None

    key_deep = selectors_my_likes.list_cursor_decode(user_id=user_id, cursor=cursor)
    ours_sql, ours_params = selectors_my_likes.liked_rows_scan_queryset(
        alias=alias, user_id=user_id, after=key_deep, count=limit + 1).query.sql_with_params()
    explain = {"ours_page_deep": _explain(alias, ours_sql, list(ours_params)),
               "offset_page_deep": _explain(alias, offset_sql, [user_id, limit, (deep - 1) * limit])}
    out = {"user_id": user_id, "shard": alias, "likes": n, "limit": limit, "deep_page": deep, "prep_seconds": prep_s,
           "walk_seconds": round(walk_s, 2), "walk_ms_per_page": round(walk_s * 1000 / deep, 2),
           "warmup_fetches": warm, "rows": rows, "consistent_with_offset": consistent,
           "ratio_p50_deep_over_1": {v: ratio(v, "p50_ms") for v in ("ours", "offset", "offset+filter")},
           "ratio_p99_deep_over_1": {v: ratio(v, "p99_ms") for v in ("ours", "offset", "offset+filter")},
           "explain": explain}
    log(f"my-likes: p50 page1/page{deep} ours {by[('ours', 1)]['p50_ms']}/{by[('ours', deep)]['p50_ms']} ms, "
        f"offset {by[('offset', 1)]['p50_ms']}/{by[('offset', deep)]['p50_ms']} ms; "
        f"ratio ours {out['ratio_p50_deep_over_1']['ours']}, offset {out['ratio_p50_deep_over_1']['offset']}")
    return out
