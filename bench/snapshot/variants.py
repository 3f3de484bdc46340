"""A snapshot build three ways, ours (the snapshot_create ops job), the naive stop-the-world ORM dump and the raw SQL
ceiling (a minimal cut, then psql COPY), and the restore's load against raw COPY FROM and an ORM bulk_create."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

from bench.harness.driver import pg_conninfo, pg_env
from bench.harness.phases import dispatch_stopped
from bench.harness.seed import table

STORAGE_MARK = "likes-bench-snapshots"  # bench/run.sh snapshot's directory; the driver never empties another
SCRATCH_GENERATION = 2_000_000_000  # the baselines' loads write here, always rolled back


def storage_dir() -> Path:
    from django.conf import settings
    path = Path(settings.SNAPSHOT_STORAGE_DIR)
    if settings.SNAPSHOT_STORAGE_BACKEND != "filesystem" or STORAGE_MARK not in path.name:
        raise SystemExit(f"[snapshot] refusing: SNAPSHOT_STORAGE_DIR must be a local directory named *{STORAGE_MARK}* "
                         f"(got {path}); use bench/run.sh snapshot")
    return path


def storage_reset() -> None:
    shutil.rmtree(storage_dir(), ignore_errors=True)
    storage_dir().mkdir(parents=True, exist_ok=True)


def _dir(name: str) -> Path:
    path = storage_dir() / "bench-baselines" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _kinds():
    from reconciliation.services.recovery.snapshot import KINDS
    return KINDS  # kind -> (model, columns, order)


def _add(into: dict, kind: str, **amounts) -> None:
    k = into.setdefault(kind, {})
    for name, n in amounts.items():
        k[name] = round(k.get(name, 0) + n, 3)


def _totals(by_kind: dict) -> dict:
    return {"by_kind": by_kind, "rows": sum(k["rows"] for k in by_kind.values()),
            "bytes": sum(k["bytes"] for k in by_kind.values())}


def ours_build(s, tag: str) -> dict:
    """One snapshot through the ops job, run in the checker process; the RecoverySnapshot row's figures."""
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_start
    from reconciliation.jobs import SNAPSHOT_JOB
    from reconciliation.models import RecoverySnapshot
    job = job_start(kind=SNAPSHOT_JOB, actor=Actor(name=s.actor, channel="cli"),
                    params={"reason": f"bench/run.sh snapshot {tag}"}, target="snapshot")
    out = s.check("opsjob", job_id=job.pk)
    snap = RecoverySnapshot.objects.get(pk=job.params["snapshotId"])
    by_kind: dict = {}
    for a in snap.artifacts:
        _add(by_kind, a["kind"], rows=a["rows"], bytes=a["bytes"])
    t = snap.timings or {}
    return {"variant": "ours", "tag": tag, "snapshot_id": snap.pk, "status": snap.status,
            "failure": snap.failure or None, "paused_ms": snap.dispatch_paused_ms, "cut_ms": t.get("cutMs"),
            "dump_ms": t.get("dumpMs"), "verify_ms": t.get("verifyMs"), "build_ms": t.get("totalMs"),
            "t_start": out["t_start"], "t_end": out["t_end"], **_totals(by_kind)}


def naive_build(s, tag: str) -> dict:
    """The stop-the-world ORM JSON dump (its files stay for naive_load)."""
    from django.conf import settings

    from counting import routing
    gen, out_dir, by_kind = routing.load_generation(), _dir("naive"), {}
    shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    w0, t0 = time.time(), time.perf_counter()
    with dispatch_stopped("bench-naive") as stop:
        for alias in settings.COUNT_PARTITION_ALIASES:
            for kind, (model, columns, order) in _kinds().items():
                path, rows = out_dir / f"{kind}-{alias}.jsonl.gz", 0
                qs = model.objects.using(alias).filter(generation=gen.generation).order_by(
                    *[c.strip() for c in order.split(",")]).values(*columns)
                with gzip.open(path, "wt", compresslevel=3, encoding="utf-8") as fh:
                    for row in qs.iterator(chunk_size=2000):
                        fh.write(json.dumps(row, default=str) + "\n")
                        rows += 1
                hashlib.sha256(path.read_bytes()).hexdigest()  # what ours records per artifact at the seal
                _add(by_kind, kind, rows=rows, bytes=path.stat().st_size)
    build = round((time.perf_counter() - t0) * 1000, 3)
    lost = stop["lost"] and f"the dispatch stop was lost during the dump ({stop['lost']})"
    return {"variant": "naive", "tag": tag, "status": "LOST" if lost else "DONE", "failure": lost, "paused_ms": build,
            "build_ms": build, "dump_ms": build, "t_start": w0, "t_end": time.time(), **_totals(by_kind)}


# The rows go through psql (C), not Python: psycopg hands a COPY out one row at a time, which costs more than the
# server's side (a first version of this ceiling was slower than ours at 1,000,000 rows).


def _copy_out(alias: str, sql: str, *, snapshot: str | None = None, sink=None) -> tuple[int, int]:
    """`sql` (a COPY … TO STDOUT) in psql, inside the exported `snapshot` if any, into `sink` if any; (rows, bytes)."""
    script = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n" + (
        f"SET TRANSACTION SNAPSHOT '{snapshot}';\n" if snapshot else "") + f"{sql};\nCOMMIT;\n"
    rows = nbytes = 0
    with subprocess.Popen(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=pg_env(alias)) as proc:
        proc.stdin.write(script.encode())
        proc.stdin.close()
        while block := proc.stdout.read(1 << 20):
            rows, nbytes = rows + block.count(b"\n"), nbytes + len(block)
            if sink is not None:
                sink.write(block)
        err = proc.stderr.read().decode(errors="replace")
    if proc.returncode:
        raise RuntimeError(f"psql on {alias} failed ({proc.returncode}): {err[:300]}")
    return rows, nbytes


def _select(kind: str, generation: int, prefix: str = "") -> str:
    model, columns, order = _kinds()[kind]
    return (f"COPY (SELECT {prefix}{', '.join(columns)} FROM {table(model)} WHERE generation = {int(generation)} "
            f"ORDER BY {order}) TO STDOUT")


def ceiling_build(s, tag: str) -> dict:
    """The minimal consistent cut (exported snapshots) and a raw COPY of both tables of every partition by psql."""
    import psycopg
    from django.conf import settings

    from counting import routing
    gen, by_kind = routing.load_generation(), {}
    conns = {a: psycopg.connect(**pg_conninfo(a), connect_timeout=5) for a in settings.COUNT_PARTITION_ALIASES}
    try:
        w0, t0 = time.time(), time.perf_counter()
        with dispatch_stopped("bench-ceiling"):
            exported = {}
            for alias, conn in conns.items():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                exported[alias] = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        paused = time.perf_counter() - t0
        for alias in conns:
            for kind in _kinds():
                rows, nbytes = _copy_out(alias, _select(kind, gen.generation), snapshot=exported[alias])
                _add(by_kind, kind, rows=rows, bytes=nbytes)
        build = time.perf_counter() - t0
    finally:
        for conn in conns.values():
            conn.close()
    return {"variant": "ceiling", "tag": tag, "status": "DONE", "failure": None, "paused_ms": round(paused * 1000, 3),
            "dump_ms": round((build - paused) * 1000, 3), "build_ms": round(build * 1000, 3), "t_start": w0,
            "t_end": time.time(), **_totals(by_kind)}


def ceiling_load(generation: int) -> dict:
    """Raw COPY FROM of the rows of `generation` (the restored one) into the scratch generation, rolled back."""
    from django.conf import settings
    out_dir, files, rows = _dir("ceiling-load"), [], 0
    try:
        for alias in settings.COUNT_PARTITION_ALIASES:  # the COPY text, written out first (not timed)
            for kind in _kinds():
                with open(path := out_dir / f"{kind}-{alias}.copy", "wb") as fh:
                    _copy_out(alias, _select(kind, generation, f"{SCRATCH_GENERATION} AS g, "), sink=fh)
                files.append((alias, kind, path))
        t0 = time.perf_counter()
        for alias, kind, path in files:
            model, columns, _order = _kinds()[kind]
            done = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-c", "BEGIN", "-c",
                                   f"\\copy {table(model)} (generation, {', '.join(columns)}) from '{path}'",
                                   "-c", "ROLLBACK"], env=pg_env(alias), capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"psql on {alias} failed ({done.returncode}): {done.stderr[:300]}")
            rows += int(m.group(1)) if (m := re.search(r"^COPY (\d+)$", done.stdout, re.MULTILINE)) else 0
        elapsed = time.perf_counter() - t0
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return {"variant": "ceiling", "rows": rows, "load_ms": round(elapsed * 1000, 3),
            "rows_per_s": round(rows / elapsed, 1) if elapsed else None}


def naive_load() -> dict | None:
    """The naive build's JSON lines back through the ORM into the scratch generation, rolled back."""
    from django.db import transaction
    files, rows, t0 = sorted(_dir("naive").glob("*.jsonl.gz")), 0, time.perf_counter()
    if not files:
        return None
    for path in files:
        kind, alias = path.name.removesuffix(".jsonl.gz").split("-", 1)
        model = _kinds()[kind][0]
        with transaction.atomic(using=alias), gzip.open(path, "rt", encoding="utf-8") as fh:
            batch = []
            for line in fh:
                batch.append(model(generation=SCRATCH_GENERATION, **json.loads(line)))
                if len(batch) >= 2000:
                    model.objects.using(alias).bulk_create(batch)
                    rows, batch = rows + len(batch), []
            model.objects.using(alias).bulk_create(batch)
            rows += len(batch)
            transaction.set_rollback(True, using=alias)
    elapsed = time.perf_counter() - t0
    return {"variant": "naive", "rows": rows, "load_ms": round(elapsed * 1000, 3),
            "rows_per_s": round(rows / elapsed, 1)}
