"""The loops of the reconciliation benchmark's own spawned processes (the pipeline's publishers, projectors
and snapshot loop are bench/projection/roles.py's):

commands  relation_set_state() in a loop (bench/worker.py's CommandMix), until told to stop. Every command is
          recorded: when it completed, its latency, its outcome (ok, 503 write_barrier, or the error's kind)
          and whether it met a write barrier (counted by wrapping the `metrics` the write barrier module
          reports through, in this process only). The last acknowledged state of every relation it touched
          comes back, so the driver can check that nothing acknowledged was lost.
checker   one check at a time, as the operator's job would run it: a reconciliation run through the ops job
          (job_start + job_run_inline, as `manage.py reconcile` does), the naive baseline, the SQL ceiling, or
          an already started ops job (the system executing an approved repair), with what the job said and
          when.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter

from bench.procs import error_kind
from bench.projection.roles import _LogTally, driver_alive, reset_connections
from bench.reconcile import MAX_LOOP_ITERATIONS, OPERATOR


class BarrierMetrics:
    """Stands in for `likes_project.metrics` inside relations.services.write_barrier: counts the barrier's
    waits and refusals of this process, then reports them on as before."""

    def __init__(self, real):
        self.real = real
        self.waits = 0
        self.refusals = 0

    def inc(self, name: str, *args, **kwargs):
        if name == "likes_write_barrier_waits_total":
            self.waits += 1
        elif name == "likes_write_barrier_refusals_total":
            self.refusals += 1
        return self.real.inc(name, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


def _barrier_counter() -> BarrierMetrics:
    from relations.services import write_barrier

    if not isinstance(write_barrier.metrics, BarrierMetrics):
        write_barrier.metrics = BarrierMetrics(write_barrier.metrics)
    return write_barrier.metrics


def role_commands(job: dict, stop, parent_pid: int) -> dict:
    """The command load until `stop` (the driver's command stop event) or the hard deadline."""
    from bench.worker import CommandMix
    from relations.services import commands
    from relations.services.write_barrier import WriteBarrierHeld

    counter = _barrier_counter()
    mix = CommandMix(rng=random.Random(job["seed"]), users=job["users"], videos=job["videos"], mix=job["mix"],
                     key_prefix=job["key_prefix"])
    t_done: list[float] = []
    latency: list[float] = []
    outcome: list[str] = []
    waited: list[bool] = []
    last_ack: dict[tuple[int, str], str] = {}
    while time.time() < job["t_start"] and not stop.is_set():
        time.sleep(0.01)  # the common start (pacing)
    for _ in range(MAX_LOOP_ITERATIONS):
        if stop.is_set() or time.time() >= job["hard_deadline"] or not driver_alive(parent_pid):
            break
        _kind, ui, vid, desired, key = mix.next()
        user_id = mix.users[ui][0]
        waits0 = counter.waits
        t0 = time.perf_counter()
        try:
            res = commands.relation_set_state(user_id=user_id, video_id=vid, desired_state=desired, operation_id=key,
                                              device_id="bench-reconcile")
            mix.observe(ui, vid, res.current.state)
            last_ack[(user_id, vid)] = res.current.state
            result = "ok"
        except WriteBarrierHeld:
            result = "503 write_barrier"
        except Exception as exc:
            result = error_kind(exc)
            reset_connections()
        latency.append(round((time.perf_counter() - t0) * 1000.0, 2))
        t_done.append(round(time.time(), 4))
        outcome.append(result)
        waited.append(counter.waits > waits0)
    return {"t_done": t_done, "latency_ms": latency, "outcome": outcome, "waited": waited,
            "last_ack": [(u, v, s) for (u, v), s in last_ack.items()]}


def _check_run(job: dict) -> dict:
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_run_inline, job_start
    from reconciliation.jobs import job_for_mode
    from reconciliation.models import CheckRun

    t0 = time.time()
    started = job_start(kind=job_for_mode(job["mode"]), actor=Actor(name=OPERATOR, channel="cli"),
                        params={"mode": job["mode"], "scope": job["scope"]})
    done = job_run_inline(started.pk)
    t1 = time.time()
    run = CheckRun.objects.get(pk=done.params["runId"])
    return {"run_id": run.pk, "mode": run.mode, "status": run.status, "checked": run.checked,
            "diffs": run.diffs_found, "diff_ids": list(run.diffs.order_by("id").values_list("id", flat=True)[:50]),
            "diff_layers": dict(Counter(run.diffs.values_list("layer", flat=True))),
            "skipped": len(run.skipped), "skipped_reasons": dict(Counter(s.get("reason", "") for s in run.skipped)),
            "barrier_held_ms": run.barrier_held_ms, "refused_because": run.refused_because,
            "job_status": done.status, "job_error": done.last_error, "t_start": t0, "t_end": t1,
            "elapsed_s": round(t1 - t0, 3),
            "run_s": round((run.finished_at - run.started_at).total_seconds(), 3)
            if run.finished_at and run.started_at else None}


def _ops_job(job: dict) -> dict:
    from likes_project.opsjobs.services import job_run_inline

    said: list[tuple[float, str]] = []
    t0 = time.time()
    done = job_run_inline(job["job_id"], on_say=lambda m: said.append((round(time.time(), 4), m[:300])))
    return {"job_status": done.status, "job_error": done.last_error, "t_start": t0, "t_end": time.time(),
            "said": said}


def role_checker(job: dict, stop, parent_pid: int) -> dict:
    """One check (job["what"]: check, naive, ceiling, opsjob), timed in this process."""
    from bench.reconcile import baselines

    while time.time() < job.get("t_start", 0.0):
        time.sleep(0.01)  # the requested start (pacing)
    what = job["what"]
    # Fresh connections for every check; the previous check's stay open until here, so that the CPU of their
    # backends is still readable when the driver's resource sampler takes its last reading after a check.
    reset_connections()
    t0 = time.time()
    # The cut drives the projector itself (reconciliation.services.cut._wait): its warnings (lag over the
    # target) are counted, as the projector processes count theirs, not printed.
    tally = _LogTally()
    loggers = [logging.getLogger(n) for n in ("counting.services.projection", "likes_project.eventlog.consumer")]
    for lg in loggers:
        lg.addHandler(tally)
        lg.propagate = False
    try:
        if what == "check":
            out = _check_run(job)
        elif what == "naive":
            out = baselines.naive_compare()
        elif what == "ceiling":
            out = baselines.sql_ceiling()
        elif what == "opsjob":
            out = _ops_job(job)
        else:
            raise ValueError(f"unknown check {what!r}")
    finally:
        for lg in loggers:
            lg.removeHandler(tally)
            lg.propagate = True
    out["logged"] = dict(tally.counts)
    out.setdefault("t_start", t0)
    out.setdefault("t_end", time.time())
    return out


ROLES = {"commands": role_commands, "checker": role_checker}
