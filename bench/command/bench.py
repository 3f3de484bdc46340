"""The like command path (issue #2; TEST-2, TEST-3, TEST-4): `bench/run.sh command`, at the service layer and over
HTTP, ours against the naive counter row, and the pgbench ceiling (docs/benchmarks.md, "Command path")."""

from __future__ import annotations

import contextlib
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.harness import driver, seed
from bench.harness.driver import BENCH_DIR
from bench.harness.phases import clients_run, pgbench, pgbench_found, window_times
from bench.harness.pool import Gunicorn, Pool
from bench.harness.report import clients_pooled, fmt, md_table, pct, ratio, resources_table
from bench.harness.roles import CommandMix, reset_connections
from bench.harness.sampler import ResourceSampler, count_io, merge
from bench.harness.seed import HOT_VIDEO, NAIVE_VIDEO_TABLE, flush_redis, prepare, reset_state

NAME = "command"
OPTIONS = {
    "users": (5000, "liking users", 1, 10**7), "videos": (2000, "videos in the uniform workload", 1, 10**7),
    "warmup": (2.0, "seconds of warm-up before each window", 0, 30),
    "duration": (3.0, "seconds measured per workload and round", 0.1, 120),
    "rounds": (4, "rounds per layer, in ABBA order; a row pools its rounds", 1, 100),
    "procs": (8, "service-layer client processes", 1, 64), "http_clients": (8, "HTTP client processes", 1, 64),
    "gunicorn_workers": (4, "gunicorn sync workers", 1, 64),
    "mix": ("like=55,unlike=30,noop=10,replay=5", "command mix in percent"),
    "pgbench_clients": ("8,16,32", "pgbench client counts"),
    "pgbench_naive_clients": ("8,32", "naive hot pgbench client counts"),
    "pgbench_duration": (8, "seconds per pgbench run", 1, 120),
    "probe_commands": (300, "commands of the single-client cost probe (0 skips it)", 0, 100_000),
    "skip_http": (False, ""), "skip_naive": (False, ""), "skip_pgbench": (False, ""),
}
PGBENCH_SCRIPT = BENCH_DIR / "pgbench" / "like_tx.sql"
APPS = {False: "likes_project.wsgi:application", True: "bench.command.naive:naive_app()"}
# The process group that runs the application code in each layer (for the CPU a command costs).
APP_PROCESS = {"service": "bench clients", "http": "gunicorn workers", "pgbench": "pgbench"}


def start(argv, name: str = NAME, options=OPTIONS, doc: str = __doc__, seed: int = 20261129):
    """The start this benchmark shares with levers: the frame, a work directory, the bench data."""
    run = driver.start(name, argv, doc, options, seed=seed, nudges=True)
    args = run.args
    args.pgbench_clients_list = driver.int_list(args.pgbench_clients)
    flush_redis()
    users, videos = prepare(users=args.users, videos=args.videos)
    reset_connections()
    return run, Path(tempfile.mkdtemp(prefix=f"likes-{name}-")), users, videos


def measure_once(pool: Pool, sampler: ResourceSampler, args, *, layer: str, naive: bool, workload: str, users: list,
                 videos: list[str], server: Gunicorn | None = None, settings: dict | None = None,
                 tag: str | None = None) -> dict:
    """One window of one workload at one layer from empty relations (`settings`: a lever's, in the clients)."""
    reset_state()
    n, run_id = args.procs if layer == "service" else args.http_clients, secrets.token_hex(3)
    tag = tag or f"{layer}-{'naive' if naive else 'ours'}-{workload}"
    jobs = [{"role": "bench.command.naive:window", "tag": tag, "layer": layer, "naive": naive,
             "port": server.port if server else None, "users": users[i::n],
             "videos": [HOT_VIDEO] if workload == "hot" else videos, "mix": args.mix_shares,
             "seed": args.seed * 1000 + i, "key_prefix": f"b{run_id}{int(naive)}{workload[0]}{layer[0]}{i}",
             "settings": settings or {}} for i in range(n)]
    results, resources = clients_run(pool, sampler, jobs, window_times(args), server)
    part = clients_pooled(results, ("ok", "changed", "replayed"), ("errors", "kinds", "sizes"), resources=resources)
    if layer == "service" and not naive and workload == "uniform":
        part["outbox_payload_bytes"] = _outbox_payload_size()
    if naive and part["changed"] and not _shard_sum(f"SELECT coalesce(sum(abs(like_count)), 0), 1 FROM "
                                                     f"{NAIVE_VIDEO_TABLE}")[0]:
        raise RuntimeError(f"{tag}: the naive counter UPDATE never ran; is bench/command/naive.py still wrapping "
                           "relations.services.commands.outbox_event_write?")
    driver.make_log(NAME)(f"  {tag}: {part['ok'] / args.duration:,.1f} cmd/s in this window")
    return part


def aggregate(parts: list[dict], args, *, layer: str, variant: str, workload: str) -> dict:
    """One row from the windows of all rounds (as if one window of rounds x duration)."""
    tot = clients_pooled(parts, ("ok", "changed", "replayed"), ("errors", "kinds", "sizes"))
    ok, lat, errors, sizes = tot["ok"], tot["latencies_ms"], tot["errors"], tot["sizes"]
    payload = [p["outbox_payload_bytes"] for p in parts if p.get("outbox_payload_bytes")]
    row = {"layer": layer, "variant": variant, "workload": workload,
           "clients": args.procs if layer == "service" else args.http_clients,
           "commands_per_s": round(ok / (args.duration * len(parts)), 1),
           "per_round_commands_per_s": [round(p["ok"] / args.duration, 1) for p in parts],
           "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "ok": ok, "errors": sum(errors.values()),
           "error_kinds": dict(errors.most_common(5)), "mix_sent": dict(tot["kinds"]),
           "changed_share": round(tot["changed"] / ok, 3) if ok else None,
           "replayed_share": round(tot["replayed"] / ok, 3) if ok else None,
           "avg_request_body_bytes": round(sizes["request"] / sizes["n"]) if sizes["n"] else None,
           "avg_response_body_bytes": round(sizes["response"] / sizes["n"]) if sizes["n"] else None,
           "avg_outbox_payload_bytes": round(sum(payload) / len(payload)) if payload else None,
           "resources": merge([p["resources"] for p in parts])}
    driver.make_log(NAME)(row_text(row))
    return row


def run_layer(pool, sampler, args, *, layer: str, variants: list[bool], users, videos, servers=None) -> list[dict]:
    """Every (variant, workload) of one layer, `--rounds` times in ABBA order (a drift of the machine hits all)."""
    cells = [(naive, workload) for naive in variants for workload in ("uniform", "hot")]
    parts: dict = {c: [] for c in cells}
    for rnd in range(args.rounds):
        for naive, workload in cells if rnd % 2 == 0 else cells[::-1]:
            parts[(naive, workload)].append(measure_once(pool, sampler, args, layer=layer, naive=naive,
                                                         workload=workload, users=users, videos=videos,
                                                         server=(servers or {}).get(naive)))
    return [aggregate(parts[c], args, layer=layer, variant="naive" if c[0] else "ours", workload=c[1]) for c in cells]


def _shard_sum(sql: str) -> tuple[int, ...]:
    """The column sums of one aggregate row of `sql` over every relation shard."""
    return tuple(sum(int(x or 0) for x in col) for col in zip(*(seed.rows(a, sql)[0] for a in seed.shards()),
                                                                 strict=True))


def _outbox_payload_size() -> int | None:
    from relations.models import OutboxEvent
    total, count = _shard_sum("SELECT coalesce(sum(octet_length(payload::text)), 0), count(*) "
                              f"FROM {OutboxEvent._meta.db_table}")
    return round(total / count) if count else None


def pgbench_row(args, sampler, *, naive_hot: bool, clients: int) -> dict:
    """bench/pgbench/like_tx.sql (-D naive_hot=1: the naive hot counter) with `clients` clients on rel_00."""
    reset_state()
    res = pgbench("rel_00", ["-M", "simple", "-f", str(PGBENCH_SCRIPT), "-D", f"users={args.users}", "-D",
                             f"videos={args.videos}", "-D", f"naive_hot={int(naive_hot)}"],
                  clients=clients, seconds=args.pgbench_duration, sampler=sampler, latencies=True)
    row = {"layer": "pgbench", "variant": "like_tx_naive_hot" if naive_hot else "like_tx", "clients": clients,
           "workload": "hot" if naive_hot else "uniform", "commands_per_s": res["tps"], "ok": res["processed"],
           "p50_ms": pct(res["latencies"], 0.5), "p99_ms": pct(res["latencies"], 0.99), "errors": res["failed"],
           "changed_share": 1.0, "replayed_share": 0.0, "resources": res["resources"]}
    driver.make_log(NAME)(row_text(row))
    return row


def cost_probe(job: dict, ctl) -> dict:
    """One client alone: statements (Django's cursor; all psycopg sent), Redis calls and app CPU per command."""
    from bench.command import naive
    from relations.services import commands
    naive.install(enabled=False)
    gen = CommandMix(rng=random.Random(job["seed"]), users=job["users"], videos=job["videos"], mix=job["mix"],
                     key_prefix=job["key_prefix"])
    counts: Counter = Counter()

    def one() -> None:
        kind, ui, vid, desired, key = gen.next()
        res = commands.relation_set_state(user_id=gen.users[ui][0], video_id=vid, desired_state=desired,
                                          operation_id=key, device_id=f"bench-{gen.users[ui][0]}")
        gen.observe(ui, vid, res.current.state)
        counts[f"kind:{kind}"] += 1

    deadline = time.time() + 60
    for _ in range(job["warm"]):
        if time.time() < deadline:
            one()
    counts.clear()
    n, stop_counting = 0, count_io(counts, statements=True)
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        while n < job["commands"] and time.time() < deadline:
            one()
            n += 1
        cpu1, wall1 = time.process_time(), time.perf_counter()
    finally:
        stop_counting()
    n = max(n, 1)
    return {"commands": n, "app_cpu_ms": round((cpu1 - cpu0) * 1000 / n, 2),
            "wall_ms": round((wall1 - wall0) * 1000 / n, 2),
            "sql_per_command": {k[4:]: round(v / n, 2) for k, v in sorted(counts.items()) if k.startswith("sql:")},
            "redis_per_command": round(counts["redis"] / n, 2), "pg_statements_per_command": round(counts["pg"] / n, 2)}


def row_text(r: dict) -> str:
    return (f"{r['layer']:<8} {r['variant']:<17} {r['workload']:<8} c={r['clients']:<3} {fmt(r['commands_per_s']):>9} "
            f"cmd/s  p50 {fmt(r['p50_ms'], 2):>7} ms  p99 {fmt(r['p99_ms'], 2):>8} ms  errors {r['errors']}")


def find(rows, layer, variant, workload):
    return next((r for r in rows if (r["layer"], r["variant"], r["workload"]) == (layer, variant, workload)), None)


def cpu_ms_per_command(row: dict | None) -> float | None:
    """App + bench-backend CPU per command: less sensitive to other load on the machine than throughput."""
    if not row or not row.get("resources") or not row["commands_per_s"]:
        return None
    by = row["resources"].get("cores_by_process", {})
    cores = by.get(APP_PROCESS[row["layer"]], 0.0) + by.get("postgres (bench backends)", 0.0)
    return round(cores / row["commands_per_s"] * 1000, 2)


def compute_ratios(rows: list[dict]) -> dict:
    def cps(r):
        return r["commands_per_s"] if r else None

    out: dict = {}
    for layer in ("service", "http"):
        for variant in ("ours", "naive"):
            hot, uni = find(rows, layer, variant, "hot"), find(rows, layer, variant, "uniform")
            key = f"{layer}_{variant}_hot_over_uniform"
            out[key] = ratio(cps(hot), cps(uni))
            # hot and uniform windows of one round run back to back: a paired estimate background load disturbs less
            paired = [round(h / u, 3) for h, u in zip(hot["per_round_commands_per_s"], uni["per_round_commands_per_s"],
                                                      strict=True) if u] if hot and uni else []
            out[key + "_median_of_rounds"] = round(statistics.median(paired), 3) if paired else None
        hot, uni = cpu_ms_per_command(find(rows, layer, "ours", "hot")), cpu_ms_per_command(find(rows, layer, "ours",
                                                                                                   "uniform"))
        out[f"{layer}_ours_cpu_ms_per_command"] = {"uniform": uni, "hot": hot}
        out[f"{layer}_ours_hot_over_uniform_cpu_normalised"] = ratio(uni, hot)
    like = [r for r in rows if r["variant"] == "like_tx"]
    ceiling = max(like, key=lambda r: r["commands_per_s"], default=None)
    out["pgbench_naive_hot_over_like_tx_by_clients"] = {
        n["clients"]: ratio(n["commands_per_s"], u["commands_per_s"])
        for n in rows if n["variant"] == "like_tx_naive_hot" for u in like if u["clients"] == n["clients"]}
    out["pgbench_ceiling_tps"], out["pgbench_ceiling_clients"] = cps(ceiling), ceiling and ceiling["clients"]
    for layer in ("service", "http"):
        out[f"{layer}_ours_uniform_over_pgbench_ceiling"] = ratio(cps(find(rows, layer, "ours", "uniform")),
                                                                  cps(ceiling))
    return out


def ratios_text(x: dict) -> str:
    def f(key):
        return fmt(x.get(key), 2)

    return "\n".join([
        f"- hot/uniform, service layer: ours **{f('service_ours_hot_over_uniform')}** (median of the paired rounds "
        f"{f('service_ours_hot_over_uniform_median_of_rounds')}), naive **{f('service_naive_hot_over_uniform')}** "
        f"({f('service_naive_hot_over_uniform_median_of_rounds')}); HTTP: ours {f('http_ours_hot_over_uniform')}, "
        f"naive {f('http_naive_hot_over_uniform')}",
        f"- ours hot/uniform normalised by CPU per command (uniform ÷ hot): service "
        f"**{f('service_ours_hot_over_uniform_cpu_normalised')}**, "
        f"HTTP {f('http_ours_hot_over_uniform_cpu_normalised')}",
        "- naive hot counter as raw SQL, naive-hot tps ÷ like_tx tps at the same clients: " + (", ".join(
            f"{c} clients **{fmt(v, 2)}**" for c, v in x["pgbench_naive_hot_over_like_tx_by_clients"].items()) or "-"),
        f"- ours (uniform) ÷ the raw SQL ceiling ({fmt(x.get('pgbench_ceiling_tps'))} tps at "
        f"{x.get('pgbench_ceiling_clients')} clients): service **{f('service_ours_uniform_over_pgbench_ceiling')}**, "
        f"HTTP {f('http_ours_uniform_over_pgbench_ceiling')}"])


def probe_text(p: dict | None, rows: list[dict]) -> str:
    http, svc = find(rows, "http", "ours", "uniform") or {}, find(rows, "service", "ours", "uniform") or {}
    sizes = (f"**Message sizes:** HTTP request body {http.get('avg_request_body_bytes', '-')} B, response "
             f"{http.get('avg_response_body_bytes', '-')} B; outbox event payload "
             f"{svc.get('avg_outbox_payload_bytes')} B of JSON.")
    if not p:
        return sizes
    sql = ", ".join(f"{k} {v:g}" for k, v in p["sql_per_command"].items())
    return (f"**Cost of one command** (one client, {p['commands']} commands of the mix): {p['wall_ms']} ms wall, "
            f"{p['app_cpu_ms']} ms app CPU; {p['pg_statements_per_command']:g} statements sent to PostgreSQL, "
            f"{sum(p['sql_per_command'].values()):g} of them through Django's cursor ({sql}); "
            f"{p['redis_per_command']:g} Redis calls. " + sizes)


def report(result: dict) -> list[str]:
    rows = result["rows"]
    return [md_table(["layer", "variant", "workload", "clients:", "commands/s:", "p50 ms:", "p99 ms:", "errors:",
                          "changed:", "replayed:", "app + PG CPU ms/cmd:"],
                         ([r["layer"], r["variant"], r["workload"], r["clients"], fmt(r["commands_per_s"]),
                           fmt(r["p50_ms"], 2), fmt(r["p99_ms"], 2), r["errors"],
                           f"{(r.get('changed_share') or 0):.0%}", f"{(r.get('replayed_share') or 0):.0%}",
                           fmt(cpu_ms_per_command(r), 2)] for r in rows)),
            "**Ratios**\n\n" + ratios_text(result["ratios"]),
            resources_table((f"{r['layer']} {r['variant']} {r['workload']} c={r['clients']}", r.get("resources"))
                            for r in rows), probe_text(result.get("single_client_probe"), rows)]


def headline(result: dict) -> dict:
    x, rows = result["ratios"], result["rows"]
    uni, hot = find(rows, "service", "ours", "uniform"), find(rows, "service", "ours", "hot")
    return {"goal": "hot ÷ uniform ≥ 0.9 (service layer)",
            "figure": f"{fmt(uni and uni['commands_per_s'], 0)} cmd/s uniform, {fmt(hot and hot['commands_per_s'], 0)}"
                      f" hot; hot ÷ uniform {fmt(x['service_ours_hot_over_uniform'], 2)} (naive "
                      f"{fmt(x['service_naive_hot_over_uniform'], 2)})",
            "ceiling": f"pgbench {fmt(x['pgbench_ceiling_tps'], 0)} tps",
            "ratio": fmt(x["service_ours_uniform_over_pgbench_ceiling"], 2)}


def main(argv=None) -> int:
    run, workdir, users, videos = start(argv)
    args = run.args
    rows, probe, sampler = [], None, ResourceSampler()
    variants = [False] if args.skip_naive else [False, True]
    try:
        with Pool(max(args.procs, 1 if args.skip_http else args.http_clients), name="client") as pool:
            rows += run_layer(pool, sampler, args, layer="service", variants=variants, users=users, videos=videos)
            if args.probe_commands:
                reset_state()
                (probe,) = pool.run([{"role": "bench.command.bench:cost_probe", "seed": args.seed, "warm": 50,
                                      "users": users[:max(1, len(users) // args.procs)], "videos": videos,
                                      "mix": args.mix_shares, "key_prefix": f"bprobe{secrets.token_hex(3)}",
                                      "commands": args.probe_commands}], timeout=150)
            if not args.skip_http:
                # Both servers run side by side (an idle one costs no CPU), so the rounds can alternate.
                with contextlib.ExitStack() as stack:
                    servers = {naive: stack.enter_context(Gunicorn(APPS[naive], args.gunicorn_workers, workdir))
                               for naive in variants}
                    rows += run_layer(pool, sampler, args, layer="http", variants=variants, users=users,
                                      videos=videos, servers=servers)
        if not args.skip_pgbench and pgbench_found(run):
            rows += [pgbench_row(args, sampler, naive_hot=False, clients=c) for c in args.pgbench_clients_list]
            if not args.skip_naive:
                rows += [pgbench_row(args, sampler, naive_hot=True, clients=c)
                         for c in driver.int_list(args.pgbench_naive_clients)]
        reset_state()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = {"rows": rows, "ratios": compute_ratios(rows), "single_client_probe": probe,
              "meta": {"hot_video": HOT_VIDEO, "mix": args.mix_shares}}
    return driver.finish(run, result, report=report, headline=headline)


if __name__ == "__main__":
    sys.exit(main())
