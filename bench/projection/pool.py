"""The spawned processes of the count-pipeline benchmark (one Django each, given one role job at a time, one
shared stop event) and the layout that says which process plays which role."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback

from bench.common import settings_overridden
from bench.procs import IDLE_EXIT_S, ClientPool, client_setup
from bench.projection import MAX_LOOP_ITERATIONS, log
from bench.projection.roles import ROLES, driver_alive, reset_connections

READY_TIMEOUT_S = 240.0


def proc_main(index: int, stop, parent_pid: int, tasks, results) -> None:
    """Entry point of one spawned worker process: django.setup() once, then run jobs until told to stop
    (or the driver is gone)."""
    client_setup()
    results.put((index, "ready", os.getpid()))
    idle_since = time.time()
    for _ in range(MAX_LOOP_ITERATIONS):
        if not driver_alive(parent_pid) or time.time() - idle_since > IDLE_EXIT_S:
            break
        try:
            job = tasks.get(timeout=1.0)
        except queue.Empty:
            continue
        if job is None:
            break
        try:
            with settings_overridden(job.get("settings")):  # e.g. the nudges of a Celery phase
                res = ROLES[job["role"]](job, stop, parent_pid)
        except Exception as exc:
            res = {"fatal": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        results.put((index, job["tag"], res))
        idle_since = time.time()
    reset_connections()


class RolePool(ClientPool):
    """Spawned worker processes running proc_main, each given one job at a time (submit/collect); one shared
    stop event ends the looping roles."""

    def __init__(self, size: int):
        self.stop = mp.get_context("spawn").Event()
        self._stash: dict[int, dict] = {}
        super().__init__(size, proc_main, args=(self.stop, os.getpid()), name="bench-pipeline", what="worker",
                         log=log, ready_timeout=READY_TIMEOUT_S)

    def pid(self, index: int) -> int:
        return self.procs[index].pid

    def submit(self, index: int, job: dict) -> None:
        self.tasks[index].put(job)

    def collect(self, indices: list[int], timeout: float) -> dict[int, dict]:
        want = set(indices)
        out = {i: self._stash.pop(i) for i in list(want) if i in self._stash}
        deadline = time.time() + timeout
        while len(out) < len(want):
            remaining = deadline - time.time()
            if remaining <= 0:
                raise RuntimeError(f"only {len(out)}/{len(want)} jobs reported within {timeout:.0f}s")
            dead = [i for i in want - set(out) if not self.procs[i].is_alive()]
            if dead:
                raise RuntimeError(f"worker process(es) {dead} died")
            try:
                index, _tag, res = self.results.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if index in want and index not in out:
                out[index] = res
            else:
                self._stash[index] = res
        fatal = [(i, r) for i, r in out.items() if isinstance(r, dict) and "fatal" in r]
        if fatal:
            i, r = fatal[0]
            raise RuntimeError(f"worker {i} failed: {r['fatal']}\n{r.get('traceback', '')}")
        return out

    def close(self, grace: float = 15.0) -> None:
        self.stop.set()
        super().close(grace)


class Layout:
    """Which pool process plays which role."""

    def __init__(self, args, shards: list[str]):
        n = 0

        def take(k: int) -> list[int]:
            nonlocal n
            out = list(range(n, n + k))
            n += k
            return out

        self.commands = take(args.procs)
        self.publishers = dict(zip(shards, take(len(shards)), strict=True))
        self.projectors = take(args.projectors)
        self.snapshot = take(1)[0]
        self.probe = take(1)[0]
        # The backlog replays run while everything else is idle, on any processes: projectors first.
        extra = take(max(0, max(args.replay_procs_list, default=0) - n))
        self.replay_order = [*self.projectors, *self.commands, *self.publishers.values(), self.snapshot,
                             self.probe, *extra]
        self.size = n

    def labels(self, pool: RolePool) -> dict[int, str]:
        out = {pool.pid(i): "command clients" for i in self.commands}
        out.update({pool.pid(i): "publishers" for i in self.publishers.values()})
        out.update({pool.pid(i): "projectors" for i in self.projectors})
        out[pool.pid(self.snapshot)] = "snapshot loop"
        out[pool.pid(self.probe)] = "probe"
        return out


def partition_shares(n_procs: int) -> list[list[int]]:
    from likes_project.eventlog import streams

    parts = streams.all_partitions()
    return [parts[i::n_procs] for i in range(n_procs) if parts[i::n_procs]]
