"""Drill 13, hot-video skew (issue 32 §2), on a real Celery worker and beat as tests/test_drills.py runs the others:
one video takes most of the commands, the hot-spot figures the worker's projector records show it as the hottest,
the suggested bucket move (the share lowered to the test topology's even 50/50 split, whose third partition starts
empty) is planned, approved and run under the load, the source partition's share of the video's buckets falls, and
every count is exact. Once (the `single` pass), on the drills' worker after them (`tests/passes.py` JOINS)."""

from __future__ import annotations

import pytest

from tests.test_drills import run

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]


def test_hot_video_skew(settings):
    from counting.models import BucketMigration

    settings.LIKES_DRILLS_ENABLED = True
    settings.HOTSPOT_MOVE_SUGGEST_SHARE, settings.HOTSPOT_MIN_WRITES = 0.4, 10
    verdict = run("hot-video-skew")
    assert "suggested and approved migration" in verdict.injected[0], verdict.injected
    assert "RETIRED" in verdict.recovered[0], verdict.recovered
    assert set(verdict.phases["fault"]["commands"]) == {"200"}
    [move] = BucketMigration.objects.all()
    assert move.state == "RETIRED" and move.target_partition == "cnt_02"  # the empty partition took them


def test_with_no_move_the_degradation_plan_holds(settings):
    """Moves unavailable (no partition past the share): every command answers, the hot video's display is refreshed
    at most every COUNT_HOT_REFRESH_S once the figures call it hot, no cold video's mark waits, counts exact. The
    workers run with the drill's throttle settings (the drill judges by them)."""
    from counting.models import BucketMigration

    settings.LIKES_DRILLS_ENABLED = True
    settings.HOTSPOT_MOVE_SUGGEST_SHARE = 1.0
    settings.COUNT_HOT_WRITES_PER_MINUTE, settings.COUNT_HOT_REFRESH_S = 20, 1.5
    verdict = run("hot-video-skew", env={"COUNT_HOT_WRITES_PER_MINUTE": "20", "COUNT_HOT_REFRESH_S": "1.5"},
                  fault_s=8)
    assert "no move suggested: degradation plan" in verdict.injected[0], verdict.injected
    assert "gaps once hot [" in verdict.recovered[0], verdict.recovered  # the throttle was seen, then judged
    assert set(verdict.phases["fault"]["commands"]) == {"200"}
    assert not BucketMigration.objects.exists()
