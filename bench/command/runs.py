"""The measured runs of the command-path benchmark: windows of service-layer and HTTP clients (bench/worker.py)
pooled over ABBA rounds, the single-client cost probe, and the pgbench ceiling on one relation shard."""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.command.report import fmt_row
from bench.common import BENCH_DIR, bench_log, percentile, pgbench_argv, pooled, rounded
from bench.dataset import HOT_VIDEO, NAIVE_VIDEO_TABLE, reset_state
from bench.procs import ClientPool
from bench.sampler import ResourceSampler, merge_resources

PGBENCH_SCRIPT = BENCH_DIR / "pgbench" / "like_tx.sql"


def client_pool(size: int) -> ClientPool:
    from bench.worker import worker_main

    return ClientPool(size, worker_main, name="bench-client", what="client")


def measure_once(pool: ClientPool, sampler: ResourceSampler, args, *, layer: str, naive: bool, workload: str,
                 users: list, videos: list[str], port: int | None = None, gunicorn_pid: int | None = None,
                 settings_overrides: dict | None = None, tag: str | None = None) -> dict:
    """One measured window of one workload at one layer, from an empty relation state (with
    `settings_overrides` applied in the client processes for the window: a lever, bench/levers.py)."""
    reset_state()
    n = args.procs if layer == "service" else args.http_clients
    run_id = secrets.token_hex(3)
    t_start = time.time() + 0.5
    t_measure = t_start + args.warmup
    t_end = t_measure + args.duration
    tag = tag or f"{layer}-{'naive' if naive else 'ours'}-{workload}"
    jobs = []
    for i in range(n):
        jobs.append({
            "tag": tag, "layer": layer, "naive": naive, "port": port,
            "users": users[i::n], "videos": [HOT_VIDEO] if workload == "hot" else videos,
            "mix": args.mix_shares, "seed": args.seed * 1000 + i,
            "key_prefix": f"b{run_id}{'n' if naive else 'o'}{workload[0]}{layer[0]}{i}",
            "t_start": t_start, "t_measure": t_measure, "t_end": t_end,
            "settings": settings_overrides or {},
        })
    sampler.start(t_measure, t_end, extra_pids={gunicorn_pid} if gunicorn_pid else set(),
                  extra_label="gunicorn workers")
    try:
        results = pool.run(jobs, timeout=(t_end - time.time()) + 90)
    finally:
        resources = sampler.stop()
    fatal = [r["fatal"] for r in results if "fatal" in r]
    if fatal:
        raise RuntimeError(f"{tag}: client failed: {fatal[0]}")
    errors, kinds, sizes = pooled(results, "errors", "kinds", "sizes")
    part = {"ok": sum(r["ok"] for r in results), "changed": sum(r["changed"] for r in results),
            "replayed": sum(r["replayed"] for r in results), "errors": errors, "kinds": kinds, "sizes": sizes,
            "latencies": [x for r in results for x in r["latencies_ms"]], "resources": resources}
    if layer == "service" and not naive and workload == "uniform":
        part["outbox_payload_bytes"] = _outbox_payload_size()
    if naive and part["changed"] and _naive_counter_total() == 0:
        raise RuntimeError(f"{tag}: the naive counter UPDATE never ran; is bench.naive still wrapping "
                           "relations.services.commands.outbox_event_write?")
    bench_log(f"  {tag}: {part['ok'] / args.duration:,.1f} cmd/s in this window")
    return part


def aggregate(parts: list[dict], args, *, layer: str, naive: bool, workload: str) -> dict:
    """One row from the windows of all rounds (as if they were one window of rounds x duration)."""
    lat = sorted(x for p in parts for x in p["latencies"])
    ok = sum(p["ok"] for p in parts)
    errors, kinds, sizes = pooled(parts, "errors", "kinds", "sizes")
    seconds = args.duration * len(parts)
    payload = [p["outbox_payload_bytes"] for p in parts if p.get("outbox_payload_bytes")]
    row = {
        "layer": layer, "variant": "naive" if naive else "ours", "workload": workload,
        "clients": args.procs if layer == "service" else args.http_clients,
        "commands_per_s": round(ok / seconds, 1),
        "per_round_commands_per_s": [round(p["ok"] / args.duration, 1) for p in parts],
        "p50_ms": rounded(percentile(lat, 0.50)), "p99_ms": rounded(percentile(lat, 0.99)),
        "ok": ok, "errors": sum(errors.values()), "error_kinds": dict(errors.most_common(5)),
        "changed_share": round(sum(p["changed"] for p in parts) / ok, 3) if ok else None,
        "replayed_share": round(sum(p["replayed"] for p in parts) / ok, 3) if ok else None,
        "mix_sent": dict(kinds), "measured_seconds": seconds,
        "avg_request_body_bytes": round(sizes["request"] / sizes["n"]) if sizes["n"] else None,
        "avg_response_body_bytes": round(sizes["response"] / sizes["n"]) if sizes["n"] else None,
        "avg_outbox_payload_bytes": round(sum(payload) / len(payload)) if payload else None,
        "resources": merge_resources([p["resources"] for p in parts]),
    }
    bench_log(fmt_row(row))
    return row


def run_layer(pool: ClientPool, sampler: ResourceSampler, args, *, layer: str, variants: list[bool],
              users: list, videos: list[str], servers: dict | None = None) -> list[dict]:
    """Every (variant, workload) of one layer, `args.rounds` times, in ABBA order so that a slow drift
    of the machine's background load hits every row alike."""
    cells = [(naive, workload) for naive in variants for workload in ("uniform", "hot")]
    parts: dict[tuple[bool, str], list[dict]] = {c: [] for c in cells}
    for rnd in range(args.rounds):
        order = cells if rnd % 2 == 0 else list(reversed(cells))
        for naive, workload in order:
            server = (servers or {}).get(naive)
            parts[(naive, workload)].append(measure_once(
                pool, sampler, args, layer=layer, naive=naive, workload=workload, users=users, videos=videos,
                port=server.port if server else None, gunicorn_pid=server.proc.pid if server else None))
    return [aggregate(parts[c], args, layer=layer, naive=c[0], workload=c[1]) for c in cells]


def run_probe(pool: ClientPool, args, *, users: list, videos: list[str]) -> dict:
    """Cost of one command with a single client: SQL statements, Redis calls, app CPU, wall time."""
    reset_state()
    job = {"tag": "probe", "layer": "probe", "users": users[:max(1, len(users) // args.procs)], "videos": videos,
           "mix": args.mix_shares, "seed": args.seed, "key_prefix": f"bprobe{secrets.token_hex(3)}",
           "warm": 50, "commands": args.probe_commands}
    (res,) = pool.run([job], timeout=150)
    if "fatal" in res:
        raise RuntimeError(f"probe failed: {res['fatal']}")
    bench_log(f"probe (1 client): {res['wall_ms']} ms wall, {res['app_cpu_ms']} ms app CPU, "
              f"SQL {res['sql_per_command']}, Redis {res['redis_per_command']} per command")
    return res


def _shard_sum(sql: str) -> tuple[int, ...]:
    """The column sums of one aggregate row of `sql` over every relation shard."""
    from django.db import connections

    from relations import routing

    total: tuple[int, ...] = ()
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute(sql)
            row = tuple(int(x) for x in cur.fetchone())
            total = tuple(a + b for a, b in zip(total, row, strict=True)) if total else row
    connections.close_all()
    return total


def _outbox_payload_size() -> int | None:
    """Average size of the outbox event payload (JSON text) written in the last window."""
    from relations.models import OutboxEvent

    total, count = _shard_sum("SELECT coalesce(sum(octet_length(payload::text)), 0), count(*) "
                              f"FROM {OutboxEvent._meta.db_table}")
    return round(total / count) if count else None


def _naive_counter_total() -> int:
    """Sum of |like_count| over the naive counter rows: non-zero once the naive UPDATE has run."""
    (total,) = _shard_sum(f"SELECT coalesce(sum(abs(like_count)), 0) FROM {NAIVE_VIDEO_TABLE}")
    return total


# --- pgbench -------------------------------------------------------------------------------------

_TPS_RE = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)
_FAILED_RE = re.compile(r"^number of failed transactions: (\d+)", re.M)
_PROCESSED_RE = re.compile(r"^number of transactions actually processed: (\d+)", re.M)


def run_pgbench(args, sampler: ResourceSampler, *, naive_hot: bool, clients: int, workdir: Path) -> dict:
    """bench/pgbench/like_tx.sql (with -D naive_hot=1: the naive hot-counter variant) for --pgbench-duration
    seconds with `clients` clients on rel_00."""
    label = "like_tx_naive_hot" if naive_hot else "like_tx"
    reset_state()
    logdir = Path(tempfile.mkdtemp(prefix="pgb-", dir=workdir))
    cmd, env = pgbench_argv("rel_00", ["-M", "simple", "-f", str(PGBENCH_SCRIPT), "-D", f"users={args.users}",
                                       "-D", f"videos={args.videos}", "-D", f"naive_hot={int(naive_hot)}",
                                       "-l", "--log-prefix", str(logdir / "pgb")],
                            clients=clients, seconds=args.pgbench_duration)
    t0 = time.time()
    skip = min(1.0, args.pgbench_duration / 4)  # connection set-up
    sampler.start(t0 + skip, t0 + args.pgbench_duration, extra_pids=set(), extra_label="pgbench")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.pgbench_duration + 60)
    finally:
        resources = sampler.stop()
    out = proc.stdout + proc.stderr
    tps = _TPS_RE.search(out)
    if proc.returncode != 0 or not tps:
        raise RuntimeError(f"pgbench {label} failed (rc={proc.returncode}):\n{out[-2000:]}")
    lat = []
    for f in logdir.iterdir():
        for line in f.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2].isdigit():
                lat.append(int(parts[2]) / 1000.0)
    shutil.rmtree(logdir, ignore_errors=True)
    lat.sort()
    failed = _FAILED_RE.search(out)
    processed = _PROCESSED_RE.search(out)
    row = {"layer": "pgbench", "variant": label, "workload": "hot" if naive_hot else "uniform",
           "clients": clients, "commands_per_s": round(float(tps.group(1)), 1),
           "p50_ms": rounded(percentile(lat, 0.5)), "p99_ms": rounded(percentile(lat, 0.99)),
           "ok": int(processed.group(1)) if processed else None, "errors": int(failed.group(1)) if failed else 0,
           "changed_share": 1.0, "replayed_share": 0.0,
           "script": f"bench/pgbench/like_tx.sql -D naive_hot={int(naive_hot)}", "resources": resources}
    bench_log(fmt_row(row))
    return row
