"""Benchmark driver of commit -> displayCount convergence under load (issue 15 §2; spec TEST-3).

Run through ./bench/convergence.sh (bench/env.sh: the bench's own likes_bench* databases, Redis db 14 with the
prefix likes-bench, rate limiting off). It reuses the count-pipeline benchmark's processes and phases
(bench/projection/): for each pipeline path

  loops   the publishers, projectors and snapshot as plain loops in the bench's own processes (as
          ./bench/projection.sh runs them; no broker, no nudges);
  celery  the real Celery worker and beat, started from the Procfile's `worker` and `beat` lines as written
          (the nudges on, in the workers and in the command clients and the probe);

it runs the uniform workload twice, each time from empty tables and streams:

  max     a closed-loop load (--procs processes, one command in flight each) with the pipeline running:
          the highest sustained command load the machine holds is its commands/s, scaled down by the share
          of the produced events the projector applied in the window when the pipeline fell behind;
  target  an open-loop load at --load-share (0.8) of that sustained rate, spread over the same processes;

with the commit -> displayCount probe (bench/projection/roles.py:role_probe: a like or unlike on a probe video
every --probe-interval s, polled every --probe-poll s through counting.selectors.display_counts_get, the read
path of GET .../like-count with its L1, and without the L1), then the drain and the exactness check of every
video (vbuckets == durable snapshot == LIKED relations).

Results: a table on stdout, bench/results/convergence_latest.json and the generated part of the
"Convergence (issue 15 §2)" section of docs/benchmarks.md. Nothing asserts on timings; the exit code is
non-zero only when the harness fails or a count is not exact.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common
from bench.common import md_table
from bench.dataset import flush_bench_redis, prepare
from bench.projection import log
from bench.projection.phases import run_sustained
from bench.projection.pool import Layout, RolePool
from bench.projection.state import exactness, prepare_pipeline, reset_workload
from bench.sampler import ResourceSampler, cpu_text

OPTIONS = {
    "paths": ("loops,celery", "pipeline paths: loops and/or celery"),
    "users": (5000, "liking users"),
    "videos": (2000, "videos of the uniform workload"),
    "warmup": (3.0, "seconds of load before each window"),
    "duration": (20.0, "measured seconds per phase"),
    "procs": (4, "command processes"),
    "projectors": (2, "projector processes of the loops path"),
    "load_share": (0.8, "the target load as a share of the highest sustained load"),
    "mix": ("like=60,unlike=40", "command mix in percent"),
    "snapshot_interval": (0.2, "display snapshot cadence of the loops path, s"),
    "publish_idle": (0.01, "publisher sleep after an empty claim (loops path), s"),
    "project_idle": (0.01, "projector sleep when nothing is new (loops path), s"),
    "probe_videos": (16, "probe videos"),
    "probe_interval": (0.05, "probe commit cadence, s"),
    "probe_poll": (0.02, "probe poll interval, s"),
    "probe_timeout": (10.0, "a probe not visible after this many s is a timeout"),
    "drain_timeout": (90.0, "bound on each drain, s"),
}
RESULT_PATH = common.RESULTS_DIR / "convergence_latest.json"
PROCFILE = common.ROOT / "Procfile"
BEGIN, END = "<!-- bench:convergence:generated:begin -->", "<!-- bench:convergence:generated:end -->"
NUDGES_ON = {"LIKES_NUDGE_ENABLED": True}
CELERY_STOP_S = 20.0


def parse_args(argv=None) -> argparse.Namespace:
    p, args = common.parse_options(argv, "bench/convergence.sh", __doc__, OPTIONS, seed=20261203, wait_quiet=180.0)
    args.mix_shares = common.parse_mix(p, args.mix)
    args.path_list = [x.strip() for x in args.paths.split(",") if x.strip()]
    if not args.path_list or any(x not in ("loops", "celery") for x in args.path_list):
        p.error("--paths: loops and/or celery")
    common.require_positive(p, args, ("users", "videos", "procs", "projectors", "probe_videos"))
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 0 < args.load_share <= 1
            and 1 <= args.drain_timeout <= 240 and 0.5 <= args.probe_timeout <= 30):
        p.error("out of range (duration 0-120 s, warm-up 0-30 s, load share (0, 1], drain 1-240 s, "
                "probe timeout 0.5-30 s)")
    args.replay_procs_list = []  # the projection benchmark's Layout reads it; no replays here
    return args


# --- the Celery path ----------------------------------------------------------------------------------


def procfile_lines() -> dict[str, str]:
    out = {}
    for line in PROCFILE.read_text().splitlines():
        name, sep, cmd = line.partition(":")
        if sep and name.strip() in ("worker", "beat"):
            out[name.strip()] = cmd.strip()
    return out


def broker_purge() -> None:
    """Drop the Celery queues of the bench broker (Redis db 14), so a phase starts with none of the last
    one's tasks; the likes-bench keys are the other benchmarks' and this run's own."""
    from django.conf import settings

    from likes_project.nudge import pending_forget_all
    from likes_project.redis_client import stream_redis

    queues = {q.strip() for q in procfile_lines()["worker"].split("-Q", 1)[1].split()[0].split(",")}
    keys = [*queues, "unacked", "unacked_index", "unacked_mutex"]
    with contextlib.suppress(Exception):
        stream_redis().delete(*keys)
        pending_forget_all()  # the purged tasks will never clear their "queued" flags (D89)
    log(f"broker queues purged ({', '.join(sorted(queues))}; prefix {settings.LIKES_REDIS_PREFIX} untouched)")


_SUCCEEDED = re.compile(r"Task ([\w.]+)\[[^\]]+\] succeeded in ([0-9.]+)s")


def worker_tasks(log_path: Path, seconds: float) -> list[dict]:
    """What the Celery worker ran, from its INFO lines ("Task NAME[id] succeeded in Ns"): per task name, how
    many a second over the phase and their mean and total run time (where the worker's time went)."""
    runs: dict[str, list[float]] = {}
    if log_path.exists():
        for line in log_path.read_text(errors="replace").splitlines():
            m = _SUCCEEDED.search(line)
            if m:
                runs.setdefault(m.group(1), []).append(float(m.group(2)))
    out = [{"task": name, "per_s": round(len(v) / seconds, 1), "mean_ms": round(sum(v) / len(v) * 1000, 1),
            "busy_s_per_s": round(sum(v) / seconds, 2)} for name, v in runs.items()]
    return sorted(out, key=lambda r: -r["busy_s_per_s"])


@contextlib.contextmanager
def celery_running(workdir: Path):
    """The Procfile's `worker` and `beat`, as written, in this environment with the nudges on; stopped
    (SIGTERM, then SIGKILL) at the end. They stay in the driver's process group, so bench/env.sh's
    cleanup stops them too if the driver dies."""
    env = {**os.environ, "LIKES_NUDGE_ENABLED": "true", "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen] = []
    broker_purge()
    try:
        for name, cmd in procfile_lines().items():
            logf = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process below
            # Through a shell, as a Procfile runner does (the line expands ${CELERY_CONCURRENCY:-4}).
            procs.append(subprocess.Popen(["/bin/sh", "-c", f"exec {cmd}"], cwd=common.ROOT, env=env, stdout=logf,
                                          stderr=subprocess.STDOUT))
            log(f"started celery {name}: {cmd}")
        time.sleep(6.0)  # worker boot (prefork pool, broker connection) and beat's first tick
        dead = [p.args for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"celery process exited at start: {dead} (logs in {workdir})")
        yield {p.pid for p in procs}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.time() + CELERY_STOP_S
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.time()))
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        broker_purge()


# --- phases ----------------------------------------------------------------------------------------------


def sustained(row: dict) -> float:
    """The command load the pipeline held in a closed-loop phase: the commands/s, scaled down by the share
    of the events produced that the projector applied in the window when it fell behind."""
    produced, applied = row["events_produced_per_s"], row["events_applied_per_s"]
    keep_up = min(1.0, applied / produced) if produced else 1.0
    row["sustained_commands_per_s"] = round(row["commands_per_s"] * keep_up, 1)
    return row["sustained_commands_per_s"]


def run_phase(pool, layout, sampler, args, ctx: dict, *, path: str, phase: str, rate: float | None,
              workdir: Path) -> dict:
    reset_workload()
    worker_log = workdir / "worker.log"
    worker_log.unlink(missing_ok=True)
    t0 = time.time()
    celery = celery_running(workdir) if path == "celery" else contextlib.nullcontext(set())
    with celery:
        row = run_sustained(pool, layout, sampler, args, workload="uniform", users=ctx["users"],
                            videos=ctx["videos"], probe_user=ctx["probe_user"], probe_videos=ctx["probe_videos"],
                            pipeline=path, rate_per_s=rate, job_settings=NUDGES_ON if path == "celery" else None)
    if path == "celery":  # the whole phase: warm-up, window and drain
        row["worker_tasks"] = worker_tasks(worker_log, time.time() - t0)
    row["exactness"] = exactness(ctx["all_videos"], check_snapshots=True)
    ex = row["exactness"]
    row.update({"path": path, "phase": phase, "exact": bool(ex["buckets_exact"] and ex["snapshot_exact"])})
    log(f"{path} {phase}: {row['commands_per_s']} cmd/s (target {rate and round(rate, 1)}), displayCount p50/p99 "
        f"{row['display_p50_ms']}/{row['display_p99_ms']} ms, without L1 {row['view_p50_ms']}/{row['view_p99_ms']} ms"
        f", {row['display_timeouts']} timeouts, {'EXACT' if row['exact'] else 'MISMATCH'}")
    return row


def table(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        target = common.fmt(r["rate_per_s"], 1) if r["rate_per_s"] else \
            f"closed loop (sustained {common.fmt(r.get('sustained_commands_per_s'), 1)})"
        cells.append([r["path"], r["phase"], target,
                      f"{r['commands_per_s']:,.1f}", f"{r['events_produced_per_s']:,.1f}",
                      f"{r['events_applied_per_s']:,.1f}",
                      f"{common.fmt(r['publish_lag_p50_ms'], 0)} / {common.fmt(r['publish_lag_p99_ms'], 0)}",
                      f"{common.fmt(r['lag_p50_ms'], 0)} / {common.fmt(r['lag_p99_ms'], 0)}",
                      f"**{common.fmt(r['display_p50_ms'], 0)} / {common.fmt(r['display_p99_ms'], 0)}** "
                      f"({r['display_samples']}, {r['display_timeouts']})",
                      f"{common.fmt(r['view_p50_ms'], 0)} / {common.fmt(r['view_p99_ms'], 0)}",
                      f"{r['drain_s']}", "EXACT" if r["exact"] else "MISMATCH"])
    return md_table(["path", "phase", "target cmd/s:", "commands/s:", "events produced/s:", "events applied/s:",
                     "publish lag p50 / p99 ms:", "projection lag p50 / p99 ms:",
                     "commit→displayCount p50 / p99 ms (probes, timeouts):", "same without L1 p50 / p99 ms:",
                     "drain s:", "exact"], cells)


def verdicts(rows: list[dict]) -> str:
    lines = ["**Goal: commit → displayCount p99 ≤ 2,000 ms at the target load**", ""]
    for r in rows:
        if r["phase"] == "target":
            ok = r["display_p99_ms"] is not None and r["display_p99_ms"] <= 2000 and not r["display_timeouts"]
            lines.append(f"- {r['path']}: p99 {common.fmt(r['display_p99_ms'], 0)} ms at "
                         f"{r['commands_per_s']:,.1f} commands/s — {'MET' if ok else 'NOT MET'}")
    return "\n".join(lines)


def resources(rows: list[dict]) -> str:
    cells = [[f"{r['path']} {r['phase']}", f"{r['resources'].get('cores_busy', 0):.2f}", cpu_text(r["resources"], 0.05)]
             for r in rows if r.get("resources")]
    return md_table(["phase", "machine busy (cores):", "CPU by process (cores)"], cells)


def worker_table(rows: list[dict]) -> str:
    cells = [[f"{r['path']} {r['phase']}", t["task"], f"{t['per_s']:,.1f}", f"{t['mean_ms']:,.1f}",
              f"{t['busy_s_per_s']:.2f}"] for r in rows for t in r.get("worker_tasks", [])[:8]]
    return md_table(["phase", "task", "runs/s:", "mean ms:", "worker-seconds a second:"], cells)


def print_report(result: dict) -> None:
    common.print_blocks(table(result["rows"]), verdicts(result["rows"]), resources(result["rows"]),
                        worker_table(result["rows"]))


def write_docs(result: dict) -> None:
    meta, m = result["meta"], result["machine"]
    machine = common.machine_text(m, pg=("shared_buffers", "synchronous_commit", "fsync"), stack=("python", "django"),
                                  load=f"Load average when the run started: {m.get('loadavg_at_start')}.")
    params = (f"**Parameters:** uniform workload, {meta['users']:,} users × {meta['videos']:,} videos, mix "
              f"{meta['mix']}; {meta['procs']} command processes; warm-up {meta['warmup_s']:g} s, then "
              f"{meta['duration_s']:g} s measured per phase; target = {meta['load_share']:g} × the load the max "
              f"phase of the same path sustained (its commands/s × min(1, events applied ÷ produced)); probe: "
              f"{meta['probe_videos']} videos, a commit every "
              f"{meta['probe_interval_s']:g} s, polled every {meta['probe_poll_s']:g} s; loops path: "
              f"{meta['projectors']} projector processes, snapshot every {meta['snapshot_interval_s']:g} s; Celery "
              f"path: `{meta['procfile']['worker']}` and `{meta['procfile']['beat']}`; COUNT_L1_TTL_S "
              f"{meta['count_l1_ttl_s']:g}, NUDGE_DEBOUNCE_S {meta['nudge_debounce_s']:g}.")
    section = common.doc_section(BEGIN, END, writer="bench/convergence_bench.py", meta=meta, machine=machine,
                                 blocks=[params, table(result["rows"]), verdicts(result["rows"]),
                                         "**Where the CPU went:**\n\n" + resources(result["rows"]),
                                         "**What the Celery worker ran** (its INFO lines, over the whole phase "
                                         "including warm-up and drain):\n\n" + worker_table(result["rows"])],
                                 wall="the driver")
    common.write_generated(section, BEGIN, END, heading="## Convergence (issue 15 §2)")


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    from django.conf import settings
    from django.db import connections

    from relations import routing

    common.refuse_nudges("convergence", "convergence.sh")
    connections.close_all()
    waited = common.wait_for_quiet(args.wait_quiet, tag="convergence", log=log)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    flush_bench_redis()
    users, videos = prepare(users=args.users, videos=args.videos)
    probe_user, probe_sets, all_videos = prepare_pipeline(args, videos)
    ctx = {"users": users, "videos": videos, "probe_user": probe_user, "probe_videos": probe_sets["uniform"],
           "all_videos": all_videos}
    layout = Layout(args, routing.all_aliases())
    rows: list[dict] = []
    workdir = Path(tempfile.mkdtemp(prefix="likes-convergence-bench-"))
    pool = None
    try:
        pool = RolePool(layout.size)
        sampler = ResourceSampler(client_pids=set())
        for path in args.path_list:
            top = run_phase(pool, layout, sampler, args, ctx, path=path, phase="max", rate=None, workdir=workdir)
            rows.append(top)
            rows.append(run_phase(pool, layout, sampler, args, ctx, path=path, phase="target",
                                  rate=sustained(top) * args.load_share, workdir=workdir))
    finally:
        if pool is not None:
            pool.close()
        reset_workload()
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "meta": {**common.run_times(wall0), "loadavg_at_end": common.loadavg(), "waited_s": waited,
                 "users": args.users, "videos": args.videos, "mix": args.mix_shares, "procs": args.procs,
                 "warmup_s": args.warmup, "duration_s": args.duration, "load_share": args.load_share,
                 "projectors": args.projectors, "snapshot_interval_s": args.snapshot_interval,
                 "probe_videos": args.probe_videos, "probe_interval_s": args.probe_interval,
                 "probe_poll_s": args.probe_poll, "probe_timeout_s": args.probe_timeout,
                 "procfile": procfile_lines(), "count_l1_ttl_s": settings.COUNT_L1_TTL_S,
                 "nudge_debounce_s": settings.NUDGE_DEBOUNCE_S, "count_hot_refresh_s": settings.COUNT_HOT_REFRESH_S},
        "machine": spec,
        "rows": rows,
    }
    exact = all(r["exact"] and r["drained"] for r in rows)
    return common.finish_run(result, RESULT_PATH, report=print_report, docs=None if args.no_docs else write_docs,
                             log=log, clock="driver wall clock",
                             failure=None if exact else "MISMATCH: a count differs from the facts (or no drain)")


if __name__ == "__main__":
    sys.exit(main())
