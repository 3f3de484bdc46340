"""The report of bench/topology.sh (issue 16): command throughput (service layer, naive baseline, pgbench
ceiling) and commit -> displayCount convergence on the `single` and `scaled` topologies, side by side, from
the JSON each run wrote. Prints the table and writes the "Topologies" section of docs/benchmarks.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench import common

BEGIN, END = "<!-- topology:begin -->", "<!-- topology:end -->"

TOPOLOGIES = ("single", "scaled")


def _row(rows: list[dict], **match) -> dict:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), {})


def table(results: Path) -> str:
    cmd = {t: json.loads((results / f"command_{t}.json").read_text()) for t in TOPOLOGIES}
    conv = {t: json.loads((results / f"convergence_{t}.json").read_text()) for t in TOPOLOGIES}
    lines = ["| | single | scaled | scaled / single |", "|---|---:|---:|---:|"]

    def add(label: str, values: dict, fmt: str = "{:,.1f}") -> None:
        a, b = values.get("single"), values.get("scaled")
        ratio = f"{b / a:.2f}" if a and b else ""
        lines.append(f"| {label} | {fmt.format(a) if a is not None else ''} | "
                     f"{fmt.format(b) if b is not None else ''} | {ratio} |")

    for workload in ("uniform", "hot"):
        add(f"service layer, ours, {workload} (commands/s)",
            {t: _row(cmd[t]["rows"], layer="service", variant="ours", workload=workload).get("commands_per_s")
             for t in TOPOLOGIES})
        add(f"service layer, naive counter, {workload} (commands/s)",
            {t: _row(cmd[t]["rows"], layer="service", variant="naive", workload=workload).get("commands_per_s")
             for t in TOPOLOGIES})
    add("pgbench ceiling of the command's statements (tps, first server)",
        {t: cmd[t]["ratios"].get("pgbench_ceiling_tps") for t in TOPOLOGIES})
    add("service ours uniform / pgbench ceiling",
        {t: (_row(cmd[t]["rows"], layer="service", variant="ours", workload="uniform").get("commands_per_s") or 0)
         / (cmd[t]["ratios"].get("pgbench_ceiling_tps") or 1) for t in TOPOLOGIES}, "{:.2f}")
    add("pipeline sustained (Celery worker; commands/s)",
        {t: _row(conv[t]["rows"], path="celery", phase="max").get("sustained_commands_per_s") for t in TOPOLOGIES})
    for q in ("p50", "p99"):
        add(f"commit -> displayCount {q} at 80 % of it (ms)",
            {t: _row(conv[t]["rows"], path="celery", phase="target").get(f"display_{q}_ms") for t in TOPOLOGIES})
    add("exact after the drain (1 = yes)",
        {t: float(all(r.get("exact") for r in conv[t]["rows"])) for t in TOPOLOGIES}, "{:.0f}")
    machine = cmd["single"]["machine"]
    lines.append("")
    lines.append(f"Machine: {machine.get('nproc')} cores, {machine.get('memory_gib')} GiB, PostgreSQL "
                 f"{machine.get('postgresql')}, Redis {machine.get('redis')}; both topologies on this one host "
                 f"(the second PostgreSQL server and the three Cluster nodes share its cores and disk).")
    return "\n".join(lines)


def main() -> int:
    results = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/topology")
    text = table(results)
    print(text)
    if "--no-docs" not in sys.argv:
        finished = json.loads((results / "convergence_scaled.json").read_text())["meta"]["finished_at"]
        section = "\n\n".join([BEGIN, "<!-- Written by bench/topology.sh at the end of every run. -->",
                                 f"### Last run: {finished}", text, END])
        common.write_generated(section, BEGIN, END, heading="## Topologies: single against scaled (issue 16)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
