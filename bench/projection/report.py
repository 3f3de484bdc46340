"""The report of the count-pipeline benchmark: hot/uniform ratios, the tables on stdout and the generated part
of the "Count projection pipeline" section of docs/benchmarks.md."""

from __future__ import annotations

from bench.common import doc_section, fmt, machine_text, md_table, pooled, print_blocks, ratio, write_generated
from bench.dataset import HOT_VIDEO
from bench.sampler import cpu_text, waits_text

DOC_BEGIN = "<!-- bench:projection:generated:begin -->"
DOC_END = "<!-- bench:projection:generated:end -->"


def compute_ratios(rows: list[dict], pipeline_procs: int) -> dict:
    """hot ÷ uniform: commands/s and events applied/s of the sustained window; replay applied/s per
    variant and process count (pooled over the rounds, and per round in run order)."""
    by = {r["workload"]: r for r in rows}
    out: dict = {"pipeline_procs": pipeline_procs, "capacity": {}}
    if "hot" not in by or "uniform" not in by:
        return out
    hot, uni = by["hot"], by["uniform"]

    out["commands_hot_over_uniform"] = ratio(hot["commands_per_s"], uni["commands_per_s"])
    out["ours_sustained_hot_over_uniform"] = ratio(hot["events_applied_per_s"], uni["events_applied_per_s"])
    for procs, hcell in hot.get("capacity", {}).items():
        ucell = uni.get("capacity", {}).get(procs)
        if not ucell:
            continue
        out["capacity"][procs] = {
            variant: {"hot_over_uniform": ratio(hcell[variant]["applied_per_s"], ucell[variant]["applied_per_s"]),
                      "per_round": [round(h / u, 3) for h, u in zip(hcell[variant]["per_round"],
                                                                    ucell[variant]["per_round"], strict=False)
                                    if h and u]}
            for variant in ("ours", "naive")}
    head = out["capacity"].get(str(pipeline_procs), {})
    out["ours_capacity_hot_over_uniform"] = head.get("ours", {}).get("hot_over_uniform")
    out["naive_capacity_hot_over_uniform"] = head.get("naive", {}).get("hot_over_uniform")
    for key in ("ours_sustained_hot_over_uniform", "ours_capacity_hot_over_uniform"):
        out[key.replace("_hot_over_uniform", "_passes")] = None if out[key] is None else out[key] >= 0.9
    return out


def exact_overall(rows: list[dict]) -> bool:
    ok = True
    for r in rows:
        ex = r["exactness"]
        ok &= bool(ex["buckets_exact"] and ex["snapshot_exact"] and r["drained"])
        ok &= all(rep["exact"] for rep in r["replays"])
    return ok


def sustained_table(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        ex = r["exactness"]
        exact = "EXACT" if ex["buckets_exact"] and ex["snapshot_exact"] else "**MISMATCH**"
        cells.append([
            r["workload"], fmt(r["commands_per_s"]), fmt(r["events_produced_per_s"]), fmt(r["events_applied_per_s"]),
            f"{fmt(r['lag_p50_ms'], 0)} / {fmt(r['lag_p99_ms'], 0)}",
            f"{fmt(r['publish_lag_p50_ms'], 0)} / {fmt(r['publish_lag_p99_ms'], 0)}",
            f"{fmt(r['display_p50_ms'], 0)} / {fmt(r['display_p99_ms'], 0)} ({r['display_samples']}, "
            f"{r['display_timeouts']})",
            f"{fmt(r['view_p50_ms'], 0)} / {fmt(r['view_p99_ms'], 0)}", fmt(r["drain_s"]),
            f"{exact} ({ex['liked_total']:,} likes, {ex['videos_checked']:,} videos)"])
    return md_table(["workload", "commands/s:", "events produced/s:", "events applied/s:",
                     "projection lag p50 / p99 ms:", "publish lag p50 / p99 ms:",
                     "commit→displayCount p50 / p99 ms (probes, timeouts):", "same without L1 p50 / p99 ms:",
                     "drain s:", "exact"], cells)


def capacity_table(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        for procs, cell in r.get("capacity", {}).items():
            mine = [x for x in r["replays"] if str(x["procs"]) == procs]
            exact = "EXACT" if all(x["exact"] for x in mine) else "**MISMATCH**"

            def rounds(variant, cell=cell):
                return ", ".join(fmt(x, 0) for x in cell[variant]["per_round"])

            def failures(variant, mine=mine):
                reps = [x for x in mine if x["variant"] == variant]
                groups = sum(sum(x.get("group_failures", {}).values()) for x in reps)
                return f"{groups} / {sum(x.get('pg_deadlocks', 0) for x in reps)}"

            cells.append([r["workload"], procs, f"{cell['ours']['backlog'] or 0:,}",
                          f"**{fmt(cell['ours']['applied_per_s'], 0)}** ({rounds('ours')})",
                          f"**{fmt(cell['naive']['applied_per_s'], 0)}** ({rounds('naive')})",
                          failures("ours"), failures("naive"), exact])
    return md_table(["workload", "processes:", "backlog events:", "ours applied/s (per round):",
                     "naive single-row applied/s (per round):",
                     "ours: groups failed and replayed / PG deadlocks:", "naive: same:", "exact after every replay"],
                    cells)


def _verdict(x) -> str:
    return "n/a" if x is None else ("PASS (≥ 0.9)" if x >= 0.9 else "FAIL (< 0.9)")


def ratios_text(ratios: dict) -> str:
    def f(x):
        return "n/a" if x is None else f"{x:.2f}"

    def rounds(vals):
        return ", ".join(f"{v:.2f}" for v in vals or []) or "n/a"

    pp = str(ratios.get("pipeline_procs"))
    lines = [
        f"- **ours, projection throughput hot/uniform at saturation with the pipeline's {pp} projector processes "
        f"(backlog replay): {f(ratios.get('ours_capacity_hot_over_uniform'))} — "
        f"{_verdict(ratios.get('ours_capacity_hot_over_uniform'))}**",
        f"- ours, events applied/s hot/uniform under the sustained load: "
        f"**{f(ratios.get('ours_sustained_hot_over_uniform'))} — "
        f"{_verdict(ratios.get('ours_sustained_hot_over_uniform'))}** (bounded by the arrival rate; commands/s "
        f"hot/uniform {f(ratios.get('commands_hot_over_uniform'))})",
    ]
    for procs, cell in ratios.get("capacity", {}).items():
        lines.append(
            f"- {procs} processes: ours hot/uniform **{f(cell['ours']['hot_over_uniform'])}** "
            f"({_verdict(cell['ours']['hot_over_uniform'])}; paired rounds {rounds(cell['ours']['per_round'])}); "
            f"naive single-row counter hot/uniform **{f(cell['naive']['hot_over_uniform'])}** "
            f"(paired rounds {rounds(cell['naive']['per_round'])})")
    return "\n".join(lines)


def resources_table(rows: list[dict]) -> str:
    cells = []

    def line(name, res):
        if res:
            cells.append([name, f"{res['cores_busy']:.2f}", cpu_text(res, 0.05), waits_text(res, 3)])

    for r in rows:
        line(f"{r['workload']} sustained", r.get("resources"))
        for procs in r.get("capacity", {}):
            for variant in ("ours", "naive"):
                reps = [x for x in r["replays"] if x["variant"] == variant and str(x["procs"]) == procs
                        and x.get("resources")]
                if reps:
                    line(f"{r['workload']} replay {variant} x{procs} (round {reps[0]['round'] + 1})",
                         reps[0]["resources"])
    return md_table(["phase", "machine busy (cores):", "CPU by process (cores)",
                     "top bench-DB backend states (share of samples)"], cells)


def loops_text(rows: list[dict]) -> str:
    parts = []
    for r in rows:
        pubs, projs, snap = r["publishers"], r["projectors"], r["snapshot_loop"]
        batches = sum(p.get("batches", 0) for p in pubs)
        sent = sum(p.get("sent", 0) for p in pubs)
        calls = sum(p.get("calls", 0) for p in projs)
        (errors,) = pooled([*pubs, *projs, snap], "errors")
        statuses, logged = pooled(projs, "statuses", "logged")
        retries = sum(p.get("retry", 0) + p.get("uncertain", 0) + p.get("dead", 0) for p in pubs)
        logged = dict(logged)
        parts.append(
            f"- {r['workload']}: publishers sent {sent:,} events in {batches:,} batches "
            f"({sent / batches if batches else 0:.1f} per batch, {retries} retry/uncertain/dead); projectors made "
            f"{calls:,} consume_partition passes (statuses {dict(statuses)}), dead letters "
            f"{r['exactness']['dead_letters']}, frozen buckets {r['exactness']['frozen_buckets']}, logged "
            f"{logged or 0}, PG deadlocks {r.get('pg_deadlocks')}; snapshot loop "
            f"{snap.get('runs', 0)} runs, {snap.get('videos', 0):,} video refreshes ({snap.get('skipped_hot', 0)} "
            f"hot skips), p50/p99 {fmt(snap.get('p50_ms'), 0)}/{fmt(snap.get('p99_ms'), 0)} ms per run; command "
            f"p50/p99 {fmt(r['command_p50_ms'], 1)}/{fmt(r['command_p99_ms'], 1)} ms, errors {r['command_errors']}; "
            f"probe errors {r['probe_errors'] or 0}; loop errors {dict(errors) or 0}; served displayCount "
            f"{'exact' if r['exactness'].get('served_exact') else 'NOT exact'} "
            f"(sources {r['exactness'].get('served_sources')})")
    return "\n".join(parts)


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    mix = ", ".join(f"{k} {v:g}%" for k, v in meta["mix"].items())
    exact = "EXACT" if result["exact"] else "MISMATCH (see bench/results/projection_latest.json)"
    machine = machine_text(spec, pg=("max_connections", "shared_buffers", "synchronous_commit", "fsync"),
                           stack=("python", "django"),
                           load=f"Load average when the run started: {spec.get('loadavg_at_start')}; when it ended: "
                                f"{meta.get('loadavg_at_end')}.")
    return doc_section(DOC_BEGIN, DOC_END, writer="bench/projection_bench.py", meta=meta, machine=machine,
                       wall="the driver", blocks=[
        f"**Parameters:** {meta['users']} users; uniform: {meta['videos']} videos, hot: 1 video (`{HOT_VIDEO}`) "
        f"receiving every like; command mix {mix}, fresh operation ids; {meta['procs']} command processes; "
        f"warm-up {meta['warmup_s']:g} s, then {meta['duration_s']:g} s measured per workload; pipeline "
        f"processes: {meta['publishers']} publishers (one per relation shard), {meta['projectors']} projector "
        f"processes over {meta['stream_partitions']} stream partitions (batch {meta['projector_batch']}, 10 "
        f"batches per pass), 1 snapshot loop every {meta['snapshot_interval_s']:g} s (hot videos at most every "
        f"{meta['count_hot_refresh_s']:g} s), 1 probe ({meta['probe_videos']} probe videos per workload, a "
        f"commit every {meta['probe_interval_s']:g} s, polled every {meta['probe_poll_s']:g} s, timeout "
        f"{meta['probe_timeout_s']:g} s); backlog replays with {', '.join(str(x) for x in meta['replay_procs'])} "
        f"processes, {meta['replay_rounds']} round(s) per variant and process count (a variant's hot and uniform "
        f"replays back to back, the order alternating). "
        f"Plain loops, no Celery; rate limiting and nudges off.",
        "**Sustained load with the pipeline running** (figures of the measured window):",
        sustained_table(result["rows"]),
        "**Projection capacity: the workload's whole stream projected again from an empty state** "
        "(the same process count for both variants; applied/s = events ÷ time from the common start to the "
        "last progress, pooled over the rounds):",
        capacity_table(result["rows"]),
        "**Ratios**",
        ratios_text(result["ratios"]),
        f"**Exactness:** {exact}: for every video, sum of vbuckets = durable display snapshot = LIKED relations in "
        "the shards after the drain, and after every replay (ours: vbuckets; naive: its counter row).",
        "**The loops:**",
        loops_text(result["rows"]),
        "**Where the time went** (CPU from /proc and waits of the bench databases' backends from "
        "pg_stat_activity every 0.25 s, over the measured window and over the first replay of each variant "
        "and process count):",
        resources_table(result["rows"]),
    ])


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                    heading="## Count projection pipeline\n\nRun `./bench/projection.sh`.")


def print_report(result: dict) -> None:
    ratios = result["ratios"]
    print_blocks(sustained_table(result["rows"]), capacity_table(result["rows"]), ratios_text(ratios),
                 resources_table(result["rows"]), loops_text(result["rows"]))
    bar = "=" * 100
    print(bar)
    pp = ratios.get("pipeline_procs")

    def show(value, gate=True):
        shown = "n/a" if value is None else f"{value:.2f}"
        return shown + (f"  {_verdict(value)}" if gate and value is not None else "")

    print(f"  ours: projection throughput hot/uniform, saturated replay, {pp} processes".ljust(78)
          + show(ratios.get("ours_capacity_hot_over_uniform")))
    print("  ours: events applied/s hot/uniform, sustained load".ljust(78)
          + show(ratios.get("ours_sustained_hot_over_uniform")))
    for procs, cell in ratios.get("capacity", {}).items():
        if procs != str(pp):
            print(f"  ours: projection throughput hot/uniform, saturated replay, {procs} processes".ljust(78)
                  + show(cell["ours"]["hot_over_uniform"]))
    for procs, cell in ratios.get("capacity", {}).items():
        print(f"  naive single-row counter: hot/uniform, saturated replay, {procs} processes".ljust(78)
              + show(cell["naive"]["hot_over_uniform"], gate=False))
    print(f"  final counts vs relation facts: {'EXACT' if result['exact'] else 'MISMATCH'}")
    print(bar)
    print()
