"""The report of the command-path benchmark: the ratios (hot/uniform, naive, the pgbench ceiling, CPU per
command), the tables on stdout and the generated section of docs/benchmarks.md."""

from __future__ import annotations

import statistics

from bench.common import doc_section, fmt, machine_text, md_table, print_blocks, write_generated
from bench.sampler import cpu_text, waits_text

DOC_BEGIN = "<!-- bench:generated:begin -->"
DOC_END = "<!-- bench:generated:end -->"
# The process group that runs the application code in each layer (for CPU per command).
_APP_PROCESS = {"service": "bench clients", "http": "gunicorn workers", "pgbench": "pgbench"}


def fmt_row(r: dict) -> str:
    return (f"{r['layer']:<8} {r['variant']:<15} {r['workload']:<8} c={r['clients']:<3} "
            f"{fmt(r['commands_per_s']):>9} cmd/s  p50 {fmt(r['p50_ms'], 2):>7} ms  "
            f"p99 {fmt(r['p99_ms'], 2):>8} ms  "
            f"errors {r['errors']}  changed {fmt((r.get('changed_share') or 0) * 100, 0)}%")


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
    return md_table(
        ["layer", "variant", "workload", "clients:", "commands/s:", "p50 ms:", "p99 ms:", "errors:", "changed:",
         "replayed:"],
        ([r["layer"], r["variant"], r["workload"], r["clients"], fmt(r["commands_per_s"]), fmt(r["p50_ms"], 2),
          fmt(r["p99_ms"], 2), r["errors"], f"{fmt((r.get('changed_share') or 0) * 100, 0)}%",
          f"{fmt((r.get('replayed_share') or 0) * 100, 0)}%"] for r in rows))


def resources_table(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        res = r.get("resources") or {}
        if not res:
            continue
        by = res.get("cores_by_process", {})
        cps = r["commands_per_s"] or 0

        def per_cmd(cores, cps=cps):
            return "-" if not cps or cores is None else f"{cores / cps * 1000:.2f}"

        cells.append([f"{r['layer']} {r['variant']} {r['workload']} c={r['clients']}", f"{res['cores_busy']:.2f}",
                      per_cmd(by.get(_APP_PROCESS[r["layer"]])), per_cmd(by.get("postgres (bench backends)")),
                      cpu_text(res, 0.05), waits_text(res, 3)])
    return md_table(["run", "machine busy (cores):", "app CPU ms/cmd:", "PG backend CPU ms/cmd:",
                     "CPU by process (cores)", "top bench-DB backend states (share of samples)"], cells)


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
    sent = probe.get("pg_statements_per_command")
    sent_text = f"{sent:g} statements sent to PostgreSQL in all (any cursor), " if sent is not None else ""
    return (f"One client, no concurrency, {probe['commands']} commands of the same mix: "
            f"{probe['wall_ms']} ms wall and {probe['app_cpu_ms']} ms of app-process CPU per command; "
            f"{sent_text}{total:g} of them through Django's cursor ({sql}; a transaction's implicit BEGIN and "
            f"COMMIT come on top; the command's one-statement function runs in autocommit) and "
            f"{probe['redis_per_command']:g} Redis calls.")


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
        f"({fmt(ratios.get('pgbench_ceiling_tps'))} tps at {ratios.get('pgbench_ceiling_clients')} clients): "
        f"**{f(ratios.get('service_ours_uniform_over_pgbench_ceiling'))}**"
        f"  (HTTP: {f(ratios.get('http_ours_uniform_over_pgbench_ceiling'))})",
    ])


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    mix = ", ".join(f"{k} {v:g}%" for k, v in meta["mix"].items())
    machine = machine_text(spec, pg=("max_connections", "shared_buffers", "synchronous_commit", "fsync"),
                           stack=("python", "django", "drf"), extra=f"; {spec.get('pgbench')}",
                           load=f"Load average when the run started: {spec.get('loadavg_at_start')}.")
    return doc_section(DOC_BEGIN, DOC_END, writer="bench/command_bench.py", meta=meta, machine=machine, blocks=[
        f"**Parameters:** {meta['users']} users, {meta['videos']} uniform videos + 1 hot video; command mix {mix}; "
        f"warm-up {meta['warmup_s']:g} s before every window; each row pools {meta['rounds']} windows of "
        f"{meta['duration_s']:g} s (ABBA order); service layer "
        f"{meta['procs']} processes; HTTP {meta['http_clients']} client processes against gunicorn "
        f"--workers {meta['gunicorn_workers']}; pgbench {meta['pgbench_duration_s']} s per row on one shard. "
        f"Rate limiting off.",
        markdown_table(result["rows"]),
        "**Ratios**",
        ratios_text(result["ratios"]),
        "**Where the time went** (sampled during each measured window: CPU from /proc, waits of the bench "
        "database backends from pg_stat_activity every 0.25 s):",
        resources_table(result["rows"]),
        "**Message sizes:** " + sizes_text(result["rows"]),
        "**Cost of one command:** " + probe_text(result.get("single_client_probe")),
    ])


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END, heading="## Measured results",
                    empty="# Benchmarks\n\nRun `./bench/run.sh`.\n")


def print_report(result: dict) -> None:
    print_blocks(markdown_table(result["rows"]), ratios_text(result["ratios"]), resources_table(result["rows"]),
                 probe_text(result.get("single_client_probe")))
