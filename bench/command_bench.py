"""Benchmark driver for the like command path (issue #2 "Benchmark"; spec TEST-2, TEST-3, TEST-4).

Run through ./bench/run.sh, which does the setup and points every setting at the bench databases.
In one run it measures, each for a fixed window after a warm-up, with concurrent clients:

  service layer  processes calling relations.services.commands.relation_set_state() directly
  HTTP           PUT /v1/videos/<id>/like-relation against gunicorn (sync workers) on 127.0.0.1
  naive          both of the above plus `UPDATE bench_naive_video SET like_count = like_count +/- 1` in the
                 command transaction (bench/naive.py wraps outbox_event_write; production code is untouched)
  pgbench        the same statements as raw SQL on one relation shard (the ceiling), and the naive hot variant

for two workloads: `uniform` (users x many videos, random pairs) and `hot` (the same users x one video).
Results: a table on stdout, bench/results/latest.json, and the generated section of docs/benchmarks.md.
Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import (
    BENCH_DIR,
    DOCS_PATH,
    RESULTS_DIR,
    ROOT,
    ClientPool,
    Gunicorn,
    ResourceSampler,
    _log,
    _pg_conninfo,
    log_machine,
    machine_spec,
    merge_resources,
    parse_mix,
    percentile,
    print_blocks,
    run_times,
    start_driver,
    write_generated,
)

PGBENCH_DIR = BENCH_DIR / "pgbench"

USER_PREFIX = "bench-u"
AUTHOR_NAME = "bench-author"
VIDEO_PREFIX = "bench-v"
HOT_VIDEO = "bench-hot"
DOC_BEGIN = "<!-- bench:generated:begin -->"
DOC_END = "<!-- bench:generated:end -->"
# The process group that runs the application code in each layer (for CPU per command).
_APP_PROCESS = {"service": "bench clients", "http": "gunicorn workers", "pgbench": "pgbench"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=5000, help="liking users (default 5000)")
    p.add_argument("--videos", type=int, default=2000, help="videos in the uniform workload (default 2000)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up before each window (default 2)")
    p.add_argument("--duration", type=float, default=3.0,
                   help="seconds measured per workload and round (default 3)")
    p.add_argument("--rounds", type=int, default=4,
                   help="rounds per layer, in ABBA order; a row pools its rounds (default 4, so 12 s per row)")
    p.add_argument("--procs", type=int, default=8, help="service-layer client processes (default 8)")
    p.add_argument("--http-clients", type=int, default=8, help="HTTP client processes (default 8)")
    p.add_argument("--gunicorn-workers", type=int, default=4, help="gunicorn sync workers (default 4)")
    p.add_argument("--mix", default="like=55,unlike=30,noop=10,replay=5",
                   help="command mix in percent (default like=55,unlike=30,noop=10,replay=5)")
    p.add_argument("--pgbench-clients", default="8,16,32", help="pgbench client counts (default 8,16,32)")
    p.add_argument("--pgbench-naive-clients", default="8,32", help="naive hot pgbench client counts (default 8,32)")
    p.add_argument("--pgbench-duration", type=int, default=8, help="seconds per pgbench run (default 8)")
    p.add_argument("--probe-commands", type=int, default=300,
                   help="commands of the single-client cost probe (default 300; 0 skips it)")
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--skip-http", action="store_true")
    p.add_argument("--skip-naive", action="store_true")
    p.add_argument("--skip-pgbench", action="store_true")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = p.parse_args(argv)
    args.mix_shares = parse_mix(p, args.mix)
    args.pgbench_clients_list = [int(x) for x in args.pgbench_clients.split(",") if x.strip()]
    args.pgbench_naive_clients_list = [int(x) for x in args.pgbench_naive_clients.split(",") if x.strip()]
    for name in ("users", "videos", "procs", "http_clients", "gunicorn_workers", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 1 <= args.pgbench_duration <= 120):
        p.error("durations out of range (duration 0-120 s, warm-up 0-30 s, pgbench 1-120 s)")
    return args


# --- data preparation ----------------------------------------------------------------------------


def _chunks(seq, n):
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


def prepare(args) -> tuple[list[tuple[int, str]], list[str]]:
    """Users with DRF tokens, one author, `args.videos` public videos plus the hot one (through
    video_snapshot_upsert), and the naive counter table in every relation shard. Idempotent."""
    from django.contrib.auth import get_user_model
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from likes_project.audit.services import Actor
    from relations import routing
    from relations.models import VideoSnapshot
    from relations.services.videos import video_snapshot_upsert

    t0 = time.monotonic()
    User = get_user_model()
    author, _ = User.objects.get_or_create(username=AUTHOR_NAME, defaults={"password": "!bench"})
    names = [f"{USER_PREFIX}{i:06d}" for i in range(args.users)]
    existing: set[str] = set()
    for chunk in _chunks(names, 5000):
        existing.update(User.objects.filter(username__in=chunk).values_list("username", flat=True))
    missing = [User(username=n, password="!bench") for n in names if n not in existing]
    if missing:
        User.objects.bulk_create(missing, batch_size=2000, ignore_conflicts=True)
    ids: dict[str, int] = {}
    for chunk in _chunks(names, 5000):
        ids.update(User.objects.filter(username__in=chunk).values_list("username", "pk"))
    uid_list = [ids[n] for n in names]
    tokens: dict[int, str] = {}
    for chunk in _chunks(uid_list, 5000):
        tokens.update(Token.objects.filter(user_id__in=chunk).values_list("user_id", "key"))
    new_tokens = [Token(user_id=uid, key=Token.generate_key()) for uid in uid_list if uid not in tokens]
    if new_tokens:
        Token.objects.bulk_create(new_tokens, batch_size=2000)
        for chunk in _chunks(uid_list, 5000):
            tokens.update(Token.objects.filter(user_id__in=chunk).values_list("user_id", "key"))
    users = [(uid, tokens[uid]) for uid in uid_list]

    videos = [f"{VIDEO_PREFIX}{i:05d}" for i in range(args.videos)]
    all_videos = [*videos, HOT_VIDEO]
    have = set(VideoSnapshot.objects.filter(video_id__in=all_videos).values_list("video_id", flat=True))
    actor = Actor(name="bench", channel="cli")
    created = 0
    for vid in all_videos:
        if vid not in have:
            video_snapshot_upsert(video_id=vid, author_id=author.pk, visibility="public", status="active",
                                  version=1, actor=actor)
            created += 1

    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS bench_naive_video ("
                        " video_id varchar(64) PRIMARY KEY, like_count bigint NOT NULL DEFAULT 0)")
            cur.execute("INSERT INTO bench_naive_video (video_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                        [all_videos])
    per_shard = Counter(routing.alias_for_user(uid) for uid, _ in users)
    _log(f"prepared {len(users)} users ({len(missing)} new, per shard {dict(per_shard)}), "
         f"{len(all_videos)} videos ({created} new) in {time.monotonic() - t0:.1f}s")
    return users, videos


def reset_state() -> None:
    """Empty the relation tables of every bench shard and zero the naive counters, so each workload
    starts from the same state (only ever the likes_bench_* databases: check_environment ran)."""
    from django.db import connections

    from relations import routing
    from relations.models import LikeCommand, LikeRelation, OutboxEvent

    tables = ", ".join(m._meta.db_table for m in (LikeRelation, LikeCommand, OutboxEvent))
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {tables}")
            cur.execute("UPDATE bench_naive_video SET like_count = 0 WHERE like_count <> 0")
    connections.close_all()


def flush_bench_redis() -> None:
    """Drop the bench namespace (prefix likes-bench, bench Redis db) so caches start cold."""
    from django.conf import settings

    from likes_project.redis_client import cache_redis

    client = cache_redis()
    pattern = f"{settings.LIKES_REDIS_PREFIX}:*"
    deleted = 0
    cursor = 0
    for _ in range(10_000):  # bounded SCAN
        cursor, keys = client.scan(cursor=cursor, match=pattern, count=1000)
        if keys:
            deleted += client.delete(*keys)
        if cursor == 0:
            break
    _log(f"flushed {deleted} bench redis keys")


# --- client pool ---------------------------------------------------------------------------------


def client_pool(size: int) -> ClientPool:
    from bench.worker import worker_main

    return ClientPool(size, worker_main, name="bench-client", what="client")


def measure_once(pool: ClientPool, sampler: ResourceSampler, args, *, layer: str, naive: bool, workload: str,
                 users: list, videos: list[str], port: int | None = None, gunicorn_pid: int | None = None) -> dict:
    """One measured window of one workload at one layer, from an empty relation state."""
    reset_state()
    n = args.procs if layer == "service" else args.http_clients
    run_id = secrets.token_hex(3)
    t_start = time.time() + 0.5
    t_measure = t_start + args.warmup
    t_end = t_measure + args.duration
    tag = f"{layer}-{'naive' if naive else 'ours'}-{workload}"
    jobs = []
    for i in range(n):
        jobs.append({
            "tag": tag, "layer": layer, "naive": naive, "port": port,
            "users": users[i::n], "videos": [HOT_VIDEO] if workload == "hot" else videos,
            "mix": args.mix_shares, "seed": args.seed * 1000 + i,
            "key_prefix": f"b{run_id}{'n' if naive else 'o'}{workload[0]}{layer[0]}{i}",
            "t_start": t_start, "t_measure": t_measure, "t_end": t_end,
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
    part = {"ok": sum(r["ok"] for r in results), "changed": sum(r["changed"] for r in results),
            "replayed": sum(r["replayed"] for r in results), "errors": Counter(), "kinds": Counter(),
            "latencies": [x for r in results for x in r["latencies_ms"]], "resources": resources}
    part["sizes"] = Counter()
    for r in results:
        part["errors"].update(r["errors"])
        part["kinds"].update(r["kinds"])
        part["sizes"].update(r.get("sizes", {}))
    if layer == "service" and not naive and workload == "uniform":
        part["outbox_payload_bytes"] = _outbox_payload_size()
    if naive and part["changed"] and _naive_counter_total() == 0:
        raise RuntimeError(f"{tag}: the naive counter UPDATE never ran; is bench.naive still wrapping "
                           "relations.services.commands.outbox_event_write?")
    _log(f"  {tag}: {part['ok'] / args.duration:,.1f} cmd/s in this window")
    return part


def aggregate(parts: list[dict], args, *, layer: str, naive: bool, workload: str) -> dict:
    """One row from the windows of all rounds (as if they were one window of rounds x duration)."""
    lat = sorted(x for p in parts for x in p["latencies"])
    ok = sum(p["ok"] for p in parts)
    errors: Counter = Counter()
    kinds: Counter = Counter()
    for p in parts:
        errors.update(p["errors"])
        kinds.update(p["kinds"])
    seconds = args.duration * len(parts)
    sizes: Counter = Counter()
    for p in parts:
        sizes.update(p["sizes"])
    payload = [p["outbox_payload_bytes"] for p in parts if p.get("outbox_payload_bytes")]
    row = {
        "layer": layer, "variant": "naive" if naive else "ours", "workload": workload,
        "clients": args.procs if layer == "service" else args.http_clients,
        "commands_per_s": round(ok / seconds, 1),
        "per_round_commands_per_s": [round(p["ok"] / args.duration, 1) for p in parts],
        "p50_ms": _round(percentile(lat, 0.50)), "p99_ms": _round(percentile(lat, 0.99)),
        "ok": ok, "errors": sum(errors.values()), "error_kinds": dict(errors.most_common(5)),
        "changed_share": round(sum(p["changed"] for p in parts) / ok, 3) if ok else None,
        "replayed_share": round(sum(p["replayed"] for p in parts) / ok, 3) if ok else None,
        "mix_sent": dict(kinds), "measured_seconds": seconds,
        "avg_request_body_bytes": round(sizes["request"] / sizes["n"]) if sizes["n"] else None,
        "avg_response_body_bytes": round(sizes["response"] / sizes["n"]) if sizes["n"] else None,
        "avg_outbox_payload_bytes": round(sum(payload) / len(payload)) if payload else None,
        "resources": merge_resources([p["resources"] for p in parts]),
    }
    _log(_fmt_row(row))
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
    _log(f"probe (1 client): {res['wall_ms']} ms wall, {res['app_cpu_ms']} ms app CPU, "
         f"SQL {res['sql_per_command']}, Redis {res['redis_per_command']} per command")
    return res


def _outbox_payload_size() -> int | None:
    """Average size of the outbox event payload (JSON text) written in the last window."""
    from django.db import connections

    from relations import routing

    total = count = 0
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute("SELECT coalesce(sum(octet_length(payload::text)), 0), count(*) FROM relations_outboxevent")
            s, c = cur.fetchone()
            total, count = total + int(s), count + int(c)
    connections.close_all()
    return round(total / count) if count else None


def _naive_counter_total() -> int:
    """Sum of |like_count| over the naive counter rows: non-zero once the naive UPDATE has run."""
    from django.db import connections

    from relations import routing

    total = 0
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cur:
            cur.execute("SELECT coalesce(sum(abs(like_count)), 0) FROM bench_naive_video")
            total += int(cur.fetchone()[0])
    connections.close_all()
    return total


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


# --- pgbench -------------------------------------------------------------------------------------

_TPS_RE = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)
_FAILED_RE = re.compile(r"^number of failed transactions: (\d+)", re.M)
_PROCESSED_RE = re.compile(r"^number of transactions actually processed: (\d+)", re.M)


def run_pgbench(args, sampler: ResourceSampler, *, script: str, clients: int, label: str, workdir: Path) -> dict:
    reset_state()
    info = _pg_conninfo("rel_00")
    pgb = shutil.which("pgbench") or "/usr/bin/pgbench"
    logdir = Path(tempfile.mkdtemp(prefix="pgb-", dir=workdir))
    cmd = [pgb, "-h", str(info["host"]), "-p", str(info["port"]), "-n", "-M", "simple",
           "-f", str(PGBENCH_DIR / script), "-D", f"users={args.users}", "-D", f"videos={args.videos}",
           "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 2)), "-T", str(args.pgbench_duration),
           "-l", "--log-prefix", str(logdir / "pgb")]
    if info.get("user"):
        cmd += ["-U", info["user"]]
    cmd.append(info["dbname"])
    env = os.environ.copy()
    if info.get("password"):
        env["PGPASSWORD"] = info["password"]
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
    row = {"layer": "pgbench", "variant": label, "workload": "hot" if "hot" in label else "uniform",
           "clients": clients, "commands_per_s": round(float(tps.group(1)), 1),
           "p50_ms": _round(percentile(lat, 0.5)), "p99_ms": _round(percentile(lat, 0.99)),
           "ok": int(processed.group(1)) if processed else None, "errors": int(failed.group(1)) if failed else 0,
           "changed_share": 1.0, "replayed_share": 0.0, "script": f"bench/pgbench/{script}",
           "resources": resources}
    _log(_fmt_row(row))
    return row


# --- reporting -----------------------------------------------------------------------------------


def _fmt(x, nd=1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _fmt_row(r: dict) -> str:
    return (f"{r['layer']:<8} {r['variant']:<15} {r['workload']:<8} c={r['clients']:<3} "
            f"{_fmt(r['commands_per_s']):>9} cmd/s  p50 {_fmt(r['p50_ms'], 2):>7} ms  "
            f"p99 {_fmt(r['p99_ms'], 2):>8} ms  "
            f"errors {r['errors']}  changed {_fmt((r.get('changed_share') or 0) * 100, 0)}%")


def _find(rows, layer, variant, workload):
    for r in rows:
        if r["layer"] == layer and r["variant"] == variant and r["workload"] == workload:
            return r
    return None


def compute_ratios(rows: list[dict]) -> dict:
    def ratio(a, b):
        if not a or not b or not b["commands_per_s"]:
            return None
        return round(a["commands_per_s"] / b["commands_per_s"], 3)

    out = {}
    for layer in ("service", "http"):
        out[f"{layer}_ours_hot_over_uniform"] = ratio(_find(rows, layer, "ours", "hot"),
                                                      _find(rows, layer, "ours", "uniform"))
        out[f"{layer}_naive_hot_over_uniform"] = ratio(_find(rows, layer, "naive", "hot"),
                                                       _find(rows, layer, "naive", "uniform"))
        # The hot and uniform windows of one round run back to back (ABBA order), so their ratio is
        # a paired estimate that background load on a shared machine disturbs less than the pooled one.
        for variant in ("ours", "naive"):
            hot, uni = _find(rows, layer, variant, "hot"), _find(rows, layer, variant, "uniform")
            if hot and uni:
                paired = [round(h / u, 3) for h, u in zip(hot["per_round_commands_per_s"],
                                                          uni["per_round_commands_per_s"], strict=True) if u]
                out[f"{layer}_{variant}_hot_over_uniform_per_round"] = paired
                out[f"{layer}_{variant}_hot_over_uniform_median_of_rounds"] = (
                    round(statistics.median(paired), 3) if paired else None)
    ceiling = max((r for r in rows if r["layer"] == "pgbench" and r["variant"] == "like_tx"),
                  key=lambda r: r["commands_per_s"], default=None)
    naive_pg = [r for r in rows if r["layer"] == "pgbench" and r["variant"] == "like_tx_naive_hot"]
    pairs = [(n, next((r for r in rows if r["layer"] == "pgbench" and r["variant"] == "like_tx"
                       and r["clients"] == n["clients"]), None)) for n in naive_pg]
    pairs = [(n, u) for n, u in pairs if u]
    out["pgbench_naive_hot_over_like_tx_by_clients"] = {n["clients"]: ratio(n, u) for n, u in pairs}
    out["pgbench_naive_hot_over_like_tx"] = ratio(*pairs[-1]) if pairs else None
    out["pgbench_ceiling_tps"] = ceiling["commands_per_s"] if ceiling else None
    out["pgbench_ceiling_clients"] = ceiling["clients"] if ceiling else None
    # Cost per command (app + bench backend CPU) is far less sensitive to other load on a shared machine
    # than throughput. It says nothing about lock waits, so it is given for ours only.
    for layer in ("service", "http"):
        hot, uni = _find(rows, layer, "ours", "hot"), _find(rows, layer, "ours", "uniform")
        ch, cu = _cpu_ms_per_command(hot), _cpu_ms_per_command(uni)
        out[f"{layer}_ours_cpu_ms_per_command"] = {"uniform": cu, "hot": ch}
        out[f"{layer}_ours_hot_over_uniform_cpu_normalised"] = round(cu / ch, 3) if cu and ch else None
    out["service_ours_uniform_over_pgbench_ceiling"] = ratio(_find(rows, "service", "ours", "uniform"), ceiling)
    out["http_ours_uniform_over_pgbench_ceiling"] = ratio(_find(rows, "http", "ours", "uniform"), ceiling)
    return out


def _cpu_ms_per_command(row: dict | None) -> float | None:
    if not row or not row.get("resources") or not row["commands_per_s"]:
        return None
    by = row["resources"].get("cores_by_process", {})
    app = by.get(_APP_PROCESS[row["layer"]], 0.0)
    return round((app + by.get("postgres (bench backends)", 0.0)) / row["commands_per_s"] * 1000, 2)


def markdown_table(rows: list[dict]) -> str:
    lines = ["| layer | variant | workload | clients | commands/s | p50 ms | p99 ms | errors | changed | replayed |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['variant']} | {r['workload']} | {r['clients']} | {_fmt(r['commands_per_s'])} | "
            f"{_fmt(r['p50_ms'], 2)} | {_fmt(r['p99_ms'], 2)} | {r['errors']} | "
            f"{_fmt((r.get('changed_share') or 0) * 100, 0)}% | {_fmt((r.get('replayed_share') or 0) * 100, 0)}% |")
    return "\n".join(lines)


def resources_table(rows: list[dict]) -> str:
    lines = ["| run | machine busy (cores) | app CPU ms/cmd | PG backend CPU ms/cmd | CPU by process (cores) "
             "| top bench-DB backend states (share of samples) |",
             "|---|---:|---:|---:|---|---|"]
    for r in rows:
        res = r.get("resources") or {}
        if not res:
            continue
        by = res.get("cores_by_process", {})
        cps = r["commands_per_s"] or 0

        def per_cmd(cores, cps=cps):
            return "-" if not cps or cores is None else f"{cores / cps * 1000:.2f}"

        cpu = ", ".join(f"{k} {v:.2f}" for k, v in by.items() if v >= 0.05)
        waits = ", ".join(f"{w['wait']} {w['share'] * 100:.0f}%" for w in res.get("top_waits", [])[:3])
        lines.append(f"| {r['layer']} {r['variant']} {r['workload']} c={r['clients']} | {res['cores_busy']:.2f} | "
                     f"{per_cmd(by.get(_APP_PROCESS[r['layer']]))} | "
                     f"{per_cmd(by.get('postgres (bench backends)'))} | {cpu} | {waits} |")
    return "\n".join(lines)


def sizes_text(rows: list[dict]) -> str:
    http = _find(rows, "http", "ours", "uniform") or {}
    svc = _find(rows, "service", "ours", "uniform") or {}
    return (f"HTTP request body {http.get('avg_request_body_bytes', 'n/a')} B and response body "
            f"{http.get('avg_response_body_bytes', 'n/a')} B on average (plus headers: token, Idempotency-Key); "
            f"outbox event payload {svc.get('avg_outbox_payload_bytes', 'n/a')} B of JSON.")


def probe_text(probe: dict | None) -> str:
    if not probe:
        return "(not run)"
    sql = ", ".join(f"{k} {v:g}" for k, v in probe["sql_per_command"].items())
    total = sum(probe["sql_per_command"].values())
    return (f"One client, no concurrency, {probe['commands']} commands of the same mix: "
            f"{probe['wall_ms']} ms wall and {probe['app_cpu_ms']} ms of app-process CPU per command; "
            f"{total:g} SQL statements per command through Django's cursor ({sql}; the implicit BEGIN and the "
            f"COMMIT of the command transaction come on top) and {probe['redis_per_command']:g} Redis calls.")


def _cpu_pair(d: dict | None) -> str:
    if not d or d.get("uniform") is None or d.get("hot") is None:
        return "n/a"
    return f"{d['uniform']:.2f} vs {d['hot']:.2f}"


def ratios_text(ratios: dict) -> str:
    def f(x):
        return "n/a" if x is None else f"{x:.2f}"

    def rounds(key):
        vals = ratios.get(key) or []
        return ", ".join(f"{v:.2f}" for v in vals) or "n/a"

    return "\n".join([
        f"- ours, hot/uniform (service layer): **{f(ratios.get('service_ours_hot_over_uniform'))}**; "
        f"median of the per-round pairs {f(ratios.get('service_ours_hot_over_uniform_median_of_rounds'))} "
        f"({rounds('service_ours_hot_over_uniform_per_round')}). HTTP: "
        f"{f(ratios.get('http_ours_hot_over_uniform'))}, median of rounds "
        f"{f(ratios.get('http_ours_hot_over_uniform_median_of_rounds'))} "
        f"({rounds('http_ours_hot_over_uniform_per_round')})",
        f"- naive baseline, hot/uniform (service layer): **{f(ratios.get('service_naive_hot_over_uniform'))}**; "
        f"median of the per-round pairs {f(ratios.get('service_naive_hot_over_uniform_median_of_rounds'))} "
        f"({rounds('service_naive_hot_over_uniform_per_round')}). HTTP: "
        f"{f(ratios.get('http_naive_hot_over_uniform'))}, median of rounds "
        f"{f(ratios.get('http_naive_hot_over_uniform_median_of_rounds'))} "
        f"({rounds('http_naive_hot_over_uniform_per_round')})",
        f"- ours, hot/uniform normalised by CPU cost (uniform ÷ hot of app + bench-backend CPU ms per "
        f"command: service {_cpu_pair(ratios.get('service_ours_cpu_ms_per_command'))}, HTTP "
        f"{_cpu_pair(ratios.get('http_ours_cpu_ms_per_command'))}): service "
        f"**{f(ratios.get('service_ours_hot_over_uniform_cpu_normalised'))}**, HTTP "
        f"{f(ratios.get('http_ours_hot_over_uniform_cpu_normalised'))}",
        "- naive hot counter as raw SQL (pgbench), naive-hot tps / like_tx tps at the same client count: "
        + (", ".join(f"{c} clients **{f(v)}**"
                     for c, v in (ratios.get("pgbench_naive_hot_over_like_tx_by_clients") or {}).items()) or "n/a"),
        f"- ours (service layer, uniform) / raw pgbench ceiling "
        f"({_fmt(ratios.get('pgbench_ceiling_tps'))} tps at {ratios.get('pgbench_ceiling_clients')} clients): "
        f"**{f(ratios.get('service_ours_uniform_over_pgbench_ceiling'))}**"
        f"  (HTTP: {f(ratios.get('http_ours_uniform_over_pgbench_ceiling'))})",
    ])


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    mix = ", ".join(f"{k} {v:g}%" for k, v in meta["mix"].items())
    return "\n".join([
        DOC_BEGIN,
        "<!-- Written by bench/command_bench.py at the end of every run; edit the text outside these markers. -->",
        "",
        f"### Last run: {meta['finished_at']} ({meta['wall_seconds']:.0f} s wall clock for the whole run)",
        "",
        "**Machine:** "
        f"{spec.get('nproc')} CPUs ({spec.get('cpu_model', 'unknown model')}), {spec.get('memory_gib')} GiB RAM, "
        f"Linux {spec.get('kernel')}; PostgreSQL {spec.get('postgresql')} (max_connections "
        f"{spec.get('pg_max_connections')}, shared_buffers {spec.get('pg_shared_buffers')}, synchronous_commit "
        f"{spec.get('pg_synchronous_commit')}, fsync {spec.get('pg_fsync')}); Redis {spec.get('redis')}; "
        f"Python {spec.get('python')}, Django {spec.get('django')}, DRF {spec.get('drf')}; {spec.get('pgbench')}. "
        f"Load average when the run started: {spec.get('loadavg_at_start')}.",
        "",
        f"**Parameters:** {meta['users']} users, {meta['videos']} uniform videos + 1 hot video; command mix {mix}; "
        f"warm-up {meta['warmup_s']:g} s before every window; each row pools {meta['rounds']} windows of "
        f"{meta['duration_s']:g} s (ABBA order); service layer "
        f"{meta['procs']} processes; HTTP {meta['http_clients']} client processes against gunicorn "
        f"--workers {meta['gunicorn_workers']}; pgbench {meta['pgbench_duration_s']} s per row on one shard. "
        f"Rate limiting off.",
        "",
        markdown_table(result["rows"]),
        "",
        "**Ratios**",
        "",
        ratios_text(result["ratios"]),
        "",
        "**Where the time went** (sampled during each measured window: CPU from /proc, waits of the bench "
        "database backends from pg_stat_activity every 0.25 s):",
        "",
        resources_table(result["rows"]),
        "",
        "**Message sizes:** " + sizes_text(result["rows"]),
        "",
        "**Cost of one command:** " + probe_text(result.get("single_client_probe")),
        "",
        DOC_END,
    ])


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END, heading="## Measured results",
                    empty="# Benchmarks\n\nRun `./bench/run.sh`.\n")


def print_report(result: dict) -> None:
    print_blocks(markdown_table(result["rows"]), ratios_text(result["ratios"]), resources_table(result["rows"]),
                 probe_text(result.get("single_client_probe")))


# --- main ----------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = start_driver()
    from django.db import connections

    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="likes-bench-"))
    spec = machine_spec()
    log_machine(spec, _log)
    flush_bench_redis()
    users, videos = prepare(args)
    connections.close_all()

    rows: list[dict] = []
    probe: dict | None = None
    pool = None
    try:
        pool = client_pool(max(args.procs, 1 if args.skip_http else args.http_clients))
        sampler = ResourceSampler(client_pids=pool.pids)
        variants = [False] if args.skip_naive else [False, True]
        rows += run_layer(pool, sampler, args, layer="service", variants=variants, users=users, videos=videos)
        if args.probe_commands > 0:
            probe = run_probe(pool, args, users=users, videos=videos)
        if not args.skip_http:
            # Both servers run side by side (an idle one costs no CPU), so the rounds can alternate.
            with contextlib.ExitStack() as stack:
                servers = {}
                for naive in variants:
                    app = "bench.naive_wsgi:application" if naive else "likes_project.wsgi:application"
                    servers[naive] = stack.enter_context(Gunicorn(app, args.gunicorn_workers, workdir))
                rows += run_layer(pool, sampler, args, layer="http", variants=variants, users=users,
                                  videos=videos, servers=servers)
        pool.close()
        pool = None
        if not args.skip_pgbench and not (shutil.which("pgbench") or Path("/usr/bin/pgbench").exists()):
            _log("pgbench not found (Debian package postgresql-client); skipping the raw SQL ceiling")
            args.skip_pgbench = True
        if not args.skip_pgbench:
            for c in args.pgbench_clients_list:
                rows.append(run_pgbench(args, sampler, script="like_tx.sql", clients=c, label="like_tx",
                                        workdir=workdir))
            if not args.skip_naive:
                for c in args.pgbench_naive_clients_list:
                    rows.append(run_pgbench(args, sampler, script="like_tx_naive_hot.sql", clients=c,
                                            label="like_tx_naive_hot", workdir=workdir))
        reset_state()
    finally:
        if pool is not None:
            pool.close()
        shutil.rmtree(workdir, ignore_errors=True)

    result = {
        "meta": {
            **run_times(wall0),
            "users": args.users, "videos": args.videos, "hot_video": HOT_VIDEO, "mix": args.mix_shares,
            "warmup_s": args.warmup, "duration_s": args.duration, "rounds": args.rounds, "procs": args.procs,
            "http_clients": args.http_clients, "gunicorn_workers": args.gunicorn_workers,
            "pgbench_duration_s": args.pgbench_duration, "rate_limit_enabled": False,
            "error_definition": "service: relation_set_state raised; HTTP: status other than 200, connection "
                                "error or 10 s timeout; pgbench: failed transactions. Latencies are of "
                                "successful commands in the measured window.",
        },
        "machine": spec,
        "rows": rows,
        "ratios": compute_ratios(rows),
        "single_client_probe": probe,
    }
    (RESULTS_DIR / "latest.json").write_text(json.dumps(result, indent=2) + "\n")
    print_report(result)
    if not args.no_docs:
        write_docs(result)
        _log(f"wrote {DOCS_PATH.relative_to(ROOT)}")
    _log(f"wrote {(RESULTS_DIR / 'latest.json').relative_to(ROOT)}; "
         f"driver wall clock {result['meta']['wall_seconds']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
