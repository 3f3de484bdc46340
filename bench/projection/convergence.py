"""Commit -> displayCount under load (issue 15 §2; TEST-3; D89): `bench/run.sh convergence`, through the bench's
loops and the real Celery worker and beat (docs/benchmarks.md, "Convergence")."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import driver
from bench.harness.driver import ROOT
from bench.harness.phases import Layout
from bench.harness.pool import Pool
from bench.harness.report import fmt, md_table, pair, resources_table
from bench.harness.sampler import ResourceSampler
from bench.projection.pipeline import OPTIONS as PIPELINE_OPTIONS
from bench.projection.pipeline import exactness, prepare_pipeline, reset_workload, run_sustained

NAME = "convergence"
OPTIONS = {"paths": ("none,loops,celery", "pipeline paths: none (the commands alone, P8's denominator), loops, "
                                          "celery"),
           **{k: v for k, v in PIPELINE_OPTIONS.items() if k not in ("workloads", "replay_rounds", "replay_procs")},
           "duration": (20.0, "measured seconds per phase", 0.1, 120),
           "load_share": (0.8, "the target load as a share of the highest sustained load", 0.01, 1),
           "rate": (0.0, "commands/s of a fixed load: each pipeline path runs one phase at it, no closed-loop phase "
                         "(an A/B of the pipeline's cost at one load; 0: the closed loop, then its share)", 0, 5000)}
NUDGES_ON = {"LIKES_NUDGE_ENABLED": True}
_SUCCEEDED = re.compile(r"Task ([\w.]+)\[[^\]]+\] succeeded in ([0-9.]+)s")


def procfile_lines() -> dict[str, str]:
    return {name.strip(): cmd.strip() for name, sep, cmd in
            (line.partition(":") for line in (ROOT / "Procfile").read_text().splitlines())
            if sep and name.strip() in ("worker", "beat")}


def broker_purge() -> None:
    """Drop the Celery queues of the bench broker, so a phase starts with none of the last one's tasks."""
    from likes_project.nudge import pending_forget_all
    from likes_project.redis_client import stream_redis
    queues = {q.strip() for q in procfile_lines()["worker"].split("-Q", 1)[1].split()[0].split(",")}
    with contextlib.suppress(Exception):
        stream_redis().delete(*queues, "unacked", "unacked_index", "unacked_mutex")
        pending_forget_all()  # the purged tasks will never clear their "queued" flags (D89)


def task_cpu(prom_dir: Path) -> dict[str, tuple[float, float]]:
    """Per task name, from the worker's own metric files: (CPU seconds, runs) (`likes_task_cpu_seconds_total`)."""
    from likes_project.metrics import counter_samples

    out: dict[str, tuple[float, float]] = {}
    if not prom_dir.is_dir():
        return out
    for name, labels, value in counter_samples(("likes_task_cpu_seconds_total", "likes_task_runs_total"),
                                               path=str(prom_dir)):
        cpu, runs = out.get(labels["task"], (0.0, 0.0))
        out[labels["task"]] = (cpu + value, runs) if name.startswith("likes_task_cpu") else (cpu, runs + value)
    return out


def worker_tasks(log_path: Path, seconds: float, prom_dir: Path | None = None) -> list[dict]:
    """Per task the Celery worker ran ("Task NAME[id] succeeded in Ns"): runs/s, mean ms, worker-seconds a second,
    and from the worker's metric files its CPU per run and cores."""
    runs: dict[str, list[float]] = {}
    if log_path.exists():
        for m in _SUCCEEDED.finditer(log_path.read_text(errors="replace")):
            runs.setdefault(m.group(1), []).append(float(m.group(2)))
    cpu = task_cpu(prom_dir) if prom_dir else {}
    out = [{"task": k, "per_s": round(len(v) / seconds, 1), "mean_ms": round(sum(v) / len(v) * 1000, 1),
            "busy_s_per_s": round(sum(v) / seconds, 2),
            "cpu_ms": round(cpu[k][0] / cpu[k][1] * 1000, 1) if cpu.get(k, (0, 0))[1] else None,
            "cpu_cores": round(cpu[k][0] / seconds, 3) if k in cpu else None} for k, v in runs.items()]
    return sorted(out, key=lambda r: -(r["cpu_cores"] or r["busy_s_per_s"]))


@contextlib.contextmanager
def celery_running(workdir: Path):
    """The Procfile's `worker` and `beat` as a Procfile runner starts them, nudges on, in the driver's session."""
    prom_dir = workdir / "prometheus"  # the worker's own metric files: its CPU per task (task_cpu)
    shutil.rmtree(prom_dir, ignore_errors=True)
    prom_dir.mkdir(parents=True)
    env = {**os.environ, "LIKES_NUDGE_ENABLED": "true", "PYTHONUNBUFFERED": "1",
           "PROMETHEUS_MULTIPROC_DIR": str(prom_dir)}
    procs: list[subprocess.Popen] = []
    broker_purge()
    try:
        for name, cmd in procfile_lines().items():
            logf = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - the process's output while it runs
            procs.append(subprocess.Popen(["/bin/sh", "-c", f"exec {cmd}"], cwd=ROOT, env=env, stdout=logf,
                                          stderr=subprocess.STDOUT))
        time.sleep(6.0)  # worker boot (prefork pool, broker connection) and beat's first tick
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a celery process exited at start (logs in {workdir})")
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=20)
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        broker_purge()


def run_phase(pool, layout, sampler, args, ctx: dict, *, path: str, phase: str, rate: float | None,
              workdir: Path) -> dict:
    reset_workload()
    (workdir / "worker.log").unlink(missing_ok=True)
    t0 = time.time()
    with celery_running(workdir) if path == "celery" else contextlib.nullcontext():
        row = run_sustained(pool, layout, sampler, args, workload="uniform", users=ctx["users"], videos=ctx["videos"],
                            probe_user=ctx["probe_user"], probe_videos=ctx["probe_videos"], pipeline=path,
                            rate_per_s=rate, job_settings=NUDGES_ON if path == "celery" else None)
    if path == "celery":  # the whole phase: warm-up, window and drain
        row["worker_tasks"] = worker_tasks(workdir / "worker.log", time.time() - t0, workdir / "prometheus")
    row.update(path=path, phase=phase, exactness=exactness() if path != "none" else None)
    row["exact"] = row["exactness"]["exact"] if path != "none" else None
    # The load the pipeline held: commands/s scaled down by the share of the produced events it applied.
    produced, applied = row["events_produced_per_s"], row["events_applied_per_s"]
    row["sustained_commands_per_s"] = round(row["commands_per_s"] * (min(1.0, applied / produced) if produced
                                                                     and path != "none" else 1.0), 1)
    driver.make_log(NAME)(f"{path} {phase}: {row['commands_per_s']} cmd/s (target {rate and round(rate, 1)}), "
                          f"displayCount p50/p99 {pair(row['display_p50_ms'], row['display_p99_ms'], 0)} ms, "
                          f"{row['display_timeouts']} timeouts, {_exact_word(row)}")
    return row


def _exact_word(row: dict) -> str:
    return "-" if row["path"] == "none" else "EXACT" if row["exact"] else "MISMATCH"


def p8(rows: list[dict]) -> tuple[float, float, float] | None:
    """Issue 34's P8: commands/s the Celery pipeline keeps up with ÷ commands/s with no pipeline, this run."""
    top = {r["path"]: r for r in rows if r["phase"] == "max"}
    if "celery" not in top or "none" not in top or not top["none"]["commands_per_s"]:
        return None
    with_it, without = top["celery"]["sustained_commands_per_s"], top["none"]["commands_per_s"]
    return with_it, without, round(with_it / without, 2)


def report(result: dict) -> list[str]:
    rows = result["rows"]
    table = md_table(
        ["path", "phase", "target cmd/s:", "commands/s:", "events produced/s:", "events applied/s:",
         "publish lag p50 / p99 ms:", "projection lag p50 / p99 ms:",
         "commit→displayCount p50 / p99 ms (probes, timeouts):", "same without L1 p50 / p99 ms:", "drain s:", "exact"],
        [[r["path"], r["phase"], fmt(r["rate_per_s"]) if r["rate_per_s"] else
          f"closed loop (sustained {fmt(r['sustained_commands_per_s'])})", fmt(r["commands_per_s"]),
          fmt(r["events_produced_per_s"]), fmt(r["events_applied_per_s"]),
          pair(r["publish_lag_p50_ms"], r["publish_lag_p99_ms"], 0), pair(r["lag_p50_ms"], r["lag_p99_ms"], 0),
          f"**{pair(r['display_p50_ms'], r['display_p99_ms'], 0)}** ({r['display_samples']}, {r['display_timeouts']})",
          pair(r["view_p50_ms"], r["view_p99_ms"], 0), r["drain_s"], _exact_word(r)]
         for r in rows])
    goals = [f"- {r['path']}: p99 {fmt(r['display_p99_ms'], 0)} ms at {fmt(r['commands_per_s'])} commands/s — "
             f"{'MET' if met(r) else 'NOT MET'}" for r in rows if r["phase"] == "target"]
    tasks = md_table(["phase", "task", "runs/s:", "mean ms:", "worker-seconds a second:", "CPU ms a run:",
                      "CPU cores:"],
                     [[f"{r['path']} {r['phase']}", t["task"], fmt(t["per_s"]), fmt(t["mean_ms"]),
                       fmt(t["busy_s_per_s"], 2), fmt(t.get("cpu_ms")), fmt(t.get("cpu_cores"), 3)]
                      for r in rows for t in r.get("worker_tasks", [])[:10]])
    ratio = p8(rows)
    p8_line = (f"**P8 (issue 34):** the Celery pipeline keeps up with {fmt(ratio[0])} commands/s; the same commands "
               f"with no pipeline run at {fmt(ratio[1])}: **{fmt(ratio[2], 2)}** (goal ≥ 0.60)." if ratio else "")
    meta = result["meta"]
    layout = (f"**The event log** has {meta['stream_partitions']} stream partition"
              f"{'' if meta['stream_partitions'] == 1 else 's'} (`STREAM_PARTITIONS` when the bench databases were "
              f"bootstrapped); the worker's pool {meta['pool_processes']} processes."
              if "stream_partitions" in meta else "")
    return [table, layout, "**Goal: commit → displayCount p99 ≤ 2,000 ms at the target load**\n\n"
            + "\n".join(goals), p8_line,
            resources_table((f"{r['path']} {r['phase']}", r.get("resources")) for r in rows),
            f"**What the Celery worker ran** (`{result['meta']['procfile'].get('worker')}`, over the whole phase):\n\n"
            + tasks if any(r.get("worker_tasks") for r in rows) else ""]


def met(r: dict) -> bool:
    return r["display_p99_ms"] is not None and r["display_p99_ms"] <= 2000 and not r["display_timeouts"]


def headline(result: dict) -> dict:
    targets = [r for r in result["rows"] if r["phase"] == "target"]
    return {"goal": "commit → displayCount p99 ≤ 2 s at 80 % of the sustained load",
            "figure": "; ".join(f"{r['path']} p99 {fmt(r['display_p99_ms'], 0)} ms at {fmt(r['commands_per_s'], 0)} "
                                f"cmd/s" for r in targets),
            "ceiling": "; ".join(f"{r['path']} sustains {fmt(r['sustained_commands_per_s'], 0)} cmd/s"
                                 for r in result["rows"] if r["phase"] == "max"),
            "ratio": ", ".join("MET" if met(r) else "NOT MET" for r in targets)
            + (f"; P8 {fmt(p8(result['rows'])[2], 2)}" if p8(result["rows"]) else "")}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261203, wait_quiet=180.0)
    args = run.args
    paths = [x for x in args.paths.split(",") if x in ("none", "loops", "celery")]
    from django.conf import settings

    users, videos, probe_user, probe_sets = prepare_pipeline(args)
    ctx = {"users": users, "videos": videos, "probe_user": probe_user, "probe_videos": probe_sets["uniform"]}
    layout = Layout(args, probe=True)
    rows, workdir, sampler = [], Path(tempfile.mkdtemp(prefix="likes-convergence-")), ResourceSampler()
    try:
        with Pool(layout.size, name="pipeline") as pool:
            for path in paths:
                if args.rate and path != "none":
                    rows.append(run_phase(pool, layout, sampler, args, ctx, path=path, phase="fixed", rate=args.rate,
                                          workdir=workdir))
                    continue
                top = run_phase(pool, layout, sampler, args, ctx, path=path, phase="max", rate=None, workdir=workdir)
                if path == "none":  # P8's denominator: no pipeline, so no target phase to converge in
                    rows.append(top)
                    continue
                rows += [top, run_phase(pool, layout, sampler, args, ctx, path=path, phase="target",
                                        workdir=workdir, rate=top["sustained_commands_per_s"] * args.load_share)]
    finally:
        reset_workload()
        shutil.rmtree(workdir, ignore_errors=True)
    from likes_project.eventlog import streams
    result = {"rows": rows, "meta": {"mix": args.mix_shares, "procfile": procfile_lines(),
                                     "stream_partitions": streams.active_contract().partitions,
                                     "pool_processes": int(os.environ.get("CELERY_CONCURRENCY", "4")),
                                     "count_l1_ttl_s": settings.COUNT_L1_TTL_S,
                                     "nudge_debounce_s": settings.NUDGE_DEBOUNCE_S}}
    exact = all(r["exact"] and r["drained"] for r in rows if r["path"] != "none")
    return driver.finish(run, result, report=report, headline=headline,
                         failure=None if exact else "MISMATCH: a count differs from the facts (or no drain)")


if __name__ == "__main__":
    sys.exit(main())
