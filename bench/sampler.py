"""Resource sampling of a measured window (TEST-3 "resource bottleneck"): the bench backends' wait events
(pg_stat_activity) and the CPU of every process (/proc), summarised by role, and the text of those
figures in the reports. Importing this module does not import Django."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

from bench.common import BENCH_DB_PREFIX, bench_log, pg_conninfo


def read_cpu_by_pid() -> dict[int, tuple[str, int, float, int]]:
    """pid -> (comm, ppid, CPU seconds so far, start time in ticks; the start time tells a reused pid)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        out[int(entry)] = (comm, int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks, int(fields[19]))
    return out


def _read_proc_stat() -> tuple[float, float, float]:
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    vals = [int(x) for x in parts]
    idle, iowait = vals[3], vals[4]
    return float(sum(vals[:8])), float(idle), float(iowait)


class ResourceSampler:
    """Samples the bench backends' wait events (pg_stat_activity) and per-process CPU over a window."""

    def __init__(self, *, client_pids: set[int], interval: float = 0.25):
        self.client_pids = set(client_pids)
        self.interval = interval
        self.extra_pids: set[int] = set()
        self.extra_label = "gunicorn"
        self.pid_labels: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.waits: Counter = Counter()
        self.samples = 0
        self.bench_backends: set[int] = set()
        self._window = (0.0, 0.0)
        self.cpu0 = self.cpu1 = None

    def start(self, t_measure: float, t_end: float, *, extra_pids: set[int] | None = None,
              extra_label: str = "gunicorn", pid_labels: dict[int, str] | None = None) -> None:
        """Sample over [t_measure, t_end] (or until stop()). `pid_labels` names further processes of
        the bench by pid (checked first; bench/projection_bench.py labels its pipeline roles)."""
        self.extra_pids = set(extra_pids or ())
        self.extra_label = extra_label
        self.pid_labels = dict(pid_labels or {})
        self._window = (t_measure, t_end)
        self._stop.clear()
        self.waits = Counter()
        self.samples = 0
        self.bench_backends = set()
        self.cpu0 = self.cpu1 = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg

        t_measure, t_end = self._window
        try:
            conn = psycopg.connect(**pg_conninfo("default"), autocommit=True, connect_timeout=5)
        except Exception as exc:
            bench_log(f"resource sampler: no database connection ({exc.__class__.__name__})")
            conn = None
        try:
            while not self._stop.is_set() and time.time() < t_measure:
                time.sleep(0.02)  # the sampler's tick; this is a measurement pacer, not a test wait
            self.cpu0 = (time.time(), _read_proc_stat(), read_cpu_by_pid())
            # The window's CPU ends just before t_end: service-layer clients close their connections right
            # after it, and an exited backend's CPU can no longer be read.
            t_cpu_end = t_end - 0.15
            for _ in range(100_000):  # bounded; the deadline ends it long before
                if self._stop.is_set() or time.time() >= t_cpu_end:
                    break
                if conn is not None:
                    rows = conn.execute(
                        "SELECT pid, state, wait_event_type, wait_event FROM pg_stat_activity "
                        "WHERE datname LIKE %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                        [BENCH_DB_PREFIX + "%"],
                    ).fetchall()
                    self.samples += 1
                    for pid, state, wtype, wevent in rows:
                        self.bench_backends.add(pid)
                        if state == "active":
                            self.waits[f"{wtype}:{wevent}" if wtype else "CPU (running)"] += 1
                        elif state and state.startswith("idle in transaction"):
                            self.waits["idle in transaction (waiting for the client)"] += 1
                time.sleep(max(0.0, min(self.interval, t_cpu_end - time.time())))  # sample at a fixed interval (pacing)
            self.cpu1 = (time.time(), _read_proc_stat(), read_cpu_by_pid())
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return self.summary()

    def summary(self) -> dict:
        if not self.cpu0 or not self.cpu1:
            return {}
        (w0, st0, p0), (w1, st1, p1) = self.cpu0, self.cpu1
        wall = w1 - w0
        if wall < 0.5:
            return {}  # too short a window to say anything
        total = st1[0] - st0[0]
        busy = (total - (st1[1] - st0[1]) - (st1[2] - st0[2])) / total if total > 0 else 0.0
        ncpu = os.cpu_count() or 1
        cores: Counter = Counter()
        for pid, (comm, ppid, cpu, started) in p1.items():
            before = p0.get(pid)
            delta = cpu - (before[2] if before and before[3] == started else 0.0)
            if delta <= 0:
                continue
            if pid in self.pid_labels:
                key = self.pid_labels[pid]
            elif pid in self.client_pids:
                key = "bench clients"
            elif pid in self.extra_pids or ppid in self.extra_pids:
                key = self.extra_label
            elif pid in self.bench_backends:
                key = "postgres (bench backends)"
            elif comm.startswith("postgres") or comm.startswith("postmaster"):
                key = "postgres (other: wal, checkpointer, other databases)"
            elif comm == "pgbench":
                key = "pgbench"
            elif comm.startswith("redis"):
                key = "redis"
            elif comm.startswith(("kworker", "ksoftirqd", "kswapd", "jbd2", "rcu_")):
                key = "kernel threads"
            else:
                key = f"other: {comm}"
            cores[key] += delta / wall
        return _resource_summary(
            cores_busy=busy * ncpu, iowait=(st1[2] - st0[2]) / total if total > 0 else 0.0,
            cores=dict(cores), waits=dict(self.waits), samples=self.samples)


def _resource_summary(*, cores_busy: float, iowait: float, cores: dict, waits: dict, samples: int) -> dict:
    active = sum(waits.values())
    top = [{"wait": k, "share": round(v / active, 3)} for k, v in Counter(waits).most_common(5)] if active else []
    return {"cores_busy": round(cores_busy, 2), "iowait_share": round(iowait, 3),
            "cores_by_process": {k: round(v, 2) for k, v in Counter(cores).most_common()},
            "avg_busy_bench_backends": round(active / samples, 2) if samples else 0.0,
            "top_waits": top, "wait_counts": waits, "samples": samples}


def merge_resources(items: list[dict]) -> dict:
    """Average the CPU figures of several windows and pool their wait samples."""
    items = [i for i in items if i]
    if not items:
        return {}
    n = len(items)
    cores: Counter = Counter()
    waits: Counter = Counter()
    for i in items:
        for k, v in i["cores_by_process"].items():
            cores[k] += v / n
        waits.update(i.get("wait_counts", {}))
    return _resource_summary(cores_busy=sum(i["cores_busy"] for i in items) / n,
                             iowait=sum(i["iowait_share"] for i in items) / n, cores=dict(cores),
                             waits=dict(waits), samples=sum(i.get("samples", 0) for i in items))


def cpu_text(res: dict, min_cores: float) -> str:
    """"role cores, ..." of the processes that used at least `min_cores`."""
    return ", ".join(f"{k} {v:.2f}" for k, v in (res.get("cores_by_process") or {}).items() if v >= min_cores)


def waits_text(res: dict, n: int) -> str:
    """The `n` most sampled states of the bench backends, as "state share%, ..."."""
    return ", ".join(f"{w['wait']} {w['share'] * 100:.0f}%" for w in res.get("top_waits", [])[:n])
