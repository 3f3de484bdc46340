"""The test suite's budget report (issue 28, D100): each pass's wall time and counts, the 25 slowest tests over
all passes, and a loud warning when the whole run is over budget (it does not fail the run). Printed and
written to the file given, from the JUnit XML each pass of scripts/test.sh wrote.

    python scripts/test_report.py --junit-dir DIR --out FILE --budget-s 900 --workers 3 --total-ms MS \
        "single 481234 0" "upgraded 61234 0" ...   (name, wall milliseconds, pytest's exit status)
"""

from __future__ import annotations

import argparse
import datetime
import xml.etree.ElementTree as ET
from pathlib import Path

SLOWEST = 25


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m {rest:02d}s" if minutes else f"{seconds:.1f}s"


def _cases(path: Path) -> list[dict]:
    """Every test case of one JUnit file: its id, seconds (setup, call and teardown) and outcome."""
    if not path.exists():
        return []
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        cases.append({"id": f"{module}.py::{case.get('name')}", "seconds": float(case.get("time") or 0),
                      "outcome": outcome})
    return cases


def report(junit_dir: Path, passes: list[tuple[str, float, int]], *, total_s: float, budget_s: float,
           workers: int) -> list[str]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Test suite report, {now}: {workers} pytest-xdist workers per pass", "",
             f"{'pass':<10} {'wall':>9} {'passed':>7} {'failed':>7} {'skipped':>8}  exit"]
    slowest, totals = [], {"passed": 0, "failed": 0, "skipped": 0}
    for name, seconds, status in passes:
        cases = _cases(junit_dir / f"{name}.xml")
        count = {k: sum(1 for c in cases if c["outcome"] in k) for k in (("passed",), ("failure", "error"),
                                                                       ("skipped",))}
        lines.append(f"{name:<10} {_clock(seconds):>9} {count[('passed',)]:>7} {count[('failure', 'error')]:>7} "
                     f"{count[('skipped',)]:>8}  {status}")
        slowest += [(c["seconds"], name, c["id"]) for c in cases]
        totals["passed"] += count[("passed",)]
        totals["failed"] += count[("failure", "error")] + (1 if status not in (0, 5) and not cases else 0)
        totals["skipped"] += count[("skipped",)]
    lines.append(f"{'all':<10} {_clock(total_s):>9}  (budget {_clock(budget_s)}, setup included)")
    lines += ["", f"The {SLOWEST} slowest tests (setup, call and teardown):"]
    lines += [f"  {seconds:7.1f} s  {name:<9} {test_id}" for seconds, name, test_id in
              sorted(slowest, reverse=True)[:SLOWEST]]
    # Worker-seconds a module costs in a pass: what moving it out of a pass, or making it leaner, saves.
    modules: dict[tuple[str, str], list[float]] = {}
    for seconds, name, test_id in slowest:
        modules.setdefault((name, test_id.split("::", 1)[0]), []).append(seconds)
    lines += ["", f"The {SLOWEST} costliest modules (worker-seconds, tests):"]
    lines += [f"  {sum(times):7.1f} s  {name:<9} {module} ({len(times)})" for (name, module), times in
              sorted(modules.items(), key=lambda kv: -sum(kv[1]))[:SLOWEST]]
    if total_s > budget_s:
        banner = "!" * 100
        lines += ["", banner,
                  f"!!! OVER BUDGET: the whole run took {_clock(total_s)}, the budget is {_clock(budget_s)} "
                  f"(issue 28). Make the slowest tests leaner before adding more.",
                  banner]
    # The closing line, in the form any reader of test output takes as the run's count.
    lines += ["", f"total: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--total-ms", type=int, required=True)
    parser.add_argument("passes", nargs="*", help='"NAME WALL_MS EXIT_STATUS" per pass')
    args = parser.parse_args()
    passes = []
    for spec in args.passes:
        name, ms, status = spec.split()
        passes.append((name, int(ms) / 1000, int(status)))
    lines = report(args.junit_dir, passes, total_s=args.total_ms / 1000, budget_s=args.budget_s,
                   workers=args.workers)
    text = "\n".join(lines) + "\n"
    print("\n" + text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"[test] report written to {args.out}")


if __name__ == "__main__":
    main()
