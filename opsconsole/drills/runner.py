"""One drill run, the same for the test suite and `manage.py drill`: create the drill's own users and
videos, check the pipeline converges before any fault, keep commands flowing, inject the fault and hold
it while sampling the backlog, undo it, then wait (bounded) until every projection equals the facts
and the facts equal what was acknowledged; the verdict says all of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from likes_project.waiting import wait_until
from opsconsole.drills.api import DrillApi
from opsconsole.drills.checks import Backlog, backlog_sample, projections_compare, retries_get
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.population import drill_population_create
from opsconsole.drills.records import record_write
from opsconsole.drills.registry import DRILLS
from opsconsole.drills.scenarios import Context
from opsconsole.drills.stage import DeploymentStage, Stage
from opsconsole.drills.traffic import Ack, Traffic
from opsconsole.drills.verdict import Verdict

BASELINE_TIMEOUT_S = 60.0
SHOW_MAX_S = 30.0  # how much longer than fault_s a fault is held for its effect to show (Drill.shown)
POLL_S = 1.0


def drills_enabled_check() -> None:
    if not getattr(settings, "LIKES_DRILLS_ENABLED", False):
        raise DrillRefused("fault drills are disabled here: set LIKES_DRILLS_ENABLED=true in the environment "
                           "of this command (drills inject real faults into the databases and Redis)")


def drill_run(name: str, *, stage: Stage | None = None, fault_s: float | None = None, alias: str | None = None,
              heal_timeout_s: float = 120.0, users_per_shard: int = 15, videos: int = 8,
              say: Callable[[str], None] = lambda line: None) -> Verdict:
    """Run drill `name` and return its verdict (PASS when no failure was recorded). Raises DrillRefused
    before touching anything when drills are disabled, the name is unknown or the drill cannot run here.
    The fault is always undone, whatever happens while it holds."""
    drills_enabled_check()
    if name not in DRILLS:
        raise DrillRefused(f"unknown drill {name!r}; the drills are: {', '.join(DRILLS)}")
    drill = DRILLS[name]()
    stage = stage or DeploymentStage()
    if fault_s is None:  # the drill's own length, capped by DRILL_FAULT_MAX_S where set (the test settings)
        fault_s = min(drill.default_fault_s, settings.DRILL_FAULT_MAX_S or drill.default_fault_s)
    ctx = Context(stage=stage, fault_s=fault_s, alias=alias)
    drill.prepare(ctx)
    started_at = timezone.now()
    population = drill_population_create(users_per_shard=users_per_shard, videos=videos)
    say(f"drill {name}: run {population.run_id}, {len(population.users)} users over "
        f"{len(population.by_shard)} shards, {len(population.videos)} videos")
    traffic = Traffic(population)
    ctx.traffic = traffic
    try:
        verdict = _run(drill, ctx, population, traffic, started_at=started_at, heal_timeout_s=heal_timeout_s,
                       say=say)
    except Exception as exc:  # broken off: kept as an ERROR record, then raised as it was
        record_write(drill, stage=stage.label, started_at=started_at, finished_at=timezone.now(), verdict=None,
                     error=exc)
        raise
    finally:
        traffic.stop()  # whatever went wrong, no command outlives the run
    record = record_write(drill, stage=stage.label, started_at=started_at, finished_at=timezone.now(),
                          verdict=verdict)
    say(f"drill record {record.pk} written")
    return verdict


def _run(drill, ctx, population, traffic, *, started_at, heal_timeout_s, say) -> Verdict:
    name = drill.name
    verdict = Verdict(drill=name, stage=ctx.stage.label, run_id=population.run_id, heal_timeout_s=heal_timeout_s)
    api = DrillApi()

    # 1. Before any fault the pipeline must converge, or a FAIL later would blame the wrong thing.
    traffic.start("before")
    try:
        wait_until(lambda: traffic.commands_sent() >= len(population.users), timeout_s=60)
    finally:
        traffic.stop()
    baseline, _samples, _at = _converge(api, population, traffic.expected(), timeout_s=BASELINE_TIMEOUT_S)
    if not baseline.ok:
        verdict.failures.append(f"the projections did not converge within {BASELINE_TIMEOUT_S:.0f} s before any "
                                f"fault ({baseline.mismatches()} mismatches, {len(baseline.errors)} unreadable); "
                                "are the worker and beat running?")
        verdict.comparison = baseline.as_dict()
        _tallies(verdict, traffic)
        return verdict
    say("baseline converged; commands flowing, injecting the fault")

    # 2. The fault, held for fault_s while commands flow and the backlog is sampled.
    traffic.start("before")
    wait_until(lambda: traffic.commands_sent("before") >= 8, timeout_s=30)
    fault_samples: list[Backlog] = []
    confirmed: list[bool] = []
    try:
        # Where the fault changes which answers are right, no command may straddle the switch.
        if drill.pause_at_switch:
            traffic.stop()
        verdict.injected.append(drill.inject(ctx))
        if drill.pause_at_switch:
            traffic.start("fault", drill.rule(ctx))
        else:
            traffic.set_phase("fault", drill.rule(ctx))
        say(f"injected: {verdict.injected[-1]}")
        held_from = time.monotonic()
        ticker = threading.Event()
        while True:
            fault_samples.append(backlog_sample())
            effect = drill.in_effect(ctx)
            if effect is not None:
                confirmed.append(effect)
            held = time.monotonic() - held_from
            # The fault lasts fault_s by definition (the drill's length, not a measurement), and longer, bounded,
            # until what it is there to show has happened.
            if held >= ctx.fault_s and (drill.shown(ctx) or held >= ctx.fault_s + SHOW_MAX_S):
                break
            ticker.wait(min(POLL_S, ctx.fault_s - held) if held < ctx.fault_s else POLL_S)
        verdict.fault_s = round(time.monotonic() - held_from, 1)
    finally:
        if drill.pause_at_switch:
            traffic.stop()
        verdict.recovered.append(drill.recover(ctx))
        recovered_at = time.monotonic()
        if drill.pause_at_switch:
            traffic.start("after")
        else:
            traffic.set_phase("after")
    say(f"recovered: {verdict.recovered[-1]}")
    verdict.fault_confirmed = all(confirmed) if confirmed else None
    if confirmed and not all(confirmed):
        verdict.failures.append(f"the fault was not in effect in {confirmed.count(False)} of {len(confirmed)} "
                                "looks while it should have held")
    # A few commands after the return (the downed part's users must succeed again), then the heal; none when every
    # pair had its one command during the fault (frozen: a later one would paper over a lost event).
    wait_until(lambda: traffic.commands_sent("after") >= 8 or traffic.all_frozen(), timeout_s=10)
    traffic.stop()

    # 3. Commands that failed during the fault: a client would look them up by operation id.
    resolved = _resolve_failed(api, traffic)
    verdict.resolved = {"failed": len(traffic.failed),
                        "not_applied": sum(1 for f in traffic.failed if f.operation_id not in resolved),
                        "committed_after_all": len(resolved)}
    expected = traffic.expected(resolved)

    # 4. Heal: bounded wait for every projection to equal the facts.
    final, heal_samples, healed_at = _converge(api, population, expected,
                                               timeout_s=max(0.0, heal_timeout_s - (time.monotonic() - recovered_at)))
    verdict.heal_s = round(healed_at - recovered_at, 1) if healed_at is not None else None
    verdict.comparison = final.as_dict()
    if not final.ok:
        verdict.failures.append(f"not healed within {heal_timeout_s:.0f} s of the fault's end: "
                                f"{final.mismatches()} mismatches, {len(final.errors)} unreadable reads")
    verdict.backlog_max = _backlog_max(fault_samples, heal_samples)
    r = retries_get(population, since=started_at)
    verdict.retries = {"dead_letters": r.dead_letters, "outbox_rows_retried": r.outbox_retried,
                       "outbox_failed_attempts": r.outbox_retries, "outbox_dead": r.outbox_dead}
    if r.dead_letters:
        verdict.notes.append(f"events of the drill were dead-lettered: {r.dead_letters}")
    if r.outbox_dead:
        verdict.notes.append(f"{r.outbox_dead} outbox rows of the drill went DEAD")
    _tallies(verdict, traffic)
    verdict.failures += drill.judge(ctx, traffic.tallies.get("fault") or _empty())
    verdict.notes += ctx.notes
    return verdict


def _empty():
    from opsconsole.drills.traffic import PhaseTally

    return PhaseTally()


def _tallies(verdict: Verdict, traffic: Traffic) -> None:
    verdict.phases = {phase: tally.as_dict() for phase, tally in traffic.tallies.items()}
    for phase, tally in traffic.tallies.items():
        if tally.violations:
            verdict.failures.append(f"{len(tally.violations)} answers broke the rules in phase {phase!r} "
                                    f"(first: {tally.violations[0]})")
    verdict.failures += [f"the drill's own client crashed: {c}" for c in traffic.crashed]


def _converge(api, population, expected, *, timeout_s: float):
    """Compare until everything matches or `timeout_s` passes: (last comparison, backlog samples, the
    monotonic time it first matched or None)."""
    deadline = time.monotonic() + timeout_s
    samples = []
    while True:
        samples.append(backlog_sample())
        comparison = projections_compare(api, population, expected)
        if comparison.ok:
            return comparison, samples, time.monotonic()
        if time.monotonic() >= deadline:
            return comparison, samples, None
        time.sleep(POLL_S)  # the projections are other processes' work: poll their observable result


def _resolve_failed(api: DrillApi, traffic: Traffic) -> dict[str, Ack]:
    """operation id -> its stored verdict, for failed commands that were committed after all."""
    found = {}
    for f in traffic.failed:
        answer = api.operation_get(f.user, f.operation_id)
        if answer.ok:
            found[f.operation_id] = Ack(f.seq, f.operation_id, answer.body["state"],
                                        int(answer.body["relationVersion"]))
    return found


def _backlog_max(fault: list[Backlog], heal: list[Backlog]) -> dict:
    def top(samples, pick):
        values = [v for v in (pick(s) for s in samples) if v is not None]
        return max(values) if values else None

    consumers = sorted({c for s in fault + heal for c in s.consumer_lag})
    shards = sorted({a for s in fault for a in s.outbox_pending})
    return {
        "fault_outbox": top(fault, lambda s: s.outbox_total),
        "fault_outbox_by_shard": {a: top(fault, lambda s, a=a: s.outbox_pending.get(a)) for a in shards},
        "fault_consumer_lag": {c: top(fault, lambda s, c=c: s.consumer_lag.get(c)) for c in consumers},
        "fault_consumer_lag_s": {c: top(fault, lambda s, c=c: s.consumer_lag_s.get(c)) for c in consumers},
        "fault_blocked_attempts": {c: top(fault + heal, lambda s, c=c: s.blocked_attempts.get(c))
                                   for c in consumers},
        "heal_outbox": top(heal, lambda s: s.outbox_total),
        "heal_consumer_lag": {c: top(heal, lambda s, c=c: s.consumer_lag.get(c)) for c in consumers},
    }
