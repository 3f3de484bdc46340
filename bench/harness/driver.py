"""The frame of every benchmark driver (`bench/run.sh NAME` runs `python -m MODULE`): its options, the safety checks,
the machine, the wait for a quiet machine, and the end of a run (the result file, the report, docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
DB_PREFIX = "likes_bench"
REDIS_PREFIX = "likes-bench"
# bench/run.sh tags every connection of a run with this name: another benchmark's connections are told apart.
APP_NAME = os.environ.get("PGAPPNAME", "likes-bench")
# The options of a command load with the pipeline's loops running (harness/phases.py: Layout and Session read them).
LOAD_OPTIONS = {
    "users": (5000, "users of the command load", 1, 10**6), "procs": (4, "command processes", 1, 64),
    "projectors": (2, "projector processes", 1, 16),
    "mix": ("like=60,unlike=40", "command mix in percent, kinds like/unlike/noop/replay"),
    "warmup": (3.0, "seconds of load before anything is measured", 0, 30),
    "snapshot_interval": (0.2, "display snapshot cadence, s", 0.001, 5),
    "publish_idle": (0.01, "publisher sleep after an empty claim, s", 0.001, 5),
    "project_idle": (0.01, "projector sleep when nothing is new, s", 0.001, 5),
}
# Options that set a product setting for the run (its environment variable), unless negative (-1: the product's).
SETTING_OPTIONS = {"statement_timeout_ms": "DB_STATEMENT_TIMEOUT_MS", "idle_tx_timeout_ms": "DB_IDLE_IN_TX_TIMEOUT_MS",
                   "job_lease_s": "OPS_JOB_LEASE_S", "retention_s": "BUCKET_MIGRATION_RETENTION_S"}


def make_log(tag: str):
    def log(msg: str) -> None:
        print(f"[{tag}] {msg}", file=sys.stderr, flush=True)

    return log


def parse(argv, name: str, doc: str, options: dict[str, tuple], *, seed: int, wait_quiet: float = 120.0, check=None,
          choice: tuple[str, dict] | None = None):
    """`options`: {name: (default, help[, lo, hi])} as `--name-with-dashes` typed by the default (False: a flag), and
    --wait-quiet, --seed, --no-docs, --out; `choice`: (name, choices) of a positional; `check(args)`: what is wrong."""
    p = argparse.ArgumentParser(prog=f"bench/run.sh {name}", description=doc.split("\n\n")[0])
    if choice:
        p.add_argument(choice[0], choices=choice[1])
    options = {**options, "wait_quiet": (wait_quiet, "seconds to wait for other clients of the bench databases"),
               "seed": (seed, ""), "no_docs": (False, "a trial: leave docs/benchmarks.md and the history alone"),
               "out": ("", f"the result file (default bench/results/{name}_latest.json)")}
    for opt, (default, text, *_bounds) in options.items():
        flag = "--" + opt.replace("_", "-")
        if default is False:
            p.add_argument(flag, action="store_true", help=text or None)
            continue
        shown = f"{default:g}" if isinstance(default, float) else default
        p.add_argument(flag, type=type(default), default=default, help=f"{text} (default {shown})".lstrip())
    args = p.parse_args(argv)
    for opt, (_default, _text, *bounds) in options.items():
        if bounds and not bounds[0] <= getattr(args, opt) <= bounds[1]:
            p.error(f"--{opt.replace('_', '-')} must be in [{bounds[0]:g}, {bounds[1]:g}]")
    if check and (wrong := check(args)):
        p.error(wrong)
    args.error = p.error
    return args


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_mix(args) -> dict[str, float]:
    """--mix "like=55,unlike=30,..." as {kind: percent}."""
    mix = {}
    for part in args.mix.split(","):
        kind, _, value = part.partition("=")
        if kind.strip() not in ("like", "unlike", "noop", "replay"):
            args.error(f"--mix: unknown kind {kind!r}")
        mix[kind.strip()] = float(value)
    if sum(mix.values()) <= 0:
        args.error("--mix: shares must add up to more than 0")
    return mix


def check_environment(db_name: str = DB_PREFIX, **layout: list[str]) -> None:
    """Refuse to run anywhere but databases named `db_name`* on 127.0.0.1 and the bench Redis namespace, or without
    the aliases `layout` names (setting -> aliases: a benchmark's own shard or partition layout, bench/run.sh's)."""
    from django.conf import settings
    if wrong := [f"{k}={','.join(v)}" for k, v in layout.items() if list(getattr(settings, k)) != v]:
        raise SystemExit(f"[bench] refusing: needs {' and '.join(wrong)} (use bench/run.sh)")
    for alias, cfg in settings.DATABASES.items():
        if not str(cfg["NAME"]).startswith(db_name):
            raise SystemExit(f"[bench] refusing: alias {alias} uses database {cfg['NAME']!r}, not {db_name}*")
        if cfg.get("HOST") not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"[bench] refusing: alias {alias} is on host {cfg.get('HOST')!r}")
    if settings.LIKES_REDIS_PREFIX != REDIS_PREFIX or settings.RATE_LIMIT_ENABLED:
        raise SystemExit(f"[bench] refusing: needs LIKES_REDIS_PREFIX={REDIS_PREFIX} and RATE_LIMIT_ENABLED=false "
                         "(use bench/run.sh)")


@contextlib.contextmanager
def settings_overridden(overrides: dict | None):
    """Django settings overridden for one job of a spawned process (a lever, the nudges of a Celery phase)."""
    from django.conf import settings
    saved = {name: getattr(settings, name) for name in overrides or {}}
    for name, value in (overrides or {}).items():
        setattr(settings, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)


def pg_conninfo(alias: str) -> dict:
    from django.conf import settings
    cfg = settings.DATABASES[alias]
    info = {"dbname": cfg["NAME"], "host": cfg.get("HOST") or "127.0.0.1", "port": cfg.get("PORT") or 5432,
            "user": cfg.get("USER") or None, "password": cfg.get("PASSWORD") or None}
    return {k: v for k, v in info.items() if v is not None}


def pg_env(alias: str) -> dict:
    """The environment of a libpq tool (psql, pgbench) on `alias`."""
    info = pg_conninfo(alias)
    return {**os.environ, "PGHOST": str(info["host"]), "PGPORT": str(info["port"]), "PGDATABASE": info["dbname"],
            "PGCONNECT_TIMEOUT": "5", **({"PGUSER": info["user"]} if info.get("user") else {}),
            **({"PGPASSWORD": info["password"]} if info.get("password") else {})}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine_spec() -> dict:
    import django
    import rest_framework
    from django.db import connections
    spec: dict = {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                  "django": django.get_version(), "drf": rest_framework.VERSION, "loadavg_at_start": loadavg()}
    with contextlib.suppress(OSError):
        cpu = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")]
        spec["cpu_model"] = cpu[0].split(":", 1)[1].strip() if cpu else None
        mem = [ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")]
        spec["memory_gib"] = round(int(mem[0].split()[1]) / 1024 / 1024, 1) if mem else None
    with connections["default"].cursor() as cur:
        for name in ("server_version", "max_connections", "shared_buffers", "synchronous_commit", "fsync",
                     "autovacuum"):
            cur.execute(f"SHOW {name}")
            spec["postgresql" if name == "server_version" else f"pg_{name}"] = cur.fetchone()[0]
    try:
        from likes_project.redis_client import cache_redis, role_nodes
        spec["redis"] = role_nodes(cache_redis())[0].info("server").get("redis_version")
    except Exception as exc:
        spec["redis"] = f"unknown ({exc.__class__.__name__})"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        spec["pgbench"] = subprocess.run([shutil.which("pgbench") or "/usr/bin/pgbench", "--version"],
                                         capture_output=True, text=True, timeout=10).stdout.strip()
    return spec


def code_version(paths: tuple[str, ...]) -> dict:
    """The commit measured, which of `paths` differ from it (another engineer may be editing them) and a digest."""
    import hashlib
    def git(*cmd: str) -> str:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=20).stdout
        return ""

    digest = hashlib.sha256()
    for name in paths:
        for path in sorted((ROOT / name).rglob("*.py")) if (ROOT / name).is_dir() else [ROOT / name]:
            digest.update(str(path).encode() + (path.read_bytes() if path.exists() else b""))
    return {"commit": git("rev-parse", "--short", "HEAD").strip(), "files_sha256": digest.hexdigest()[:16],
            "modified": [ln[3:] for ln in git("status", "--porcelain", "--", *paths).splitlines() if ln]}


def foreign_connections() -> int:
    """Client connections to the likes_bench* databases that are not this run's (not tagged APP_NAME)."""
    import psycopg
    with psycopg.connect(**pg_conninfo("default"), autocommit=True, connect_timeout=5) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE %s AND pid <> pg_backend_pid() "
                            "AND backend_type = 'client backend' AND application_name IS DISTINCT FROM %s",
                            [DB_PREFIX + "%", APP_NAME]).fetchone()[0]


def wait_for_quiet(max_wait: float, log) -> float:
    """Behind bench/run.sh's lock, wait for no other client on a likes_bench* database, or refuse; seconds waited."""
    from likes_project.waiting import wait_until
    t0 = time.time()

    def quiet() -> bool:
        if n := foreign_connections():
            log(f"{n} other connections to the bench databases; waiting (up to {max_wait:.0f}s)")
        return not n

    if not wait_until(quiet, timeout_s=max_wait, poll_s=5.0):
        raise SystemExit(f"[bench] refusing: other connections to the bench databases after {max_wait:.0f}s")
    return round(time.time() - t0, 1)


@dataclass
class Interference:
    """The phases during which another client was on the bench databases (recorded, and said on stderr)."""

    log: object
    records: list = field(default_factory=list)

    def note(self, phase: str) -> None:
        n = foreign_connections()
        if n:
            self.records.append({"phase": phase, "connections": n, "at": time.strftime("%H:%M:%S")})
            self.log(f"WARNING: {n} connections of another client on the bench databases during {phase}")


@dataclass
class Run:
    name: str
    args: argparse.Namespace
    log: object
    wall0: float
    waited: float
    spec: dict
    interference: Interference


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # finally-blocks stop what the driver started


def start(name: str, argv, doc: str, options: dict, *, seed: int, wait_quiet: float = 120.0, env=None,
          nudges: bool = False, check=None) -> Run:
    """Parse the options (--mix also as args.mix_shares), `env(args)` and SETTING_OPTIONS into the environment (the
    spawned processes inherit it), django.setup(), the safety checks, the wait for quiet, the machine spec."""
    args = parse(argv, name, doc, options, seed=seed, wait_quiet=wait_quiet, check=check)
    if "mix" in options:
        args.mix_shares = parse_mix(args)
    for opt, var in SETTING_OPTIONS.items():
        if opt in options and (value := getattr(args, opt)) >= 0:
            os.environ[var] = str(value) if isinstance(value, int) else f"{value:g}"
    for key, value in (env(args) if env else {}).items():
        os.environ[key] = str(value)
    signal.signal(signal.SIGTERM, _on_sigterm)
    wall0 = time.time()
    import django
    django.setup()
    from django.conf import settings
    from django.db import connections
    check_environment()
    if settings.LIKES_NUDGE_ENABLED and not nudges:
        raise SystemExit(f"[{name}] refusing: LIKES_NUDGE_ENABLED must be false (use bench/run.sh {name})")
    connections.close_all()
    log = make_log(name)
    waited = wait_for_quiet(args.wait_quiet, log)
    spec = machine_spec()
    log(f"machine: {spec['nproc']} CPUs, {spec.get('memory_gib')} GiB, PostgreSQL {spec['postgresql']}, "
        f"Redis {spec['redis']}, load {spec['loadavg_at_start']}")
    return Run(name, args, log, wall0, waited, spec, Interference(log))


def finish(run: Run, result: dict, *, report, headline=None, failure: str | None = None) -> int:
    """The result file, `report(result)` (Markdown blocks) on stdout; unless --no-docs, the docs section, the history
    line (`headline(result)`) and the summary table. The exit code: 1 with a `failure` (said last)."""
    from bench.harness import report as rep
    args = run.args
    command = "bench/run.sh " + shlex.join([run.name, *sys.argv[1:]])
    options = {k: v for k, v in vars(args).items() if k != "error" and isinstance(v, str | int | float | bool | list)}
    result["meta"] = {**options, "command": command,
                      "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(run.wall0)),
                      "finished_at": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
                      "wall_seconds": round(time.time() - run.wall0, 1), "waited_for_quiet_s": run.waited,
                      "interference": run.interference.records, "loadavg_at_end": loadavg(), **result.get("meta", {})}
    result["machine"] = run.spec
    path = Path(args.out) if args.out else RESULTS_DIR / f"{run.name}_latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    blocks = [b for b in report(result) if b]
    if run.interference.records:
        blocks.append("**Interference:** another client was on the bench databases during " + ", ".join(
            f"{i['phase']} ({i['connections']} connections)" for i in run.interference.records) + ": suspect figures.")
    rep.print_blocks(*blocks)
    if not args.no_docs:
        rep.section_write(run.name, result, blocks)
        if headline is not None and not failure:
            rep.history_append(run.name, result["meta"], headline(result))
        rep.table_write()
        run.log("wrote docs/benchmarks.md and bench/results/history.jsonl")
    run.log(f"wrote {path}; {result['meta']['wall_seconds']} s wall clock")
    if failure:
        run.log(failure)
        return 1
    return 0
