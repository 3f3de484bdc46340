"""The spawned processes of the reconciliation benchmark (one Django each, one role job at a time) and who
plays what: the command clients, one publisher per relation shard, the projectors, the display snapshot
loop (bench/projection/roles.py's loops) and one checker. Two stop events: `stop` ends the pipeline's loops,
`cmd_stop` the command load (so the load can end before the pipeline drains)."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback

from bench.procs import IDLE_EXIT_S, ClientPool, client_setup
from bench.projection import roles as pipeline_roles
from bench.projection.pool import RolePool, partition_shares
from bench.reconcile import MAX_LOOP_ITERATIONS, log
from bench.reconcile import roles as own_roles

READY_TIMEOUT_S = 240.0


def proc_main(index: int, stop, cmd_stop, parent_pid: int, tasks, results) -> None:
    """Entry point of one spawned process: django.setup() once, then run jobs until told to stop (or the
    driver is gone)."""
    client_setup()
    results.put((index, "ready", os.getpid()))
    roles = {**pipeline_roles.ROLES, **own_roles.ROLES}
    idle_since = time.time()
    for _ in range(MAX_LOOP_ITERATIONS):
        if not pipeline_roles.driver_alive(parent_pid) or time.time() - idle_since > IDLE_EXIT_S:
            break
        try:
            job = tasks.get(timeout=1.0)
        except queue.Empty:
            continue
        if job is None:
            break
        try:
            res = roles[job["role"]](job, cmd_stop if job["role"] == "commands" else stop, parent_pid)
        except Exception as exc:
            res = {"fatal": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        results.put((index, job["tag"], res))
        idle_since = time.time()
    pipeline_roles.reset_connections()


class Pool(RolePool):
    """RolePool's submit/collect with this benchmark's entry point and a second stop event."""

    def __init__(self, size: int):
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.cmd_stop = ctx.Event()
        self._stash = {}
        ClientPool.__init__(self, size, proc_main, args=(self.stop, self.cmd_stop, os.getpid()), name="bench-reconcile",
                            what="worker", log=log, ready_timeout=READY_TIMEOUT_S)

    def close(self, grace: float = 15.0) -> None:
        self.cmd_stop.set()
        super().close(grace)


class Layout:
    def __init__(self, *, procs: int, projectors: int, shards: list[str]):
        n = 0

        def take(k: int) -> list[int]:
            nonlocal n
            out = list(range(n, n + k))
            n += k
            return out

        self.commands = take(procs)
        self.publishers = dict(zip(shards, take(len(shards)), strict=True))
        self.projectors = take(projectors)
        self.snapshot = take(1)[0]
        self.checker = take(1)[0]
        self.size = n
        self.shares = partition_shares(projectors)

    @property
    def loops(self) -> list[int]:
        return [*self.publishers.values(), *self.projectors[:len(self.shares)], self.snapshot]

    def labels(self, pool: Pool) -> dict[int, str]:
        out = {pool.pid(i): "command clients" for i in self.commands}
        out.update({pool.pid(i): "publishers" for i in self.publishers.values()})
        out.update({pool.pid(i): "projectors" for i in self.projectors})
        out[pool.pid(self.snapshot)] = "snapshot loop"
        out[pool.pid(self.checker)] = "checker"
        return out
