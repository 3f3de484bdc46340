"""The one process pool of the benchmarks (spawned processes, one django.setup() each, one job at a time: a role
"module:function", settings overrides, a stop event), and gunicorn. Importing it does not import Django."""

from __future__ import annotations

import contextlib
import http.client
import importlib
import multiprocessing as mp
import os
import queue
import signal
import socket
import subprocess
import time
import traceback
from pathlib import Path

from bench.harness.driver import ROOT, make_log, settings_overridden

IDLE_EXIT_S = 1800.0  # a process exits after this long without a job (or when told, or when the driver is gone)
log = make_log("pool")


class Ctl:
    """What a role's loop asks: may it go on (its stop event unset, the driver alive, before its deadline)?"""

    def __init__(self, stop, parent_pid: int):
        self.stop, self.parent_pid = stop, parent_pid

    def go(self, deadline: float = float("inf")) -> bool:
        return not self.stop.is_set() and os.getppid() == self.parent_pid and time.time() < deadline

    def sleep_until(self, t: float) -> None:
        for _ in range(100_000):
            if time.time() >= t or not self.go():
                return
            time.sleep(min(t - time.time(), 0.5))  # wait for the common start (pacing)


def role(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _serve(index: int, env: dict, stop, cmd_stop, parent_pid: int, tasks, results) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's: it stops us
    os.environ.update(env)
    import django
    django.setup()
    results.put((index, "ready", os.getpid()))
    idle = time.time()
    for _ in range(10_000_000):  # bounded; the driver's None or its exit ends it
        if os.getppid() != parent_pid or time.time() - idle > IDLE_EXIT_S:
            break
        try:
            job = tasks.get(timeout=1.0)
        except queue.Empty:
            continue
        if job is None:
            break
        ctl = Ctl(cmd_stop if job.get("stop") == "commands" else stop, parent_pid)
        try:
            with settings_overridden(job.get("settings")):
                res = role(job["role"])(job, ctl)
        except Exception as exc:
            res = {"fatal": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        results.put((index, job.get("tag", job["role"]), res))
        idle = time.time()
    from django.db import connections
    with contextlib.suppress(Exception):
        connections.close_all()


class Pool:
    def __init__(self, size: int, *, name: str, env: dict | None = None, ready_timeout: float = 240.0):
        ctx = mp.get_context("spawn")
        self.name, self.stop, self.cmd_stop = name, ctx.Event(), ctx.Event()
        self.results, self.tasks, self._stash = ctx.Queue(), [ctx.Queue() for _ in range(size)], {}
        self.procs = [ctx.Process(target=_serve, args=(i, env or {}, self.stop, self.cmd_stop, os.getpid(),
                                                       self.tasks[i], self.results), daemon=True, name=f"{name}-{i}")
                      for i in range(size)]
        for p in self.procs:
            p.start()
        ready, deadline = 0, time.time() + ready_timeout
        while ready < size:
            if time.time() > deadline or not all(p.is_alive() for p in self.procs):
                self.close(1.0)
                raise RuntimeError(f"only {ready}/{size} {name} processes became ready")
            with contextlib.suppress(queue.Empty):
                ready += self.results.get(timeout=2.0)[1] == "ready"
        log(f"{size} {name} processes ready")

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def pid(self, index: int) -> int:
        return self.procs[index].pid

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def labels(self, label: str) -> dict[int, str]:
        return dict.fromkeys(self.pids, label)

    def submit(self, index: int, job: dict) -> None:
        self.tasks[index].put(job)

    def collect(self, indices: list[int], timeout: float) -> dict[int, dict]:
        """The answers of the jobs given to `indices`; raises when one failed, a process died or time ran out."""
        want = set(indices)
        out = {i: self._stash.pop(i) for i in list(want) if i in self._stash}
        deadline = time.time() + timeout
        while len(out) < len(want):
            if time.time() > deadline:
                raise RuntimeError(f"only {len(out)}/{len(want)} {self.name} jobs reported within {timeout:.0f}s")
            dead = [i for i in want - set(out) if not self.procs[i].is_alive()]
            if dead:
                raise RuntimeError(f"{self.name} process(es) {dead} died")
            try:
                index, _tag, res = self.results.get(timeout=1.0)
            except queue.Empty:
                continue
            if index in want and index not in out:
                out[index] = res
            else:
                self._stash[index] = res
        fatal = [(i, r) for i, r in out.items() if isinstance(r, dict) and "fatal" in r]
        if fatal:
            i, r = fatal[0]
            raise RuntimeError(f"{self.name} {i} failed: {r['fatal']}\n{r.get('traceback', '')}")
        return out

    def run(self, jobs: list[dict], timeout: float) -> list[dict]:
        """One job to each of the first len(jobs) processes; their answers in order."""
        for i, job in enumerate(jobs):
            self.submit(i, job)
        out = self.collect(list(range(len(jobs))), timeout)
        return [out[i] for i in range(len(jobs))]

    def stopped(self, indices: list[int], timeout: float = 60.0, *, commands: bool = False) -> dict[int, dict]:
        """Set a stop event (the pipeline's, or the command load's), collect the loops it ends, clear it."""
        event = self.cmd_stop if commands else self.stop
        event.set()
        try:
            return self.collect(indices, timeout)
        finally:
            event.clear()

    def close(self, grace: float = 15.0) -> None:
        self.stop.set()
        self.cmd_stop.set()
        for q in self.tasks:
            with contextlib.suppress(Exception):
                q.put(None)
        deadline = time.time() + grace
        for p in self.procs:
            p.join(timeout=max(0.1, deadline - time.time()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


class Gunicorn:
    """gunicorn (the Procfile's config) on a free port, in a session of its own, its pid in $BENCH_PIDDIR."""

    def __init__(self, app: str, workers: int, logdir: Path, *, env: dict | None = None, label: str = "",
                 server: str = "gunicorn"):
        self.app, self.workers, self.env, self.server = app, workers, env or {}, server
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log_path = logdir / f"gunicorn-{self.port}{label}.log"
        self.proc = self.pidfile = None

    def __enter__(self) -> Gunicorn:
        self._log = open(self.log_path, "ab")  # closed in __exit__
        self.proc = subprocess.Popen(
            self.argv(),
            cwd=ROOT, env={**os.environ, **self.env}, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        if os.environ.get("BENCH_PIDDIR"):
            self.pidfile = Path(os.environ["BENCH_PIDDIR"]) / f"gunicorn.{self.proc.pid}.pid"
            self.pidfile.write_text(str(self.proc.pid))
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def argv(self) -> list[str]:
        if self.server == "granian":
            return [str(ROOT / ".venv" / "bin" / "python"), "-m", "granian", "--interface", "wsgi", "--host",
                    "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers), "--blocking-threads", "1",
                    "--log-level", "warning", "--no-ws", self.app]
        return [str(ROOT / ".venv" / "bin" / "gunicorn"), "-c", "python:likes_project.gunicorn_conf", self.app,
                "--workers", str(self.workers), "--bind", f"127.0.0.1:{self.port}", "--timeout", "30",
                "--graceful-timeout", "5", "--log-level", "warning"]

    def _wait_ready(self) -> None:
        from bench.harness.sampler import read_cpu_by_pid
        deadline, healthy = time.time() + 60, 0
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}; see {self.log_path}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                healthy += conn.getresponse().status == 200
                conn.close()
            except OSError:
                pass
            kids = sum(1 for _c, ppid, _cpu, _s in read_cpu_by_pid().values() if ppid == self.proc.pid)
            if healthy >= self.workers * 2 and kids >= self.workers:
                time.sleep(1.0)  # let the last worker finish importing the app
                log(f"gunicorn {self.app} ready on 127.0.0.1:{self.port}")
                return
            time.sleep(0.2)  # poll the health endpoint (bounded by the deadline)
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
