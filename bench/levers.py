"""The levers of the like command path, one at a time, each before and after in the same run (issue 15 §1).

Run through ./bench/levers.sh (the setup, databases and Redis namespace of ./bench/run.sh). For every lever
its "before" and its "after" (the current code) alternate over --rounds windows of the uniform workload
(ABAB ... so a drift of the machine hits both alike); everything else is the current code. The raw SQL
ceiling (bench/pgbench/like_tx.sql on one shard) runs at the start and at the end of the run; the highest
figure is the ceiling. Results: a table on stdout, bench/results/levers_latest.json and the generated
lever section of docs/benchmarks.md. Nothing here asserts on timings.

Levers (the "before" of each):
  service  LIKE_COMMAND_WRITE_PATH=python         the statement-by-statement transaction (D84)
  service  NUDGE_DEBOUNCE_S=0.05                  a 50 ms nudge window, about the old leading-edge-only one (D86)
  service  AUTHOR_HINTS_MAX=0                     the snapshot and the edges in two round trips (D87)
  http     LIKE_COMMAND_WRITE_PATH=python         the same, behind gunicorn
  http     bench.levers_wsgi (DRF TokenAuthentication)   the ORM token lookup (D85)
  http     AUTHOR_HINTS_MAX=0                     the snapshot and the edges in two round trips (D87)
  http     GUNICORN_WORKER_CLASS=gthread x4 threads      threads instead of sync workers (D85)
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import sys
from dataclasses import dataclass, field

from bench import common
from bench.command.report import _cpu_ms_per_command
from bench.command.runs import aggregate, client_pool, measure_once, run_pgbench
from bench.command_bench import OPTIONS as COMMAND_OPTIONS
from bench.command_bench import check_args, start_run
from bench.dataset import reset_state
from bench.procs import Gunicorn
from bench.sampler import ResourceSampler

log = common.bench_log
SHARED = ("users", "videos", "warmup", "duration", "procs", "http_clients", "gunicorn_workers", "mix",
          "pgbench_duration")
OPTIONS = {**{name: COMMAND_OPTIONS[name] for name in SHARED},
           "rounds": (4, "windows per side of every lever (ABAB order)"),
           "pgbench_clients": ("8,16", "pgbench client counts (run at the start and at the end)")}
RESULT_PATH = common.RESULTS_DIR / "levers_latest.json"
DOC_BEGIN = "<!-- bench:levers:generated:begin -->"
DOC_END = "<!-- bench:levers:generated:end -->"
APP = "likes_project.wsgi:application"


@dataclass(frozen=True)
class Side:
    settings: dict = field(default_factory=dict)  # service layer: overrides in the client processes
    app: str = APP  # HTTP: the gunicorn application and the environment on top of the run's
    env: tuple = ()


@dataclass(frozen=True)
class Lever:
    name: str
    layer: str
    before: Side
    after: Side = Side()


LEVERS = (
    Lever("one-statement write path (python → function)", "service",
          Side(settings={"LIKE_COMMAND_WRITE_PATH": "python"})),
    Lever("nudge window 0.05 s → 0.2 s, trailing edge", "service", Side(settings={"NUDGE_DEBOUNCE_S": 0.05})),
    Lever("visibility and edges in one Redis round trip (author hints off → on)", "service",
          Side(settings={"AUTHOR_HINTS_MAX": 0})),
    Lever("one-statement write path (python → function)", "http",
          Side(env=(("LIKE_COMMAND_WRITE_PATH", "python"),))),
    Lever("token authentication (DRF ORM → one raw statement)", "http", Side(app="bench.levers_wsgi:application")),
    Lever("visibility and edges in one Redis round trip (author hints off → on)", "http",
          Side(env=(("AUTHOR_HINTS_MAX", "0"),))),
    Lever("gunicorn workers (gthread 4 × 4 threads → sync 4)", "http",
          Side(env=(("GUNICORN_WORKER_CLASS", "gthread"), ("GUNICORN_THREADS", "4")))),
)


def parse_args(argv=None):
    p, args = common.parse_options(argv, "bench/levers.sh", __doc__, OPTIONS, seed=20261202)
    return check_args(p, args)


def _lever_rows(pool, sampler, args, lever: Lever, index: int, servers: dict, users, videos) -> dict:
    parts: dict[str, list] = {"before": [], "after": []}
    for rnd in range(args.rounds):
        for side_name in (("before", "after") if rnd % 2 == 0 else ("after", "before")):
            side = getattr(lever, side_name)
            server = servers.get((side.app, side.env)) if lever.layer == "http" else None
            parts[side_name].append(measure_once(
                pool, sampler, args, layer=lever.layer, naive=False, workload="uniform", users=users, videos=videos,
                port=server.port if server else None, gunicorn_pid=server.proc.pid if server else None,
                settings_overrides=side.settings, tag=f"lever{index}-{lever.layer}-{side_name}"))
    out = {"lever": lever.name, "layer": lever.layer,
           "before_config": {"settings": lever.before.settings, "app": lever.before.app, "env": dict(lever.before.env)}}
    for side_name, side_parts in parts.items():
        row = aggregate(side_parts, args, layer=lever.layer, naive=False, workload="uniform")
        row["variant"] = f"lever {index} {side_name}"
        out[side_name] = row
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    args.skip_naive = True
    wall0, waited, workdir, spec, users, videos = start_run(args, tag="levers")
    ceiling_rows, levers = [], []
    pool = None
    try:
        sampler = ResourceSampler(client_pids=set())
        for c in args.pgbench_clients_list:
            ceiling_rows.append(run_pgbench(args, sampler, naive_hot=False, clients=c, workdir=workdir))
        pool = client_pool(max(args.procs, args.http_clients))
        sampler = ResourceSampler(client_pids=pool.pids)
        # One discarded window first: the client processes' first connections and caches are not a lever's.
        measure_once(pool, sampler, args, layer="service", naive=False, workload="uniform", users=users,
                     videos=videos, tag="warm-up (discarded)")
        for i, lever in enumerate(LEVERS, 1):
            log(f"lever {i}: {lever.layer} {lever.name}")
            # A lever's two servers run only during its windows: every worker (and thread) holds its own
            # connections, and all of them at once would pass PostgreSQL's max_connections.
            with contextlib.ExitStack() as stack:
                servers = {}
                if lever.layer == "http":
                    for side in (lever.before, lever.after):
                        servers[(side.app, side.env)] = stack.enter_context(Gunicorn(
                            side.app, args.gunicorn_workers, workdir, env=dict(side.env),
                            label=f"-{secrets.token_hex(2)}"))
                levers.append(_lever_rows(pool, sampler, args, lever, i, servers, users, videos))
        pool.close()
        pool = None
        sampler = ResourceSampler(client_pids=set())
        for c in args.pgbench_clients_list:
            ceiling_rows.append(run_pgbench(args, sampler, naive_hot=False, clients=c, workdir=workdir))
        reset_state()
    finally:
        if pool is not None:
            pool.close()
        shutil.rmtree(workdir, ignore_errors=True)
    ceiling = max(r["commands_per_s"] for r in ceiling_rows)
    for lever in levers:
        b, a = lever["before"]["commands_per_s"], lever["after"]["commands_per_s"]
        lever.update(after_over_before=round(a / b, 3) if b else None, before_over_ceiling=round(b / ceiling, 3),
                     after_over_ceiling=round(a / ceiling, 3),
                     cpu_ms_per_command_before=_cpu_ms_per_command(lever["before"]),
                     cpu_ms_per_command_after=_cpu_ms_per_command(lever["after"]))
    result = {
        "meta": {**common.run_times(wall0), "waited_for_quiet_s": waited, "users": args.users, "videos": args.videos,
                 "mix": args.mix_shares, "warmup_s": args.warmup, "duration_s": args.duration, "rounds": args.rounds,
                 "procs": args.procs, "http_clients": args.http_clients, "gunicorn_workers": args.gunicorn_workers,
                 "pgbench_duration_s": args.pgbench_duration, "rate_limit_enabled": False},
        "machine": spec, "ceiling_tps": ceiling, "ceiling_rows": ceiling_rows, "levers": levers,
    }
    return common.finish_run(result, RESULT_PATH, report=print_report, docs=None if args.no_docs else write_docs,
                             log=log, clock="driver wall clock")


def lever_table(result: dict) -> str:
    rows = []
    for lv in result["levers"]:
        b, a = lv["before"], lv["after"]
        rows.append([lv["layer"], lv["lever"], common.fmt(b["commands_per_s"]), common.fmt(a["commands_per_s"]),
                     common.fmt(lv["after_over_before"], 2), common.fmt(lv["before_over_ceiling"], 2),
                     common.fmt(lv["after_over_ceiling"], 2), common.fmt(b["p99_ms"], 1), common.fmt(a["p99_ms"], 1),
                     f"{common.fmt(lv['cpu_ms_per_command_before'], 2)} → "
                     f"{common.fmt(lv['cpu_ms_per_command_after'], 2)}",
                     b["errors"] + a["errors"]])
    return common.md_table(["layer", "lever", "before cmd/s:", "after cmd/s:", "after / before:",
                            "before / ceiling:", "after / ceiling:", "p99 before ms:", "p99 after ms:",
                            "app + PG CPU ms/cmd", "errors:"], rows)


def _ceiling_text(result: dict) -> str:
    runs = ", ".join(f"{common.fmt(r['commands_per_s'])} tps at {r['clients']} clients" for r in result["ceiling_rows"])
    return (f"**Ceiling:** pgbench of bench/pgbench/like_tx.sql on one shard, at the start and at the end: {runs}; "
            f"the ceiling is the highest, {common.fmt(result['ceiling_tps'])} tps.")


def print_report(result: dict) -> None:
    common.print_blocks(lever_table(result), _ceiling_text(result))


def write_docs(result: dict) -> None:
    meta, spec = result["meta"], result["machine"]
    machine = common.machine_text(spec, pg=("shared_buffers", "synchronous_commit", "fsync"),
                                  stack=("python", "django", "drf"),
                                  load=f"Load average when the run started: {spec.get('loadavg_at_start')}.")
    section = common.doc_section(DOC_BEGIN, DOC_END, writer="bench/levers.py", meta=meta, machine=machine, blocks=[
        f"**Parameters:** uniform workload, {meta['users']} users × {meta['videos']} videos; each side of a lever "
        f"pools {meta['rounds']} windows of {meta['duration_s']:g} s after {meta['warmup_s']:g} s of warm-up, "
        f"before and after alternating; service layer {meta['procs']} processes, HTTP {meta['http_clients']} "
        f"clients against gunicorn --workers {meta['gunicorn_workers']}. \"After\" is the current code; \"before\" "
        "changes only the lever. Rate limiting off, nudges on (as deployed).",
        lever_table(result), _ceiling_text(result)])
    common.write_generated(section, DOC_BEGIN, DOC_END, heading="### Levers of the command path (issue 15 §1)")


if __name__ == "__main__":
    sys.exit(main())
