"""One move of a set of buckets three ways: ours (the ops job after a second operator's approval), the naive
stop-the-world move and the binary COPY ceiling; the baselines write a scratch generation and roll back."""

from __future__ import annotations

import time

from bench.harness import seed
from bench.harness.driver import pg_conninfo
from bench.harness.phases import dispatch_stopped, step_times
from bench.harness.seed import make_log, table

log = make_log("migration")
OPERATOR, APPROVER = "bench-mig-operator", "bench-mig-approver"
SCRATCH_GENERATION = 2_000_000_000


def ours(s, buckets: list[int], target: str, tag: str) -> dict:
    from counting.models import BucketMigration
    from counting.services.migration import ledger
    from likes_project.audit.services import Actor
    m = ledger.migration_plan(target=target, buckets=buckets, reason=f"bench/run.sh migration {tag}",
                              actor=Actor(name=OPERATOR, channel="cli"))
    m = ledger.migration_approve(migration_id=m.pk, actor=Actor(name=APPROVER, channel="cli"))
    out = s.check("opsjob", job_id=m.job_id)
    m = BucketMigration.objects.get(pk=m.pk)
    steps, _ends = step_times(out["said"], out["t_start"])
    end = m.cutover_at.timestamp() if m.cutover_at else None
    r = {"tag": tag, "migration_id": m.pk, "state": m.state, "error": m.error or None, "job_status": out["job_status"],
         "buckets": len(m.buckets), "sources": sorted(set(m.source_partitions.values())), "target": m.target_partition,
         "rows_to_copy": m.rows_to_copy, "copied_rows": m.copied_rows, "replayed_events": m.replayed_events,
         "catchup_passes": m.catchup_passes, "write_pause_ms": m.write_pause_ms, "cleaned": bool(m.source_cleaned_at),
         "verify_ok": (m.verify_result or {}).get("ok"), "steps_s": steps, "t_start": out["t_start"],
         "t_end": out["t_end"], "job_s": round(out["t_end"] - out["t_start"], 3),
         "copy_rows_per_s": round(m.copied_rows / steps["copy"], 1) if steps.get("copy") else None,
         "pause_window": [end - m.write_pause_ms / 1000, end] if end and m.write_pause_ms else None}
    log(f"  ours {tag}: {r['buckets']} buckets {'+'.join(r['sources'])} -> {r['target']}: {m.state}, job "
        f"{r['job_s']:.1f}s {steps}, {m.copied_rows:,} rows copied, write pause {m.write_pause_ms} ms")
    return r


def vacuum(aliases: list[str]) -> float:
    """VACUUM (ANALYZE) of the count tables on `aliases` (the server's autovacuum is off); the seconds it took."""
    from counting.models import LikeCountProjection, VideoLikeCountVbucket
    t0 = time.monotonic()
    for alias in aliases:
        seed.vacuum(alias, LikeCountProjection, VideoLikeCountVbucket)
    return round(time.monotonic() - t0, 2)


def _select(t, generation: int, buckets: list[int]) -> str:
    return (f"SELECT {SCRATCH_GENERATION}::int AS generation, {', '.join(t.all_columns)} FROM {t.table} WHERE "
            f"generation = {int(generation)} AND virtual_bucket = ANY('{{{','.join(map(str, map(int, buckets)))}}}')")


def naive(source: str, target: str, buckets: list[int], *, batch: int) -> dict:
    import psycopg

    from counting import routing
    from counting.models import CountBucketRoute
    from counting.services.migration import changelog
    gen, rows, w0, t0 = routing.load_generation(), 0, time.time(), time.perf_counter()
    with dispatch_stopped("bench-mig-naive") as stop:
        t_stopped = time.perf_counter()
        with psycopg.connect(**pg_conninfo(source), connect_timeout=5) as src, \
                psycopg.connect(**pg_conninfo(target), connect_timeout=5) as tgt, \
                psycopg.connect(**pg_conninfo("default"), connect_timeout=5) as ctl:
            for t in changelog.TABLES:
                cols = ("generation", *t.all_columns)
                with src.cursor(name=f"naive_{t.kind}") as read, tgt.cursor() as write:
                    read.itersize = batch
                    read.execute(_select(t, gen.generation, buckets))
                    while chunk := read.fetchmany(batch):
                        write.executemany(f"INSERT INTO {t.table} ({', '.join(cols)}) VALUES "
                                          f"({', '.join(['%s'] * len(cols))})", chunk)
                        rows += len(chunk)
            copy_s = time.perf_counter() - t_stopped
            ctl.execute(f"UPDATE {table(CountBucketRoute)} SET physical_partition = %s, route_epoch = route_epoch + 1 "
                        "WHERE bucket_space_version = %s AND virtual_bucket = ANY(%s)",
                        [target, gen.space.version, buckets])  # the switch, rolled back with the rest
            for conn in (ctl, tgt, src):
                conn.rollback()
    paused = time.perf_counter() - t_stopped
    log(f"  naive: {rows:,} rows {source} -> {target} in {copy_s:.1f}s; projector stopped {paused * 1000:,.0f} ms")
    return {"variant": "naive", "source": source, "target": target, "rows": rows, "copy_s": round(copy_s, 3),
            "rows_per_s": round(rows / copy_s, 1) if copy_s else None, "write_pause_ms": round(paused * 1000, 1),
            "lost_dispatch_stop": stop["lost"], "t_start": w0, "t_end": time.time(), "batch": batch,
            "total_s": round(time.perf_counter() - t0, 3)}


def ceiling(source: str, target: str, buckets: list[int]) -> dict:
    import psycopg

    from counting import routing
    from counting.services.migration import changelog
    gen, rows, w0, t0 = routing.load_generation(), 0, time.time(), time.perf_counter()
    with psycopg.connect(**pg_conninfo(source), connect_timeout=5) as src, \
            psycopg.connect(**pg_conninfo(target), connect_timeout=5) as tgt:
        for t in changelog.TABLES:
            with src.cursor() as rc, tgt.cursor() as wc:
                with rc.copy(f"COPY ({_select(t, gen.generation, buckets)}) TO STDOUT (FORMAT binary)") as out, \
                        wc.copy(f"COPY {t.table} (generation, {', '.join(t.all_columns)}) FROM STDIN "
                                "(FORMAT binary)") as into:
                    for data in out:
                        into.write(data)
                rows += wc.rowcount
        tgt.rollback()
        src.rollback()
    seconds = time.perf_counter() - t0
    log(f"  ceiling: {rows:,} rows {source} -> {target} by COPY in {seconds:.1f}s")
    return {"variant": "ceiling", "source": source, "target": target, "rows": rows, "copy_s": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1) if seconds else None, "t_start": w0, "t_end": time.time()}
