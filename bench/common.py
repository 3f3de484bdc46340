"""What every benchmark driver (bench/command_bench.py, projection_bench.py, read_bench.py, reverse_bench.py)
shares: paths, the environment safety checks, the machine spec, the wait for other clients of the bench
databases, percentiles and number formats, the common command-line options, the driver's frame, and the
generated sections of docs/benchmarks.md. Resource sampling is in bench/sampler.py, gunicorn and spawned
client processes in bench/procs.py, the bench data in bench/dataset.py.

Importing this module does not import Django (client processes import it before setup).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
DOCS_PATH = ROOT / "docs" / "benchmarks.md"
BENCH_DB_PREFIX = "likes_bench"
BENCH_REDIS_PREFIX = "likes-bench"


def make_log(tag: str):
    """A driver's logger: `[tag] message` on stderr."""

    def log(msg: str) -> None:
        print(f"[{tag}] {msg}", file=sys.stderr, flush=True)

    return log


bench_log = make_log("bench")


# --- safety and environment ----------------------------------------------------------------------


def check_environment() -> None:
    """Refuse to run anywhere but the bench databases on 127.0.0.1."""
    from django.conf import settings

    for alias, cfg in settings.DATABASES.items():
        if not str(cfg["NAME"]).startswith(BENCH_DB_PREFIX):
            raise SystemExit(f"[bench] refusing: alias {alias} uses database {cfg['NAME']!r}, not {BENCH_DB_PREFIX}*")
        if cfg.get("HOST") not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"[bench] refusing: alias {alias} is on host {cfg.get('HOST')!r}")
    if settings.LIKES_REDIS_PREFIX != BENCH_REDIS_PREFIX:
        raise SystemExit(f"[bench] refusing: LIKES_REDIS_PREFIX must be {BENCH_REDIS_PREFIX} (use ./bench/run.sh)")
    if settings.RATE_LIMIT_ENABLED:
        raise SystemExit("[bench] refusing: RATE_LIMIT_ENABLED must be false (use ./bench/run.sh)")


def refuse_nudges(tag: str, script: str) -> None:
    """The drivers that run the pipeline's loops themselves must not queue Celery nudges nobody runs."""
    from django.conf import settings

    if settings.LIKES_NUDGE_ENABLED:
        raise SystemExit(f"[{tag}] refusing: LIKES_NUDGE_ENABLED must be false (use ./bench/{script})")


@contextlib.contextmanager
def settings_overridden(overrides: dict | None):
    """Django settings overridden for the duration of one job of a client process (a lever of
    bench/levers.py, the nudges of a Celery phase), restored afterwards."""
    from django.conf import settings

    overrides = overrides or {}
    saved = {name: getattr(settings, name) for name in overrides}
    for name, value in overrides.items():
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


def pgbench_argv(alias: str, options: list[str], *, clients: int, seconds: int) -> tuple[list[str], dict]:
    """The pgbench command line for a run of `options` (script, -D variables, ...) with `clients` clients for
    `seconds` on the bench database of `alias`, and its environment (the password, if any)."""
    info = pg_conninfo(alias)
    cmd = [shutil.which("pgbench") or "/usr/bin/pgbench", "-h", str(info["host"]), "-p", str(info["port"]), "-n",
           *options, "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 2)), "-T", str(seconds)]
    if info.get("user"):
        cmd += ["-U", info["user"]]
    cmd.append(info["dbname"])
    env = os.environ.copy()
    if info.get("password"):
        env["PGPASSWORD"] = info["password"]
    return cmd, env


def machine_spec() -> dict:
    from django.db import connections

    from likes_project.redis_client import cache_redis

    spec: dict = {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                spec["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                spec["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    spec["loadavg_at_start"] = loadavg()
    with connections["default"].cursor() as cur:
        cur.execute("SHOW server_version")
        spec["postgresql"] = cur.fetchone()[0]
        for name in ("max_connections", "shared_buffers", "synchronous_commit", "fsync", "wal_sync_method"):
            cur.execute(f"SHOW {name}")
            spec[f"pg_{name}"] = cur.fetchone()[0]
    try:
        from likes_project.redis_client import role_nodes

        spec["redis"] = role_nodes(cache_redis())[0].info("server").get("redis_version")
    except Exception as exc:
        spec["redis"] = f"unknown ({exc.__class__.__name__})"
    import django
    import rest_framework

    spec["django"] = django.get_version()
    spec["drf"] = rest_framework.VERSION
    pgb = shutil.which("pgbench") or "/usr/bin/pgbench"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        spec["pgbench"] = subprocess.run([pgb, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return spec


def log_machine(spec: dict, log) -> None:
    log(f"machine: {spec.get('nproc')} CPUs, {spec.get('memory_gib')} GiB, PostgreSQL {spec.get('postgresql')}, "
        f"Redis {spec.get('redis')}, load {spec.get('loadavg_at_start')}")


# --- other clients of the bench databases ---------------------------------------------------------


def other_connections(conn, *, app_name: str | None = None) -> int:
    """Client connections to the likes_bench* databases other than `conn`'s own (and, with `app_name`, other
    than those whose application_name is `app_name`)."""
    sql = ("SELECT count(*) FROM pg_stat_activity WHERE datname LIKE %s AND pid <> pg_backend_pid() "
           "AND backend_type = 'client backend'")
    params: list = [BENCH_DB_PREFIX + "%"]
    if app_name is not None:
        sql += " AND application_name IS DISTINCT FROM %s"
        params.append(app_name)
    return conn.execute(sql, params).fetchone()[0]


def _bench_db():
    import psycopg

    return psycopg.connect(**pg_conninfo("default"), autocommit=True, connect_timeout=5)


def foreign_connections(app_name: str | None = None) -> int:
    """Connections to the likes_bench* databases that are not this run's: with `app_name`, the ones not tagged
    with it (bench/read.sh and bench/reverse.sh set $PGAPPNAME for every process of their run)."""
    with _bench_db() as conn:
        return other_connections(conn, app_name=app_name)


def wait_for_quiet(max_wait: float, *, tag: str, log, app_name: str | None = None) -> float:
    """The benchmarks TRUNCATE the same bench tables and flush the same Redis namespace. bench/env.sh serialises
    the scripts with a lock; as a second guard, wait until no other client is connected to a likes_bench*
    database (without `app_name`, call it before this run opens its own connections), or refuse. Returns the
    seconds waited."""
    t0 = time.time()
    with _bench_db() as conn:
        for _ in range(10_000):  # bounded; the deadline ends it first
            n = other_connections(conn, app_name=app_name)
            if n == 0:
                break
            if time.time() - t0 >= max_wait:
                raise SystemExit(f"[{tag}] refusing: {n} other connections to the {BENCH_DB_PREFIX}* databases "
                                 f"after {max_wait:.0f}s (another benchmark running?)")
            log(f"{n} other connections to the bench databases; waiting (up to {max_wait:.0f}s)")
            time.sleep(5)  # poll for other benchmarks to leave (bounded by max_wait)
    return round(time.time() - t0, 1)


class Interference:
    """The phases during which another client was on the bench databases (recorded, and said on stderr)."""

    def __init__(self, app_name: str, log):
        self.app_name = app_name
        self.log = log
        self.records: list[dict] = []

    def note(self, phase: str) -> None:
        n = foreign_connections(self.app_name)
        if n:
            self.records.append({"phase": phase, "connections": n, "at": time.strftime("%H:%M:%S")})
            self.log(f"WARNING: {n} connections of another client on the bench databases during {phase}")


# --- numbers -------------------------------------------------------------------------------------------


def percentile(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def rounded(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def fmt(x, nd: int = 1) -> str:
    """A figure of a table: thousands separators, `nd` decimals, "-" when there is none."""
    return "-" if x is None else f"{x:,.{nd}f}"


def ratio(a: float | None, b: float | None, nd: int = 3) -> float | None:
    return round(a / b, nd) if a is not None and b else None


def pooled(items, *keys: str) -> list[Counter]:
    """For each of `keys`, the sum of the counts `items` (the results of several clients, windows or loops)
    hold under it."""
    out = [Counter() for _ in keys]
    for item in items:
        for total, key in zip(out, keys, strict=True):
            total.update(item.get(key) or {})
    return out


def tally(counter: Counter, report, fields: tuple[str, ...]) -> None:
    """Add the `fields` of one report (a dataclass of counts) to `counter`."""
    for name in fields:
        counter[name] += getattr(report, name)


# --- the driver's frame ----------------------------------------------------------------------------


def add_options(p: argparse.ArgumentParser, options: dict[str, tuple]) -> None:
    """Options from {name: (default, help)}: `--name-with-dashes`, typed by the default (False: a flag), the
    help ending in "(default ...)" unless it already says what the default is."""
    for name, (default, help_text) in options.items():
        flag = "--" + name.replace("_", "-")
        if default is False:
            p.add_argument(flag, action="store_true", help=help_text or None)
            continue
        shown = f"{default:g}" if isinstance(default, float) else default
        if "(default" not in help_text:
            help_text = f"{help_text} (default {shown})".lstrip()
        p.add_argument(flag, type=type(default), default=default, help=help_text)


def parse_options(argv, prog: str, doc: str, options: dict[str, tuple], *, seed: int, wait_quiet: float = 120.0
                  ) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """A driver's command line (its description: the first paragraph of the driver's docstring `doc`): its
    `options` (see add_options), then --wait-quiet, --seed and --no-docs, which every driver takes. Returns the
    parser (for its checks) and the parsed arguments."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    add_options(p, options)
    add_options(p, {"wait_quiet": (wait_quiet, "seconds to wait for other clients of the likes_bench databases to go"),
                    "seed": (seed, ""),
                    "no_docs": (False, "do not rewrite docs/benchmarks.md")})
    return p, p.parse_args(argv)


def require_positive(p: argparse.ArgumentParser, args: argparse.Namespace, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")


def parse_mix(parser, text: str) -> dict[str, float]:
    """--mix "like=55,unlike=30,..." as {kind: percent}; parser.error() on an unknown kind or no shares."""
    mix = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        if name.strip() not in ("like", "unlike", "noop", "replay"):
            parser.error(f"--mix: unknown kind {name!r}")
        mix[name.strip()] = float(value)
    if sum(mix.values()) <= 0:
        parser.error("--mix: shares must add up to more than 0")
    return mix


def int_list(text: str) -> list[int]:
    """"8,16,32" as [8, 16, 32]."""
    return [int(x) for x in text.split(",") if x.strip()]


def on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def start_driver() -> float:
    """A driver's start: SIGTERM raises SystemExit (so finally-blocks stop what it started), django.setup(),
    the environment safety checks. Returns the wall-clock start (time.time())."""
    signal.signal(signal.SIGTERM, on_sigterm)
    wall0 = time.time()
    import django

    django.setup()
    check_environment()
    return wall0


def run_times(wall0: float) -> dict:
    """The start, end and wall clock of a run that started at time.time() == wall0 (the meta's first keys)."""
    return {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall0)),
        "finished_at": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
        "wall_seconds": round(time.time() - wall0, 1),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def md_table(columns: list[str], rows) -> str:
    """A Markdown table: the header cells `columns` (a trailing ":" right-aligns the column, as `---:` does),
    then one line per row of cells (str() of each; None is an empty cell)."""
    lines = ["| " + " | ".join(c.removesuffix(":") for c in columns) + " |",
             "|" + "|".join("---:" if c.endswith(":") else "---" for c in columns) + "|"]
    lines += ["|" + "|".join(" " if c is None else f" {c} " for c in row) + "|" for row in rows]
    return "\n".join(lines)


def print_blocks(*blocks: str) -> None:
    """The report on stdout: each block after a blank line, and a blank line at the end."""
    print()
    for block in blocks:
        print(block)
        print()


# --- docs/benchmarks.md ----------------------------------------------------------------------------------

_STACK = {"python": "Python", "django": "Django", "drf": "DRF"}


def machine_text(spec: dict, *, pg: tuple[str, ...], stack: tuple[str, ...], load: str, extra: str = "") -> str:
    """The **Machine:** paragraph: CPUs, memory, kernel, PostgreSQL with the `pg` settings, Redis, the `stack`
    versions (+ `extra`), then the `load` sentence."""
    settings = ", ".join(f"{name} {spec.get('pg_' + name)}" for name in pg)
    versions = ", ".join(f"{_STACK[k]} {spec.get(k)}" for k in stack)
    return ("**Machine:** "
            f"{spec.get('nproc')} CPUs ({spec.get('cpu_model', 'unknown model')}), {spec.get('memory_gib')} GiB RAM, "
            f"Linux {spec.get('kernel')}; PostgreSQL {spec.get('postgresql')} ({settings}); Redis {spec.get('redis')}; "
            f"{versions}{extra}. {load}")


def doc_section(begin: str, end: str, *, writer: str, meta: dict, machine: str, blocks: list[str],
                wall: str = "the whole run") -> str:
    """A generated section of docs/benchmarks.md between its markers: who writes it, the run's date and wall
    clock, the machine, then the `blocks` (paragraphs and tables), a blank line between any two."""
    head = f"{begin}\n<!-- Written by {writer} at the end of every run; edit the text outside these markers. -->"
    last = f"### Last run: {meta['finished_at']} ({meta['wall_seconds']:.0f} s wall clock for {wall})"
    return "\n\n".join([head, last, machine, *blocks, end])


def interference_blocks(meta: dict) -> list[str]:
    """The phases another client of the bench databases interfered with (Interference.records), if any."""
    if not meta.get("interference"):
        return []
    return ["**Interference:** another client was connected to the bench databases during: "
            + ", ".join(f"{i['phase']} ({i['connections']} connections)" for i in meta["interference"])
            + ". Figures of those phases are suspect."]


def write_generated(section: str, begin: str, end: str, *, heading: str, empty: str = "# Benchmarks\n") -> None:
    """Put `section` (which starts with `begin` and ends with `end`) in docs/benchmarks.md in place of the text
    between those markers; without them, append `heading` and the section (to `empty` when there is no file)."""
    text = DOCS_PATH.read_text() if DOCS_PATH.exists() else empty
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        DOCS_PATH.write_text(head + section + tail)
        return
    DOCS_PATH.parent.mkdir(parents=True, exist_ok=True)
    DOCS_PATH.write_text(text.rstrip() + f"\n\n{heading}\n\n" + section + "\n")


def finish_run(result: dict, path: Path, *, report, docs, log, clock: str = "wall clock",
               failure: str | None = None) -> int:
    """The end of every run: the result JSON at `path`, `report(result)` on stdout, then `docs(result)` (None with
    --no-docs: docs/benchmarks.md stays as it is). Returns the exit code: 1 with a `failure` (said last)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    report(result)
    if docs is not None:
        docs(result)
        log(f"wrote {DOCS_PATH.relative_to(ROOT)}")
    log(f"wrote {path.relative_to(ROOT)}; {clock} {result['meta']['wall_seconds']}s")
    if failure:
        log(failure)
        return 1
    return 0
