"""The retirement of deleted videos is tracked per video (issue 9 §4): a run works on a bounded batch of
deleted videos not retired yet, never reloads retired ones, and marks a video retired only once its rows
are gone for good: not while a lagging projector or an unpublished outbox row may still bring them back."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from counting.models import (
    DirtyVideo,
    LikeReverseProjection,
    LikeReverseRecent,
    LikeReverseSort,
    RetirementStatus,
    VideoDisplayCount,
    VideoRetirement,
    VideoRetirementScan,
)
from counting.services.retire import deleted_videos_retire
from counting.tasks import display_snapshot_task, retire_deleted_videos_task
from relations.models import VideoSnapshot
from relations.selectors.retire import deleted_videos_list
from tests.counting.helpers import drain, drain_all, project_reverse, publish_all
from tests.relations.helpers import cmd

# Transactional: the publisher only takes rows whose transaction has committed.
pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


@pytest.fixture
def no_settle(settings):
    """Deletions count as settled at once (the outbox and projector guards still apply)."""
    settings.RETIRE_SETTLE_S = 0.0


def _rows(video_id: str) -> int:
    n = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        for model in (LikeReverseProjection, LikeReverseSort, LikeReverseRecent, DirtyVideo):
            n += model.objects.using(alias).filter(video_id=video_id).count()
    return n + VideoDisplayCount.objects.filter(video_id=video_id).count()


def _status(video_id: str) -> str | None:
    return VideoRetirement.objects.filter(video_id=video_id).values_list("status", flat=True).first()


def _liked(make_user, make_video, author, video_ids, likers: int = 2) -> None:
    for video_id in video_ids:
        make_video(video_id, author)
        for _ in range(likers):
            cmd(make_user(), video_id, "LIKED")
    drain_all()
    display_snapshot_task()
    assert all(_rows(v) > 0 for v in video_ids)


def _delete(make_video, author, video_ids, *, hours_ago: float | None = None) -> None:
    """Delete the videos; `hours_ago` dates the deletions back (old deletions, long settled)."""
    for i, video_id in enumerate(video_ids):
        make_video(video_id, author, status="deleted")
        if hours_ago is not None:
            at = timezone.now() - dt.timedelta(hours=hours_ago) + dt.timedelta(seconds=i)
            VideoSnapshot.objects.filter(video_id=video_id).update(updated_at=at)


def test_a_second_run_does_not_reload_retired_videos(make_user, make_video):
    author = make_user()
    old = ["rt-old-1", "rt-old-2", "rt-old-3"]
    _liked(make_user, make_video, author, old)
    _delete(make_video, author, old, hours_ago=2)

    first = retire_deleted_videos_task()
    assert first["discovered"] == 3 and first["videos"] == 3 and first["retired"] == 3
    assert all(_rows(v) == 0 for v in old)
    assert {_status(v) for v in old} == {RetirementStatus.RETIRED}

    # Nothing newly deleted: the run reads no deleted video and touches no count partition.
    snapshot_table = VideoSnapshot._meta.db_table
    with CaptureQueriesContext(connections["default"]) as on_default:
        partitions = [CaptureQueriesContext(connections[a]) for a in settings.COUNT_PARTITION_ALIASES]
        for c in partitions:
            c.__enter__()
        try:
            second = deleted_videos_retire()
        finally:
            for c in partitions:
                c.__exit__(None, None, None)
    assert (second.discovered, second.videos, second.retired, second.pending) == (0, 0, 0, 0)
    assert all(len(c.captured_queries) == 0 for c in partitions)
    snapshot_reads = [q["sql"] for q in on_default.captured_queries if snapshot_table in q["sql"]]
    assert len(snapshot_reads) == 1 and "updated_at" in snapshot_reads[0]  # bounded by the scan cursor
    scan = VideoRetirementScan.objects.get()
    assert deleted_videos_list(after=(scan.after_at, scan.after_video_id), limit=1000) == []


def test_the_batch_limit_is_honoured_and_the_rest_retired_on_the_next_run(make_user, make_video):
    author = make_user()
    videos = ["rt-b-1", "rt-b-2", "rt-b-3"]
    _liked(make_user, make_video, author, videos)
    _delete(make_video, author, videos, hours_ago=3)  # deleted in this order

    first = deleted_videos_retire(batch=2)
    assert (first.discovered, first.videos, first.retired) == (2, 2, 2)
    assert [_status(v) for v in videos] == [RetirementStatus.RETIRED, RetirementStatus.RETIRED, None]
    assert _rows("rt-b-3") > 0  # not in this run's batch: untouched

    second = deleted_videos_retire(batch=2)
    assert (second.discovered, second.videos, second.retired, second.pending) == (1, 1, 1, 0)
    assert _status("rt-b-3") == RetirementStatus.RETIRED and _rows("rt-b-3") == 0


def test_a_video_deleted_after_earlier_retirements_is_retired(make_user, make_video, no_settle):
    author = make_user()
    _liked(make_user, make_video, author, ["rt-n-old", "rt-n-new"])
    _delete(make_video, author, ["rt-n-old"], hours_ago=1)
    assert deleted_videos_retire().retired == 1

    _delete(make_video, author, ["rt-n-new"])
    report = deleted_videos_retire()
    assert (report.discovered, report.videos, report.retired) == (1, 1, 1)  # the old one is not reloaded
    assert _status("rt-n-new") == RetirementStatus.RETIRED and _rows("rt-n-new") == 0


def test_a_lagging_reverse_projector_keeps_the_video_pending(make_user, make_video, no_settle):
    author = make_user()
    make_video("rt-lag", author)
    cmd(make_user(), "rt-lag", "LIKED")
    drain()  # published and counted; the reverse projector has not run yet
    _delete(make_video, author, ["rt-lag"])

    first = deleted_videos_retire()
    assert first.fenced == 1 and first.retired == 0
    assert _status("rt-lag") == RetirementStatus.PENDING

    # The projector does not skip deleted videos (REV-6): it writes rows after the pass above.
    project_reverse()
    assert _rows("rt-lag") > 0

    second = deleted_videos_retire()
    assert second.retired == 1
    assert _status("rt-lag") == RetirementStatus.RETIRED and _rows("rt-lag") == 0


def test_an_unpublished_like_keeps_the_video_unfenced(make_user, make_video, no_settle):
    author = make_user()
    make_video("rt-outbox", author)
    cmd(make_user(), "rt-outbox", "LIKED")  # committed, still in the outbox
    _delete(make_video, author, ["rt-outbox"])

    first = deleted_videos_retire()
    assert first.videos == 1 and first.fenced == 0 and first.retired == 0
    assert VideoRetirement.objects.get(video_id="rt-outbox").fence is None

    drain_all()  # the like reaches both projectors, which write rows for the deleted video
    assert _rows("rt-outbox") > 0
    assert deleted_videos_retire().retired == 1
    assert _rows("rt-outbox") == 0


def test_a_fresh_deletion_is_not_retired_before_it_settles(make_user, make_video):
    author = make_user()
    _liked(make_user, make_video, author, ["rt-fresh"])
    _delete(make_video, author, ["rt-fresh"])  # just now: a stale visibility cache may still accept a like

    report = deleted_videos_retire()
    assert report.videos == 1 and report.retired == 0 and _rows("rt-fresh") == 0  # rows go at once
    assert VideoRetirement.objects.get(video_id="rt-fresh").fence is None
    assert deleted_videos_retire().videos == 1  # pending videos are worked on again


def test_deleted_undeleted_and_deleted_again_is_retired_again(make_user, make_video, no_settle):
    author = make_user()
    _liked(make_user, make_video, author, ["rt-again"])
    _delete(make_video, author, ["rt-again"], hours_ago=1)
    assert deleted_videos_retire().retired == 1
    first_version = VideoRetirement.objects.get(video_id="rt-again").version

    make_video("rt-again", author)  # undeleted: its new likes are served and must stay
    cmd(make_user(), "rt-again", "LIKED")
    drain_all()
    display_snapshot_task()
    kept = _rows("rt-again")
    assert kept > 0
    report = deleted_videos_retire()
    assert report.videos == 0 and _rows("rt-again") == kept

    _delete(make_video, author, ["rt-again"])
    report = deleted_videos_retire()
    assert (report.discovered, report.retired) == (1, 1)
    row = VideoRetirement.objects.get(video_id="rt-again")
    assert row.status == RetirementStatus.RETIRED and row.version > first_version
    assert _rows("rt-again") == 0


def test_a_video_undeleted_before_its_retirement_finished_is_left_alone(make_user, make_video):
    author = make_user()
    _liked(make_user, make_video, author, ["rt-back"])
    _delete(make_video, author, ["rt-back"])
    deleted_videos_retire()  # not settled yet: pending
    assert _status("rt-back") == RetirementStatus.PENDING

    make_video("rt-back", author)  # undeleted
    cmd(make_user(), "rt-back", "LIKED")
    drain_all()
    display_snapshot_task()
    kept = _rows("rt-back")
    report = deleted_videos_retire()
    assert report.revived == 1 and report.videos == 0
    assert _status("rt-back") == RetirementStatus.REVIVED and _rows("rt-back") == kept


def test_the_task_reports_plain_data(make_user, make_video):
    author = make_user()
    _liked(make_user, make_video, author, ["rt-task"])
    _delete(make_video, author, ["rt-task"], hours_ago=1)
    publish_all()
    result = retire_deleted_videos_task.run(limit=1, rounds=100, batch=10)
    assert result["more"] is False and result["retired"] == 1
    assert sum(n for counts in result["deleted"].values() for n in counts.values()) > 0
