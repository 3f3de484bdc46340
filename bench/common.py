"""What the benchmark drivers (bench/command_bench.py, bench/projection_bench.py, bench/read_bench.py) share.

Paths, the environment safety checks, the machine spec, resource sampling, percentiles, gunicorn start/stop,
spawned client pools, the job loop of a client process, and writing a generated section of docs/benchmarks.md
between its markers. Importing this module does not import Django (client processes import it before setup).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import platform
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
DOCS_PATH = ROOT / "docs" / "benchmarks.md"
GUNICORN = ROOT / ".venv" / "bin" / "gunicorn"
BENCH_DB_PREFIX = "likes_bench"
IDLE_EXIT_S = 1800.0  # a client process that hears nothing for this long exits on its own


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --- safety and environment ----------------------------------------------------------------------


def check_environment() -> None:
    """Refuse to run anywhere but the bench databases on 127.0.0.1."""
    from django.conf import settings

    for alias, cfg in settings.DATABASES.items():
        if not str(cfg["NAME"]).startswith(BENCH_DB_PREFIX):
            raise SystemExit(f"[bench] refusing: alias {alias} uses database {cfg['NAME']!r}, not {BENCH_DB_PREFIX}*")
        if cfg.get("HOST") not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"[bench] refusing: alias {alias} is on host {cfg.get('HOST')!r}")
    if settings.LIKES_REDIS_PREFIX != "likes-bench":
        raise SystemExit("[bench] refusing: LIKES_REDIS_PREFIX must be likes-bench (use ./bench/run.sh)")
    if settings.RATE_LIMIT_ENABLED:
        raise SystemExit("[bench] refusing: RATE_LIMIT_ENABLED must be false (use ./bench/run.sh)")


def _pg_conninfo(alias: str) -> dict:
    from django.conf import settings

    cfg = settings.DATABASES[alias]
    info = {"dbname": cfg["NAME"], "host": cfg.get("HOST") or "127.0.0.1", "port": cfg.get("PORT") or 5432,
            "user": cfg.get("USER") or None, "password": cfg.get("PASSWORD") or None}
    return {k: v for k, v in info.items() if v is not None}


def machine_spec() -> dict:
    from django.db import connections

    from likes_project.redis_client import cache_redis

    spec: dict = {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                spec["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                spec["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    spec["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    with connections["default"].cursor() as cur:
        cur.execute("SHOW server_version")
        spec["postgresql"] = cur.fetchone()[0]
        for name in ("max_connections", "shared_buffers", "synchronous_commit", "fsync", "wal_sync_method"):
            cur.execute(f"SHOW {name}")
            spec[f"pg_{name}"] = cur.fetchone()[0]
    try:
        spec["redis"] = cache_redis().info("server").get("redis_version")
    except Exception as exc:
        spec["redis"] = f"unknown ({exc.__class__.__name__})"
    import django
    import rest_framework

    spec["django"] = django.get_version()
    spec["drf"] = rest_framework.VERSION
    pgb = shutil.which("pgbench") or "/usr/bin/pgbench"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        spec["pgbench"] = subprocess.run([pgb, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return spec


# --- resource sampling (TEST-3 "resource bottleneck") ---------------------------------------------


def _read_cpu_by_pid() -> dict[int, tuple[str, int, float, int]]:
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
            conn = psycopg.connect(**_pg_conninfo("default"), autocommit=True, connect_timeout=5)
        except Exception as exc:
            _log(f"resource sampler: no database connection ({exc.__class__.__name__})")
            conn = None
        try:
            while not self._stop.is_set() and time.time() < t_measure:
                time.sleep(0.02)  # the sampler's tick; this is a measurement pacer, not a test wait
            self.cpu0 = (time.time(), _read_proc_stat(), _read_cpu_by_pid())
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
            self.cpu1 = (time.time(), _read_proc_stat(), _read_cpu_by_pid())
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




# --- percentiles ----------------------------------------------------------------------------------------


def percentile(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)

# --- gunicorn ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gunicorn:
    def __init__(self, app: str, workers: int, logdir: Path):
        self.app = app
        self.workers = workers
        self.port = _free_port()
        self.log_path = logdir / f"gunicorn-{app.split(':')[0].replace('.', '-')}.log"
        self.proc: subprocess.Popen | None = None
        self.pidfile: Path | None = None

    def __enter__(self) -> Gunicorn:
        cmd = [str(GUNICORN), self.app, "--workers", str(self.workers), "--bind", f"127.0.0.1:{self.port}",
               "--timeout", "30", "--graceful-timeout", "5", "--log-level", "warning"]
        self._log = open(self.log_path, "ab")  # closed in __exit__
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=os.environ.copy(), stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        piddir = os.environ.get("BENCH_PIDDIR")
        self.pidfile = Path(piddir) / f"gunicorn.{self.proc.pid}.pid" if piddir else None
        if self.pidfile:
            self.pidfile.write_text(str(self.proc.pid))
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _children(self) -> list[int]:
        kids = []
        for pid, (_comm, ppid, _cpu, _started) in _read_cpu_by_pid().items():
            if ppid == self.proc.pid:
                kids.append(pid)
        return kids

    def _wait_ready(self) -> None:
        import http.client

        deadline = time.time() + 60
        healthy = 0
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}; see {self.log_path}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                status = conn.getresponse().status
                conn.close()
            except OSError:
                status = None
            if status == 200:
                healthy += 1
                if healthy >= self.workers * 2 and len(self._children()) >= self.workers:
                    time.sleep(1.0)  # let the last worker finish importing the app
                    _log(f"gunicorn {self.app} ready on 127.0.0.1:{self.port} (pid {self.proc.pid})")
                    return
            time.sleep(0.2)  # poll gunicorn's health endpoint (bounded by its deadline)
        raise RuntimeError(f"gunicorn did not become ready within 60s; see {self.log_path}")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: only gunicorn and its workers
                self.proc.wait(timeout=5)
        if self.pidfile:
            with contextlib.suppress(OSError):
                self.pidfile.unlink()
        with contextlib.suppress(Exception):
            self._log.close()


# --- other clients of the bench databases ---------------------------------------------------------


def other_connections(conn, *, app_name: str | None = None) -> int:
    """Client connections to the likes_bench* databases other than `conn`'s own (and, with `app_name`, other
    than those whose application_name is `app_name`)."""
    sql = ("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE %s AND pid <> pg_backend_pid() "
           "AND backend_type = 'client backend'")
    params: list = [BENCH_DB_PREFIX + "%"]
    if app_name is not None:
        sql += " AND application_name IS DISTINCT FROM %s"
        params.append(app_name)
    return conn.execute(sql, params).fetchone()[0]


def wait_for_quiet(max_wait: float, count, *, tag: str, log, ndigits: int | None = None) -> float:
    """Wait until `count()` (other clients of the likes_bench* databases) is 0, or refuse. Returns the seconds
    waited, rounded to `ndigits`."""
    t0 = time.time()
    for _ in range(10_000):  # bounded; the deadline ends it first
        n = count()
        if n == 0:
            return round(time.time() - t0, ndigits)
        if time.time() - t0 >= max_wait:
            raise SystemExit(f"[{tag}] refusing: {n} other connections to the {BENCH_DB_PREFIX}* databases "
                             f"after {max_wait:.0f}s (another benchmark running?)")
        log(f"{n} other connections to the bench databases; waiting (up to {max_wait:.0f}s)")
        time.sleep(5)  # poll for other benchmarks to leave (bounded by max_wait)
    return round(time.time() - t0, ndigits)


class HttpStatusError(Exception):
    """A client's HTTP answer other than 200 (its class name and status are the error kind)."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}: {body[:200]!r}")
        self.status = status


# --- spawned client processes -----------------------------------------------------------------------


def serve_jobs(index: int, tasks, results, handle, tag) -> None:
    """The job loop of a spawned client process (after django.setup()): report ready, then run `handle(job)`
    for each job until told to stop (None) or idle for IDLE_EXIT_S, and answer (index, tag(job), result)."""
    results.put((index, "ready", None))
    while True:
        try:
            job = tasks.get(timeout=IDLE_EXIT_S)
        except queue.Empty:
            break
        if job is None:
            break
        try:
            res = handle(job)
        except Exception as exc:
            res = {"fatal": f"{exc.__class__.__name__}: {exc}"}
        results.put((index, tag(job), res))
    from django.db import connections

    connections.close_all()



class ClientPool:
    """Spawned client processes running `target(index, *args, tasks, results)`, one job each per run()."""

    def __init__(self, size: int, target, *, args: tuple = (), name: str, what: str, log=_log,
                 raise_fatal: bool = False):
        ctx = mp.get_context("spawn")
        self.what = what
        self.raise_fatal = raise_fatal
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(size)]
        self.procs = [ctx.Process(target=target, args=(i, *args, self.tasks[i], self.results), daemon=True,
                                  name=f"{name}-{i}") for i in range(size)]
        for p in self.procs:
            p.start()
        ready = 0
        deadline = time.time() + 180
        while ready < size:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise RuntimeError(f"only {ready}/{size} {what} processes became ready")
            with contextlib.suppress(queue.Empty):
                _, tag, _ = self.results.get(timeout=remaining)
                ready += tag == "ready"
        log(f"{size} {what} processes ready")

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.procs if p.pid}

    def run(self, jobs: list[dict], timeout: float) -> list[dict]:
        for i, job in enumerate(jobs):
            self.tasks[i].put(job)
        out: dict[int, dict] = {}
        deadline = time.time() + timeout
        while len(out) < len(jobs):
            remaining = deadline - time.time()
            if remaining <= 0:
                raise RuntimeError(f"only {len(out)}/{len(jobs)} clients reported within {timeout:.0f}s")
            if not all(p.is_alive() for p in self.procs[:len(jobs)]):
                raise RuntimeError("a client process died")
            with contextlib.suppress(queue.Empty):
                index, _tag, res = self.results.get(timeout=min(remaining, 2.0))
                out[index] = res
        if self.raise_fatal:
            fatal = [r["fatal"] for r in out.values() if "fatal" in r]
            if fatal:
                raise RuntimeError(f"{self.what} failed: {fatal[0]}")
        return [out[i] for i in range(len(jobs))]

    def close(self) -> None:
        for q in self.tasks:
            with contextlib.suppress(Exception):
                q.put(None)
        deadline = time.time() + 15
        for p in self.procs:
            p.join(timeout=max(0.1, deadline - time.time()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


# --- the driver's frame ------------------------------------------------------------------------------


def on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def parse_mix(parser, text: str) -> dict[str, float]:
    """--mix "like=55,unlike=30,..." as {kind: percent}; parser.error() on an unknown kind or no shares."""
    mix = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in ("like", "unlike", "noop", "replay"):
            parser.error(f"--mix: unknown kind {name!r}")
        mix[name.strip()] = float(value)
    if sum(mix.values()) <= 0:
        parser.error("--mix: shares must add up to more than 0")
    return mix


def start_driver() -> float:
    """A driver's start: SIGTERM raises SystemExit (so finally-blocks stop what it started), django.setup(),
    the environment safety checks. Returns the wall-clock start (time.time())."""
    signal.signal(signal.SIGTERM, on_sigterm)
    wall0 = time.time()
    import django

    django.setup()
    check_environment()
    return wall0


def print_blocks(*blocks: str) -> None:
    """The report on stdout: each block after a blank line, and a blank line at the end."""
    print()
    for block in blocks:
        print(block)
        print()


def log_machine(spec: dict, log) -> None:
    log(f"machine: {spec.get('nproc')} CPUs, {spec.get('memory_gib')} GiB, PostgreSQL {spec.get('postgresql')}, "
        f"Redis {spec.get('redis')}, load {spec.get('loadavg_at_start')}")


def run_times(wall0: float) -> dict:
    """The start, end and wall clock of a run that started at time.time() == wall0 (the meta's first keys)."""
    return {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall0)),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
        "wall_seconds": round(time.time() - wall0, 1),
    }


def write_generated(section: str, begin: str, end: str, *, heading: str, empty: str = "# Benchmarks\n") -> None:
    """Put `section` (which starts with `begin` and ends with `end`) in docs/benchmarks.md in place of the text
    between those markers; without them, append `heading` and the section (to `empty` when there is no file)."""
    text = DOCS_PATH.read_text() if DOCS_PATH.exists() else empty
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        DOCS_PATH.write_text(head + section + tail)
        return
    DOCS_PATH.parent.mkdir(parents=True, exist_ok=True)
    DOCS_PATH.write_text(text.rstrip() + f"\n\n{heading}\n\n" + section + "\n")
