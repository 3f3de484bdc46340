"""The migration benchmark's report: the summary (failures, warnings, the headline figures), the tables on stdout,
and the generated part of a docs/benchmarks.md section (the result's "markdown" key; the docs file is not
written)."""

from __future__ import annotations

from bench.common import fmt, machine_text, md_table, print_blocks, ratio
from bench.sampler import cpu_text, waits_text

STEPS = (("prepare", "prepare (contract, clear the target)"), ("copy", "copy (every row of the buckets, in chunks)"),
         ("catch_up", "catch-up passes"), ("cutover", "cutover (drain, replay to H, CAS)"),
         ("verify", "verify (rows at H, identity)"), ("cleanup", "source cleanup (retention 0)"))


def _s(ms) -> str:
    return "-" if ms is None else f"{ms / 1000:,.2f}"


def _all_migrations(result: dict) -> list[dict]:
    rev = (result.get("reverse") or {}).get("migration")
    return [result["big"]["migration"], *result.get("series", {}).get("migrations", []), *([rev] if rev else [])]


def _throughputs(result: dict) -> list[dict]:
    return [t for t in (result.get(k) for k in ("throughput_before", "throughput_after", "throughput_after2",
                                                 "throughput_before2")) if t]


def _layout_medians(result: dict) -> dict[str, float | None]:
    """Median events/s of every backlog measured with the bootstrap's layout (2 partitions) and with the moved
    buckets on cnt_02 (3 partitions)."""
    from bench.common import percentile

    by: dict[str, list[float]] = {"2": [], "3": []}
    for t in _throughputs(result):
        key = str(len(t["layout"]))
        by.setdefault(key, []).extend(r["replay"]["applied_per_s"] for r in t["rounds"] if r["replay"]["applied_per_s"])
    return {k: (round(percentile(sorted(v), 0.5), 1) if v else None) for k, v in by.items()}


def summary(result: dict) -> dict:
    failures, warnings = [], []
    for r in _all_migrations(result):
        if r["state"] != "RETIRED" or not r.get("verify_ok"):
            failures.append(f"migration {r['migration_id']} ({r['tag']}): {r['state']}, verify {r.get('verify_ok')}"
                            + (f", {r['error'][:200]}" if r.get("error") else ""))
        if r.get("job_status") != "SUCCEEDED":
            failures.append(f"migration {r['migration_id']} ({r['tag']}): its ops job {r.get('job_status')}"
                            + (f" ({r['job_error'][:200]})" if r.get("job_error") else ""))
        if r["state"] == "RETIRED" and not r.get("cleaned") and result["meta"]["retention_s"] == 0:
            warnings.append(f"migration {r['migration_id']}: the source copy was not cleaned up")
    final = result.get("final") or {}
    if not final.get("seeded_exact"):
        failures.append(f"seeded videos' routed sums changed: {final.get('seeded_mismatches')}")
    if not (final.get("buckets_exact") and final.get("snapshots_exact")):
        failures.append(f"a load video's count differs from its facts: buckets {final.get('bucket_mismatches')}, "
                        f"snapshots {final.get('snapshot_mismatches')}")
    if final.get("acknowledged_lost"):
        failures.append(f"{final['acknowledged_lost']} acknowledged relations lost: {final.get('lost_examples')}")
    if not (final.get("routes") or {}).get("single_writer"):
        failures.append(f"buckets without exactly one writer: {(final.get('routes') or {}).get('bad_buckets')}")
    if final.get("stale_rows") and any(final["stale_rows"].values()) and result["meta"]["retention_s"] == 0:
        warnings.append(f"rows of the moved buckets left on a retired source: {final['stale_rows']}")
    for key in ("big", "series", "final_drain"):
        loops = ((result.get(key) or {}).get("loops") if key != "final_drain" else result.get(key)) or {}
        if loops and not loops.get("drained"):
            warnings.append(f"{key}: the pipeline did not drain: {loops.get('pending')}")
        if loops.get("loop_errors"):
            warnings.append(f"{key}: pipeline loop errors {loops['loop_errors']}")
    if (result.get("series") or {}).get("stopped"):
        failures.append(f"the series stopped early: {result['series']['stopped']}")
    rev = result.get("reverse") or {}
    if rev.get("skipped") and "already" not in rev["skipped"]:
        warnings.append(f"the reverse migration did not run: {rev['skipped']}")
    naive = (result.get("series") or {}).get("baselines", {}).get("naive")
    if naive and naive.get("lost_dispatch_stop"):
        warnings.append(f"the naive move lost its dispatch stop: {naive['lost_dispatch_stop']}")
    code, code_end = result["meta"].get("code") or {}, result["meta"].get("code_at_end") or {}
    if code.get("files_sha256") != code_end.get("files_sha256"):
        warnings.append("the measured code changed during the run (another engineer's edits): the processes started "
                        f"before it ran {code.get('files_sha256')}, the tree at the end is "
                        f"{code_end.get('files_sha256')}")
    big = result["big"]["migration"]
    series = result.get("series") or {}
    tb, ta = result.get("throughput_before") or {}, result.get("throughput_after") or {}
    medians = _layout_medians(result)
    return {"failures": failures, "warnings": warnings,
            "throughput_2_partitions_per_s": medians.get("2"), "throughput_3_partitions_per_s": medians.get("3"),
            "big_write_pause_ms": big.get("write_pause_ms"), "big_total_s": big.get("approve_to_retired_s"),
            "big_copy_rows_per_s": big.get("copy_rows_per_s"),
            "series_pause_p50_ms": series.get("pause_p50_ms"), "series_pause_p99_ms": series.get("pause_p99_ms"),
            "throughput_before_per_s": tb.get("applied_per_s_median"),
            "throughput_after_per_s": ta.get("applied_per_s_median"),
            "naive_pause_ms": (naive or {}).get("write_pause_ms"),
            "ceiling_rows_per_s": (series.get("baselines", {}).get("ceiling") or {}).get("rows_per_s")}


# --- blocks ---------------------------------------------------------------------------------------------


def _machine(result: dict) -> str:
    spec, meta = result["machine"], result["meta"]
    load = (f"Load average at the start {spec.get('loadavg_at_start')}, at the end {meta.get('loadavg_at_end')} "
            "(other work shared the machine: see the reading).")
    return machine_text(spec, pg=("max_connections", "shared_buffers", "synchronous_commit", "fsync"),
                        stack=("python", "django"), load=load)


def _parameters(result: dict) -> str:
    m = result["meta"]
    mix = ", ".join(f"{k} {v:g}%" for k, v in m["mix"].items())
    return (f"**Parameters:** {m['scale']:,} projection rows seeded in the {m['buckets']} moving buckets (the first "
            f"{m['buckets']} of cnt_00's 512), {m['rest_share']:g} as many a bucket elsewhere, {m['per_video']} "
            f"relations a video; {m['count_partitions']} with the bootstrap over {m['bootstrap_partitions']} "
            f"({m['virtual_buckets']} virtual buckets); command load: {m['procs']} processes calling "
            f"relation_set_state ({mix}) over {m['users']:,} users and {m['load_videos']:,} videos of its own; "
            f"pipeline: {m['publishers']} publishers, {m['projectors']} projector processes over "
            f"{m['stream_partitions']} stream partitions (COUNT_PROJECTOR_BATCH {m['count_projector_batch']}), the "
            f"display snapshot loop every {m['snapshot_interval_s']:g} s; BUCKET_MIGRATION_COPY_CHUNK "
            f"{m['copy_chunk']}, _CUTOVER_LAG {m['cutover_lag']}, _CATCHUP_PASSES {m['catchup_passes_max']}, "
            f"_RETENTION_S {m['retention_s']:g}; series: {m['series']} migrations of {m['series_buckets']} buckets, "
            f"{m['series_gap_s']:g} s apart; throughput: {m['burst_rounds']} backlog(s) of {m['burst']:,} events "
            f"before and after; statement_timeout {m['statement_timeout_ms']} ms, idle_in_transaction "
            f"{m['idle_tx_timeout_ms']} ms; OPS_JOB_LEASE_S {m.get('job_lease_s', 60):g}"
            + (" (set for this run by --job-lease-s)" if m.get("job_lease_overridden") else "")
            + f"; server autovacuum {m['server_autovacuum']}"
            + ("; VACUUM (ANALYZE) stand-in after every migration" if m["vacuum_stand_in"] else "")
            + f"; databases {m['databases']}. Plain loops, no Celery.")


def _dataset(result: dict) -> str:
    d = result["seed"]
    mv = d["moved_buckets"]["rows"]
    src = mv.get("cnt_00", {})
    rows = [[f"{d['projection_rows']:,}", f"{d['vbuckets']:,}",
             ", ".join(f"{a} {p['projection_rows']:,} / {p['vbuckets']:,}" for a, p in sorted(d["partitions"].items())),
             f"{d['moved_buckets']['count']}", f"{src.get('projection', 0):,}", f"{src.get('vbuckets', 0):,}",
             f"{src.get('liked', 0):,}", f"{d['seconds']}"]]
    return ("**The data set** (bulk, straight into the count partitions; no relation facts for these rows):\n\n"
            + md_table(["projection rows:", "vbuckets:", "per partition (projection / vbuckets)", "moving buckets:",
                        "their projection rows:", "their vbuckets:", "of which LIKED:", "seeded in s:"], rows))


def _big(result: dict) -> list[str]:
    r = result["big"]["migration"]
    steps = r["steps_ms"]
    total = sum(v for v in steps.values())
    rows = []
    for key, label in STEPS:
        if key not in steps:
            continue
        extra = ""
        if key == "copy":
            extra = f"{r['copied_rows']:,} rows, **{fmt(r['copy_rows_per_s'], 0)} rows/s**"
        elif key == "catch_up":
            extra = f"{r['replayed_events']:,} changed rows replayed in {r['catchup_passes']} passes"
        elif key == "cutover":
            extra = f"write pause **{fmt(r['write_pause_ms'], 1)} ms**"
        elif key == "verify":
            extra = (f"{r['verify_rows_compared'] or 0:,} source rows compared: "
                     f"{'ok' if r['verify_ok'] else 'FAILED'}")
        rows.append([label, _s(steps[key]), extra])
    rows.append(["**the job, start to end**", f"**{r['job_s']:,.2f}**",
                 f"plan {r['plan_ms']:.0f} ms, approve {r['approve_ms']:.0f} ms before it; approval → RETIRED "
                 f"{fmt(r['approve_to_retired_s'], 2)} s; steps sum {total / 1000:,.2f} s"])
    out = [f"**1. The migration of {r['buckets']} buckets {'+'.join(r['sources'])} → {r['target']} under the "
           f"command load** (migration {r['migration_id']}, {r['state']}; {r['rows_to_copy']:,} rows to copy at the "
           "plan: projection rows + vbuckets):\n\n" + md_table(["step", "seconds:", "what"], rows)]
    out.append(_pause_parts(r))
    out.append(_load_table(result["big"], [r]))
    return out


def _pause_parts(r: dict) -> str:
    p = r.get("cutover_parts") or {}
    if not p:
        return "- the cutover's parts were not timed"
    names = (("drain_fences_ms", "source fences DRAINING (waits for the writers in flight, reads H)"),
             ("replay_to_h_ms", "replay to H (and its ledger save)"), ("ledger_saves_ms", "other ledger saves"),
             ("target_fences_ms", "target fences ACTIVE at E+1"),
             ("candidate_manifest_ms", "candidate manifest sealed (1,024 items)"),
             ("checkpoints_read_ms", "the count consumer's offsets read"),
             ("manifest_items_ms", "manifest items read"), ("routes_materialize_ms", "routes materialised"),
             ("ledger_transition_ms", "ledger → VERIFY + audit"), ("other_ms", "the rest (CAS update, commit, …)"))
    parts = "; ".join(f"{label} {p.get(k, 0):,.1f} ms" for k, label in names if p.get(k))
    b = r.get("cutover_outside_pause") or {}
    pre = "; ".join(f"{label} {b[k]:,.1f} ms" for k, label in (
        ("route_lock_acquire_ms", "the route lock"), ("contract_check_ms", "the contract re-checked"),
        ("candidate_manifest_ms", "the candidate manifest sealed"), ("target_fences_ms", "the target fences at E+1"))
        if b.get(k))
    return (f"- the write pause ({fmt(r['write_pause_ms'], 1)} ms in the ledger; {fmt(p.get('pause_timed_ms'), 1)} ms "
            f"timed from the DRAINING call to the end of the ledger's transition) was: {parts}. Before it, "
            f"{fmt(b.get('total_ms'), 1)} ms: {pre or '-'}; after the CAS: source fences RETIRED "
            f"{fmt(b.get('retire_source_fences_after_ms'), 1)} ms")


def _load_table(session: dict, migrations: list[dict]) -> str:
    rows = [["load alone (before)", *(_cmd(session["commands_alone"])), *_lag(session.get("lag_alone"))]]
    for r in migrations:
        c = r.get("commands") or {}
        lag = r.get("lag") or {}
        rows.append([f"during migration {r['migration_id']} ({r['tag']})", *_cmd(c.get("during_job")),
                     *_lag(lag.get("during_job"))])
        if c.get("around_pause"):
            rows.append([f"its write pause ±0.5 s ({fmt(r['write_pause_ms'], 0)} ms)", *_cmd(c["around_pause"]),
                         *_lag(lag.get("around_pause"))])
    for name, b in (session.get("baselines") or {}).items():
        if name == "vacuum":
            continue
        rows.append([f"during the {name} move", *_cmd((b.get("commands") or {}).get("during_job")),
                     *_lag((b.get("lag") or {}).get("during_job"))])
    rows.append(["load alone (after)", *_cmd(session["commands_after"]), "", "", "", ""])
    return ("**Commands and counts meanwhile** (commands through relation_set_state; lags of the load's events by "
            "commit time: publish = commit → published to the stream, projection = commit → its `applied` receipt):"
            "\n\n" + md_table(["window", "commands/s:", "p50 / p99 ms:", "errors:", "events:",
                                "publish lag p50 / p99 ms:", "projection lag p50 / p99 / max ms:", "unapplied:"], rows))


def _cmd(c: dict | None) -> list[str]:
    if not c:
        return ["-", "-", "-"]
    errors = sum(c.get("errors", {}).values()) + c.get("barrier_503", 0)
    return [fmt(c["commands_per_s"], 1), f"{fmt(c['p50_ms'], 1)} / {fmt(c['p99_ms'], 1)}", str(errors)]


def _lag(x: dict | None) -> list[str]:
    if not x:
        return ["-", "-", "-", "-"]
    return [f"{x['events']:,}", f"{fmt(x.get('publish_lag_p50_ms'), 0)} / {fmt(x.get('publish_lag_p99_ms'), 0)}",
            f"{fmt(x['lag_p50_ms'], 0)} / {fmt(x['lag_p99_ms'], 0)} / {fmt(x['lag_max_ms'], 0)}", str(x["unapplied"])]


def _series(result: dict) -> list[str]:
    s = result.get("series")
    if not s:
        return ["**2. Write pause series:** not run."]
    rows = []
    for r in s["migrations"]:
        st = r["steps_ms"]
        p = r.get("cutover_parts") or {}
        rows.append([r["tag"], f"{'+'.join(r['sources'])} → {r['target']}", r["state"],
                     "ok" if r.get("verify_ok") else "FAILED", f"**{fmt(r['write_pause_ms'], 1)}**",
                     fmt(p.get("drain_fences_ms"), 1), fmt(p.get("replay_to_h_ms"), 1),
                     fmt(p.get("routes_materialize_ms"), 1), f"{r['copied_rows']:,}", f"{r['replayed_events']:,}",
                     str(r["catchup_passes"]), _s(st.get("copy")), _s(st.get("verify")), f"{r['job_s']:,.1f}"])
    moved = s["migrations"][0]["buckets"] if s["migrations"] else 0
    head = (f"**2. Write pause over {len(s['migrations'])} migrations** of {moved}"
            f" buckets back and forth under the same load: **p50 {fmt(s['pause_p50_ms'], 1)} ms, p99 "
            f"{fmt(s['pause_p99_ms'], 1)} ms** (min {fmt(s['pause_min_ms'], 1)}, max {fmt(s['pause_max_ms'], 1)}); "
            "the big migration above is not in this series.\n\n")
    return [head + md_table(["run", "move", "state", "verify", "write pause ms:", "drain ms:", "replay to H ms:",
                             "routes ms:", "rows copied:", "replayed:", "passes:", "copy s:", "verify s:",
                             "job s:"], rows),
            _load_table(s, s["migrations"])]


def _throughput(result: dict) -> str:
    ts = _throughputs(result)
    if not ts:
        return "**3. Projection throughput:** not run."
    rows = []
    for t in ts:
        for k, rnd in enumerate(t["rounds"]):
            rep = rnd["replay"]
            res = rep.get("resources") or {}
            rows.append([t["label"], ", ".join(f"{a} {n}" for a, n in t["layout"].items()), str(k + 1),
                         f"{rnd['burst']['relations']:,}", f"{rep['applied']:,}", fmt(rep["elapsed_s"], 2),
                         f"**{fmt(rep['applied_per_s'], 0)}**", str(rep["procs"]), fmt(res.get("cores_busy"), 2),
                         cpu_text(res, 0.1)])
    med = _layout_medians(result)
    before, after = med.get("2"), med.get("3")
    return ("**3. Projection throughput before and after the move** (a backlog of new relations published first, then "
            "applied by the projector processes with nothing else running; events applied ÷ seconds to the last "
            "progress; measured with the bootstrap's layout, after the move, again after the series, and again after "
            f"the buckets were moved back): median over the backlogs of each layout **{fmt(before, 0)} events/s on "
            f"2 partitions → {fmt(after, 0)} on 3** (×{fmt(ratio(after, before), 2)})"
            ".\n\n" + md_table(["when", "buckets per partition", "round:", "backlog:", "applied:", "s:",
                                "events/s:", "processes:", "machine busy (cores):", "CPU by process (cores)"], rows))


def _baselines(result: dict) -> str:
    big = result["big"]["migration"]
    s = result.get("series") or {}
    b = s.get("baselines") or {}
    rows = []
    copy_s = (big["steps_ms"].get("copy") or 0) / 1000
    rows.append(["ours: the migration (big run above): its copy step", f"{big['copied_rows']:,}", fmt(copy_s, 2),
                 f"**{fmt(big['copy_rows_per_s'], 0)}**", f"**{fmt(big['write_pause_ms'], 1)}**",
                 f"{big['job_s']:,.1f} s job, counts stay live"])
    pauses = s.get("pauses_ms") or []
    if pauses:
        rows.append([f"ours: series p50 / p99 ({len(pauses)} runs)", "-", "-", "-",
                     f"{fmt(s['pause_p50_ms'], 1)} / {fmt(s['pause_p99_ms'], 1)}", ""])
    n = b.get("naive")
    if n:
        rows.append([f"naive: stop-the-world, executemany of {n['batch']} ({n['source']} → {n['target']})",
                     f"{n['rows']:,}", fmt(n["copy_s"], 2), f"**{fmt(n['rows_per_s'], 0)}**",
                     f"**{fmt(n['write_pause_ms'], 1)}**", "the whole projector stopped for all of it"])
    c = b.get("ceiling")
    if c:
        rows.append([f"ceiling: COPY TO STDOUT → COPY FROM STDIN, binary ({c['source']} → {c['target']})",
                     f"{c['rows']:,}", fmt(c["copy_s"], 2), f"**{fmt(c['rows_per_s'], 0)}**", "-",
                     "rows only: no pause, routes or checks"])
    rev = result.get("reverse") or {}
    rm = rev.get("migration")
    if rm:
        rows.append(["ours, nothing else running: the reverse migration's copy step", f"{rm['copied_rows']:,}",
                     fmt((rm["steps_ms"].get("copy") or 0) / 1000, 2), f"**{fmt(rm['copy_rows_per_s'], 0)}**",
                     f"**{fmt(rm['write_pause_ms'], 1)}**", f"{rm['job_s']:,.1f} s job"])
    ci = rev.get("ceiling_idle")
    if ci:
        rows.append([f"ceiling, nothing else running ({ci['source']} → {ci['target']})", f"{ci['rows']:,}",
                     fmt(ci["copy_s"], 2), f"**{fmt(ci['rows_per_s'], 0)}**", "-", "rows only"])
    head = ("**4. Against a naive stop-the-world move and the raw SQL ceiling** (the same buckets' rows, both "
            "tables, under the same command load unless the row says otherwise; the baselines write a scratch "
            "generation and roll back)")
    if c and big.get("copy_rows_per_s"):
        head += (f": our copy reaches {fmt(ratio(big['copy_rows_per_s'], c['rows_per_s']), 2)} of the ceiling's "
                 "rows/s")
    if ci and rm and rm.get("copy_rows_per_s"):
        head += (f"; with nothing else running {fmt(ratio(rm['copy_rows_per_s'], ci['rows_per_s']), 2)} of the idle "
                 "ceiling")
    if n and big.get("write_pause_ms"):
        head += f"; the naive move stops the counts {fmt(ratio(n['write_pause_ms'], big['write_pause_ms']), 0)}× longer"
    return head + ".\n\n" + md_table(["variant", "rows:", "copy s:", "rows/s:", "write pause ms:", "note"], rows)


def _reverse(result: dict) -> str:
    r = (result.get("reverse") or {}).get("migration")
    if not r:
        return ""
    st = r["steps_ms"]
    p = r.get("cutover_parts") or {}
    return (f"**5. The same move without the load:** migration {r['migration_id']} moved the {r['buckets']} buckets "
            f"{'+'.join(r['sources'])} → {r['target']} with nothing else running: {r['state']}, verify "
            f"{'ok' if r.get('verify_ok') else 'FAILED'}; job {r['job_s']:,.1f} s (copy {_s(st.get('copy'))} s = "
            f"{fmt(r['copy_rows_per_s'], 0)} rows/s, catch-up {_s(st.get('catch_up'))} s, cutover "
            f"{_s(st.get('cutover'))} s, verify {_s(st.get('verify'))} s, cleanup {_s(st.get('cleanup'))} s); "
            f"write pause **{fmt(r['write_pause_ms'], 1)} ms** (drain {fmt(p.get('drain_fences_ms'), 1)} ms, replay to "
            f"H {fmt(p.get('replay_to_h_ms'), 1)} ms, routes materialised {fmt(p.get('routes_materialize_ms'), 1)} ms)")


def _autovacuum(result: dict) -> str:
    a = result.get("autovacuum")
    if not a:
        return ""
    top = sorted(a["by_table"].items(), key=lambda kv: -kv[1])[:6]
    return (f"- the server's autovacuum is off; it was stood in for every {a['naptime_s']:g} s on every database of "
            f"the run (bench/migration/autovacuum.py): {len(a['runs'])} runs, "
            f"{sum(r['ms'] for r in a['runs']) / 1000:,.1f} s in all ({', '.join(f'{k} ×{n}' for k, n in top)})"
            + ("; and after every migration a VACUUM (ANALYZE) of the two count tables on its source and target"
               if result["meta"].get("vacuum_stand_in") else ""))


def _code(result: dict) -> str:
    c = result["meta"].get("code") or {}
    return (f"- code measured: commit {c.get('commit')}"
            + (f" with uncommitted changes to {', '.join(c['modified'])}" if c.get("modified") else "")
            + f" (sha256 of the migration, projection, snapshot and routing modules {c.get('files_sha256')})")


def _resources(result: dict) -> str:
    rows = []
    big = result["big"]["migration"]
    items = [(f"migration {big['migration_id']} (big)", big.get("resources"))]
    for name, b in ((result.get("series") or {}).get("baselines") or {}).items():
        if name == "vacuum":
            continue
        items.append((f"{name} move", b.get("resources")))
    rev = result.get("reverse") or {}
    if rev.get("ceiling_idle"):
        items.append(("ceiling, nothing else running", rev["ceiling_idle"].get("resources")))
    if rev.get("migration"):
        items.append((f"migration {rev['migration']['migration_id']} (nothing else running)",
                      rev["migration"].get("resources")))
    for label, res in items:
        if res:
            rows.append([label, fmt(res.get("cores_busy"), 2), cpu_text(res, 0.05), waits_text(res, 3)])
    return ("**Where the time went** (CPU from /proc and the bench databases' backend states from pg_stat_activity "
            "every 0.25 s):\n\n" + md_table(["window", "machine busy (cores):", "CPU by process (cores)",
                                             "top bench-DB backend states"], rows))


def _final(result: dict) -> str:
    f = result.get("final") or {}
    routes = f.get("routes") or {}
    ok = f.get("seeded_exact") and f.get("buckets_exact") and f.get("snapshots_exact") and not f.get(
        "acknowledged_lost") and routes.get("single_writer")
    return (f"**Final state:** {'EXACT' if ok else 'MISMATCH'}: the {f.get('seeded_videos', 0):,} seeded videos' "
            f"routed sums are what the seed wrote ({f.get('seeded_liked', 0):,} LIKED) "
            f"{'ok' if f.get('seeded_exact') else f.get('seeded_mismatches')}; over the "
            f"{f.get('videos', 0):,} load and backlog videos ({f.get('liked', 0):,} LIKED relations) Σ routed vbuckets "
            f"{'=' if f.get('buckets_exact') else '≠'} the facts and the display snapshot "
            f"{'=' if f.get('snapshots_exact') else '≠'} the facts; {f.get('acknowledged', 0):,} relations "
            f"acknowledged by a command, {f.get('acknowledged_lost', 0)} lost; one writer per bucket "
            f"{'ok' if routes.get('single_writer') else routes.get('bad_buckets')} (buckets per partition "
            f"{routes.get('buckets_per_partition')}); rows of the moved buckets left on the other partitions "
            f"{f.get('stale_rows')}")


def _pipeline(result: dict) -> str:
    out = []
    for key in ("big", "series"):
        loops = (result.get(key) or {}).get("loops")
        if loops:
            out.append(f"{key}: publishers sent {loops['published']:,}, projectors applied {loops['applied']:,} "
                       f"(pass statuses {loops['projector_statuses']}; logged {loops['projector_logged']}), "
                       f"{loops['snapshot_runs']} display snapshot runs, drained in {loops['drain_s']} s, loop errors "
                       f"{loops['loop_errors'] or 0}")
    fd = result.get("final_drain")
    if fd:
        state = "drained" if fd["drained"] else f"NOT drained {fd['pending']}"
        out.append(f"the final drain (no commands): {state} in {fd['drain_s']} s, {fd['snapshot_runs']} display "
                   "snapshot runs")
    return "- the pipeline: " + "; ".join(out) if out else ""


def blocks(result: dict) -> list[str]:
    out = [_parameters(result), _dataset(result), *_big(result), *_series(result), _throughput(result),
           _baselines(result), _reverse(result), _resources(result), _final(result), _pipeline(result),
           _autovacuum(result), _code(result)]
    warnings = result["summary"]["warnings"] + result["summary"]["failures"]
    if warnings:
        out.append("**Warnings:** " + "; ".join(warnings))
    return [b for b in out if b]


def print_report(result: dict) -> None:
    print_blocks(_machine(result), *blocks(result))


def generated_section(result: dict) -> str:
    meta = result["meta"]
    head = ("<!-- Generated by bench/migration_bench.py (the result's markdown key); the docs text is written by "
            "hand. -->")
    last = f"### Run of {meta['finished_at']} ({meta['wall_seconds']:.0f} s wall clock for the driver)"
    return "\n\n".join([head, last, _machine(result), *blocks(result)])


def main(argv=None) -> int:
    """Render a results file again (its summary and markdown key rewritten, the report printed):
    `python -m bench.migration.report bench/migration/results-1000000.json`."""
    import json
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.migration.report RESULTS.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    result = json.loads(path.read_text())
    result["summary"] = summary(result)
    result["warnings"] = list(result["summary"]["warnings"])
    result["markdown"] = generated_section(result)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print_report(result)
    return 1 if result["summary"]["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
