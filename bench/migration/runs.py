"""One move of a set of buckets, three ways:

ours     the product's migration: `migration_plan` by one operator, `migration_approve` by another (both
         in the driver, as `manage.py bucket_migration_plan` / `_approve` call them), then its ops job run to its
         end by the checker process as a worker runs it (bench/migration/roles.py, `job_run_inline`). Figures
         from the BucketMigration ledger row (write_pause_ms: the source fences DRAINING -> the CAS committed;
         copied_rows, replayed_events, catchup_passes), the audit records of its transitions, and the
         protocol's steps timed in that process.
naive    a stop-the-world move as an application would first write it: the count consumer's dispatch stopped
         (its leases on every stream partition taken and renewed, what bench/snapshot's naive build does), the
         buckets' rows of both tables read from the source through a server-side cursor and written to the target
         by `executemany` of a plain INSERT (`--naive-batch` rows a call), the routes switched (the route rows of
         the buckets updated to the target at epoch + 1), dispatch resumed. Its write pause is all of it. So that
         the product's state stays as it is, the rows go to a scratch generation and the target's transaction and
         the route switch are rolled back at the end (inside the pause; a rollback costs next to nothing).
ceiling  the raw SQL floor of moving the rows between the two databases: `COPY (SELECT … WHERE virtual_bucket =
         ANY(…)) TO STDOUT (FORMAT binary)` on the source streamed straight into `COPY … FROM STDIN (FORMAT binary)`
         on the target (its indexes and the change_seq trigger included), one table after the other, into a
         scratch generation, rolled back. No pause, no routes, no checks: rows/s only.
"""

from __future__ import annotations

import time
from collections import Counter

from bench.common import pg_conninfo, rounded
from bench.migration import APPROVER, OPERATOR, SCRATCH_GENERATION, log


def _t(model) -> str:
    return model._meta.db_table


# --- ours ---------------------------------------------------------------------------------------------------


def plan_and_approve(buckets: list[int], target: str, reason: str):
    from counting.services.migration import ledger
    from likes_project.audit.services import Actor

    t0 = time.time()
    m = ledger.migration_plan(target=target, buckets=buckets, reason=reason,
                              actor=Actor(name=OPERATOR, channel="cli"))
    t_plan = time.time()
    m = ledger.migration_approve(migration_id=m.pk, actor=Actor(name=APPROVER, channel="cli"))
    return m, {"plan_ms": round((t_plan - t0) * 1000, 1), "approve_ms": round((time.time() - t_plan) * 1000, 1),
               "t_plan": t0}


def _sum(calls, name: str, *, inside: tuple[float, float] | None = None) -> tuple[float, int]:
    sel = [(a, b) for n, a, b, _ in calls if n == name and (inside is None or (a >= inside[0] and b <= inside[1]))]
    return round(sum(b - a for a, b in sel) * 1000, 1), len(sel)


def step_figures(calls: list) -> dict:
    """The protocol's steps and the parts of the cutover from the calls timed in the checker process."""
    steps = {}
    for name in ("_prepare", "_copy", "_catch_up", "_cutover", "_verify", "_cleanup"):
        ms, n = _sum(calls, name)
        if n:
            steps[name.strip("_")] = ms
    cut = [(a, b) for n, a, b, _ in calls if n == "_cutover"]
    parts: dict = {}
    before: dict = {}
    if cut:
        window = cut[-1]
        drain = [(a, b) for n, a, b, x in calls if n == "horizon" and x.get("state") == "DRAINING"
                 and a >= window[0] and b <= window[1]]
        tx = [(a, b) for n, a, b, _ in calls if n == "transition" and a >= window[0] and b <= window[1]]
        if drain:
            d0 = drain[0][0]
            end = tx[-1][1] if tx else window[1]
            inside = (d0, end)
            parts = {
                "pause_timed_ms": round((end - d0) * 1000, 1),
                "drain_fences_ms": round(sum(b - a for a, b in drain) * 1000, 1),
                "replay_to_h_ms": _sum(calls, "_replay", inside=inside)[0],
                "target_fences_ms": _sum(calls, "_fences_set", inside=inside)[0],
                "candidate_manifest_ms": _sum(calls, "_candidate", inside=inside)[0],
                "ledger_saves_ms": _sum(calls, "_save", inside=inside)[0],
                "checkpoints_read_ms": _sum(calls, "checkpoints_get", inside=inside)[0],
                "manifest_items_ms": _sum(calls, "manifest_items", inside=inside)[0],
                "routes_materialize_ms": _sum(calls, "routes_materialize", inside=inside)[0],
                "ledger_transition_ms": _sum(calls, "transition", inside=inside)[0],
            }
            # _replay saves the ledger itself: its _save is inside the replay's time already.
            replay_saves = sum(b - a for n, a, b, _ in calls if n == "_save" and any(
                ra <= a and b <= rb for rn, ra, rb, _ in calls if rn == "_replay" and d0 <= ra and rb <= end))
            parts["ledger_saves_ms"] = round(parts["ledger_saves_ms"] - replay_saves * 1000, 1)
            named = sum(v for k, v in parts.items() if k != "pause_timed_ms")
            parts["other_ms"] = round(parts["pause_timed_ms"] - named, 1)
            pre = (window[0], d0)
            before = {"route_lock_acquire_ms": _sum(calls, "switch_exclusive.acquire", inside=pre)[0],
                      "candidate_manifest_ms": _sum(calls, "_candidate", inside=pre)[0],
                      "target_fences_ms": _sum(calls, "_fences_set", inside=pre)[0],
                      "contract_check_ms": _sum(calls, "_contract_problems", inside=pre)[0],
                      "total_ms": round((d0 - window[0]) * 1000, 1)}
        before["retire_source_fences_after_ms"] = _sum(calls, "_source_fences_retire")[0]
    copy_apply = _sum(calls, "rows_apply", inside=next(((a, b) for n, a, b, _ in calls if n == "_copy"), None))
    copy_read = _sum(calls, "rows_after")
    verify_read = _sum(calls, "bucket_rows")
    identity = _sum(calls, "identity_problems")
    return {"steps_ms": steps, "cutover_parts": parts, "cutover_outside_pause": before,
            "copy_read_ms": copy_read[0], "copy_read_calls": copy_read[1],
            "copy_write_ms": copy_apply[0], "copy_write_calls": copy_apply[1],
            "verify_read_ms": verify_read[0], "verify_read_calls": verify_read[1], "identity_ms": identity[0],
            "cleanup_delete_ms": _sum(calls, "rows_delete")[0], "ledger_saves_ms": _sum(calls, "_save")[0],
            "ledger_saves": _sum(calls, "_save")[1]}


def audit_times(migration_id: int) -> dict:
    from likes_project.audit.models import AuditRecord

    out = {}
    for action, at in AuditRecord.objects.filter(target_type="bucket_migration", target_id=str(migration_id)) \
            .order_by("at", "id").values_list("action", "at"):
        out.setdefault(action.removeprefix("bucket_migration."), at.timestamp())
    return out


def ours(h, buckets: list[int], target: str, tag: str) -> dict:
    """Plan, approve, run the job in the checker process; the ledger's and the timers' figures."""
    from counting.models import BucketMigration

    m, pa = plan_and_approve(buckets, target, f"bench/migration.sh {tag}")
    h.pool.submit(h.layout.checker, {"role": "migration", "tag": f"mig-{tag}", "job_id": m.job_id})
    out = h.pool.collect([h.layout.checker], timeout=h.args.check_timeout)[h.layout.checker]
    m = BucketMigration.objects.get(pk=m.pk)
    audit = audit_times(m.pk)
    figures = step_figures(out["calls"])
    steps = figures["steps_ms"]
    sources = sorted(set(m.source_partitions.values()))
    copy_s = steps.get("copy", 0) / 1000
    pause_end = m.cutover_at.timestamp() if m.cutover_at else None
    r = {
        "tag": tag, "migration_id": m.pk, "state": m.state, "error": m.error or None, "job_status": out["job_status"],
        "job_error": out["job_error"] or None, "buckets": len(m.buckets), "sources": sources,
        "target": m.target_partition, "rows_to_copy": m.rows_to_copy, "copied_rows": m.copied_rows,
        "replayed_events": m.replayed_events, "catchup_passes": m.catchup_passes,
        "write_pause_ms": m.write_pause_ms, "verify_ok": (m.verify_result or {}).get("ok"),
        "verify_rows_compared": (m.verify_result or {}).get("rowsCompared"),
        "verify_mismatches": len((m.verify_result or {}).get("mismatches") or []),
        "verify_identity_problems": len((m.verify_result or {}).get("identityProblems") or []),
        "cleaned": m.source_cleaned_at is not None, **pa,
        "job_s": round(out["t_end"] - out["t_start"], 3), "t_start": out["t_start"], "t_end": out["t_end"],
        "approve_to_retired_s": rounded(audit["retired"] - audit["prepare"], 3)
        if "retired" in audit and "prepare" in audit else None,
        "copy_rows_per_s": round(m.copied_rows / copy_s, 1) if copy_s else None,
        "pause_window": [pause_end - m.write_pause_ms / 1000, pause_end] if pause_end and m.write_pause_ms else None,
        **figures, "audit": {k: round(v - out["t_start"], 3) for k, v in audit.items()},
        "said": [(round(t - out["t_start"], 3), msg) for t, msg in out["said"]][:30],
        "not_timed": out.get("not_timed") or [],
    }
    log(f"  ours {tag}: {len(m.buckets)} buckets {'+'.join(sources)} -> {m.target_partition}: {m.state}"
        + (f" ({m.error[:200]})" if m.error else "")
        + f"; job {r['job_s']:.1f}s (copy {steps.get('copy', 0) / 1000:.1f}s, catch-up "
        f"{steps.get('catch_up', 0) / 1000:.2f}s, cutover {steps.get('cutover', 0) / 1000:.2f}s, verify "
        f"{steps.get('verify', 0) / 1000:.1f}s, cleanup {steps.get('cleanup', 0) / 1000:.1f}s); "
        f"{m.copied_rows:,} rows copied ({r['copy_rows_per_s'] or 0:,.0f}/s), {m.replayed_events:,} replayed in "
        f"{m.catchup_passes} passes; write pause {m.write_pause_ms} ms")
    return r


# --- vacuum stand-in ----------------------------------------------------------------------------------------


def vacuum(aliases: list[str]) -> dict:
    """VACUUM (ANALYZE) of the two count tables on `aliases`: what autovacuum does after a bulk copy and a bulk
    delete, on a server where it is off. Plain autocommit connections (no statement timeout)."""
    import psycopg

    from counting.models import LikeCountProjection, VideoLikeCountVbucket

    t0 = time.monotonic()
    for alias in aliases:
        with psycopg.connect(**pg_conninfo(alias), autocommit=True, connect_timeout=5) as conn:
            for model in (LikeCountProjection, VideoLikeCountVbucket):
                conn.execute(f"VACUUM (ANALYZE) {_t(model)}")
    return {"partitions": aliases, "s": round(time.monotonic() - t0, 2)}


# --- the baselines -----------------------------------------------------------------------------------------


def _select(table, generation: int, buckets: list[int], *, scratch: bool) -> str:
    cols = ", ".join(table.all_columns)
    head = f"{SCRATCH_GENERATION}::int AS generation, " if scratch else ""
    return (f"SELECT {head}{cols} FROM {table.table} WHERE generation = {int(generation)} AND virtual_bucket = "
            f"ANY('{{{','.join(str(int(b)) for b in buckets)}}}'::int[])")


def naive(source: str, target: str, buckets: list[int], *, batch: int) -> dict:
    """The stop-the-world move (see the module)."""
    import psycopg

    from bench.snapshot.variants import _release, _Renewer, _take_dispatch
    from counting import routing
    from counting.models import CountBucketRoute
    from counting.services.migration import changelog

    gen = routing.load_generation()
    rows: Counter = Counter()
    w0, t0 = time.time(), time.perf_counter()
    grants = _take_dispatch("bench-mig-naive")
    renewer = _Renewer(grants)
    renewer.renew()
    renewer.start()
    t_stopped = time.perf_counter()
    try:
        with psycopg.connect(**pg_conninfo(source), connect_timeout=5) as src, \
                psycopg.connect(**pg_conninfo(target), connect_timeout=5) as tgt, \
                psycopg.connect(**pg_conninfo("default"), connect_timeout=5) as ctl:
            for table in changelog.TABLES:
                cols = ("generation", *table.all_columns)
                insert = (f"INSERT INTO {table.table} ({', '.join(cols)}) VALUES "
                          f"({', '.join(['%s'] * len(cols))})")
                with src.cursor(name=f"naive_{table.kind}") as read, tgt.cursor() as write:
                    read.itersize = batch
                    read.execute(_select(table, gen.generation, buckets, scratch=True))
                    while True:
                        chunk = read.fetchmany(batch)
                        if not chunk:
                            break
                        write.executemany(insert, chunk)
                        rows[table.kind] += len(chunk)
            t_copied = time.perf_counter()
            with ctl.cursor() as cur:  # the switch: every route of the buckets to the target at epoch + 1
                cur.execute(f"UPDATE {_t(CountBucketRoute)} SET physical_partition = %s, route_epoch = route_epoch + 1 "
                            "WHERE bucket_space_version = %s AND virtual_bucket = ANY(%s)",
                            [target, gen.space.version, buckets])
                switched = cur.rowcount
            ctl.rollback()
            tgt.rollback()
            src.rollback()
    finally:
        renewer.done.set()
        renewer.join(timeout=30)
        _release(grants)
        paused = time.perf_counter() - t_stopped
    total = time.perf_counter() - t0
    n = sum(rows.values())
    copy_s = t_copied - t_stopped
    r = {"variant": "naive", "source": source, "target": target, "buckets": len(buckets), "rows": n,
         "by_table": dict(rows), "routes_switched": switched, "lost_dispatch_stop": renewer.lost,
         "write_pause_ms": round(paused * 1000, 1), "stop_ms": round((t_stopped - t0) * 1000, 1),
         "copy_s": round(copy_s, 3), "rows_per_s": round(n / copy_s, 1) if copy_s else None,
         "total_s": round(total, 3), "t_start": w0, "t_end": time.time(), "batch": batch}
    log(f"  naive: {n:,} rows {source} -> {target} in {copy_s:.1f}s ({r['rows_per_s']:,.0f} rows/s); projector "
        f"stopped {paused * 1000:,.0f} ms" + (f"; LOST the stop: {renewer.lost}" if renewer.lost else ""))
    return r


def ceiling(source: str, target: str, buckets: list[int]) -> dict:
    """Raw COPY between the two databases (see the module)."""
    import psycopg

    from counting import routing
    from counting.services.migration import changelog

    gen = routing.load_generation()
    rows: Counter = Counter()
    per_table: dict[str, float] = {}
    w0, t0 = time.time(), time.perf_counter()
    with psycopg.connect(**pg_conninfo(source), connect_timeout=5) as src, \
            psycopg.connect(**pg_conninfo(target), connect_timeout=5) as tgt:
        for table in changelog.TABLES:
            t1 = time.perf_counter()
            cols = ", ".join(("generation", *table.all_columns))
            with src.cursor() as rc, tgt.cursor() as wc:
                with rc.copy(f"COPY ({_select(table, gen.generation, buckets, scratch=True)}) TO STDOUT "
                             "(FORMAT binary)") as out, \
                        wc.copy(f"COPY {table.table} ({cols}) FROM STDIN (FORMAT binary)") as into:
                    for data in out:
                        into.write(data)
                rows[table.kind] = wc.rowcount
            per_table[table.kind] = round(time.perf_counter() - t1, 3)
        tgt.rollback()
        src.rollback()
    seconds = time.perf_counter() - t0
    n = sum(rows.values())
    r = {"variant": "ceiling", "source": source, "target": target, "buckets": len(buckets), "rows": n,
         "by_table": dict(rows), "seconds_by_table": per_table, "copy_s": round(seconds, 3),
         "rows_per_s": round(n / seconds, 1) if seconds else None, "t_start": w0, "t_end": time.time()}
    log(f"  ceiling: {n:,} rows {source} -> {target} by COPY in {seconds:.1f}s ({r['rows_per_s']:,.0f} rows/s)")
    return r
