"""The report of the recovery-snapshot benchmark: the summary, the tables on stdout, and the generated part of a
"Recovery snapshots" section for docs/benchmarks.md (kept in the result JSON; this benchmark does not write the
docs file)."""

from __future__ import annotations

from bench.common import doc_section, fmt, machine_text, md_table, print_blocks, ratio
from bench.reconcile.report import final_text, seed_table
from bench.sampler import cpu_text, waits_text
from bench.snapshot.phases import pause_summary

DOC_BEGIN = "<!-- bench:snapshot:generated:begin -->"
DOC_END = "<!-- bench:snapshot:generated:end -->"
VARIANT_NAMES = {"ours": "ours: the snapshot_create ops job", "naive": "naive: stop-the-world ORM JSON dump",
                 "ceiling": "ceiling: minimal cut + raw COPY to /dev/null"}
LOAD_NAMES = {"ours": "ours: the restore's load (gzip COPY artifacts -> temp table -> INSERT, checksums)",
              "ceiling": "ceiling: raw COPY FROM of uncompressed text",
              "naive": "naive: ORM bulk_create of the naive JSON dump"}


def _s(ms) -> float | None:
    return None if ms is None else ms / 1000.0


def _mb(n) -> str:
    return "-" if n is None else f"{n / 1e6:,.1f}"


def summary(result: dict) -> dict:
    """The headline figures: per variant idle and under load, the restore against the facts, the ratios."""
    idle = result.get("idle") or []
    builds = result["builds"]
    out: dict = {"idle": {}, "load": {}, "warnings": []}
    for v in ("ours", "naive", "ceiling"):
        rows = [r for r in idle if r["variant"] == v]
        if rows:
            out["idle"][v] = {"build_s": _s(rows[0]["build_ms"]), "paused_ms": rows[0]["paused_ms"],
                              "bytes": rows[0]["bytes"], "rows": rows[0]["rows"]}
        runs = builds["ours"] if v == "ours" else [r for r in builds["baselines"] if r["variant"] == v]
        if runs:
            s = pause_summary(runs)
            s.pop("resources")
            out["load"][v] = s
    i, ld = out["idle"], out["load"]
    out["ratios"] = {
        "idle_build_ours_over_ceiling": ratio(*(i.get(v, {}).get("build_s") for v in ("ours", "ceiling")), nd=2),
        "idle_build_naive_over_ours": ratio(*(i.get(v, {}).get("build_s") for v in ("naive", "ours")), nd=2),
        "load_pause_p50_ours_over_ceiling": ratio(*(ld.get(v, {}).get("paused_p50_ms") for v in ("ours", "ceiling")),
                                                  nd=2),
        "load_pause_p50_naive_over_ours": ratio(*(ld.get(v, {}).get("paused_p50_ms") for v in ("naive", "ours")),
                                                nd=1),
    }
    not_sealed = [r for r in builds["ours"] if r["status"] != "SEALED"]
    if not_sealed:
        out["warnings"].append(f"{len(not_sealed)} of {len(builds['ours'])} builds under load were not SEALED: "
                               + "; ".join(f"{r['snapshot_id']} {r['status']} {r['failure']}" for r in not_sealed[:3]))
    for r in [*idle, *builds["baselines"]]:
        if r["variant"] == "naive" and r["status"] != "DONE":
            out["warnings"].append(f"naive {r['tag']}: {r['failure']}")
    rest = result.get("restore")
    if rest:
        r, f = rest["restore"], rest["facts_all"]
        out["restore"] = {"status": r["status"], "approve_to_switch_s": r["approve_to_switch_s"],
                          "approve_to_done_s": r["approve_to_done_s"], "verify_s": r["verify_s"],
                          "replayed": (r["replayed"] or 0) + (r["final_replayed"] or 0)}
        out["facts"] = f
        out["ratios"]["facts_all_over_restore_done"] = ratio(f.get("all_s"), r["approve_to_done_s"], nd=1)
        out["ratios"]["facts_all_repair_only_over_restore_switch"] = ratio(f.get("all_repair_only_s"),
                                                                           r["approve_to_switch_s"], nd=1)
    return out


# --- tables ------------------------------------------------------------------------------------------------


def _kind_cell(r: dict, kind: str) -> str:
    k = (r.get("by_kind") or {}).get(kind)
    return "-" if not k else f"{k['rows']:,} / {_mb(k['bytes'])}"


def idle_table(result: dict) -> str:
    rows = result.get("idle") or []
    if not rows:
        return "(no idle builds: --skip idle or --idle-rounds 0)"
    cells = []
    for r in rows:
        cells.append([VARIANT_NAMES[r["variant"]], r["round"] + 1, _kind_cell(r, "projection"),
                      _kind_cell(r, "vbuckets"), f"**{_mb(r['bytes'])}**",
                      fmt(r["bytes"] / r["rows"] if r["rows"] else None, 1), f"**{fmt(_s(r['build_ms']), 2)}**",
                      fmt(_s(r.get("dump_ms")), 2), fmt(_s(r.get("verify_ms")), 2), fmt(r["paused_ms"], 1),
                      r["status"]])
    return md_table(["variant", "round:", "projection rows / MB:", "vbuckets rows / MB:", "total MB:", "bytes/row:",
                     "build s:", "dump s:", "read-back s:", "dispatch paused ms:", "status"], cells)


def load_table(result: dict) -> str:
    builds = result["builds"]
    cmds = result.get("commands") or {}
    alone = (cmds.get("load_alone") or {}).get("commands_per_s")
    cells = []
    for v in ("ours", "ceiling", "naive"):
        runs = builds["ours"] if v == "ours" else [r for r in builds["baselines"] if r["variant"] == v]
        if not runs:
            continue
        s = pause_summary(runs)
        during = cmds.get(f"during_{v}") or {}
        sizes = sorted(r["bytes"] for r in runs)
        cells.append([VARIANT_NAMES[v], s["builds"], s["statuses"],
                      f"**{fmt(s['paused_p50_ms'])} / {fmt(s['paused_p99_ms'])}** / {fmt(s['paused_max_ms'])}",
                      f"**{fmt(_s(s['build_p50_ms']), 2)}** / {fmt(_s(s['build_p99_ms']), 2)}",
                      _mb(sizes[len(sizes) // 2]),
                      f"{fmt(during.get('commands_per_s'))} ({fmt(ratio(during.get('commands_per_s'), alone), 2)})",
                      f"{fmt(during.get('p50_ms'), 1)} / {fmt(during.get('p99_ms'), 1)}"])
    return md_table(["variant", "builds:", "statuses", "dispatch paused p50 / p99 / max ms:", "build p50 / p99 s:",
                     "median MB:", "commands/s during (÷ load alone):", "command p50 / p99 ms:"], cells)


def pause_list(result: dict) -> str:
    ours = result["builds"]["ours"]
    return ("- dispatch pause of each build of ours under load, ms (in order): "
            + ", ".join(fmt(r["paused_ms"], 0) for r in ours)
            + "\n- its parts, median: before the pause (the drain of receipts beyond the checkpoints) "
            + fmt(_median([r["cut_ms"] - r["paused_ms"] for r in ours if r["cut_ms"] is not None
                           and r["paused_ms"] is not None]), 0)
            + " ms; cut (that drain + the pause + the proofs) "
            + fmt(_median([r["cut_ms"] for r in ours]), 0) + " ms, dump "
            + fmt(_median([r["dump_ms"] for r in ours]), 0)
            + " ms, read-back and seal " + fmt(_median([r["verify_ms"] for r in ours]), 0)
            + " ms; the ops job from start to end " + fmt(_median([r["job_s"] for r in ours]), 2) + " s")


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def restore_table(result: dict) -> str:
    rest = result.get("restore")
    if not rest:
        return "(nothing was restored)"
    r, facts, f = rest["restore"], rest["facts"], rest["facts_all"]
    replayed = (r["replayed"] or 0) + (r["final_replayed"] or 0)
    cells = [[f"ours: restore of snapshot {r['snapshot_id']} (`--source snapshot:{r['snapshot_id']}`), every video",
              r["status"], fmt(r["verify_before_s"], 2), fmt(_s(r["load_ms"]), 2),
              f"{replayed:,} in {fmt(_s(r['replay_ms']), 2)} ({fmt(r['replayed_per_s'], 0)}/s)",
              fmt(_s(r["check_ms"]), 2), fmt(r["fence_ms"], 0), f"**{fmt(r['approve_to_switch_s'], 1)}**",
              f"{fmt(r['verify_s'], 1)} ({r['verify_status']})", f"**{fmt(r['approve_to_done_s'], 1)}**"]]
    for x in facts:
        cells.append([f"repair from the facts {x['batch'] + 1}: {x['videos']} videos", x["status"], "-", "-",
                      f"{x['tail_folded'] or 0} tail events folded", "-", f"barrier {fmt(x['barrier_ms'], 0)}",
                      fmt(x["repair_s"], 1), f"{fmt(x['verify_s'], 1)} ({x['verify_status']})",
                      fmt(x["approve_to_done_s"], 1)])
    if f.get("all_s") is not None:
        how = (f"extrapolated ×{f['all_videos'] / f['measured_videos']:.1f} from {f['measured_videos']:,} videos"
               if f["extrapolated"] else "measured: every video")
        cells.append([f"repair from the facts, all {f['all_videos']:,} videos ({how})", "-", "-", "-", "-", "-", "-",
                      f"**{fmt(f['all_repair_only_s'], 0)}**", "-", f"**{fmt(f['all_s'], 0)}**"])
    return md_table(["recovery", "status", "verify before s:", "load s:", "replay: entries in s:", "identity + "
                     "coverage s:", "fence ms:", "approval → repaired s:", "exact verify after s:",
                     "approval → done s:"], cells)


def restore_text(result: dict) -> str:
    rest = result.get("restore")
    if not rest:
        return ""
    d, r, f = rest["damage"], rest["restore"], rest["facts_all"]
    lines = [f"- damage: partition `{d['partition']}` lost by hand ({d['projection_rows']:,} projection rows and "
             f"{d['vbuckets']:,} vbuckets of generation {d['generation']} deleted in SQL, the pipeline running); every "
             "video has relations there",
             f"- the restore: generation {r['previous_generation']} → {r['generation']}, {r['rows_loaded']:,} rows "
             f"loaded, {r['coverage_checked'] or 0:,} relations covered by its coverage check, identity diffs "
             f"{r['identity_diffs']}, coverage diffs {r['coverage_diffs']}; the job said: "
             + "; ".join(f"+{t:.1f}s {m.split(' at T = ')[0]}" for t, m in r["said"][:8])]
    if f.get("all_s") is not None:
        ratio_done = ratio(f["all_s"], r["approve_to_done_s"], nd=1)
        lines.append(
            f"- repair from the facts: {f['measured_batches']} repair(s) of up to {result['meta']['facts_batch']} "
            f"videos measured ({f['measured_videos']:,} of {f['all_videos']:,} videos), "
            + (f"**extrapolated linearly to all {f['all_videos']:,} videos** ({f['per_video_s']:.3f} s a video)"
               if f["extrapolated"] else "every video repaired")
            + f": {fmt(f['all_s'], 0)} s from approvals to done, {fmt(f['all_repair_only_s'], 0)} s without the exact "
            f"verify runs; the restore did every video in {fmt(r['approve_to_done_s'], 0)} s (×{ratio_done or '-'}). "
            "One repair of every video at once is not what was measured: its per-video layer read "
            "(reconciliation/services/repair.py `_layer_values`) is quadratic in the scope")
    return "\n".join(lines)


def autoanalyze_text(result: dict) -> str:
    meta, aa = result["meta"], result.get("autoanalyze")
    if aa is None:
        return (f"- the server's autovacuum is {meta['server_autovacuum']}; no ANALYZE was stood in for"
                + (" (--autoanalyze-naptime 0)" if meta["server_autovacuum"] == "off" else ""))
    rest = (result.get("restore") or {}).get("restore") or {}
    during = [r for r in aa["runs"] if rest and rest["t_start"] <= aa["t0"] + r["at_s"] <= rest["t_end"]]
    return (f"- the server's autovacuum is off; its ANALYZE was stood in for every {aa['naptime_s']:g} s "
            f"(bench/snapshot/autoanalyze.py): {len(aa['runs'])} ANALYZE runs, {len(during)} of them during the "
            "restore (" + ", ".join(f"{r['table'].removeprefix('counting_')} on {r['partition']} "
                                    f"+{r['at_s'] - (rest['t_start'] - aa['t0']):.0f} s" for r in during) + ")"
            + (f"; errors {aa['errors']}" if aa["errors"] else ""))


def loads_table(result: dict) -> str:
    rest = result.get("restore")
    if not rest:
        return ""
    loads = rest["loads"]
    ceiling = (loads.get("ceiling") or {}).get("rows_per_s")
    cells = []
    for v in ("ours", "ceiling", "naive"):
        x = loads.get(v)
        if not x:
            continue
        cells.append([LOAD_NAMES[v], f"{x['rows']:,}", fmt(_s(x["load_ms"]), 2), f"**{fmt(x['rows_per_s'], 0)}**",
                      fmt(ratio(x["rows_per_s"], ceiling), 3)])
    return md_table(["the restore's load (both tables, every partition)", "rows:", "seconds:", "rows/s:",
                     "÷ ceiling:"], cells)


def commands_table(result: dict) -> str:
    cmds = result.get("commands") or {}
    base = (cmds.get("load_alone") or {}).get("commands_per_s")
    names = {"load_alone": "load alone (the window before the builds)", "during_ours": "during the builds of ours",
             "during_ceiling": "during the ceiling's builds", "during_naive": "during the naive builds",
             "during_facts_repairs": "during the repairs from the facts", "during_restore": "during the restore"}
    cells = []
    for key, name in names.items():
        c = cmds.get(key)
        if not c:
            continue
        cells.append([name, fmt(c.get("seconds"), 1), f"**{fmt(c.get('commands_per_s'))}**",
                      fmt(ratio(c.get("commands_per_s"), base), 3),
                      f"{fmt(c.get('p50_ms'), 1)} / {fmt(c.get('p99_ms'), 1)}", c.get("barrier_503", 0),
                      c.get("errors") or 0])
    return md_table(["commands through relation_set_state", "seconds:", "commands/s:", "÷ load alone:",
                     "p50 / p99 ms:", "503 write_barrier:", "other errors"], cells)


def loops_text(result: dict) -> str:
    lo = result.get("loops")
    if not lo:
        return ""
    stale = f"; {lo['stale_dirty_marks']} dirty marks of the retired generation left" if lo.get("stale_dirty_marks") \
        else ""
    return (f"- the pipeline over the load session: publishers sent {lo['published']:,}, projectors applied "
            f"{lo['applied']:,} (pass statuses {lo['projector_statuses']}), {lo['snapshot_runs']} display snapshot "
            f"runs, drained {'in ' + str(lo['drain_s']) + ' s' if lo['drained'] else 'NOT: ' + str(lo['pending'])}"
            f"{stale}, loop errors {lo['loop_errors'] or 0}")


def resources_table(result: dict) -> str:
    cells = []
    for r in result.get("idle") or []:
        if r.get("resources") and r["round"] == 0:
            cells.append([f"{r['variant']} idle", r["resources"]])
    ours = pause_summary(result["builds"]["ours"])["resources"]
    if ours:
        cells.append([f"ours under load (mean of {len(result['builds']['ours'])} builds)", ours])
    rest = result.get("restore")
    if rest:
        if rest.get("facts_resources"):
            cells.append(["repairs from the facts (mean)", rest["facts_resources"]])
        if rest["restore"].get("resources"):
            cells.append(["restore of the snapshot", rest["restore"]["resources"]])
    return md_table(["window", "machine busy (cores):", "CPU by process (cores)",
                     "top bench-DB backend states (share of samples)"],
                    [[name, f"{res['cores_busy']:.2f}", cpu_text(res, 0.05), waits_text(res, 3)]
                     for name, res in cells])


def headline(result: dict) -> str:
    s = result["summary"]
    i, ld, rt = s["idle"], s["load"], s["ratios"]
    lines = []
    if i:
        lines.append("- idle build of the whole projection: " + ", ".join(
            f"{v} {fmt(i[v]['build_s'], 2)} s ({_mb(i[v]['bytes'])} MB)"
            for v in ("ours", "naive", "ceiling") if v in i)
            + f"; ours ÷ ceiling {rt['idle_build_ours_over_ceiling']}, naive ÷ ours {rt['idle_build_naive_over_ours']}")
    if ld:
        lines.append("- dispatch pause under load, p50 / p99 ms: " + ", ".join(
            f"{v} {fmt(ld[v]['paused_p50_ms'])} / {fmt(ld[v]['paused_p99_ms'])} ({ld[v]['builds']} builds)"
            for v in ("ours", "ceiling", "naive") if v in ld)
            + f"; ours ÷ ceiling {rt['load_pause_p50_ours_over_ceiling']}, naive ÷ ours "
            f"{rt['load_pause_p50_naive_over_ours']}")
    if s.get("restore"):
        r, f = s["restore"], s["facts"]
        lines.append(f"- restore of a lost partition from the snapshot: {r['status']}, approval → repaired "
                     f"{fmt(r['approve_to_switch_s'], 1)} s, → done (incl. the exact verify of every video, "
                     f"{fmt(r['verify_s'], 1)} s) {fmt(r['approve_to_done_s'], 1)} s, {r['replayed']:,} entries "
                     f"replayed; from the facts: {fmt(f.get('all_s'), 0)} s to done, "
                     f"{fmt(f.get('all_repair_only_s'), 0)} s without the verify runs ("
                     + ("extrapolated from " + f"{f['measured_videos']:,} of {f['all_videos']:,} videos"
                        if f.get("extrapolated") else "every video") + ")")
    return "\n".join(lines)


def _machine(result: dict) -> str:
    spec = result["machine"]
    started, ended = spec.get("loadavg_at_start"), result["meta"].get("loadavg_at_end")
    return machine_text(spec, pg=("max_connections", "shared_buffers", "synchronous_commit", "fsync"),
                        stack=("python", "django"), load=f"Load average at the start {started}, at the end {ended}.")


def generated_section(result: dict) -> str:
    meta = result["meta"]
    mix = ", ".join(f"{k} {v:g}%" for k, v in meta["mix"].items())
    blocks = [
        f"**Parameters:** {meta['relations']:,} relations seeded (as many projection rows); {meta['snapshots']} builds "
        f"of ours under load, {meta['snapshot_gap_s']:g} s apart, {meta['baseline_runs']} round(s) of the baselines "
        f"under load, {meta['idle_rounds']} idle round(s); command load: {meta['procs']} processes calling "
        f"relation_set_state ({mix}) over {meta['users']:,} users; pipeline: {meta['publishers']} publishers, "
        f"{meta['projectors']} projector processes over {meta['stream_partitions']} stream partitions, the display "
        f"snapshot loop every {meta['snapshot_interval_s']:g} s; {len(meta['count_partitions'])} count partitions; "
        f"SNAPSHOT_KEEP {meta['snapshot_keep']}, SNAPSHOT_REPLAY_FENCE_LAG {meta['snapshot_replay_fence_lag']}, "
        f"RECONCILE_DRAIN_MAX_S {meta['drain_max_s']:g}; statement_timeout {meta['statement_timeout_ms']} ms, "
        f"idle_in_transaction_session_timeout {meta['idle_tx_timeout_ms']} ms"
        + (" (set for this run by --statement-timeout-ms / --idle-tx-timeout-ms; 0: none)"
           if meta["db_timeouts_overridden"] else " (the product's)")
        + f"; server autovacuum {meta['server_autovacuum']}; artifacts in a local directory. Plain loops, no Celery.",
        "**The data set** (bulk SQL, then checked):",
        seed_table(result),
        "**1. Build time and artifact size** (nothing else running; sizes are the stored files: gzip for ours and "
        "the naive dump, raw COPY text for the ceiling, which stores nothing):",
        idle_table(result),
        "**2. Dispatch pause under the command load** (ours: RecoverySnapshot.dispatch_paused_ms, from the first "
        "lease request of the cut to the release; the baselines time the same span):",
        load_table(result),
        pause_list(result),
        "**3. A lost count partition: restore from the last sealed snapshot against repair from the facts** ("
        + ("the command load running" if meta["recover_under_load"] else
           "the command load stopped after the builds, the pipeline running; the events after the snapshot are the "
           "load's") + f"; requested by `{meta['operator']}`, approved by `{meta['approver']}`, run by the system's "
        "job):",
        restore_table(result),
        restore_text(result),
        autoanalyze_text(result),
        "**The restore's load against its baselines** (the step a baseline can do; replay, checks and switch have "
        "no counterpart):",
        loads_table(result),
        "**What it costs the command path:**",
        commands_table(result),
        final_text(result),
        loops_text(result),
        "**Where the time went** (CPU from /proc and waits of the bench databases' backends from pg_stat_activity "
        "every 0.25 s):",
        resources_table(result),
    ]
    warnings = ["**Warnings:** " + "; ".join(result["warnings"])] if result.get("warnings") else []
    return doc_section(DOC_BEGIN, DOC_END, writer="bench/snapshot_bench.py", meta=meta, machine=_machine(result),
                       wall="the driver", blocks=[b for b in [*blocks, *warnings] if b])


def print_report(result: dict) -> None:
    print_blocks(seed_table(result), idle_table(result), load_table(result), pause_list(result), restore_table(result),
                 restore_text(result), autoanalyze_text(result), loads_table(result), commands_table(result),
                 final_text(result), loops_text(result), resources_table(result))
    bar = "=" * 100
    warned = "".join(f"\n  WARNING: {w}" for w in result.get("warnings") or [])
    print(f"{bar}\n{headline(result)}{warned}\n{bar}\n")
