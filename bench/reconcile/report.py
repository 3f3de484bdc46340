"""The report of the reconciliation benchmark: the tables on stdout and the generated part of the
"Reconciliation" section of docs/benchmarks.md."""

from __future__ import annotations

from statistics import median

from bench.common import doc_section, fmt, machine_text, md_table, print_blocks, ratio, write_generated
from bench.sampler import cpu_text, waits_text

DOC_BEGIN = "<!-- bench:reconcile:generated:begin -->"
DOC_END = "<!-- bench:reconcile:generated:end -->"
VARIANT_NAMES = {"ours": "ours: coverage run (REC-3/4)", "naive": "naive: COUNT(*) per video",
                 "ceiling": "ceiling: one GROUP BY per database"}


def coverage_summary(result: dict) -> dict:
    """Per variant: relations/s idle (median over the rounds, and each round) and under load; ratios."""
    idle = result.get("coverage_idle") or []
    load = (result.get("coverage_load") or {}).get("checks") or []
    out: dict = {}
    for variant in ("ours", "naive", "ceiling"):
        rounds = [r["relations_per_s"] for r in idle if r["variant"] == variant and r.get("relations_per_s")]
        under = next((r for r in load if r["variant"] == variant), None)
        out[variant] = {"idle_per_s": round(median(rounds), 1) if rounds else None, "idle_rounds": rounds,
                        "load_per_s": under["relations_per_s"] if under else None}
    for where in ("idle_per_s", "load_per_s"):
        out[f"ours_over_ceiling_{where[:-6]}"] = ratio(out["ours"][where], out["ceiling"][where])
        out[f"ours_over_naive_{where[:-6]}"] = ratio(out["ours"][where], out["naive"][where])
    return out


def seed_table(result: dict) -> str:
    s, v = result["seed"], result["seed_check"]
    plan = s["plan"]
    ident = result["identity_sample"]
    return md_table(
        ["relations:", "regular videos × relations:", "hot video likes:", "outbox rows (SENT):", "projection rows:",
         "vbuckets:", "seeded in s:", "routing sample", "identity on a sample"],
        [[f"{s['relations']:,}", f"{plan['videos']:,} × {plan['per_video']}", f"{plan['hot']:,}", f"{s['events']:,}",
          f"{s['projected']:,}", f"{s['buckets']:,}", fmt(s["seconds"]),
          f"{'ok' if v['ok'] else 'WRONG ' + str(v['wrong'])} ({v['sampled']:,} relations)",
          f"{ident['status']} ({ident['checked']:,} videos, {ident['diffs']} diffs)"]])


def _verdict(r: dict) -> str:
    if r["variant"] == "ours":
        return f"{r['status']}, {r['diffs']} diffs, {r['skipped']} skipped"
    if not r["mismatched_videos"]:
        return "0 videos differ"
    if r.get("load"):  # no wait for events in flight: a video with one is reported as different
        return f"{r['mismatched_videos']} videos differ (false: events in flight)"
    return f"**{r['mismatched_videos']} videos differ**"


def coverage_table(result: dict) -> str:
    cells = []
    for r in result.get("coverage_idle") or []:
        cells.append([VARIANT_NAMES[r["variant"]], f"idle, round {r['round'] + 1}", f"{r['relations']:,}",
                      fmt(r["elapsed_s"], 2), f"**{fmt(r['relations_per_s'], 0)}**", _verdict(r)])
    for r in (result.get("coverage_load") or {}).get("checks") or []:
        cells.append([VARIANT_NAMES[r["variant"]], "under the command load", f"{r['relations']:,}",
                      fmt(r["elapsed_s"], 2), f"**{fmt(r['relations_per_s'], 0)}**", _verdict(r)])
    return md_table(["check", "when", "relations:", "seconds:", "relations/s:", "verdict"], cells)


def ratios_text(summary: dict) -> str:
    def f(x):
        return "n/a" if x is None else f"{x:.3f}"

    o, n, c = summary["ours"], summary["naive"], summary["ceiling"]
    return "\n".join([
        f"- idle (median of the rounds): ours **{fmt(o['idle_per_s'], 0)}** relations/s, naive "
        f"{fmt(n['idle_per_s'], 0)}, ceiling {fmt(c['idle_per_s'], 0)}; ours ÷ ceiling "
        f"**{f(summary['ours_over_ceiling_idle'])}**, ours ÷ naive {f(summary['ours_over_naive_idle'])}",
        f"- under the command load: ours **{fmt(o['load_per_s'], 0)}** relations/s, naive {fmt(n['load_per_s'], 0)}, "
        f"ceiling {fmt(c['load_per_s'], 0)}; ours ÷ ceiling **{f(summary['ours_over_ceiling_load'])}**, "
        f"ours ÷ naive {f(summary['ours_over_naive_load'])}",
    ])


def command_cost_table(result: dict) -> str:
    load = result.get("coverage_load")
    if not load:
        return "(the load phase was skipped)"
    base = load["without_check"]
    cells = [["no check running (the windows before and after)", fmt(base.get("seconds"), 1),
              f"**{fmt(base.get('commands_per_s'))}**", "1.000",
              f"{fmt(base.get('p50_ms'), 1)} / {fmt(base.get('p99_ms'), 1)}", base.get("errors") or 0]]
    for r in load["checks"]:
        c = r["commands"]
        cells.append([f"while {VARIANT_NAMES[r['variant']]} runs", fmt(c["seconds"], 1),
                      f"**{fmt(c['commands_per_s'])}**", fmt(ratio(c["commands_per_s"], base.get("commands_per_s")), 3),
                      f"{fmt(c['p50_ms'], 1)} / {fmt(c['p99_ms'], 1)}", c["errors"] or 0])
    return md_table(["commands through relation_set_state", "seconds:", "commands/s:", "÷ no check:",
                     "p50 / p99 ms:", "errors"], cells)


def exact_table(result: dict) -> str:
    e = result.get("exact")
    if not e:
        return "(the exact phase was skipped)"
    c = e["commands"]
    runs = f"{e['runs_done']} of {e['runs_wanted']}"
    if e["runs_done"] < e["runs_wanted"]:
        runs += " (--exact-budget reached)"
    return md_table(
        ["videos:", "relations compared:", "runs", "verdicts", "barrier held p50 / p99 / max ms:",
         "time to result p50 / p99 s:", "commands (acknowledged/s)", "waited at the barrier (p50 / p99 / max ms)",
         "503 write_barrier", "other errors"],
        [[f"{e['videos']:,}", f"{e['relations_checked'] or 0:,}", runs, e["statuses"],
          f"**{fmt(e['barrier_p50_ms'])} / {fmt(e['barrier_p99_ms'])}** / {fmt(e['barrier_max_ms'])}",
          f"**{fmt(e['result_p50_s'], 2)} / {fmt(e['result_p99_s'], 2)}**",
          f"{c['commands']:,} ({fmt(c['commands_per_s'])}/s)",
          f"{c['waited']:,} ({fmt(c['waited_p50_ms'], 0)} / {fmt(c['waited_p99_ms'], 0)} / "
          f"{fmt(c['waited_max_ms'], 0)})",
          c["barrier_503"], c["errors"] or 0]])


def repair_table(result: dict) -> str:
    rep = result.get("repair")
    if not rep:
        return "(the repair phase was skipped)"
    cells = []
    for r in rep["rounds"]:
        cells.append([r["round"] + 1, f"{r['facts']:,}", f"{r['damaged']:,}", f"{r['coverage_status']} in "
                      f"{fmt(r['coverage_s'], 1)} s", f"**{fmt(r['approve_to_live_s'], 2)}**",
                      fmt(r["approve_to_job_done_s"], 2), f"**{fmt(r['repair_barrier_ms'], 1)}**",
                      fmt(r["verify_barrier_ms"], 1), _probe_cell(r.get("probe")), r["status"],
                      f"{r['served_after']:,} = {r['facts_after']:,}" if r["served_after"] == r["facts_after"]
                      else f"**{r['served_after']:,} ≠ {r['facts_after']:,}**"])
    return md_table(["round:", "hot video likes (facts):", "projection rows removed:", "found by coverage",
                     "approval → live count s:", "approval → job done s:", "repair barrier ms:",
                     "verify (exact) barrier ms:", "no-change probes on the video: waited / 503 / ok (max ms)",
                     "repair", "served = facts after"], cells)


def _probe_cell(p: dict | None) -> str:
    if not p:
        return "-"
    return f"{p['waited']} / {p['barrier_503']} / {p['ok']} ({fmt(p['waited_max_ms'], 0)})"


def repair_text(result: dict) -> str:
    rep = result.get("repair")
    if not rep:
        return ""
    b, d, pb = rep["commands_before"], rep["commands_during"], rep.get("probe_before") or {}
    lines = [f"- the probe on the hot video before the repairs: {pb.get('ok', 0)} no-change commands, "
             f"{fmt(pb.get('commands_per_s'))}/s, p50/p99 {fmt(pb.get('p50_ms'), 1)}/{fmt(pb.get('p99_ms'), 1)} ms",
             f"- the rest of the platform during the repairs (commands on the other videos): "
             f"{fmt(d['commands_per_s'])} commands/s (p50/p99 {fmt(d['p50_ms'], 1)}/{fmt(d['p99_ms'], 1)} ms, "
             f"{d['waited']} waited at a barrier, {d['barrier_503']} got 503, errors {d['errors'] or 0}) against "
             f"{fmt(b['commands_per_s'])} commands/s before (p50/p99 {fmt(b['p50_ms'], 1)}/{fmt(b['p99_ms'], 1)} ms)"]
    for r in rep["rounds"]:
        steps = "; ".join(f"+{t:.2f}s {m}" for t, m in r["said"][:6])
        lines.append(f"- round {r['round'] + 1}: layers found broken {r['layers']}; {r['relations_written']} "
                     f"projection rows rewritten, {r['tail_folded']} tail events folded; the job said: {steps}")
    return "\n".join(lines)


def final_text(result: dict) -> str:
    f = result["final"]
    lost = "none lost" if not f["acknowledged_lost"] else f"{f['acknowledged_lost']} LOST: {f['lost_examples']}"
    return (f"**Final state:** {'EXACT' if f['buckets_exact'] and f['snapshots_exact'] else '**MISMATCH**'} over "
            f"{f['videos']:,} videos ({f['liked']:,} LIKED relations): Σ routed vbuckets = display snapshot = the "
            f"facts{'' if f['buckets_exact'] else ' — buckets: ' + str(f['bucket_mismatches'])}"
            f"{'' if f['snapshots_exact'] else ' — snapshots: ' + str(f['snapshot_mismatches'])}; "
            f"{f['acknowledged']:,} relations acknowledged by a command, "
            f"{lost}.")


def resources_table(result: dict) -> str:
    cells = []
    rows = [*(result.get("coverage_idle") or []), *((result.get("coverage_load") or {}).get("checks") or [])]
    seen = set()
    for r in rows:
        key = (r["variant"], r.get("load"))
        res = r.get("resources")
        if key in seen or not res:
            continue
        seen.add(key)
        cells.append([f"{r['variant']} {'under load' if r.get('load') else 'idle'}", f"{res['cores_busy']:.2f}",
                      cpu_text(res, 0.05), waits_text(res, 3)])
    return md_table(["check", "machine busy (cores):", "CPU by process (cores)",
                     "top bench-DB backend states (share of samples)"], cells)


def loops_text(result: dict) -> str:
    parts = []
    for name, key in (("coverage under load", "coverage_load"), ("exact", "exact"), ("repair", "repair")):
        ph = result.get(key)
        if not ph:
            continue
        lo = ph["loops"]
        snap = (f" (p50/p99 {fmt(lo['snapshot_p50_ms'], 0)}/{fmt(lo['snapshot_p99_ms'], 0)} ms per run)"
                if lo.get("snapshot_p50_ms") is not None else "")
        logged = f", projectors logged {lo['projector_logged']}" if lo.get("projector_logged") else ""
        parts.append(f"- {name}: publishers sent {lo['published']:,}, projectors applied {lo['applied']:,} "
                     f"(statuses {lo['projector_statuses']}){logged}, {lo['snapshot_runs']} snapshot runs{snap}, "
                     f"drained "
                     f"{'in ' + str(lo['drain_s']) + ' s' if lo['drained'] else 'NOT: ' + str(lo['pending'])}, "
                     f"loop errors {lo['loop_errors'] or 0}")
    return "\n".join(parts)


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    summary = result["coverage_summary"]
    mix = ", ".join(f"{k} {v:g}%" for k, v in meta["mix"].items())
    machine = machine_text(spec, pg=("max_connections", "shared_buffers", "synchronous_commit", "fsync"),
                           stack=("python", "django"),
                           load=f"Load average when the run started: {spec.get('loadavg_at_start')}; when it ended: "
                                f"{meta.get('loadavg_at_end')}.")
    blocks = [
        f"**Parameters:** {meta['relations']:,} relations seeded; command load: {meta['procs']} processes calling "
        f"relation_set_state ({mix}, fresh operation ids) over {meta['users']:,} users; pipeline: "
        f"{meta['publishers']} publishers, {meta['projectors']} projector processes, 1 snapshot loop every "
        f"{meta['snapshot_interval_s']:g} s; warm-up {meta['warmup_s']:g} s, load-alone windows of "
        f"{meta['window_s']:g} s; RECONCILE_BATCH_VIDEOS {meta['reconcile_batch_videos']}, "
        f"RECONCILE_COVERAGE_SETTLE_S {meta['coverage_settle_s']:g}, RECONCILE_BARRIER_MAX_MS "
        f"{meta['barrier_max_ms']}, RECONCILE_BARRIER_VIDEO_LOCKS_MAX {meta['barrier_video_locks_max']}. "
        f"Plain loops, no Celery; rate limiting and nudges off.",
        "**The data set** (bulk SQL, then checked):",
        seed_table(result),
        "**1. Coverage throughput** (the whole data set; under load, the command load's new relations too):",
        coverage_table(result),
        ratios_text(summary),
        "**What a check costs the command path** (the same load, the windows of load alone against the time each "
        "check ran):",
        command_cost_table(result),
        "**2. Exact mode under the command load** (the commands on the scope's videos; the scope is above "
        "RECONCILE_BARRIER_VIDEO_LOCKS_MAX, so the barrier is the shard-wide key):",
        exact_table(result),
        "**3. Repair of the hot video** (damaged by hand in SQL, found by coverage, requested by "
        f"`{meta['operator']}`, approved by `{meta['approver']}`, run by the system's job):",
        repair_table(result),
        repair_text(result),
        final_text(result),
        "**The loops:**",
        loops_text(result),
        "**Where the time went** (CPU from /proc and waits of the bench databases' backends from pg_stat_activity "
        "every 0.25 s, over the first run of each check):",
        resources_table(result),
    ]
    if result.get("warnings"):
        blocks.append("**Warnings:** " + "; ".join(result["warnings"]))
    return doc_section(DOC_BEGIN, DOC_END, writer="bench/reconcile_bench.py", meta=meta, machine=machine,
                       wall="the driver", blocks=[b for b in blocks if b])


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                    heading="## Reconciliation (issue 11)\n\nRun `./bench/reconcile.sh`.")


def print_report(result: dict) -> None:
    print_blocks(seed_table(result), coverage_table(result), ratios_text(result["coverage_summary"]),
                 command_cost_table(result), exact_table(result), repair_table(result), repair_text(result),
                 final_text(result), loops_text(result), resources_table(result))
    bar = "=" * 100
    print(bar)
    s = result["coverage_summary"]
    print(f"  coverage relations/s idle: ours {fmt(s['ours']['idle_per_s'], 0)}, naive "
          f"{fmt(s['naive']['idle_per_s'], 0)}, ceiling {fmt(s['ceiling']['idle_per_s'], 0)}; under load: ours "
          f"{fmt(s['ours']['load_per_s'], 0)}")
    e = result.get("exact")
    if e:
        print(f"  exact ({e['videos']:,} videos, {e['runs_done']} runs): barrier p50/p99 {fmt(e['barrier_p50_ms'])}/"
              f"{fmt(e['barrier_p99_ms'])} ms, time to result p50/p99 {fmt(e['result_p50_s'], 2)}/"
              f"{fmt(e['result_p99_s'], 2)} s")
    rep = result.get("repair")
    if rep:
        print("  repair: approval -> live count " + ", ".join(fmt(r["approve_to_live_s"], 2) for r in rep["rounds"])
              + " s; repair barrier " + ", ".join(fmt(r["repair_barrier_ms"], 1) for r in rep["rounds"]) + " ms")
    for w in result.get("warnings") or []:
        print(f"  WARNING: {w}")
    print(bar)
    print()
