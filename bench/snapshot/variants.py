"""What a snapshot build and a restore's load are measured against, over the same tables in the same run:

ours     the ops job `manage.py snapshot_create` starts (reconciliation.jobs.SNAPSHOT_JOB: snapshot_create +
         snapshot_build, then retention), run by the checker process as a worker runs it (job_run_inline): the
         drain, the cut (dispatch stopped by taking the count consumer's leases, B[p], one REPEATABLE READ
         snapshot per count partition, the proofs), dispatch resumed, the gzip COPY artifacts streamed to the
         snapshot storage, read back, sealed. Figures from the RecoverySnapshot row (dispatch_paused_ms, timings,
         artifacts).
naive    a stop-the-world snapshot an application would write first: the same dispatch stop (the count
         consumer's leases, renewed while it runs) held for the WHOLE dump, and the dump through the ORM, one
         JSON line per row (`.values().iterator()` -> json.dumps -> gzip), both tables of every partition, a
         SHA-256 of each file. The pause is the whole build.
ceiling  the raw SQL floor of a consistent snapshot: the same dispatch stop held only while B[p] is read and
         one REPEATABLE READ snapshot per partition opened and exported (plain psycopg connections, no proofs),
         then `COPY (SELECT … ORDER BY key) TO STDOUT` of both tables by psql inside those exported snapshots,
         counted and thrown away (/dev/null): no compression, no storage, no read-back, no Python per row. Its
         pause is the floor of any cut that stops dispatch; its dump the floor of reading the rows out.

The restore's load (the step the baselines can do; the replay, the checks and the switch have no counterpart):
ceiling_load  the rows of the restored generation written out as raw COPY text first (not timed), then psql's
              `\\copy table (generation, …) from FILE` of that text into the real tables (their indexes
              included) under a scratch generation, one transaction per table and partition, rolled back;
naive_load    the naive build's JSON lines read back through the ORM (json.loads -> model instances ->
              bulk_create, 2,000 a batch) into the scratch generation, one transaction per file, rolled back.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import threading
import time

from bench.reconcile import OPERATOR
from bench.snapshot import SCRATCH_GENERATION, baseline_dir

ORM_CHUNK = 2000
RENEW_EVERY_S = 1.0


def _t(model) -> str:
    return model._meta.db_table


def _add(into: dict, kind: str, **amounts) -> None:
    """Add `amounts` to the counters of `kind` in `into` (rows, bytes, files, seconds per table kind)."""
    k = into.setdefault(kind, {})
    for name, n in amounts.items():
        k[name] = round(k.get(name, 0) + n, 3)


def _kinds():
    from reconciliation.services.recovery.snapshot import KINDS

    return KINDS


def _sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _lease_ttl() -> float:
    from django.conf import settings

    return max(5.0, settings.RECONCILE_DRAIN_MAX_S)


def _take_dispatch(holder: str):
    """The count consumer's lease of every stream partition (what the product's cut takes): no pass
    dispatches while they are held."""
    from django.conf import settings

    from reconciliation.services.cut import count_leases_take

    return count_leases_take(time.monotonic() + settings.RECONCILE_DRAIN_MAX_S, holder_prefix=holder)


def _release(grants) -> None:
    from likes_project import leases

    for g in grants:
        leases.lease_release(g)


# --- ours --------------------------------------------------------------------------------------------------


def ours_build(h, tag: str) -> dict:
    """One snapshot through the ops job, run in the checker process. Returns its figures."""
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_start
    from reconciliation.jobs import SNAPSHOT_JOB
    from reconciliation.models import RecoverySnapshot

    job = job_start(kind=SNAPSHOT_JOB, actor=Actor(name=OPERATOR, channel="cli"),
                    params={"reason": f"bench/snapshot.sh {tag}"}, target="snapshot")
    out = h.check("opsjob", job_id=job.pk, timeout=h.args.check_timeout)
    snap = RecoverySnapshot.objects.get(pk=job.params["snapshotId"])
    by_kind: dict[str, dict] = {}
    for a in snap.artifacts:
        _add(by_kind, a["kind"], rows=a["rows"], bytes=a["bytes"], files=1)
    timings = snap.timings or {}
    return {"variant": "ours", "tag": tag, "snapshot_id": snap.pk, "status": snap.status,
            "failure": snap.failure or None, "job_status": out["job_status"], "job_error": out.get("job_error"),
            "paused_ms": snap.dispatch_paused_ms, "cut_ms": timings.get("cutMs"), "dump_ms": timings.get("dumpMs"),
            "verify_ms": timings.get("verifyMs"), "build_ms": timings.get("totalMs"),
            "job_s": round(out["t_end"] - out["t_start"], 3), "t_start": out["t_start"], "t_end": out["t_end"],
            "by_kind": by_kind, "rows": sum(k["rows"] for k in by_kind.values()),
            "bytes": sum(k["bytes"] for k in by_kind.values()),
            "offsets": len(snap.offsets), "said": [(round(t - out["t_start"], 3), m) for t, m in out["said"]][:20],
            "logged": out.get("logged")}


# --- naive: stop the world, dump through the ORM ------------------------------------------------------------


def _orm_dump(model, alias: str, generation: int, columns, order: str, path) -> int:
    qs = (model.objects.using(alias).filter(generation=generation)
          .order_by(*[c.strip() for c in order.split(",")]).values(*columns))
    rows = 0
    with gzip.open(path, "wt", compresslevel=3, encoding="utf-8") as fh:
        for row in qs.iterator(chunk_size=ORM_CHUNK):
            fh.write(json.dumps(row, default=str))
            fh.write("\n")
            rows += 1
    return rows


class _Renewer(threading.Thread):
    """Keeps the dispatch stop of the naive build: renews its leases every `every` seconds (their TTL is
    the product's, RECONCILE_DRAIN_MAX_S), from a thread of its own (one ORM query can take longer than the
    TTL). `lost` names a lease that moved anyway."""

    def __init__(self, grants, every: float = RENEW_EVERY_S):
        super().__init__(daemon=True, name="bench-naive-renewer")
        self.grants, self.every = grants, every
        self.done = threading.Event()
        self.lost: str | None = None

    def renew(self) -> None:
        from likes_project import leases

        for g in self.grants:
            try:
                leases.lease_renew(g, ttl_s=_lease_ttl())
            except leases.LeaseLost as exc:
                self.lost = self.lost or str(exc)

    def run(self) -> None:
        from django.db import connections

        try:
            while not self.done.wait(self.every):
                self.renew()
        finally:
            connections.close_all()


def naive_build(tag: str) -> dict:
    """The stop-the-world ORM JSON dump (the files stay for naive_load; the previous build's are removed)."""
    from django.conf import settings

    from counting import routing as count_routing
    from counting.services.projection import COUNT_CONSUMER
    from likes_project.eventlog.checkpoints import checkpoints_get

    gen = count_routing.load_generation()
    out_dir = baseline_dir("naive")
    shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    by_kind: dict[str, dict] = {}
    lost = None
    w0, t0 = time.time(), time.perf_counter()
    grants = _take_dispatch("bench-naive")
    renewer = _Renewer(grants)
    renewer.renew()  # the first leases taken may be near their expiry by the time the last one is free
    renewer.start()
    try:
        through = checkpoints_get(COUNT_CONSUMER)
        for alias in settings.COUNT_PARTITION_ALIASES:
            for kind, (model, columns, order) in _kinds().items():
                path = out_dir / f"{kind}-{alias}.jsonl.gz"
                rows = _orm_dump(model, alias, gen.generation, columns, order, path)
                _add(by_kind, kind, rows=rows, bytes=path.stat().st_size, files=1)
                _sha256(path)  # what ours records per artifact at the seal; part of the build here too
    finally:
        renewer.done.set()
        renewer.join(timeout=30)
        _release(grants)
        paused = time.perf_counter() - t0
    if renewer.lost:
        lost = f"the dispatch stop was lost during the dump ({renewer.lost}): the snapshot is not consistent"
    build = time.perf_counter() - t0
    return {"variant": "naive", "tag": tag, "status": "LOST" if lost else "DONE", "failure": lost,
            "paused_ms": round(paused * 1000, 3), "build_ms": round(build * 1000, 3), "dump_ms": round(build * 1000, 3),
            "t_start": w0, "t_end": time.time(), "by_kind": by_kind,
            "rows": sum(k["rows"] for k in by_kind.values()), "bytes": sum(k["bytes"] for k in by_kind.values()),
            "offsets": len(through) if not lost else None, "generation": gen.generation}


# --- ceiling: the minimal cut, raw COPY into /dev/null ---------------------------------------------------
#
# The rows go through psql (C), not Python: psycopg hands a COPY out one row at a time, which costs more than the
# server's side of the work (a first version of this ceiling was slower than ours at 1,000,000 rows).


def _psql_env(alias: str) -> dict:
    from bench.common import pg_conninfo

    info = pg_conninfo(alias)
    env = {**os.environ, "PGHOST": str(info["host"]), "PGPORT": str(info["port"]), "PGDATABASE": info["dbname"],
           "PGCONNECT_TIMEOUT": "5"}
    if info.get("user"):
        env["PGUSER"] = info["user"]
    if info.get("password"):
        env["PGPASSWORD"] = info["password"]
    return env


def _psql_copy_out(alias: str, sql: str, *, snapshot: str | None = None, sink=None) -> tuple[int, int]:
    """Run `sql` (a COPY … TO STDOUT) in psql, inside the exported `snapshot` when given; its output counted
    (rows, bytes) and written to the binary file `sink` when given. Raises on a psql error."""
    import subprocess

    script = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n"
    if snapshot:
        script += f"SET TRANSACTION SNAPSHOT '{snapshot}';\n"
    script += f"{sql};\nCOMMIT;\n"
    rows = nbytes = 0
    with subprocess.Popen(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_psql_env(alias)) as proc:
        proc.stdin.write(script.encode())
        proc.stdin.close()
        while block := proc.stdout.read(1 << 20):
            rows += block.count(b"\n")
            nbytes += len(block)
            if sink is not None:
                sink.write(block)
        err = proc.stderr.read().decode(errors="replace")
    if proc.returncode:
        raise RuntimeError(f"psql on {alias} failed ({proc.returncode}): {err[:300]}")
    return rows, nbytes


def _select_sql(kind: str, generation: int, *, prefix: str = "") -> str:
    model, columns, order = _kinds()[kind]
    return (f"COPY (SELECT {prefix}{', '.join(columns)} FROM {_t(model)} WHERE generation = {int(generation)} "
            f"ORDER BY {order}) TO STDOUT")


def ceiling_build(tag: str) -> dict:
    """The minimal consistent cut (the exported snapshots held by plain connections) and a raw COPY of both
    tables of every partition into /dev/null by psql, inside those snapshots."""
    import psycopg
    from django.conf import settings

    from bench.common import pg_conninfo
    from counting import routing as count_routing
    from counting.services.projection import COUNT_CONSUMER
    from likes_project.eventlog.checkpoints import checkpoints_get

    gen = count_routing.load_generation()
    conns = {alias: psycopg.connect(**pg_conninfo(alias), connect_timeout=5)  # connected before the pause
             for alias in settings.COUNT_PARTITION_ALIASES}
    by_kind: dict[str, dict] = {}
    try:
        w0, t0 = time.time(), time.perf_counter()
        grants = _take_dispatch("bench-ceiling")
        try:
            through = checkpoints_get(COUNT_CONSUMER)
            exported = {}
            for alias, conn in conns.items():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                exported[alias] = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]  # taken here
        finally:
            _release(grants)
            paused = time.perf_counter() - t0
        t1 = time.perf_counter()
        for alias in conns:
            for kind in _kinds():
                rows, nbytes = _psql_copy_out(alias, _select_sql(kind, gen.generation), snapshot=exported[alias])
                _add(by_kind, kind, rows=rows, bytes=nbytes, files=1)
        dump = time.perf_counter() - t1
        build = time.perf_counter() - t0
    finally:
        for conn in conns.values():
            conn.close()
    return {"variant": "ceiling", "tag": tag, "status": "DONE", "failure": None,
            "paused_ms": round(paused * 1000, 3), "dump_ms": round(dump * 1000, 3), "build_ms": round(build * 1000, 3),
            "t_start": w0, "t_end": time.time(), "by_kind": by_kind,
            "rows": sum(k["rows"] for k in by_kind.values()), "bytes": sum(k["bytes"] for k in by_kind.values()),
            "offsets": len(through), "generation": gen.generation, "bytes_are": "raw COPY text, uncompressed"}


# --- the restore's load ------------------------------------------------------------------------------------


def _psql_copy_in(alias: str, table: str, columns: str, path) -> int:
    """`\\copy table (columns) from 'path'` in psql inside a transaction that is rolled back; the rows copied."""
    import re
    import subprocess

    done = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", "-c", "BEGIN",
                           "-c", f"\\copy {table} ({columns}) from '{path}'", "-c", "ROLLBACK"],
                          env=_psql_env(alias), capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"psql on {alias} failed ({done.returncode}): {done.stderr[:300]}")
    found = re.search(r"^COPY (\d+)$", done.stdout, re.MULTILINE)
    return int(found.group(1)) if found else 0


def ceiling_load(generation: int) -> dict:
    """Raw COPY FROM of the rows of `generation` (the restored one) into the scratch generation, rolled back."""
    from django.conf import settings

    out_dir = baseline_dir("ceiling-load")
    files: list[tuple[str, str, object]] = []
    per: dict[str, dict] = {}
    try:
        for alias in settings.COUNT_PARTITION_ALIASES:  # the COPY text, written out first (not timed)
            for kind in _kinds():
                path = out_dir / f"{kind}-{alias}.copy"
                with open(path, "wb") as fh:
                    _psql_copy_out(alias, _select_sql(kind, generation, prefix=f"{SCRATCH_GENERATION} AS g, "),
                                   sink=fh)
                files.append((alias, kind, path))
        t0 = time.perf_counter()
        for alias, kind, path in files:
            model, columns, _order = _kinds()[kind]
            ts = time.perf_counter()
            rows = _psql_copy_in(alias, _t(model), f"generation, {', '.join(columns)}", path)
            _add(per, kind, rows=rows, s=time.perf_counter() - ts)
        elapsed = time.perf_counter() - t0
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    rows = sum(k["rows"] for k in per.values())
    return {"variant": "ceiling", "rows": rows, "by_kind": per, "load_ms": round(elapsed * 1000, 3),
            "rows_per_s": round(rows / elapsed, 1) if elapsed else None, "source_generation": generation}


def naive_load() -> dict | None:
    """The naive build's JSON lines back through the ORM into the scratch generation, rolled back (None when
    there is no naive dump)."""
    from django.db import transaction

    files = sorted(baseline_dir("naive").glob("*.jsonl.gz"))
    if not files:
        return None
    per: dict[str, dict] = {}
    t0 = time.perf_counter()
    for path in files:
        kind, alias = path.name.removesuffix(".jsonl.gz").split("-", 1)
        model = _kinds()[kind][0]
        ts = time.perf_counter()
        rows = 0
        with transaction.atomic(using=alias), gzip.open(path, "rt", encoding="utf-8") as fh:
            batch = []
            for line in fh:
                batch.append(model(generation=SCRATCH_GENERATION, **json.loads(line)))
                if len(batch) >= ORM_CHUNK:
                    model.objects.using(alias).bulk_create(batch)
                    rows += len(batch)
                    batch = []
            if batch:
                model.objects.using(alias).bulk_create(batch)
                rows += len(batch)
            transaction.set_rollback(True, using=alias)
        _add(per, kind, rows=rows, s=time.perf_counter() - ts)
    elapsed = time.perf_counter() - t0
    rows = sum(k["rows"] for k in per.values())
    return {"variant": "naive", "rows": rows, "by_kind": per, "load_ms": round(elapsed * 1000, 3),
            "rows_per_s": round(rows / elapsed, 1) if elapsed else None}
