"""Processes a benchmark starts: gunicorn on 127.0.0.1, and spawned client processes (one Django each) that
run the driver's jobs, with the pieces their loops share (the common start instant, an error's kind, one
HTTP exchange). Importing this module does not import Django (client processes import it before setup)."""

from __future__ import annotations

import contextlib
import http.client
import multiprocessing as mp
import os
import queue
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

from bench.common import ROOT, bench_log
from bench.sampler import read_cpu_by_pid

GUNICORN = ROOT / ".venv" / "bin" / "gunicorn"
IDLE_EXIT_S = 1800.0  # a client process that hears nothing for this long exits on its own
HTTP_TIMEOUT_S = 10.0


# --- gunicorn ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gunicorn:
    def __init__(self, app: str, workers: int, logdir: Path, *, env: dict | None = None, label: str = ""):
        self.app = app
        self.workers = workers
        self.env = env or {}  # on top of this process's environment (a lever's setting, bench/levers.py)
        self.port = _free_port()
        self.log_path = logdir / f"gunicorn-{app.split(':')[0].replace('.', '-')}{label}.log"
        self.proc: subprocess.Popen | None = None
        self.pidfile: Path | None = None

    def __enter__(self) -> Gunicorn:
        # Started as the Procfile starts the web tier: with its config module (metrics and log hooks).
        cmd = [str(GUNICORN), "-c", "python:likes_project.gunicorn_conf", self.app,
               "--workers", str(self.workers), "--bind", f"127.0.0.1:{self.port}",
               "--timeout", "30", "--graceful-timeout", "5", "--log-level", "warning"]
        self._log = open(self.log_path, "ab")  # closed in __exit__
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **self.env}, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
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
        for pid, (_comm, ppid, _cpu, _started) in read_cpu_by_pid().items():
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
                    bench_log(f"gunicorn {self.app} ready on 127.0.0.1:{self.port} (pid {self.proc.pid})")
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


# --- what the client loops share ------------------------------------------------------------------------


class HttpStatusError(Exception):
    """A client's HTTP answer other than 200 (its class name and status are the error kind)."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}: {body[:200]!r}")
        self.status = status


def http_exchange(conn: http.client.HTTPConnection, method: str, path: str, *, body: str, headers: dict,
                  sizes: Counter | None = None) -> bytes:
    """One request on a keep-alive connection; the response body, or HttpStatusError. On a connection error
    the connection is closed (the next request reconnects). `sizes` counts the bodies' bytes."""
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException):
        conn.close()
        raise
    if sizes is not None:
        sizes["request"] += len(body)
        sizes["response"] += len(data)
        sizes["n"] += 1
    if resp.status != 200:
        raise HttpStatusError(resp.status, data)
    return data


def error_kind(exc: Exception) -> str:
    """How a client counts a failed request: the exception's class, with the HTTP status if there is one."""
    return exc.__class__.__name__ + (f":{exc.status}" if isinstance(exc, HttpStatusError) else "")


def wait_until(t_start: float) -> None:
    """All clients start at the same instant."""
    delay = t_start - time.time()
    if delay > 0:
        time.sleep(min(delay, 30.0))  # the common start (pacing)


def client_setup() -> None:
    """The start of a spawned client process: Ctrl-C is the driver's (it stops us), then django.setup()."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import django

    django.setup()


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

    def __init__(self, size: int, target, *, args: tuple = (), name: str, what: str, log=bench_log,
                 raise_fatal: bool = False, ready_timeout: float = 180.0):
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
        deadline = time.time() + ready_timeout
        while ready < size:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise RuntimeError(f"only {ready}/{size} {what} processes became ready")
            if not all(p.is_alive() for p in self.procs):
                raise RuntimeError(f"a {what} process died while starting")
            with contextlib.suppress(queue.Empty):
                _, tag, _ = self.results.get(timeout=min(remaining, 2.0))
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

    def close(self, grace: float = 15.0) -> None:
        """Tell every process to stop, give them `grace` seconds, then terminate (and kill) the rest."""
        for q in self.tasks:
            with contextlib.suppress(Exception):
                q.put(None)
        deadline = time.time() + grace
        for p in self.procs:
            p.join(timeout=max(0.1, deadline - time.time()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
