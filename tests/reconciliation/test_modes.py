"""The three modes against damage injected by hand in SQL (issue 11 §1), each with its counter-example."""

from __future__ import annotations

import pytest

from relations import routing
from relations.models import LikeRelation
from tests.reconciliation.helpers import bucket_add, liked_video, projection_delete, run_check, sql

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def test_every_mode_passes_on_a_healthy_pipeline(make_user, make_video):
    video, _ = liked_video(make_user, make_video, "rec-ok", 5)
    for mode in ("identity", "coverage", "exact"):
        run = run_check(mode, videos=[video.video_id])
        assert (run.status, run.diffs_found) == ("PASSED", 0), (mode, run.refused_because, list(run.diffs.values()))
        assert run.checked > 0
        wm = run.watermarks
        assert set(wm) >= {"sourceShards", "offsetVector", "bucketSpaceVersion", "generation", "manifestId"}
    assert run.barrier_held_ms is not None and run.barrier_held_ms >= 0


def test_an_injected_plus_three_on_one_bucket_is_found_by_identity_per_bucket(make_user, make_video):
    video, users = liked_video(make_user, make_video, "rec-plus3", 4)
    bucket_add(users[0].pk, video.video_id, 3)
    run = run_check("identity", videos=[video.video_id])
    assert run.status == "FAILED"
    buckets = [d for d in run.diffs.all() if d.layer == "buckets"]
    assert len(buckets) == 1 and buckets[0].actual - buckets[0].expected == 3
    assert buckets[0].virtual_bucket is not None


def test_a_deleted_projection_row_with_its_bucket_decremented_passes_identity_and_fails_coverage(
        make_user, make_video):
    video, users = liked_video(make_user, make_video, "rec-lost", 4)
    projection_delete(users[1].pk, video.video_id)
    identity = run_check("identity", videos=[video.video_id])
    assert [d.layer for d in identity.diffs.all()] in ([], ["display"])  # the buckets agree with the projection
    coverage = run_check("coverage", videos=[video.video_id])
    assert coverage.status == "FAILED"
    [diff] = coverage.diffs.all()
    assert (diff.layer, diff.expected, diff.actual) == ("projection", 4, 3)
    assert "consumption gap" in diff.detail["relations"][0]["verdict"]


def test_t26_a_source_change_without_an_outbox_row_passes_identity_and_fails_coverage(make_user, make_video):
    """T26: the source relation changed but the outbox has no row for it. Internal identity passes (the projection
    agrees with itself); the source-completeness check (coverage) fails and names the outbox gap."""
    video, users = liked_video(make_user, make_video, "rec-t26", 3)
    u = users[0]
    sql(routing.alias_for_user(u.pk), f"UPDATE {LikeRelation._meta.db_table} SET state = 'UNLIKED', "
        "relation_version = relation_version + 1 WHERE user_id = %s AND video_id = %s", [u.pk, video.video_id])
    assert run_check("identity", videos=[video.video_id]).status == "PASSED"
    coverage = run_check("coverage", videos=[video.video_id])
    assert coverage.status == "FAILED"
    [diff] = coverage.diffs.all()
    assert "outbox gap" in diff.detail["relations"][0]["verdict"]


def test_a_wrong_count_cache_view_is_auto_fixed_but_a_wrong_display_snapshot_waits_for_a_repair(
        make_user, make_video):
    from counting import cache as count_cache
    from counting.models import VideoDisplayCount
    from counting.selectors import count_cache_generations_get
    from counting.services import snapshots

    video, _ = liked_video(make_user, make_video, "rec-cache", 3)
    snap = VideoDisplayCount.objects.get(video_id=video.video_id)
    active = count_cache_generations_get(fresh=True).active
    wrong = (video.video_id, snap.display_count + 7, snap.snapshot_id, "2026-01-01T00:00:00Z")
    count_cache.views_write(active, [wrong])
    run = run_check("identity", videos=[video.video_id])
    [diff] = run.diffs.all()
    assert (diff.layer, diff.expected, diff.actual, diff.status) == ("count_cache", 3, 10, "FIXED")
    assert run.diffs_fixed == 1 and diff.transitions.get().actor == "reconcile"
    snapshots.display_snapshot_refresh()  # the refresh the auto-fix asked for
    assert count_cache.view_read(active, video.video_id)[0] == 3
    assert run_check("identity", videos=[video.video_id]).status == "PASSED"
    # The counter-example: the durable display snapshot is evidence's cache too, but a layer a repair
    # rebuilds (REPAIR-1): its diff stays NEW, and nothing rewrites it.
    VideoDisplayCount.objects.filter(video_id=video.video_id).update(raw_active_count=9, display_count=9)
    run = run_check("identity", videos=[video.video_id])
    [diff] = run.diffs.all()
    assert (diff.layer, diff.status, run.diffs_fixed) == ("display", "NEW", 0)
    assert VideoDisplayCount.objects.get(video_id=video.video_id).raw_active_count == 9


# spec §7 drill 14: coverage with the projection behind the source.
def test_coverage_skips_an_event_published_but_not_yet_consumed_and_fails_one_consumed_but_not_projected(
        make_user, make_video, settings):
    """Under load an event can outlast the settle time between the publisher and the projector: that is
    lag, not damage (a false FAILED seen in the benchmark under load). Once the count consumer is past
    the event and the projection still lacks it, it is a consumption gap."""
    from tests.counting.helpers import publish_all
    from tests.relations.helpers import cmd

    settings.RECONCILE_COVERAGE_SETTLE_S = 0.0
    video, _ = liked_video(make_user, make_video, "rec-lag", 2)
    late = make_user()
    cmd(late, video.video_id, "LIKED")
    publish_all()  # published; the projector has not run
    run = run_check("coverage", videos=[video.video_id])
    assert (run.status, run.diffs_found) == ("PASSED", 0)
    assert [(s["userId"], s["reason"]) for s in run.skipped] == [(late.pk, "event published, not yet consumed")]
    # The counter-example: consumed, then the projection row lost (its bucket with it).
    from tests.counting.helpers import project_all

    project_all()
    projection_delete(late.pk, video.video_id)
    run = run_check("coverage", videos=[video.video_id])
    [diff] = run.diffs.all()
    assert run.status == "FAILED" and "consumption gap" in diff.detail["relations"][0]["verdict"]
