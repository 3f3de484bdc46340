"""Fault drills against the running stores: start the real service processes (a management command,
a Celery worker) on the test databases and test Redis, and kill them where the drill says."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connections

ROOT = Path(__file__).resolve().parent.parent


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
        "PYTHONUNBUFFERED": "1",
    })
    env.update(overrides)
    return env


def start(args: list[str], **env: str) -> subprocess.Popen:
    """`python <args>` in the checkout, in its own process group (so a kill takes its children too)."""
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=service_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> str:
    """Kill the process group (SIGKILL by default: no handler runs, nothing is cleaned up) and return
    what it printed."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=30)
    return out or ""


def wait_for(condition: Callable[[], object], *, timeout_s: float = 60.0, what: str = "the condition") -> object:
    """Poll until `condition()` is truthy; the timeout only bounds a broken drill, it measures nothing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)  # the poll interval of a bounded wait on an observable condition, not a fixed wait
    raise AssertionError(f"gave up waiting for {what}")
