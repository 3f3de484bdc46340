"""The report of the growth benchmark: the table of each figure per size with the ratio last / first size, the
disk used and load time per size, and the plans of the items above the goal; on stdout and in the "Growth"
generated section of docs/benchmarks.md."""

from __future__ import annotations

from bench.common import doc_section, fmt, interference_blocks, machine_text, md_table, print_blocks, write_generated

DOC_BEGIN = "<!-- bench:growth:generated:begin -->"
DOC_END = "<!-- bench:growth:generated:end -->"
SECTION_TITLE = "## Growth: costs at 1M and 10M relations (issue 15 §5)"
GOAL = 1.2
PLAN_LINES = 45  # lines of a plan shown in the report


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n:,}"


def _mb(b: int | None) -> str:
    return "-" if b is None else f"{b / 1024 / 1024:,.0f}"


def items(size: dict) -> dict[str, tuple[dict, dict | None]]:
    """item name -> (its stats, its main statement's plan) at one size."""
    m = size["measure"]
    ml, lk = m["my_likes"], m["likers"]

    def first(plans):
        return plans[0] if plans else None

    return {
        "command (relation_set_state), likes and unlikes": (m["commands"], m["commands"].get("plan")),
        # The pooled figures are bimodal (a first like inserts, an unlike updates): their p50 falls between the
        # two modes, so each kind is shown too.
        "  of which first likes": (m["commands"]["like"], m["commands"].get("plan")),
        "  of which unlikes": (m["commands"]["unlike"], None),
        f"batch query, {m['batch']['ids']} ids, warm": (m["batch"], first(m["batch"].get("plans"))),
        f"my-likes page 1 (limit {ml['limit']})": (ml["page1"], first(ml["page1"].get("plans"))),
        f"my-likes page {ml['deep_page']:,}": (ml["deep"], first(ml["deep"].get("plans"))),
        f"likers page 1 (limit {lk['limit']})": (lk["page1"], first(lk["page1"].get("plans"))),
        f"likers page {lk['deep_page']:,}": (lk["deep"], first(lk["deep"].get("plans"))),
        "exact reconciliation of the hot video": (m["exact"], first(m["exact"].get("plans"))),
    }


def _ratio(a, b) -> float | None:
    return round(b / a, 2) if a and b is not None else None


def ratios(result: dict) -> dict[str, dict]:
    sizes = result["sizes"]
    if len(sizes) < 2:
        return {}
    lo, hi = items(sizes[0]), items(sizes[-1])
    return {name: {"p50": _ratio(lo[name][0]["p50_ms"], hi[name][0]["p50_ms"]),
                   "p99": _ratio(lo[name][0]["p99_ms"], hi[name][0]["p99_ms"])} for name in lo if name in hi}


def over_goal(result: dict) -> list[str]:
    return [name for name, r in ratios(result).items() if (r["p50"] or 0) > GOAL or (r["p99"] or 0) > GOAL]


def figures_table(result: dict) -> str:
    sizes = result["sizes"]
    labels = [_size(s["relations"]) for s in sizes]
    cols = ["Operation", *(f"p50 {x} (ms):" for x in labels), *(f"p99 {x} (ms):" for x in labels)]
    if len(sizes) >= 2:
        cols += [f"p50 {labels[-1]} / {labels[0]}:", f"p99 {labels[-1]} / {labels[0]}:"]
    rs = ratios(result)
    rows = []
    per = [items(s) for s in sizes]
    for name in per[0]:
        row = [name, *(fmt(p[name][0]["p50_ms"], 2) for p in per), *(fmt(p[name][0]["p99_ms"], 2) for p in per)]
        if len(sizes) >= 2:
            r = rs.get(name, {})
            row += [_flag(r.get("p50")), _flag(r.get("p99"))]
        rows.append(row)
    return md_table(cols, rows)


def _flag(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x" + (" **over**" if x > GOAL else "")


def disk_table(result: dict) -> str:
    sizes = result["sizes"]
    tables = sorted({t for s in sizes for t in s["disk"]["tables"]})
    cols = ["", *(f"{_size(s['relations'])}:" for s in sizes)]
    rows = [["load time of this step (s)", *(fmt(s["load"]["seconds"], 0) for s in sizes)],
            ["  of which COPY (s)", *(fmt(s["load"]["steps"].get("copy"), 0) for s in sizes)],
            ["relations loaded in this step", *(f"{s['load']['relations']:,}" for s in sizes)],
            ["all bench databases (MB)", *(_mb(s["disk"]["total"]) for s in sizes)]]
    names = sorted({d for s in sizes for d in s["disk"]["databases"]})
    rows += [[f"  {d} (MB)", *(_mb(s["disk"]["databases"].get(d)) for s in sizes)] for d in names]
    rows += [[f"table {t}, all its databases (MB)", *(_mb(s["disk"]["tables"].get(t)) for s in sizes)]
             for t in tables]
    return md_table(cols, rows)


def cpu_table(result: dict) -> str:
    """Cores the whole machine kept busy during each timed item (the driver and its backend account for about
    one): a figure well above that means another load shared the 2 cores during that item."""
    sizes = result["sizes"]
    per = [items(s) for s in sizes]
    rows = [[name, *(fmt((p[name][0].get("cpu") or {}).get("machine_busy_cores"), 2) for p in per)]
            for name in per[0] if name in per[-1] and "exact" not in name and "of which" not in name]
    return md_table(["Operation", *(f"busy cores {_size(s['relations'])}:" for s in sizes)], rows)


def statements_table(result: dict) -> str:
    """The statements of a first like one by one (median of 5 random pairs): time, buffers read, read time."""
    sizes = result["sizes"]
    per = [{st["statement"]: st for st in s["measure"]["commands"].get("statements", [])} for s in sizes]
    if not per or not per[0]:
        return ""

    def cell(st: dict | None, key: str):
        if st is None:
            return "-"
        vals = sorted(r[key] for r in st["runs"] if r.get(key) is not None)
        return "-" if not vals else f"{vals[len(vals) // 2]:g}"

    cols = ["Statement of a first like"]
    for s in sizes:
        x = _size(s["relations"])
        cols += [f"ms {x}:", f"buffers read {x}:", f"read time ms {x}:"]
    rows = []
    for name in per[0]:
        row = [name]
        for p in per:
            st = p.get(name)
            row += [cell(st, "execution_ms"), cell(st, "shared_read"), cell(st, "io_read_ms")]
        rows.append(row)
    return md_table(cols, rows)


def checks_text(result: dict) -> str:
    parts = []
    for s in result["sizes"]:
        ex, hot, m = s["measure"]["exact"], s["hot"], s["measure"]
        idle = m.get("machine") or {}
        parts.append(f"{_size(s['relations'])}: waited {idle.get('waited_s')} s for an idle machine before measuring "
                     f"({'idle' if idle.get('quiet') else 'still busy: ' + str(idle.get('busy_cores_last')) + ' cores'}"
                     f"); exact reconciliation verdicts {', '.join(ex['statuses'])} "
                     f"({ex['checked']:,} relations checked, {ex['diffs']} diffs); the hot video's LIKED relations "
                     f"{hot['facts']:,} in the facts, {hot['display']:,} in its display snapshot, {hot['planned']:,} "
                     f"by the plan; {s['load']['bucket_mismatches']} videos whose vbuckets differ from the loaded "
                     f"relations; batch answers wrong: {m['batch']['wrong']}; commands changed "
                     f"{m['commands']['changed']}, errors {m['commands']['errors'] or 'none'}; drain after the "
                     f"commands {m['drain']['seconds']} s.")
    return " ".join(parts)


def plans_text(result: dict, *, fence: bool) -> list[str]:
    out = []
    for name in over_goal(result):
        if all(items(s)[name][1] is None for s in result["sizes"]) and "batch" not in name:
            continue  # a part of an item whose plans are shown under that item
        out.append(f"**{name.strip()}**: main statement at each size")
        for s in result["sizes"]:
            _stats, plan = items(s)[name]
            if plan is None:
                out.append(f"{_size(s['relations'])}: no SQL statement (every read was served from Redis or the "
                           "process cache)")
                continue
            lines = (plan.get("text") or plan.get("error") or "").splitlines()
            shown = "\n".join(lines[:PLAN_LINES] + (["..."] if len(lines) > PLAN_LINES else []))
            head = (f"{_size(s['relations'])} on {plan['alias']}: {plan.get('execution_ms')} ms, shared buffers hit "
                    f"{plan.get('shared_hit')} / read {plan.get('shared_read')}; `{plan.get('sql', '')[:300]}`")
            out.append(head + ("\n\n```\n" + shown + "\n```" if fence else "\n" + shown))
    return out


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    machine = machine_text(spec, pg=("shared_buffers", "synchronous_commit"), stack=("python", "django"),
                           load=f"Load average at the start {spec.get('loadavg_at_start')}, at the end "
                                f"{meta.get('loadavg_at_end')}.")
    shape = meta["plan"]
    blocks = [*interference_blocks(meta)]
    code = result.get("code") or {}
    if code.get("head"):
        blocks.append(f"**Code measured:** commit {code['head']}" + (
            f", with uncommitted changes in {', '.join(f'`{m}`' for m in code['modified'])}" if code.get("modified")
            else "") + ".")
    if meta.get("warnings"):
        blocks.append("**Warnings:** " + " ".join(meta["warnings"]))
    blocks += [
        f"Sizes {', '.join(f'{n:,}' for n in meta['sizes_done'])} relations (asked: "
        f"{', '.join(f'{n:,}' for n in meta['sizes'])}). Heavy user: {shape['heavy_liked']:,} LIKED of "
        f"{shape['heavy_relations']:,} relations; hot video: {shape['hot_liked']:,} likers of "
        f"{shape['hot_relations']:,} relations; at the last size {shape['core_users']:,} core users and "
        f"{shape['videos']:,} videos. {meta['reps']} timed repetitions per item after {meta['warmup']} untimed "
        f"(commands: {meta['reps'] // 2} like/unlike pairs), {meta['reconcile_reps']} timed exact runs after one "
        f"untimed.",
        "**Figures** (ms; the ratio is the last size over the first, goal at most "
        f"{GOAL}x):",
        figures_table(result),
        "**Disk and load time:**",
        disk_table(result),
        "**Machine busy cores during each item** (from /proc/stat; the driver and its backend alone keep about "
        "one core busy, more means another load shared the machine during that item):",
        cpu_table(result),
        "**The command's statements one by one** (a first like; EXPLAIN (ANALYZE, BUFFERS) with track_io_timing, "
        "each in a transaction rolled back; median of 5 random pairs):",
        statements_table(result),
        "**Checks:** " + checks_text(result),
    ]
    plans = plans_text(result, fence=True)
    if plans:
        blocks += [f"**Plans of the items above {GOAL}x** (EXPLAIN (ANALYZE, BUFFERS), the first {PLAN_LINES} "
                   "lines):", *plans]
    return doc_section(DOC_BEGIN, DOC_END, writer="bench/growth_bench.py", meta=meta, machine=machine,
                       blocks=blocks)


def print_report(result: dict) -> None:
    if not result.get("sizes"):
        print("\n(no size was measured)\n")
        return
    print_blocks(figures_table(result), disk_table(result), cpu_table(result), statements_table(result),
                 "Checks: " + checks_text(result), *plans_text(result, fence=False))


def write_docs(result: dict) -> None:
    if not result.get("sizes"):
        return
    write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                    heading=f"{SECTION_TITLE}\n\nRun `./bench/growth.sh`. bench/growth_bench.py rewrites the text "
                            "between the `bench:growth:generated` markers at the end of every run.")
