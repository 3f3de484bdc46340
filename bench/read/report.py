"""The report of the read-path benchmark: the tables on stdout and the "Read path" generated section of
docs/benchmarks.md."""

from __future__ import annotations

import os

from bench.common import doc_section, fmt, interference_blocks, machine_text, md_table, print_blocks, write_generated
from bench.sampler import cpu_text, waits_text

DOC_BEGIN = "<!-- bench:read:generated:begin -->"
DOC_END = "<!-- bench:read:generated:end -->"
SECTION_TITLE = "## Read path (issue #4)"


def batch_table(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        res = r.get("resources") or {}
        hit = "-" if r["relation_cache_hit_ratio"] is None else f"{r['relation_cache_hit_ratio'] * 100:.0f}%"
        sql = ("-" if r["sql_shards_per_request"] is None
               else f"{r['sql_shards_per_request']:.2f} + {r['sql_default_per_request'] or 0:.2f}")
        cells.append([r["layer"], r["case"], r["clients"], fmt(r["requests_per_s"]), fmt(r["p50_ms"], 2),
                      fmt(r["p99_ms"], 2), r["errors"], r["wrong"], hit, sql,
                      fmt(r["redis_round_trips_per_request"], 2), fmt(r.get("app_cpu_ms_per_request"), 2),
                      fmt(r.get("pg_backend_cpu_ms_per_request"), 2),
                      f"{cpu_text(res, 0.1)} (machine busy {res.get('cores_busy', 0):.2f})"])
    return md_table(["layer", "case", "clients:", "requests/s:", "p50 ms:", "p99 ms:", "errors:", "wrong:",
                     "relation cache hits:", "SQL/request shards + default", "Redis round trips/request:",
                     "app CPU ms/request:", "PG backend CPU ms/request:", "CPU (cores) by process"], cells)


def list_table(lst: dict | None) -> str:
    if not lst:
        return "(not run)"
    names = {"ours": "ours: liked_page_list + cursor decode/encode", "offset": "OFFSET baseline (raw SQL)",
             "offset+filter": "OFFSET + the same visibility filter"}
    lines = [md_table(["variant", "page:", "p50 ms:", "p99 ms:", "timed fetches:"],
                      ([names[r["variant"]], r["page"], fmt(r["p50_ms"], 3), fmt(r["p99_ms"], 3), r["fetches"]]
                       for r in lst["rows"]))]
    d = lst["deep_page"]
    rp50, rp99 = lst["ratio_p50_deep_over_1"], lst["ratio_p99_deep_over_1"]
    e = lst["explain"]

    def rows_read(x):
        return ", ".join(f"{t} {i or ''} {n} rows".replace("  ", " ") for t, i, n in x["scan_nodes"])

    lines += ["", f"Page {d} / page 1: ours **{fmt(rp50['ours'], 2)}** (p50), {fmt(rp99['ours'], 2)} (p99); "
                  f"OFFSET **{fmt(rp50['offset'], 2)}** (p50), {fmt(rp99['offset'], 2)} (p99); OFFSET + filter "
                  f"{fmt(rp50['offset+filter'], 2)} (p50), {fmt(rp99['offset+filter'], 2)} (p99).",
              "",
              f"EXPLAIN ANALYZE of page {d}: ours {e['ours_page_deep']['execution_ms']} ms, "
              f"{rows_read(e['ours_page_deep'])}, {e['ours_page_deep']['shared_buffers_hit']} buffer hits; "
              f"OFFSET {e['offset_page_deep']['execution_ms']} ms, {rows_read(e['offset_page_deep'])}, "
              f"{e['offset_page_deep']['shared_buffers_hit']} buffer hits."]
    return "\n".join(lines)


def rebuild_text(rb: dict | None) -> str:
    if not rb:
        return "(not run)"
    mib = 2 ** 20
    gk = rb["generation_keys"]
    delta = rb["redis_used_memory_delta_bytes"]
    lines = [md_table(
        ["relations:", "users x videos", "per shard", "rebuild s:", "relations/s:", "status", "sample check",
         "Redis used_memory delta:", "generation keys (MEMORY USAGE estimate)"],
        [[f"{rb['relations']:,}", f"{rb['users']:,} x {rb['relations_per_user']}",
          ", ".join(f"{a} {n:,}" for a, n in rb["per_shard"].items()), rb["seconds"], f"{rb['relations_per_s']:,}",
          rb["status"], f"{rb['sampled']} sampled, {rb['mismatches']} mismatches",
          f"{delta / mib:.1f} MiB ({delta / max(1, rb['relations']):.0f} B/relation)",
          f"{gk['keys']:,} hashes, ~{gk['estimated_bytes'] / mib:.1f} MiB ({gk['avg_key_bytes']} B each)"]])]
    if rb.get("extrapolated_1m_seconds"):
        lines += ["", f"**1,000,000 relations were not run**: extrapolated linearly from {rb['relations']:,}, the "
                      f"rebuild would take about **{rb['extrapolated_1m_seconds']} s**."]
    if rb.get("calibration"):
        c = rb["calibration"]
        lines += ["", f"Calibration first (auto mode): {c['relations']:,} relations rebuilt in {c['seconds']} s "
                      f"({c['relations_per_s']:,}/s), projecting {c['projected_1m_seconds']} s for 1,000,000 against "
                      f"a budget of {c['budget_seconds']:.0f} s."]
    res = rb.get("resources") or {}
    if res:
        cpu, waits = cpu_text(res, 0.05), waits_text(res, 4)
        lines += ["", f"Where the rebuild's time went (CPU in cores over the rebuild, machine busy "
                      f"{res['cores_busy']:.2f} of {os.cpu_count()}): {cpu}. Bench backend states: {waits or 'n/a'}."]
    floor = sum(v["floor_table_bytes"] for v in rb["tables"].values())
    lines += ["", f"Data insert (generate_series, both shards): {rb['insert_seconds']} s. The rebuild also wrote the "
                  f"durable floor (LIKE_RELATION_CACHE_PROJECTION) on the shards: {floor / mib:.0f} MiB with indexes. "
                  f"Redis db size grew by {rb['redis_keys_delta']:,} keys."]
    return "\n".join(lines)


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    machine = machine_text(spec, pg=("shared_buffers", "synchronous_commit"), stack=("python", "django", "drf"),
                           load=f"Load average at the start {spec.get('loadavg_at_start')}, at the end "
                                f"{meta.get('loadavg_at_end')}.")
    return doc_section(DOC_BEGIN, DOC_END, writer="bench/read_bench.py", meta=meta, machine=machine, blocks=[
        f"**Parameters:** {meta['users']} users, each with a feed of {meta['feed']} of {meta['videos']} videos "
        f"(30% LIKED, 10% UNLIKED, 60% never acted on); {meta['batch']} ids per request; warm-up "
        f"{meta['warmup_s']:g} s before each {meta['duration_s']:g} s window; {meta['rounds']} windows per row; "
        f"service layer {meta['procs']} processes, HTTP {meta['http_clients']} client processes against gunicorn "
        f"--workers {meta['gunicorn_workers']}. LIKES_NUDGE_ENABLED=false, rate limiting off.",
        *interference_blocks(meta),
        "**1. Batch query (20 ids)**",
        batch_table(result["batch"]["rows"]),
        "Relation cache fills for the warm case (relation_cache_repair of every feed): "
        + (", ".join(f"{f['entries']:,} entries in {f['seconds']} s" for f in result["batch"]["fills"]) or "none"),
        f"**2. My-likes page, user with {result['list']['likes']:,} likes, limit {result['list']['limit']}**"
        if result.get("list") else "**2. My-likes page** (not run)",
        list_table(result.get("list")),
        "**3. Relation-cache rebuild** (`relation_cache_rebuild()` end to end)",
        rebuild_text(result.get("rebuild")),
    ])


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                    heading=f"{SECTION_TITLE}\n\nRun `./bench/read.sh`.")


def print_report(result: dict) -> None:
    print_blocks(batch_table(result["batch"]["rows"]), list_table(result.get("list")),
                 rebuild_text(result.get("rebuild")))
