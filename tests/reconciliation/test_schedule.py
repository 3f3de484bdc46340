"""The check schedule (REC-8; issue 11 §2): recently changed videos hottest first, no pile-up while a
run of the same schedule is still going, a rotating pass that moves on and wraps (so cold videos are
checked too), and the meta-alert when a schedule has not finished a run within three periods."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from counting.models import LikeCountProjection, VideoDisplayCount
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline
from reconciliation import schedule
from reconciliation.models import CheckRun
from tests.metrics_helpers import parse, scrape_text
from tests.reconciliation.helpers import api_liked_video, bucket_add, finished_long_ago, shard_transaction_holding

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True),
              pytest.mark.usefixtures("close_db_connections")]

IDENTITY, COVERAGE, ROTATING = "reconcile-identity-recent", "reconcile-coverage-recent", "reconcile-coverage-rotating"
EXACT_HOT = "reconcile-exact-hot"


def _videos(api, make_user, make_video, likes: dict[str, int]) -> list:
    out = {}
    for video_id, n in likes.items():
        out[video_id] = api_liked_video(api, make_user, make_video, video_id, n)
    return out


def _unchanged_for_hours(video_id: str) -> None:
    """The video's display snapshot last moved two hours ago: it is no longer "recently changed"."""
    VideoDisplayCount.objects.filter(video_id=video_id).update(generated_at=timezone.now() - dt.timedelta(hours=2))


def _started(name: str) -> tuple[OpsJob, CheckRun]:
    out = schedule.scheduled_start(name)
    assert out["status"] == "started", out
    job = OpsJob.objects.get(pk=out["jobId"])
    return job, CheckRun.objects.get(pk=job.params["runId"])


def _finish(job: OpsJob) -> CheckRun:
    job = job_run_inline(job.pk)
    return CheckRun.objects.get(pk=job.params["runId"])


def test_recent_schedules_pick_recently_changed_videos_hottest_first(api, make_user, make_video):
    _videos(api, make_user, make_video, {"sc-a": 1, "sc-b": 3, "sc-c": 2, "sc-stale": 4})
    _unchanged_for_hours("sc-stale")  # the hottest, but not recently changed
    for name, mode in ((IDENTITY, "identity"), (COVERAGE, "coverage")):
        job, run = _started(name)
        assert job.params["scope"] == {"videos": ["sc-b", "sc-c", "sc-a"]}
        assert (run.mode, run.kind, run.schedule, run.status, run.actor) == (mode, "scheduled", name, "QUEUED",
                                                                              f"schedule:{name}")
        assert _finish(job).status == "PASSED"


def test_the_daily_exact_check_takes_the_hottest_videos_whenever_they_moved_and_clears_a_refused_verdict(
        api, make_user, make_video, settings):
    """REC-8's priority exact reconciliation of hot videos: the hottest by displayed count, the stale one too; a
    one-off manual exact check that was refused is no longer the mode's verdict once this one has PASSED."""
    _videos(api, make_user, make_video, {"sc-a": 1, "sc-b": 3, "sc-c": 2, "sc-stale": 4})
    _unchanged_for_hours("sc-stale")
    refused = CheckRun.objects.create(mode="exact", status="REFUSED", scope={"videos": ["sc-a"]}, actor="someone",
                                      refused_because="the barrier could not be held", finished_at=timezone.now())
    settings.RECONCILE_EXACT_HOT_LIMIT = 3
    job, run = _started(EXACT_HOT)
    assert job.params["scope"] == {"videos": ["sc-stale", "sc-b", "sc-c"]}
    assert (job.kind, run.mode, run.kind, run.schedule) == ("reconcile.exact", "exact", "scheduled", EXACT_HOT)
    assert _finish(job).status == "PASSED"
    from opsconsole.dashboard import front_page

    [verdicts] = [p for p in front_page()["panels"] if p.key == "verdicts"]
    exact = next(row for row in verdicts.rows if row[0].text == "exact")
    assert exact[1].text == f"#{run.pk}" and exact[1].text != f"#{refused.pk}" and exact[2].text == "PASSED"
    assert not verdicts.alert
    assert EXACT_HOT in settings.CELERY_BEAT_SCHEDULE


def test_a_scheduled_run_checks_every_video_it_picked_across_chunks(api, make_user, make_video, settings):
    videos = _videos(api, make_user, make_video, {"sc-a": 1, "sc-b": 3, "sc-c": 2})
    _video, users = videos["sc-a"]
    bucket_add(users[0].pk, "sc-a", 3)  # the coldest, and the first by id
    settings.RECONCILE_BATCH_VIDEOS = 1
    job, _run = _started(IDENTITY)
    run = _finish(job)
    assert run.checked == 3, run.checkpoint
    assert run.status == "FAILED" and {d.video_id for d in run.diffs.all()} == {"sc-a"}


def test_a_schedule_does_not_pile_up_while_its_previous_run_is_going(api, make_user, make_video):
    _videos(api, make_user, make_video, {"sc-a": 1, "sc-b": 2})
    job, run = _started(IDENTITY)
    assert schedule.scheduled_start(IDENTITY) == {"status": "previous_running"}  # QUEUED
    CheckRun.objects.filter(pk=run.pk).update(status="RUNNING")
    assert schedule.scheduled_start(IDENTITY) == {"status": "previous_running"}  # RUNNING
    assert CheckRun.objects.filter(schedule=IDENTITY).count() == 1
    assert OpsJob.objects.filter(params__schedule=IDENTITY).count() == 1
    assert schedule.scheduled_start(COVERAGE)["status"] == "started"  # another schedule is not held up
    CheckRun.objects.filter(pk=run.pk).update(status="QUEUED")
    assert _finish(job).status == "PASSED"
    # Counter-example: once the previous run finished, the next one starts.
    job2, run2 = _started(IDENTITY)
    assert run2.pk != run.pk
    assert _finish(job2).status == "PASSED"


def test_a_run_whose_job_failed_does_not_hold_its_schedule_forever(api, make_user, make_video, settings):
    _videos(api, make_user, make_video, {"sc-a": 1})
    job, run = _started(IDENTITY)
    # A count partition whose projection table another session holds locked: the run's read gives up
    # after the connection's lock_timeout, and the job fails (at once: with retries, the job waits out a lock
    # timeout first, D135).
    settings.LEDGER_TRANSIENT_RETRIES = 0
    alias = settings.COUNT_PARTITION_ALIASES[0]
    with shard_transaction_holding(alias, f"LOCK TABLE {LikeCountProjection._meta.db_table} "
                                          "IN ACCESS EXCLUSIVE MODE", []):
        job = job_run_inline(job.pk)
    assert job.status == "FAILED"
    run.refresh_from_db()
    assert run.status == "REFUSED" and "OperationalError" in run.refused_because  # nothing was proven
    job2, _run2 = _started(IDENTITY)
    assert _finish(job2).status == "PASSED"


def test_the_rotating_pass_moves_on_and_wraps_over_every_video(api, make_user, make_video, settings):
    ids = ["sc-r1", "sc-r2", "sc-r3", "sc-r4", "sc-r5"]
    _videos(api, make_user, make_video, dict.fromkeys(ids, 1))
    for video_id in ids[:4]:
        _unchanged_for_hours(video_id)  # cold: the recent schedules never pick them
    assert schedule.recent_videos() == ["sc-r5"]
    settings.RECONCILE_ROTATING_VIDEOS_PER_RUN = 2
    passes = []
    for _ in range(4):
        job, run = _started(ROTATING)
        assert schedule.scheduled_start(ROTATING) == {"status": "previous_running"}
        passes.append(run.scope["videos"])
        assert _finish(job).status == "PASSED"
    assert passes == [["sc-r1", "sc-r2"], ["sc-r3", "sc-r4"], ["sc-r5"], ["sc-r1", "sc-r2"]]


def test_a_schedule_is_overdue_when_no_run_finished_within_three_periods(api, make_user, make_video, client):
    _videos(api, make_user, make_video, {"sc-a": 1})
    assert all(late and age is None for age, late in schedule.overdue().values())  # never ran

    def gauges() -> dict[str, float]:
        samples = parse(scrape_text(client))
        return {dict(labels)["schedule"]: v for (name, labels), v in samples.items()
                if name == "likes_reconcile_schedule_overdue"}

    assert gauges() == {IDENTITY: 1.0, COVERAGE: 1.0, ROTATING: 1.0, EXACT_HOT: 1.0}
    job, _run = _started(IDENTITY)
    run = _finish(job)
    age, late = schedule.overdue()[IDENTITY]
    assert not late and age is not None and age >= 0
    assert gauges() == {IDENTITY: 0.0, COVERAGE: 1.0, ROTATING: 1.0, EXACT_HOT: 1.0}
    ages = {dict(labels)["schedule"]: v for (name, labels), v in parse(scrape_text(client)).items()
            if name == "likes_reconcile_schedule_age_seconds"}
    assert set(ages) == {IDENTITY} and ages[IDENTITY] >= 0
    finished_long_ago(run, 3 * 60 - 10)  # within three one-minute periods: on time
    assert schedule.overdue()[IDENTITY][1] is False
    finished_long_ago(run, 3 * 60 + 10)  # past them: the meta-alert
    assert schedule.overdue()[IDENTITY][1] is True
    assert gauges()[IDENTITY] == 1.0
    # A run still going is not a finished one: the schedule stays overdue until it finishes.
    job, _run = _started(IDENTITY)
    assert schedule.overdue()[IDENTITY][1] is True
    _finish(job)
    assert schedule.overdue()[IDENTITY][1] is False
