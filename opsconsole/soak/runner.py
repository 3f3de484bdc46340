"""One soak (issue 33 §1): the soak's own users and videos, spec TEST-2's traffic groups over HTTP against the
running service, the seed's fault windows injected while they run, a heal, then the history checker. The verdict
prints the seed, the schedule, the outcomes, the time to heal and each violation with its history lines; a
`DrillRecord` keeps it."""

from __future__ import annotations

import json
import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from django.utils import timezone

from likes_project.waiting import wait_until
from opsconsole.drills.checks import connections_refresh
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.population import drill_population_create
from opsconsole.drills.records import record_write
from opsconsole.drills.runner import drills_enabled_check
from opsconsole.drills.stage import DeploymentStage, Stage
from opsconsole.soak import checker
from opsconsole.soak import faults as soak_faults
from opsconsole.soak.history import History
from opsconsole.soak.schedule import Window, faults_parse, schedule_draw, traffic_parse
from opsconsole.soak.traffic import SIZES, SoakTraffic
from relations import routing


class SoakDrill:
    """How the soak shows in the drill records."""

    name = "soak"
    summary = ("seeded faults under the four traffic groups over HTTP; the history checker finds no lost, reordered "
               "or double-answered command, no read below its floor, no 500, and every projection exact after the heal")
    commands_succeed_while = ""
    spec_numbers = ()


@dataclass
class SoakVerdict:
    seed: int
    duration_s: float
    base_url: str
    run_id: str = ""
    schedule: list[dict] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)  # what each window did, begin and end, in order
    outcomes: dict[str, int] = field(default_factory=dict)
    heal_s: float | None = None
    violations: list[dict] = field(default_factory=list)
    reconciliation: dict = field(default_factory=dict)
    history: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.violations and self.heal_s is not None

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed, "verdict": "PASS" if self.passed else "FAIL"}

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, default=str)

    def as_text(self) -> str:
        out = [f"soak seed {self.seed}, {self.duration_s:.0f} s against {self.base_url} (run {self.run_id})",
               "  schedule: " + ("; ".join(f"{w['fault']}{' ' + w['target'] if w['target'] else ''} at "
                                           f"{w['start_s']} s for {w['length_s']} s" for w in self.schedule) or "none")]
        out += [f"  {line}" for line in self.injected]
        out += [f"  {n:>6}  {label}" for label, n in sorted(self.outcomes.items())]
        out.append(f"  healed in {self.heal_s} s" if self.heal_s is not None else "  NOT HEALED")
        out.append(f"  exact reconciliation: {self.reconciliation or 'not run'}")
        out += [f"  note: {n}" for n in self.notes]
        for v in self.violations:
            out.append(f"  VIOLATION (rule {v['rule']}): {v['text']}")
            out += [f"      {line}" for line in v["lines"]]
        out += [f"  history: {self.history}", "  PASS" if self.passed else "  FAIL"]
        return "\n".join(out)


def base_url_check(base_url: str) -> str:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or parts.hostname not in ("127.0.0.1", "localhost"):
        raise DrillRefused(f"the soak drives only a service on this host (http://127.0.0.1:PORT), not {base_url!r}")
    return base_url.rstrip("/")


OPERATIONS_WAIT_S = 60.0  # after the heal, how long the soak waits for the operations it started to finish


def _window(w: Window, *, t0: float, stop: threading.Event, stage: Stage, history: History, said: list[str],
            videos: list[str], operations: list) -> None:
    """Hold one fault window: wait for its start, begin, hold, end (always, once begun)."""
    if stop.wait(max(0.0, t0 + w.start_s - time.monotonic())):
        return
    try:
        what, end, operation = soak_faults.begin(w.fault, target=w.target, seconds=w.length_s, stage=stage,
                                                 videos=videos)
    except Exception as exc:  # noqa: BLE001 - a fault that could not begin is reported, the soak goes on
        said.append(f"{w.fault}: could not begin: {exc.__class__.__name__}: {exc}")
        history.write(kind="fault", fault=w.fault, phase="refused", detail=str(exc)[:300])
        return
    if operation is not None:
        operations.append(operation)
    said.append(f"{w.fault} at {time.monotonic() - t0:.1f} s: {what}")
    history.write(kind="fault", fault=w.fault, phase="begin", target=w.target, detail=what)
    try:
        stop.wait(w.length_s)
    finally:
        try:
            done = end()
        except Exception as exc:  # noqa: BLE001 - said in the verdict (the fault may still hold), the soak goes on
            done = f"COULD NOT BE UNDONE: {exc.__class__.__name__}: {exc}"
        said.append(f"{w.fault} ended at {time.monotonic() - t0:.1f} s: {done}")
        history.write(kind="fault", fault=w.fault, phase="end", detail=done)


def soak_run(*, seed: int, duration_s: float, base_url: str, faults: str | None = None, traffic: str | None = None,
             history_path: Path | None = None, stage: Stage | None = None, heal_timeout_s: float = 180.0,
             sizes: dict[str, int] | None = None, operations_wait_s: float = OPERATIONS_WAIT_S,
             say: Callable[[str], None] = lambda line: None) -> SoakVerdict:
    """Run one soak and return its verdict. Refused (DrillRefused) before anything is created when drills are
    disabled, the URL is not this host's, a fault cannot run here or a list names an unknown fault or group.
    `sizes`: clients per group (default `traffic.SIZES`); `operations_wait_s`: how long, after the heal, the soak
    waits for the operations it started to finish before it notes how each stands."""
    drills_enabled_check()
    base_url = base_url_check(base_url)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line a request: the history has them
    try:
        stage = stage or DeploymentStage()
        names, groups = faults_parse(faults, signals=soak_faults.signals_allowed(stage)), traffic_parse(traffic)
    except ValueError as exc:
        raise DrillRefused(str(exc)) from exc
    soak_faults.check(names, stage)
    started_at = timezone.now()
    shards = len(routing.all_aliases())
    sizes = sizes or SIZES
    population = drill_population_create(users_per_shard=math.ceil(sum(sizes[g] for g in groups) / shards) + 1,
                                          videos=8)
    path = history_path or Path(tempfile.gettempdir()) / f"likes-soak-{seed}-{population.run_id}.jsonl"
    verdict = SoakVerdict(seed, duration_s, base_url, population.run_id, history=str(path))
    schedule = schedule_draw(seed, duration_s=duration_s, faults=names, targets=soak_faults.targets())
    verdict.schedule = [w.as_dict() for w in schedule]
    history = History(path)
    history.write(kind="meta", seed=seed, duration_s=duration_s, base_url=base_url, run_id=population.run_id,
                  schedule=verdict.schedule, groups=groups)
    say(f"soak seed {seed}: run {population.run_id}, {len(schedule)} fault windows, history {path}")
    load = SoakTraffic(population, history, base_url=base_url, seed=seed, groups=groups, sizes=sizes)
    stop, operations = threading.Event(), []
    t0 = time.monotonic()
    windows = [threading.Thread(target=_window, args=(w,), kwargs={"t0": t0, "stop": stop, "stage": stage,
                                                                   "history": history, "said": verdict.injected,
                                                                   "videos": population.videos,
                                                                   "operations": operations},
                                daemon=True) for w in schedule]
    load.start()
    for t in windows:
        t.start()
    try:
        stop.wait(duration_s)
    finally:
        stop.set()  # a window still holding ends now
        load.stop()
        load.close()
        for t in windows:
            t.join(timeout=120)
    history.write(kind="meta", phase="traffic stopped")
    say(f"traffic stopped, the windows closed at {time.monotonic() - t0:.1f} s; healing")
    healing_from = time.monotonic()

    connections_refresh()
    report = checker.Report()
    expected = checker.history_check(path, checker.facts_read(population), report)
    healed_at = wait_until(lambda: checker.compare(population, expected).ok,
                           timeout_s=heal_timeout_s, poll_s=1.0)
    verdict.heal_s = round(time.monotonic() - healing_from, 1) if healed_at else None
    # The operations started mid-soak: how each ended (one left unfinished is noted: it waits for an operator).
    wait_until(lambda: all(op.read()[1] for op in operations) or None, timeout_s=operations_wait_s, poll_s=1.0)
    verdict.notes += [f"started mid-soak: {op.said()}" for op in operations]
    say(f"healed in {verdict.heal_s} s; operations settled at {time.monotonic() - t0:.1f} s")
    checker.stores_check(population, expected, report)
    checker.reconciliation_check(population, report)
    history.close()
    verdict.outcomes, verdict.violations, verdict.reconciliation = (report.outcomes, report.violations,
                                                                    report.reconciliation)
    if verdict.heal_s is None:
        verdict.notes.append(f"the projections did not equal the facts within {heal_timeout_s:.0f} s of the end")
    record_write(SoakDrill, stage=stage.label, started_at=started_at, finished_at=timezone.now(),
                 verdict=_as_drill_verdict(verdict), seed=seed, history_file=str(path))
    return verdict


def _as_drill_verdict(v: SoakVerdict):
    """The soak's verdict in the shape the drill records keep."""
    from opsconsole.drills.verdict import Verdict

    failures = [f"rule {x['rule']}: {x['text']}" for x in v.violations]
    if v.heal_s is None:
        failures.append("not healed")
    return Verdict(drill="soak", stage="", run_id=v.run_id, injected=v.injected, heal_s=v.heal_s,
                   failures=failures, notes=v.notes, comparison={"outcomes": v.outcomes,
                                                                 "reconciliation": v.reconciliation})
