"""Auto-repair paused (issue 14 §3): a check run still finds and records a wrong count-cache view, but the
diff stays NEW and the cache is not rewritten; cleared, the next run fixes it as before (the counter-example)."""

from __future__ import annotations

import pytest

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import system_actor
from likes_project.switches import switch_set
from reconciliation.models import CheckDiff
from tests.reconciliation.helpers import liked_video, run_check

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

ACTOR = system_actor("test-operator")


def auto_repair(paused: bool) -> None:
    switch_set(kind="auto-repair", key=None, paused=paused, reason="investigating the cache", actor=ACTOR)


def test_paused_auto_repair_records_the_cache_diff_without_fixing_it_and_cleared_it_fixes(make_user, make_video):
    from counting import cache as count_cache
    from counting.models import VideoDisplayCount
    from counting.selectors import count_cache_generations_get
    from counting.services import snapshots

    video, _ = liked_video(make_user, make_video, "ar-cache", 3)
    snap = VideoDisplayCount.objects.get(video_id=video.video_id)
    active = count_cache_generations_get(fresh=True).active
    count_cache.views_write(active, [(video.video_id, snap.display_count + 7, snap.snapshot_id,
                                      "2026-01-01T00:00:00Z")])
    auto_repair(True)

    run = run_check("identity", videos=[video.video_id])
    [diff] = run.diffs.all()
    assert (diff.layer, diff.expected, diff.actual, diff.status) == ("count_cache", 3, 10, "NEW")
    assert (run.status, run.diffs_found, run.diffs_fixed) == ("FAILED", 1, 0)
    assert not diff.transitions.exists()
    snapshots.display_snapshot_refresh()  # nothing asked for a refresh: the wrong view stays
    assert count_cache.view_read(active, video.video_id)[0] == 10

    auto_repair(False)
    run = run_check("identity", videos=[video.video_id])
    [fixed] = run.diffs.all()
    assert (fixed.layer, fixed.status, run.diffs_fixed) == ("count_cache", "FIXED", 1)
    snapshots.display_snapshot_refresh()
    assert count_cache.view_read(active, video.video_id)[0] == 3
    assert CheckDiff.objects.get(pk=diff.pk).status == "NEW"  # the first run's record is kept as it was
    assert [r.action for r in AuditRecord.objects.filter(target_type="reconciliation").order_by("id")] == [
        "reconcile.auto_repair_pause", "reconcile.auto_repair_resume"]
