"""bench/reconcile's spawned processes (the command clients, one publisher per relation shard, the projectors,
the display snapshot loop, one checker), with this benchmark's roles added: the checker process also runs a
migration's ops job (bench/migration/roles.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
import traceback

from bench.procs import IDLE_EXIT_S, ClientPool, client_setup
from bench.projection import roles as pipeline_roles
from bench.reconcile import MAX_LOOP_ITERATIONS
from bench.reconcile import pool as reconcile_pool
from bench.reconcile import roles as reconcile_roles

from . import log


def proc_main(index: int, stop, cmd_stop, parent_pid: int, tasks, results) -> None:
    """Entry point of one spawned process (bench/reconcile/pool.py's, with the migration role)."""
    from bench.migration import roles as own_roles

    client_setup()
    results.put((index, "ready", os.getpid()))
    roles = {**pipeline_roles.ROLES, **reconcile_roles.ROLES, **own_roles.ROLES}
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


class Pool(reconcile_pool.Pool):
    def __init__(self, size: int):  # reconcile's Pool with this module's entry point
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.cmd_stop = ctx.Event()
        self._stash = {}
        ClientPool.__init__(self, size, proc_main, args=(self.stop, self.cmd_stop, os.getpid()),
                            name="bench-migration", what="worker", log=log,
                            ready_timeout=reconcile_pool.READY_TIMEOUT_S)
