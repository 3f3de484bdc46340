"""A reconciliation or snapshot job that meets a count partition refusing connections for a moment (the soak's
`count-partition-down`: ALTER DATABASE ... ALLOW_CONNECTIONS false, its sessions ended) waits it out and finishes
in the same job, as a ledger does (`SliceContext.transient_wait`); with no waits allowed it fails as before, and the
run it held says why. The refusal is real: the drills' `DatabaseRefusal` on the test partition, undone by a timer."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from likes_project.opsjobs.models import JobStatus, OpsJob
from likes_project.opsjobs.services import job_run_inline, job_start
from opsconsole.drills.faults import DatabaseRefusal
from reconciliation.jobs import SNAPSHOT_JOB, job_for_mode
from reconciliation.models import CheckRun, RepairRequest, RunStatus
from reconciliation.services import checks, repair
from reconciliation.services.recovery import snapshot
from tests.reconciliation import helpers as live

pytestmark = [pytest.mark.topology, *live.LIVE_STORES]

PARTITION = "cnt_01"
REFUSED_S = 1.2  # the refusal lasts this long: a few of the test settings' 0.5 s waits


def _refused_for_a_moment() -> threading.Timer:
    refusal = DatabaseRefusal(PARTITION)
    refusal.begin()
    undo = threading.Timer(REFUSED_S, lambda: (refusal.end(), connections.close_all()))
    undo.start()
    return undo


def _run(kind: str, params: dict, *, refused: bool) -> OpsJob:
    job = job_start(kind=kind, actor=live.OPERATOR, params=params)
    undo = _refused_for_a_moment() if refused else None
    try:
        return job_run_inline(job.pk)
    finally:
        if undo is not None:
            undo.join()


def _check(mode: str, video_id: str, *, refused: bool) -> tuple[OpsJob, CheckRun]:
    scope = checks.scope_normalize(videos=[video_id])
    job = _run(job_for_mode(mode), {"mode": mode, "scope": scope}, refused=refused)
    return job, CheckRun.objects.get(pk=job.params["runId"])


@pytest.mark.parametrize("mode", ["coverage", "exact"])
def test_a_check_run_waits_out_a_partition_refusing_and_passes_in_the_same_job(api, make_user, make_video, mode):
    video = f"tr-{mode}"
    live.api_liked_video(api, make_user, make_video, video, 3)
    job, run = _check(mode, video, refused=True)
    assert (job.status, run.status) == (JobStatus.SUCCEEDED, RunStatus.PASSED), (job.last_error, run.refused_because)
    assert job.state["transientTries"] >= 1, job.state


def test_with_no_wait_allowed_the_refused_check_run_fails_and_says_why(api, make_user, make_video, settings):
    """The counter-example: the same refusal, LEDGER_TRANSIENT_RETRIES 0, ends the job and the run."""
    settings.LEDGER_TRANSIENT_RETRIES = 0
    live.api_liked_video(api, make_user, make_video, "tr-none", 3)
    job, run = _check("exact", "tr-none", refused=True)
    assert (job.status, run.status) == (JobStatus.FAILED, RunStatus.REFUSED)
    assert "OperationalError" in run.refused_because and "transientTries" not in job.state


def test_a_snapshot_that_meets_a_refusal_is_taken_again_and_seals(api, make_user, make_video, settings):
    live.api_liked_video(api, make_user, make_video, "tr-snap", 3)
    job = _run(SNAPSHOT_JOB, {"reason": "transient"}, refused=True)
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    failed = [snapshot.snapshot_get(pk) for pk in job.params["aborted"]]
    assert failed and all(s.status == "FAILED" and "OperationalError" in s.failure for s in failed)
    assert snapshot.snapshot_get(job.params["snapshotId"]).status == "SEALED"

    settings.LEDGER_TRANSIENT_RETRIES = 0  # the counter-example: the job fails with its one snapshot FAILED
    job = _run(SNAPSHOT_JOB, {"reason": "transient, no wait"}, refused=True)
    assert job.status == JobStatus.FAILED and "OperationalError" in job.last_error
    assert not job.params.get("aborted") and snapshot.snapshot_get(job.params["snapshotId"]).status == "FAILED"


def _repaired(video_id: str, users) -> tuple[OpsJob, RepairRequest]:
    """A bucket of the video damaged by hand (+3), its repair requested and approved once, its job run while the
    partition refuses for a moment."""
    live.bucket_add(users[0].pk, video_id, 3)
    req = repair.repair_request(actor=live.REQUESTER, source="facts", reason="transient", videos=[video_id])
    req = repair.repair_approve(repair_id=req.pk, actor=live.APPROVER)
    undo = _refused_for_a_moment()
    try:
        job = job_run_inline(req.job_id)
    finally:
        undo.join()
    req.refresh_from_db()
    return job, req


def test_a_repair_that_meets_a_refusal_waits_it_out_and_succeeds_on_its_one_approval(api, make_user, make_video):
    _video, users = live.api_liked_video(api, make_user, make_video, "tr-repair", 3)
    job, req = _repaired("tr-repair", users)
    assert (job.status, req.status) == (JobStatus.SUCCEEDED, "SUCCEEDED"), (job.last_error, req.error)
    assert job.state["transientTries"] >= 1, job.state
    assert req.before["tr-repair"]["buckets"] == 6 and req.after["tr-repair"]["buckets"] == 3  # the first reading
    assert live.displayed("tr-repair") == 3
    # No run it started was left RUNNING: a verify the refusal broke off says so.
    runs = CheckRun.objects.filter(repair_id=req.pk)
    assert all(r.finished for r in runs) and runs.get(pk=req.verify_run_id).status == RunStatus.PASSED


def test_with_no_wait_allowed_the_refused_repair_fails_as_before(api, make_user, make_video, settings):
    """The counter-example: LEDGER_TRANSIENT_RETRIES 0, the same refusal fails the job and its repair."""
    settings.LEDGER_TRANSIENT_RETRIES = 0
    _video, users = live.api_liked_video(api, make_user, make_video, "tr-repair-none", 3)
    job, req = _repaired("tr-repair-none", users)
    assert (job.status, req.status) == (JobStatus.FAILED, "FAILED") and "OperationalError" in job.last_error
    assert all(r.finished for r in CheckRun.objects.filter(repair_id=req.pk))
