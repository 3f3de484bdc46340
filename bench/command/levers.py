"""The command path's levers (issue 15 §1): `bench/run.sh levers`. Each lever's "before" (LEVERS) and "after" (the
current code) alternate over --rounds uniform windows; the raw SQL ceiling (bench/pgbench/like_tx.sql on one shard)
runs at the start and at the end, the highest is the ceiling."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import sys
from dataclasses import dataclass, field

from bench.command.bench import OPTIONS as COMMAND_OPTIONS
from bench.command.bench import aggregate, cpu_ms_per_command, measure_once, pgbench_row, start
from bench.harness import driver
from bench.harness.pool import Gunicorn, Pool
from bench.harness.report import fmt, md_table
from bench.harness.sampler import ResourceSampler
from bench.harness.seed import reset_state

NAME = "levers"
OPTIONS = {**{k: COMMAND_OPTIONS[k] for k in ("users", "videos", "warmup", "duration", "procs", "http_clients",
                                              "gunicorn_workers", "mix", "pgbench_duration")},
           "rounds": (4, "windows per side of every lever (ABAB order)", 1, 100),
           "pgbench_clients": ("8,16", "pgbench client counts (run at the start and at the end)"),
           "only": ("", "run only these levers, by their 1-based numbers (e.g. 8,9); empty: every lever")}
APP = "likes_project.wsgi:application"


@dataclass(frozen=True)
class Side:
    settings: dict = field(default_factory=dict)  # service layer: overrides in the client processes
    app: str = APP  # HTTP: the gunicorn application and the environment on top of the run's
    env: tuple = ()
    server: str = "gunicorn"


@dataclass(frozen=True)
class Lever:
    name: str
    layer: str
    before: Side
    after: Side = Side()


WRITE_PATH, HINTS = "one-statement write path (python → function)", "visibility and edges in one Redis round trip"
LEVERS = (
    Lever(WRITE_PATH, "service", Side(settings={"LIKE_COMMAND_WRITE_PATH": "python"})),
    Lever("nudge window 0.05 s → 0.2 s, trailing edge", "service", Side(settings={"NUDGE_DEBOUNCE_S": 0.05})),
    Lever(HINTS + " (author hints off → on)", "service", Side(settings={"AUTHOR_HINTS_MAX": 0})),
    Lever(WRITE_PATH, "http", Side(env=(("LIKE_COMMAND_WRITE_PATH", "python"),))),
    Lever("token authentication (DRF ORM → one raw statement)", "http",
          Side(app="bench.command.naive:drf_token_app()")),
    Lever(HINTS + " (author hints off → on)", "http", Side(env=(("AUTHOR_HINTS_MAX", "0"),))),
    Lever("gunicorn workers (gthread 4 × 4 threads → sync 4)", "http",
          Side(env=(("GUNICORN_WORKER_CLASS", "gthread"), ("GUNICORN_THREADS", "4")))),
    Lever("the API's own middleware chain (12 → 7, D136)", "http", Side(env=(("API_LEAN_MIDDLEWARE", "false"),))),
    Lever("health check only after idling (SELECT 1 a request → none under load, D137)", "http",
          Side(env=(("DB_HEALTH_CHECK_IDLE_S", "0"),))),
    Lever("web server (gunicorn sync → granian, keep-alive)", "http", Side(), Side(server="granian")),
)


def lever_rows(pool, sampler, args, lever: Lever, index: int, servers: dict, users, videos) -> dict:
    parts: dict[str, list] = {"before": [], "after": []}
    for rnd in range(args.rounds):
        for side_name in ("before", "after") if rnd % 2 == 0 else ("after", "before"):
            side = getattr(lever, side_name)
            parts[side_name].append(measure_once(
                pool, sampler, args, layer=lever.layer, naive=False, workload="uniform", users=users, videos=videos,
                server=servers.get((side.app, side.env, side.server)), settings=side.settings,
                tag=f"lever{index}-{lever.layer}-{side_name}"))
    out = {"lever": lever.name, "layer": lever.layer, "before_config": {"settings": lever.before.settings,
                                                                        "app": lever.before.app,
                                                                        "env": dict(lever.before.env)}}
    for side_name, side_parts in parts.items():
        out[side_name] = aggregate(side_parts, args, layer=lever.layer, variant=f"lever {index} {side_name}",
                                   workload="uniform")
    return out


def report(result: dict) -> list[str]:
    rows = [[lv["layer"], lv["lever"], fmt(lv["before"]["commands_per_s"]), fmt(lv["after"]["commands_per_s"]),
             fmt(lv["after_over_before"], 2), fmt(lv["before_over_ceiling"], 2), fmt(lv["after_over_ceiling"], 2),
             f"{fmt(lv['before']['p99_ms'])} / {fmt(lv['after']['p99_ms'])}",
             f"{fmt(cpu_ms_per_command(lv['before']), 2)} → {fmt(cpu_ms_per_command(lv['after']), 2)}",
             lv["before"]["errors"] + lv["after"]["errors"]] for lv in result["levers"]]
    runs = ", ".join(f"{fmt(r['commands_per_s'])} tps at {r['clients']} clients" for r in result["ceiling_rows"])
    return [md_table(["layer", "lever", "before cmd/s:", "after cmd/s:", "after ÷ before:", "before ÷ ceiling:",
                      "after ÷ ceiling:", "p99 before / after ms:", "app + PG CPU ms/cmd", "errors:"], rows),
            f"**Ceiling:** pgbench of bench/pgbench/like_tx.sql on one shard, at the start and at the end: {runs}; the "
            f"ceiling is the highest, {fmt(result['ceiling_tps'])} tps."]


def headline(result: dict) -> dict:
    best = max(result["levers"], key=lambda lv: lv["after_over_before"] or 0)
    service = [lv for lv in result["levers"] if lv["layer"] == "service"]
    return {"goal": "each lever's after ÷ before, against the ceiling",
            "figure": f"{len(result['levers'])} levers; best {best['layer']} {best['lever'].split(' (')[0]} "
                      f"×{fmt(best['after_over_before'], 2)}",
            "ceiling": f"pgbench {fmt(result['ceiling_tps'], 0)} tps",
            "ratio": fmt(service[0]["after_over_ceiling"], 2) + " (service, after)" if service else "-"}


def main(argv=None) -> int:
    run, workdir, users, videos = start(argv, NAME, OPTIONS, __doc__, seed=20261202)
    args = run.args
    ceiling_rows, levers, sampler = [], [], ResourceSampler()
    try:
        ceiling_rows += [pgbench_row(args, sampler, naive_hot=False, clients=c) for c in args.pgbench_clients_list]
        with Pool(max(args.procs, args.http_clients), name="client") as pool:
            # One discarded window first: the clients' first connections and caches are no lever's.
            measure_once(pool, sampler, args, layer="service", naive=False, workload="uniform", users=users,
                         videos=videos, tag="warm-up (discarded)")
            only = set(driver.int_list(args.only)) if args.only else None
            for i, lever in enumerate(LEVERS, 1):
                if only is not None and i not in only:
                    continue
                run.log(f"lever {i}: {lever.layer} {lever.name}")
                # A lever's two servers run only during its windows: every worker holds its own connections, and
                # all of them at once would pass PostgreSQL's max_connections.
                with contextlib.ExitStack() as stack:
                    servers = {(s.app, s.env, s.server): stack.enter_context(
                        Gunicorn(s.app, args.gunicorn_workers, workdir, env=dict(s.env), server=s.server,
                                 label=f"-{secrets.token_hex(2)}"))
                               for s in (lever.before, lever.after)} if lever.layer == "http" else {}
                    levers.append(lever_rows(pool, sampler, args, lever, i, servers, users, videos))
        ceiling_rows += [pgbench_row(args, sampler, naive_hot=False, clients=c) for c in args.pgbench_clients_list]
        reset_state()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ceiling = max(r["commands_per_s"] for r in ceiling_rows)
    for lv in levers:
        b, a = lv["before"]["commands_per_s"], lv["after"]["commands_per_s"]
        lv.update(after_over_before=round(a / b, 3) if b else None, before_over_ceiling=round(b / ceiling, 3),
                  after_over_ceiling=round(a / ceiling, 3))
    result = {"ceiling_tps": ceiling, "ceiling_rows": ceiling_rows, "levers": levers, "meta": {"mix": args.mix_shares}}
    return driver.finish(run, result, report=report, headline=headline)


if __name__ == "__main__":
    sys.exit(main())
