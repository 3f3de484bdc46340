"""Command throughput and commit -> displayCount on the `single` and `scaled` topologies (issue 16): `bench/run.sh
topology` runs `command` and `convergence` (the Celery path) on each, then `python -m bench.topology DIR [--no-docs]`
prints the table of their results in DIR (without --no-docs, also the docs section and the history line)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from bench.harness import report as rep

TOPOLOGIES = ("single", "scaled")


def _row(rows: list[dict], **match) -> dict:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), {})


def figures(results: Path) -> dict[str, dict]:
    """label -> {topology: value} from the four result files."""
    cmd = {t: json.loads((results / f"command_{t}.json").read_text()) for t in TOPOLOGIES}
    conv = {t: json.loads((results / f"convergence_{t}.json").read_text()) for t in TOPOLOGIES}
    out: dict[str, dict] = {}
    for workload in ("uniform", "hot"):
        for variant, name in (("ours", "ours"), ("naive", "naive counter")):
            out[f"service layer, {name}, {workload} (commands/s)"] = {
                t: _row(cmd[t]["rows"], layer="service", variant=variant, workload=workload).get("commands_per_s")
                for t in TOPOLOGIES}
    out["pgbench ceiling of the command's statements (tps, first server)"] = {
        t: cmd[t]["ratios"].get("pgbench_ceiling_tps") for t in TOPOLOGIES}
    out["service ours uniform ÷ pgbench ceiling"] = {
        t: cmd[t]["ratios"].get("service_ours_uniform_over_pgbench_ceiling") for t in TOPOLOGIES}
    out["pipeline sustained (Celery worker; commands/s)"] = {
        t: _row(conv[t]["rows"], path="celery", phase="max").get("sustained_commands_per_s") for t in TOPOLOGIES}
    for q in ("p50", "p99"):
        out[f"commit → displayCount {q} at 80 % of it (ms)"] = {
            t: _row(conv[t]["rows"], path="celery", phase="target").get(f"display_{q}_ms") for t in TOPOLOGIES}
    out["exact after the drain (1 = yes)"] = {t: float(all(r.get("exact") for r in conv[t]["rows"]))
                                              for t in TOPOLOGIES}
    return out


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        return print(__doc__) or 0
    results = Path(argv[0] if argv and not argv[0].startswith("-") else "bench/results/topology")
    fig = figures(results)
    table = rep.md_table(["", "single:", "scaled:", "scaled ÷ single:"],
                         [[label, rep.fmt(v.get("single"), 2), rep.fmt(v.get("scaled"), 2),
                           rep.fmt(rep.ratio(v.get("scaled"), v.get("single")), 2)] for label, v in fig.items()])
    single = json.loads((results / "command_single.json").read_text())
    conv = json.loads((results / "convergence_scaled.json").read_text())
    note = ("Both topologies on this one host: the second PostgreSQL server and the three Cluster nodes share its "
            "cores and disk.")
    rep.print_blocks(table, note)
    if "--no-docs" not in argv:
        meta = {**conv["meta"], "command": "bench/run.sh " + shlex.join(["topology", *argv[1:]])}
        rep.section_write("topology", {"meta": meta, "machine": single["machine"]}, [table, note])
        sustained = fig["pipeline sustained (Celery worker; commands/s)"]
        p99 = fig["commit → displayCount p99 at 80 % of it (ms)"]
        rep.history_append("topology", meta, {
            "goal": "scaled ≥ single on one host",
            "figure": f"Celery path sustains {rep.fmt(sustained['single'], 0)} → {rep.fmt(sustained['scaled'], 0)} "
                      f"cmd/s; p99 {rep.fmt(p99['single'], 0)} → {rep.fmt(p99['scaled'], 0)} ms", "ceiling": "-",
            "ratio": rep.fmt(rep.ratio(sustained["scaled"], sustained["single"]), 2)})
        rep.table_write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
