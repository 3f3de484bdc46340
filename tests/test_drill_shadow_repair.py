"""Spec §7's drill 14 (`repair-under-consumption`; REPAIR-3, REPAIR-4, REC-4, T27, T29) on a real Celery worker and
beat, as tests/test_drills.py runs the others: a projection row lost by hand is found by online coverage, repaired
from the facts (requested and approved by two system actors, run by the workers) while commands keep flowing to its
video, and the coverage rules are judged with the projection equal to, behind and ahead of the source; everything
converges exactly. The `single` pass, on the drills' worker after them (`tests/passes.py` JOINS)."""

from __future__ import annotations

import re

import pytest

from likes_project.audit.models import AuditRecord
from opsconsole.drills import drill_run
from opsconsole.models import DrillRecord
from reconciliation.models import CheckRun, RepairRequest
from tests import drills

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

POPULATION = {"users_per_shard": 6, "videos": 4}
CASES = {"behind, consumed but not projected": "FAILED", "equal": "PASSED",
         "equal, another state at the same version": "FAILED", "ahead, with the outbox's evidence": "PASSED",
         "ahead, a version no outbox row has": "FAILED", "behind, in flight (consumer paused)": "PASSED"}


# spec §7 drill 14: shadow repair during live consumption; coverage equal to, behind and ahead of the source.
def test_repair_under_consumption(settings):
    settings.LIKES_DRILLS_ENABLED = True
    # Shorter than the defaults, the same in this process and the worker: the paused switch is seen within 1 s,
    # and an event in flight is waited for 1 s before coverage lists it as skipped.
    settings.SWITCH_CACHE_S, settings.RECONCILE_COVERAGE_SETTLE_S = 1.0, 1.0
    pipeline = drills.Pipeline(SWITCH_CACHE_S="1", RECONCILE_COVERAGE_SETTLE_S="1").start()
    output = ""
    try:
        verdict = drill_run("repair-under-consumption", stage=drills.SuiteStage(pipeline, None), say=print,
                            **POPULATION)
    finally:
        output = pipeline.stop()
    print(verdict.as_text())
    assert verdict.passed, verdict.as_text() + "\n--- worker/beat output ---\n" + output[-8000:]
    assert DrillRecord.objects.filter(drill="repair-under-consumption", run_id=verdict.run_id,
                                      verdict="PASS").count() == 1  # TEST-5
    assert verdict.heal_s is not None and verdict.comparison["ok"] and not verdict.comparison["partial"]
    assert set(verdict.phases["fault"]["commands"]) == {"200"}

    # The damage was found (a consumption gap) and repaired from the facts by the workers, while commands on its
    # video were acknowledged, with nothing newer overwritten.
    injected = verdict.injected[0]
    found = re.search(r"repair (\d+) SUCCEEDED \((\d+) pairs of the video acknowledged while it ran, tail folded "
                      r"(\d+), newer than its facts 0", injected)
    assert found, injected
    req = RepairRequest.objects.get(pk=int(found.group(1)))
    assert int(found.group(2)) >= 1
    assert (req.requested_by, req.approved_by) == ("drill-requester", "drill-approver")
    assert req.result["layers"]["projection"] == [f"drill-{verdict.run_id}-v0"]
    assert CheckRun.objects.get(pk=req.verify_run_id).status == "PASSED"
    assert AuditRecord.objects.filter(action="repair.execute", target_id=str(req.pk), outcome="succeeded").exists()

    # Each coverage case really ran, as its own recorded run, with the verdict the rules give.
    for name, status in CASES.items():
        case = re.search(rf"{re.escape(name)}[:]? {status}", injected)
        assert case, (name, status, injected)
    runs = CheckRun.objects.filter(mode="coverage", actor="drill")
    assert sorted(runs.values_list("status", flat=True)) == sorted(CASES.values())
    paused = runs.get(pk=int(re.search(r"\(consumer paused\) PASSED \(run (\d+)\)", injected).group(1)))
    assert any("published, not yet consumed" in s["reason"] for s in paused.skipped), paused.skipped
    switch = AuditRecord.objects.filter(action__in=["consumer.pause", "consumer.resume"], target_id="count",
                                        params__reason__startswith="drill repair-under-consumption").order_by("id")
    assert [(r.action, r.actor) for r in switch] == [("consumer.pause", "drill"), ("consumer.resume", "drill")]
