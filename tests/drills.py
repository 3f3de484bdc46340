"""Fault drills against the running stores: start the real service processes (a management command,
a Celery worker, the whole pipeline of worker + beat, a private redis-server) on the test databases
and test Redis, and kill them where the drill says. `SuiteStage` is what the shared drills
(opsconsole.drills) use in the suite to kill/restart the workers and stop/start the cache Redis."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from likes_project.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent


# --- which pass runs a drill (D141) -----------------------------------------------------------------
# Every drill is a `topology` test, and most run on both passes. Two kinds run on one pass only:
# - a drill on redis-servers of its own (the event log's flush, the cache's outage): those servers replace the
#   Cluster on `scaled` too, so `scaled` would repeat `single`;
# - a drill whose fault is a process, not a store (the workers killed mid-batch or mid-ledger, a rebalance
#   inside a snapshot's cut, the soak that runs every fault at once): what it proves is the ledger's, the
#   checkpoints' and the fences' handling of a dead process, and it runs on `scaled`, the topology a
#   deployment has (two PostgreSQL servers, the Cluster), not again on `single`.
def _on_cluster() -> bool:
    from likes_project.redis_client import is_cluster_url

    return is_cluster_url(settings.REDIS_URL)


def single_pass_only():
    return pytest.mark.skipif(_on_cluster(), reason="runs on redis-servers of its own: the single pass proves it")


def scaled_pass_only(reason: str = "a process fault, run on the deployment's topology: the scaled pass "
                                   "(LIKES_TOPOLOGY=scaled) runs it"):
    return pytest.mark.skipif(not _on_cluster(), reason=reason)


def _url(alias: str) -> str:
    cfg = connections[alias].settings_dict
    auth = cfg["USER"] + (f":{cfg['PASSWORD']}" if cfg.get("PASSWORD") else "")
    return f"postgres://{auth}@{cfg['HOST'] or '127.0.0.1'}:{cfg['PORT'] or 5432}/{cfg['NAME']}"


def service_env(**overrides: str) -> dict[str, str]:
    """The environment of a service process that uses this test run's databases and Redis."""
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "likes_project.settings.test",
        "DATABASE_URL": _url("default"),
        "RELATION_SHARD_URLS": ",".join(_url(a) for a in settings.RELATION_SHARD_ALIASES),
        "COUNT_PARTITION_URLS": ",".join(_url(a) for a in settings.COUNT_PARTITION_ALIASES),
        "REDIS_URL": settings.REDIS_URL,
        # Passed explicitly: a drill may give the event log / broker a Redis of its own.
        "REDIS_STREAMS_URL": settings.REDIS_STREAMS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "PYTHONUNBUFFERED": "1",
    })
    env.update(overrides)
    return env


def start(args: list[str], *, log=None, **env: str) -> subprocess.Popen:
    """`python <args>` in the checkout, in its own process group (so a kill takes its children too).
    Its output is piped (read by `kill`), or written to the file `log` for a long-running process that
    logs much: nobody reads a pipe meanwhile, and a full one blocks the process's next write."""
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=service_env(**env),
                            stdout=subprocess.PIPE if log is None else log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> str:
    """Kill the process group (SIGKILL by default: no handler runs, nothing is cleaned up) and return
    what it printed."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=30)
    return out or ""


def wait_for(condition: Callable[[], object], *, timeout_s: float = 60.0, what: str = "the condition") -> object:
    """Poll until `condition()` is truthy; the timeout only bounds a broken drill, it measures nothing."""
    value = wait_until(condition, timeout_s=timeout_s, poll_s=0.05)
    if not value:
        raise AssertionError(f"gave up waiting for {what}")
    return value


# --- the whole pipeline (worker on every Procfile queue + beat) ----------------------------------------


def procfile_queues() -> str:
    """The `-Q` list of the Procfile's worker line (the suite's worker consumes what production's does)."""
    line = next(x for x in (ROOT / "Procfile").read_text().splitlines() if x.startswith("worker:"))
    return re.search(r"-Q\s+(\S+)", line).group(1)


class Pipeline:
    """A real Celery worker on all the Procfile's queues and a real beat, with nudges on, on this test
    run's databases and Redis (as the settings say when `start` runs)."""

    def __init__(self, **env: str) -> None:
        self.env = {"LIKES_TEST_NUDGES": "1", **env}
        self.worker: subprocess.Popen | None = None
        self.beat: subprocess.Popen | None = None
        self._dir = tempfile.mkdtemp(prefix="likes-test-pipeline-")
        self.log_path = os.path.join(self._dir, "output.log")  # worker and beat, every incarnation
        self._log = open(self.log_path, "a")  # noqa: SIM115 - open for the processes' lifetime, closed in stop()

    def start_worker(self) -> None:
        self.worker = start(["-m", "celery", "-A", "likes_project", "worker", "-Q", procfile_queues(), "-c", "4",
                             "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
                             "-n", f"drill-{os.getpid()}-{time.monotonic_ns()}@%h"], log=self._log, **self.env)

    def start_beat(self) -> None:
        self.beat = start(["-m", "celery", "-A", "likes_project", "beat", "--loglevel", "WARNING",
                           "--pidfile", "", "-s", os.path.join(self._dir, "schedule")], log=self._log, **self.env)

    def start(self) -> Pipeline:
        self.start_worker()
        self.start_beat()
        return self

    def kill_beat(self) -> None:
        if self.beat is not None:
            kill(self.beat)
            self.beat = None

    def kill_worker(self) -> None:
        if self.worker is not None:
            kill(self.worker)
            self.worker = None

    def stop(self, *, purge: bool = True) -> str:
        """Kill worker and beat, empty the queues of the broker (the test Redis is shared by every test)
        and return what they printed."""
        self.kill_worker()
        self.kill_beat()
        if purge:
            broker_purge()
        self._log.close()
        return Path(self.log_path).read_text(errors="replace")


def broker_purge() -> None:
    """Drop every queued and unacknowledged message of the broker in the settings (killed workers leave
    unacknowledged ones that a later worker would be handed back)."""
    import redis

    from likes_project.nudge import pending_forget_all

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queues = procfile_queues().split(",")
    client.delete(*queues, "unacked", "unacked_index", "unacked_mutex")
    pending_forget_all()  # the purged tasks will never clear their "queued" flags (D89)


# --- a private redis-server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateRedis:
    """A redis-server of this test's own on a free 127.0.0.1 port, with scripts/lib.sh's flags (no
    persistence, so a restart comes back empty). `stop` and `start` stop and start it for real."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="likes-test-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def answers(self) -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def start(self) -> PrivateRedis:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for(self.answers, timeout_s=10, what=f"the private redis-server on {self.port}")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: Redis shuts down (nothing to save)
            self.proc.wait(timeout=10)
        self.proc = None


class SuiteStage:
    """The suite's side of the shared drills: it owns the pipeline's processes and, for the cache
    drill, the private cache redis-server."""

    label = "test suite"

    def __init__(self, pipeline: Pipeline, cache: PrivateRedis | None = None) -> None:
        self.pipeline = pipeline
        self.cache = cache

    def workers_check(self) -> None:
        assert self.pipeline.worker is not None, "the suite's worker is not running"

    def workers_kill(self) -> str:
        pid = self.pipeline.worker.pid
        self.pipeline.kill_worker()
        return f"SIGKILL to the suite's Celery worker (process group {pid}: main process and pool children)"

    def workers_restart(self, *, timeout_s: float) -> str:
        self.pipeline.start_worker()
        return f"the harness started a new worker (pid {self.pipeline.worker.pid})"

    def beat_stop(self) -> str:
        pid = self.pipeline.beat.pid
        self.pipeline.kill_beat()
        return f"SIGKILL to the suite's Celery beat (pid {pid}): no sweeper, lost-tail check or schedule runs"

    def beat_start(self) -> str:
        self.pipeline.start_beat()
        return f"the harness started a new beat (pid {self.pipeline.beat.pid})"

    def cache_outage(self, *, seconds: float) -> SuiteCacheOutage:
        assert self.cache is not None, "the cache drill needs the private cache redis-server"
        return SuiteCacheOutage(self.cache)


class SuiteCacheOutage:
    def __init__(self, server: PrivateRedis) -> None:
        self.server = server

    def check(self) -> None:
        assert self.server.answers(), "the private cache redis-server is not up"

    def begin(self) -> str:
        self.server.stop()
        return f"the cache redis-server on 127.0.0.1:{self.server.port} stopped (SIGTERM)"

    def down(self) -> bool:
        return not self.server.answers()

    def end(self) -> str:
        self.server.start()
        return f"the cache redis-server restarted empty on 127.0.0.1:{self.server.port}"


# --- the web process ----------------------------------------------------------------------------------

GUNICORN = Path(sys.executable).parent / "gunicorn"


class Gunicorn:
    """A real gunicorn started the way the Procfile's web line starts it (`-c python:likes_project.gunicorn_conf`),
    on this run's databases and Redis (`env` adds to the service environment); `stop` kills it and its workers."""

    def __init__(self, tmp_path: Path, workers: int = 2, **env: str) -> None:
        self.port = free_port()
        self.log_path = tmp_path / "gunicorn.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - open for the server's lifetime, closed in stop()
        env = service_env(**env)
        self.proc = subprocess.Popen(
            [str(GUNICORN), "-c", "python:likes_project.gunicorn_conf", "likes_project.wsgi:application",
             "--bind", f"127.0.0.1:{self.port}", "--workers", str(workers), "--timeout", "30"],
            cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, **headers: str) -> str:
        req = urllib.request.Request(self.url(path), headers=headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
            return resp.read().decode()

    def up(self) -> bool:
        assert self.proc.poll() is None, self.log_path.read_text()
        try:
            self.get("/healthz")
        except OSError:
            return False
        return True

    def workers(self) -> set[int]:
        """The pids whose parent is the gunicorn master."""
        found = set()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    found.add(int(entry))
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()


@contextlib.contextmanager
def gunicorn_serving(server: Gunicorn, *, workers: int):
    """`server` once it answers /healthz with all its workers up; stopped on the way out."""
    try:
        wait_for(server.up, timeout_s=60, what="gunicorn to answer /healthz")
        wait_for(lambda: len(server.workers()) == workers, timeout_s=60, what=f"{workers} gunicorn workers")
        yield server
    finally:
        server.stop()
