"""Where the time of a window went (TEST-3): CPU by role (/proc) and the bench backends' states (pg_stat_activity),
sampled from a thread of the driver; `count_io` counts what a process sends. Importing it does not import Django."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

from bench.harness.driver import DB_PREFIX, make_log, pg_conninfo

log = make_log("sampler")


def read_cpu_by_pid() -> dict[int, tuple[str, int, float, int]]:
    """pid -> (comm, ppid, CPU seconds so far, start time in ticks: the start time tells a reused pid)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2:].split()
        out[int(entry)] = (raw[raw.index("(") + 1:raw.rindex(")")], int(fields[1]),
                           (int(fields[11]) + int(fields[12])) / ticks, int(fields[19]))
    return _celery_roles(out)


def _celery_roles(procs: dict[int, tuple[str, int, float, int]]) -> dict[int, tuple[str, int, float, int]]:
    """Celery's processes by role: beat, the worker's main process (broker, acks, pool feeding) and its pool."""
    for pid, (comm, ppid, cpu, start) in list(procs.items()):
        if comm != "celery":
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        role = "beat" if b"beat" in argv else "pool" if procs.get(ppid, ("",))[0].startswith("celery") else "worker"
        procs[pid] = (f"celery {role}", ppid, cpu, start)
    return procs


def proc_stat() -> tuple[float, float, float]:
    vals = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return float(sum(vals[:8])), float(vals[3]), float(vals[4])


def _group(comm: str) -> str:
    if comm.startswith(("postgres", "postmaster")):
        return "postgres (other: wal, checkpointer, other databases)"
    if comm in ("pgbench", "psql") or comm.startswith("redis"):
        return comm.split("-")[0]
    if comm.startswith(("kworker", "ksoftirqd", "kswapd", "jbd2", "rcu_")):
        return "kernel threads"
    return f"other: {comm}"


class ResourceSampler:
    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, t0: float, t1: float, *, labels: dict[int, str] | None = None,
              parents: dict[int, str] | None = None) -> None:
        """Sample over [t0, t1] (or until stop()); `labels`: names by pid; `parents`: names of a pid's children."""
        self.labels, self.parents = dict(labels or {}), dict(parents or {})
        self.window, self.waits, self.samples, self.backends = (t0, t1), Counter(), 0, set()
        self.cpu0 = self.cpu1 = None
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg
        t0, t1 = self.window
        try:
            conn = psycopg.connect(**pg_conninfo("default"), autocommit=True, connect_timeout=5)
        except Exception as exc:
            log(f"no database connection ({exc.__class__.__name__})")
            conn = None
        try:
            while not self._stop.is_set() and time.time() < t0:
                time.sleep(0.02)  # the sampler's tick until the window opens (a measurement pacer)
            self.cpu0 = (time.time(), proc_stat(), read_cpu_by_pid())
            # The CPU ends just before t1: clients close their connections right after the window, and an exited
            # backend's CPU can no longer be read.
            t_cpu_end = t1 - 0.15
            for _ in range(10_000_000):  # bounded; the deadline ends it long before
                if self._stop.is_set() or time.time() >= t_cpu_end:
                    break
                if conn is not None:
                    self.samples += 1
                    for pid, state, wtype, wevent in conn.execute(
                            "SELECT pid, state, wait_event_type, wait_event FROM pg_stat_activity WHERE datname LIKE "
                            "%s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                            [DB_PREFIX + "%"]).fetchall():
                        self.backends.add(pid)
                        if state == "active":
                            self.waits[f"{wtype}:{wevent}" if wtype else "CPU (running)"] += 1
                        elif state and state.startswith("idle in transaction"):
                            self.waits["idle in transaction (waiting for the client)"] += 1
                time.sleep(max(0.0, min(self.interval, t_cpu_end - time.time())))  # the sampling interval
            self.cpu1 = (time.time(), proc_stat(), read_cpu_by_pid())
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not self.cpu0 or not self.cpu1 or self.cpu1[0] - self.cpu0[0] < 0.5:
            return {}  # too short a window to say anything
        (w0, st0, p0), (w1, st1, p1) = self.cpu0, self.cpu1
        total = st1[0] - st0[0]
        cores: Counter = Counter()
        for pid, (comm, ppid, cpu, started) in p1.items():
            before = p0.get(pid)
            delta = cpu - (before[2] if before and before[3] == started else 0.0)
            if delta <= 0:
                continue
            if pid in self.labels:
                key = self.labels[pid]
            elif pid in self.parents or ppid in self.parents:
                key = self.parents.get(pid) or self.parents[ppid]
            elif pid in self.backends:
                key = "postgres (bench backends)"
            else:
                key = _group(comm)
            cores[key] += delta / (w1 - w0)
        busy = (total - (st1[1] - st0[1]) - (st1[2] - st0[2])) / total if total > 0 else 0.0
        return summary(busy * (os.cpu_count() or 1), (st1[2] - st0[2]) / total if total > 0 else 0.0, cores,
                       self.waits, self.samples)


def summary(cores_busy: float, iowait: float, cores: dict, waits: dict, samples: int) -> dict:
    active = sum(waits.values())
    return {"cores_busy": round(cores_busy, 2), "iowait_share": round(iowait, 3),
            "cores_by_process": {k: round(v, 2) for k, v in Counter(cores).most_common()},
            "avg_busy_bench_backends": round(active / samples, 2) if samples else 0.0,
            "top_waits": [{"wait": k, "share": round(v / active, 3)} for k, v in Counter(waits).most_common(5)]
            if active else [], "wait_counts": dict(waits), "samples": samples}


def merge(items: list[dict]) -> dict:
    """The CPU figures of several windows averaged, their wait samples pooled."""
    items = [i for i in items if i]
    if not items:
        return {}
    cores, waits = Counter(), Counter()
    for i in items:
        for k, v in i["cores_by_process"].items():
            cores[k] += v / len(items)
        waits.update(i.get("wait_counts", {}))
    return summary(sum(i["cores_busy"] for i in items) / len(items),
                   sum(i["iowait_share"] for i in items) / len(items), cores, waits,
                   sum(i.get("samples", 0) for i in items))


def sampled(sampler: ResourceSampler, fn, labels: dict[int, str] | None = None, *,
            window: tuple[float, float] | None = None, server=None):
    """fn() sampled over `window` (else until it returns), `server`'s workers named: (fn's result, resources)."""
    t0, t1 = window or (time.time(), time.time() + 24 * 3600)
    sampler.start(t0, t1, labels=labels, parents={server.proc.pid: "gunicorn workers"} if server else None)
    try:
        out = fn()
    finally:
        resources = sampler.stop()
    return out, resources


def count_io(counts: Counter, *, pipelines: bool = False, statements: bool = False):
    """Count into `counts` "sql:ALIAS" (Django's cursor), "redis" (commands; `pipelines`: and pipelines) and, with
    `statements`, "pg" (all psycopg sent). Returns the function that stops counting."""
    import psycopg
    import redis
    import redis.client
    from django.db import connections
    undo = []

    def patch(owner, name: str, key: str) -> None:
        original = getattr(owner, name)

        def counting(self, *args, **kwargs):
            counts[key] += 1
            return original(self, *args, **kwargs)

        setattr(owner, name, counting)
        undo.append(lambda: setattr(owner, name, original))

    patch(redis.Redis, "execute_command", "redis")
    if pipelines:
        patch(redis.client.Pipeline, "execute", "redis")
    if statements:
        patch(psycopg.Cursor, "execute", "pg")
    for alias in connections:
        def wrapper(run, sql, params, many, context, alias=alias):
            counts[f"sql:{alias}"] += 1
            return run(sql, params, many, context)

        wrappers = connections[alias].execute_wrappers
        wrappers.append(wrapper)
        undo.append(lambda wrappers=wrappers, wrapper=wrapper: wrappers.remove(wrapper))
    return lambda: [fn() for fn in reversed(undo)]
