"""Where a drill runs: how the workers die and come back, and how the cache Redis goes down. The
drills themselves are the same everywhere; only these process-level actions differ. The deployment
stage is the default (the command's); the test suite passes one that owns its own processes."""

from __future__ import annotations

import time
from typing import Protocol

from opsconsole.drills.faults import CachePause, DrillRefused, celery_worker_pids, pids_kill


class CacheOutage(Protocol):
    def check(self) -> None: ...
    def begin(self) -> str: ...
    def down(self) -> bool: ...
    def end(self) -> str: ...


class Stage(Protocol):
    label: str

    def workers_check(self) -> None: ...
    def workers_kill(self) -> str: ...
    def workers_restart(self, *, timeout_s: float) -> str | None: ...
    def beat_stop(self) -> str: ...
    def beat_start(self) -> str: ...
    def cache_outage(self, *, seconds: float) -> CacheOutage: ...


class DeploymentStage:
    """A deployment: the local Celery workers are SIGKILLed and their process supervisor (systemd,
    the Procfile runner, Kubernetes) is expected to start new ones; the cache outage is a CLIENT PAUSE
    followed by FLUSHDB (faults.CachePause)."""

    label = "deployment"

    def __init__(self) -> None:
        self._killed: list[int] = []

    def workers_check(self) -> None:
        if not celery_worker_pids():
            raise DrillRefused("worker-kill found no Celery worker process on this host; run it where the "
                               "workers run (it kills them with SIGKILL and waits for their supervisor to "
                               "restart them)")

    def workers_kill(self) -> str:
        self._killed = pids_kill(celery_worker_pids())
        return (f"SIGKILL to {len(self._killed)} local Celery worker processes (pids "
                f"{', '.join(map(str, self._killed))}); the process supervisor is expected to restart them")

    def workers_restart(self, *, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            fresh = [p for p in celery_worker_pids() if p not in self._killed]
            if fresh:
                return f"the supervisor started {len(fresh)} new worker processes (pids {', '.join(map(str, fresh))})"
            time.sleep(0.5)  # waiting for another program (the supervisor) to act: nothing to subscribe to
        return None

    def beat_stop(self) -> str:
        raise DrillRefused("beat is the deployment's one scheduler, started by its supervisor: stop it there (the "
                           "soak signals only processes it or the test topology started)")

    def beat_start(self) -> str:
        raise DrillRefused("beat is started by the deployment's supervisor")

    def cache_outage(self, *, seconds: float) -> CacheOutage:
        return CachePause(seconds)
