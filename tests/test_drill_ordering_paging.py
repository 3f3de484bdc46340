"""Spec §7's drill 7 (`out-of-order-events`) and drill 15 (`paging-under-churn`) on ONE real Celery worker and beat,
as tests/test_drills.py runs the others: v2 before v1 and v4 skipping v2, v3 written to the event log for the running
projectors (count and likers equal the facts, the late events change nothing), then the likers and liked lists paged
while likes churn and privacy switches (no skip, no repeat, only popped items advance the cursor). One test, one
pipeline for both (the suite's time budget); the `single` pass, on the drills' worker after them (`tests/passes.py`
JOINS)."""

from __future__ import annotations

import re

import pytest

from opsconsole.drills import drill_run
from opsconsole.models import DrillRecord
from tests import drills

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

POPULATION = {"users_per_shard": 6, "videos": 4}


def _passed(verdict, name: str, output: str):
    assert verdict.passed, verdict.as_text() + "\n--- worker/beat output ---\n" + output[-8000:]
    assert DrillRecord.objects.filter(drill=name, run_id=verdict.run_id, verdict="PASS").count() == 1  # TEST-5
    assert verdict.heal_s is not None and verdict.comparison["ok"] and not verdict.comparison["partial"]
    assert set(verdict.phases["fault"]["commands"]) == {"200"}


def _figures(text: str, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return tuple(int(n) for n in found.groups())


def test_out_of_order_events_and_paging_under_churn(settings):
    settings.LIKES_DRILLS_ENABLED = True
    pipeline = drills.Pipeline().start()
    output = ""
    try:
        stage = drills.SuiteStage(pipeline, None)
        ordering = drill_run("out-of-order-events", stage=stage, say=print, **POPULATION)
        paging = drill_run("paging-under-churn", stage=stage, say=print, **POPULATION)
    finally:
        output = pipeline.stop()
    print(ordering.as_text(), paging.as_text(), sep="\n")

    # Drill 7: the forced order reached both projectors (every early event applied, every late one a stale no-op),
    # and the late events changed nothing (the drill's own comparison; the verdict would fail otherwise).
    _passed(ordering, "out-of-order-events", output)
    injected = ordering.injected[0]
    for consumer in ("count", "reverse"):
        applied, early = _figures(injected, rf"{consumer} early applied (\d+)/(\d+)")
        stale, late = _figures(injected, rf"{consumer} late stale (\d+)/(\d+)")
        assert applied == early == 6 and stale == late == 6, injected
    assert "the late events changed nothing" in ordering.recovered[0], ordering.recovered

    # Drill 15: walks of both lists ended, pages filled while other shards held prefetched rows they never popped,
    # and every kind of churn landed during the walks.
    _passed(paging, "paging-under-churn", output)
    evidence = paging.recovered[0]
    likers, _pages, early_filled = _figures(evidence, r"(\d+) likers walks \((\d+) pages, (\d+) filled")
    mine, = _figures(evidence, r"(\d+) my-likes walks")
    unlikes, relikes, privacy = _figures(evidence, r"(\d+) unlikes, (\d+) re-likes, (\d+) privacy switches")
    assert likers >= 1 and mine >= 1 and early_filled >= 1, evidence
    assert unlikes and relikes and privacy, evidence
