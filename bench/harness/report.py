"""Numbers, tables, and what a run leaves in docs/benchmarks.md: its section (between `<!-- bench:NAME:begin -->`
and `<!-- bench:NAME:end -->`), its line in bench/results/history.jsonl, and the summary table that opens the page
(between `<!-- bench:table:begin -->` and `<!-- bench:table:end -->`), generated from the history:

    python -m bench.harness.report --table            # print the table
    python -m bench.harness.report --table --write    # and write it into docs/benchmarks.md
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from bench.harness.driver import BENCH_DIR, ROOT

DOCS_PATH = ROOT / "docs" / "benchmarks.md"
HISTORY = BENCH_DIR / "results" / "history.jsonl"
# bench/run.sh NAME, in the order of the table.
NAMES = ("command", "levers", "projection", "projector", "convergence", "read", "reverse", "reconcile", "snapshot",
         "migration", "slotmove", "growth", "topology", "profile", "capacity")


def pct(vals, q: float, nd: int = 2) -> float | None:
    """The q-quantile of `vals` (any order, linear interpolation), rounded."""
    vals = sorted(x for x in vals if x is not None)
    if not vals:
        return None
    k = (len(vals) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(vals) - 1)
    return round(vals[lo] + (vals[hi] - vals[lo]) * (k - lo), nd)


def fmt(x, nd: int = 1) -> str:
    """A figure of a table: thousands separators, `nd` decimals, "-" when there is none."""
    return "-" if x is None else f"{x:,.{nd}f}"


def ratio(a: float | None, b: float | None, nd: int = 3) -> float | None:
    return round(a / b, nd) if a is not None and b else None


def pair(a, b, nd: int = 1) -> str:
    return f"{fmt(a, nd)} / {fmt(b, nd)}"


def pooled(items, *keys: str) -> list[Counter]:
    """For each of `keys`, the sum of the counters `items` (results of clients, windows, loops) hold under it."""
    out = [Counter() for _ in keys]
    for item in items:
        for total, key in zip(out, keys, strict=True):
            total.update(item.get(key) or {})
    return out


def clients_pooled(results, sums: tuple[str, ...], counters: tuple[str, ...], **extra) -> dict:
    """A window's clients (or a row's windows) pooled: `sums` summed, `counters` added up, every latency."""
    out = {k: sum(r[k] for r in results) for k in sums}
    out.update(zip(counters, pooled(results, *counters), strict=True))
    return {**out, "latencies_ms": [x for r in results for x in r["latencies_ms"]], **extra}


def tally(counter: Counter, report, fields: tuple[str, ...]) -> None:
    """Add the `fields` of one report (a dataclass of counts) to `counter`."""
    for name in fields:
        counter[name] += getattr(report, name)


def md_table(columns: list[str], rows) -> str:
    """A Markdown table; a trailing ":" on a column name right-aligns the column. None is an empty cell."""
    lines = ["| " + " | ".join(c.removesuffix(":") for c in columns) + " |",
             "|" + "|".join("---:" if c.endswith(":") else "---" for c in columns) + "|"]
    lines += ["|" + "|".join(" " if c is None else f" {c} " for c in row) + "|" for row in rows]
    return "\n".join(lines)


def print_blocks(*blocks: str) -> None:
    print()
    for block in blocks:
        print(block, end="\n\n")


def resources_table(items) -> str:
    """Where the time went: (label, resources of ResourceSampler) pairs, the empty ones left out; the process groups
    that used at least 0.05 cores, the top 3 backend states."""
    rows = [[label, f"{res['cores_busy']:.2f}",
             ", ".join(f"{k} {v:.2f}" for k, v in (res.get("cores_by_process") or {}).items() if v >= 0.05),
             ", ".join(f"{w['wait']} {w['share'] * 100:.0f}%" for w in res.get("top_waits", [])[:3])]
            for label, res in items if res]
    return ("**Where the time went** (CPU from /proc, the bench databases' backends from pg_stat_activity every "
            "0.25 s):\n\n" + md_table(["window", "machine busy (cores):", "CPU by process (cores)",
                                       "top bench-DB backend states"], rows)) if rows else ""


def _replace(text: str, begin: str, end: str, body: str, heading: str) -> str:
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1]
    return text.rstrip() + f"\n\n{heading}\n\n{begin}\n{body}\n{end}\n"


def section_write(name: str, result: dict, blocks: list[str]) -> None:
    """The run's section of docs/benchmarks.md: when, the command, the machine, then the report's blocks."""
    meta, spec = result["meta"], result["machine"]
    machine = (f"**Machine:** {spec.get('nproc')} CPUs ({spec.get('cpu_model', 'unknown model')}), "
               f"{spec.get('memory_gib')} GiB RAM, Linux {spec.get('kernel')}; PostgreSQL {spec.get('postgresql')} "
               f"(shared_buffers {spec.get('pg_shared_buffers')}, synchronous_commit "
               f"{spec.get('pg_synchronous_commit')}, fsync {spec.get('pg_fsync')}, autovacuum "
               f"{spec.get('pg_autovacuum')}); Redis {spec.get('redis')}; Python {spec.get('python')}, Django "
               f"{spec.get('django')}. Load average at the start {spec.get('loadavg_at_start')}, at the end "
               f"{meta.get('loadavg_at_end')}.")
    body = "\n\n".join([f"<!-- Written by `bench/run.sh {name}` at the end of every run; edit outside the markers. -->",
                        f"### Last run: {meta['finished_at']} ({meta['wall_seconds']:.0f} s wall clock)",
                        f"`{meta['command']}`", machine, *blocks])
    text = DOCS_PATH.read_text() if DOCS_PATH.exists() else "# Benchmarks\n"
    DOCS_PATH.write_text(_replace(text, f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->", body,
                                  f"## {name}"))


def history_append(name: str, meta: dict, headline: dict) -> None:
    line = {"name": name, "date": meta["finished_at"][:10], "command": meta["command"], **headline}
    with HISTORY.open("a") as fh:
        fh.write(json.dumps(line, default=str) + "\n")


def table() -> str:
    lines = [json.loads(raw) for raw in (HISTORY.read_text() if HISTORY.exists() else "").splitlines() if raw.strip()]
    latest, rows = {line["name"]: line for line in lines}, []  # later lines win
    for name in NAMES:
        h = latest.get(name)
        if h is None:
            rows.append([f"`{name}`", "-", "not run", "-", "-", "-", f"`bench/run.sh {name}`"])
            continue
        note = "" if h.get("source", "run") == "run" else " ¹"
        rows.append([f"`{name}`", h.get("goal", "-"), h.get("figure", "-"), h.get("ceiling") or "-",
                     h.get("ratio") or "-", h["date"] + note, f"`{h['command']}`"])
    return "\n".join([
        md_table(["benchmark", "goal", "latest figure", "ceiling / baseline", "ratio", "date", "command"], rows), "",
        "¹ Not re-run since the harness moved to `bench/run.sh`: the figure of that date, copied from its section "
        "below (which says how it was run). Generated by `python -m bench.harness.report --table --write` from "
        "`bench/results/history.jsonl`; every full run (without `--no-docs`) appends its line."])


def table_write() -> None:
    text = DOCS_PATH.read_text()
    DOCS_PATH.write_text(_replace(text, "<!-- bench:table:begin -->", "<!-- bench:table:end -->", table(),
                                  "## Summary"))


def main(argv: list[str]) -> int:
    if "--table" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    print(table())
    if "--write" in argv:
        table_write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
