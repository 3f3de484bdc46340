"""The recovery restore on the generation lifecycle (issue 29 §6): audited once at its start and once at its end,
its lease renewed while it works, FAILED past its time limit, and a restore whose worker died reclaimed (by the
next start, or with its job)."""

from __future__ import annotations

import time

import pytest
from django.db import transaction
from django.utils import timezone

from counting import routing as count_routing
from counting.models import CountProjectionGeneration
from likes_project import leases
from likes_project.audit.models import AuditRecord
from likes_project.eventlog.models import Lease
from likes_project.generations import engine as generations_engine
from likes_project.generations import generation_start
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import jobs_sweep
from reconciliation.models import RecoveryRestore, RepairRequest
from reconciliation.services import repair
from reconciliation.services.recovery import artifacts, restore
from tests import drills
from tests.counting.helpers import lease_expire
from tests.reconciliation.helpers import (
    APPROVER,
    LIVE_STORES,
    OPERATOR,
    REQUESTER,
    api_liked_video,
)
from tests.reconciliation.helpers import snapshot_take as _take

pytestmark = [pytest.mark.topology, *LIVE_STORES]


# --- the restore on the generation lifecycle (issue 29 §6) ---------------------------------------------


def _restore_actions(restore_id: int) -> list[tuple[str, str]]:
    """The audit records of one restore (its lifecycle's target), in order: (action, outcome)."""
    return list(AuditRecord.objects.filter(target_type="recovery_restore", target_id=str(restore_id))
                .order_by("pk").values_list("action", "outcome"))


def _slow_first_load(monkeypatch, *, pieces: int, pace_s: float, probe_after_s: float | None = None) -> dict:
    """The next artifact a restore loads streams in slowly (`pieces` more reads, `pace_s` each, after its
    rows): one long chunk of the load, during which only the restore's ticks can renew its lease. With
    `probe_after_s`, that far into the chunk an intruder tries to take the restore's lease; the returned
    dict gets its grant (None: refused) as "intruder"."""
    real_load, real_stream, seen = restore._load_artifact, artifacts.artifact_stream, {}

    def paced_stream(uri, **kwargs):
        header, chunks, hashing = real_stream(uri, **kwargs)

        def paced():
            yield from chunks
            for _ in range(pieces):
                time.sleep(pace_s)  # the store answers slowly: the chunk outlives the lease's TTL
                if (probe_after_s is not None and "intruder" not in seen
                        and time.monotonic() - seen["started"] > probe_after_s):
                    seen["intruder"] = leases.lease_acquire(resource=restore.RESTORE_LEASE, holder="intruder",
                                                            ttl_s=30)
                yield b""

        return header, paced(), hashing

    def load(*args, **kwargs):
        if seen:
            return real_load(*args, **kwargs)
        seen["started"] = time.monotonic()
        monkeypatch.setattr(artifacts, "artifact_stream", paced_stream)
        try:
            return real_load(*args, **kwargs)
        finally:
            monkeypatch.setattr(artifacts, "artifact_stream", real_stream)

    monkeypatch.setattr(restore, "_load_artifact", load)
    return seen


def test_a_restore_is_audited_at_its_start_and_end_and_a_dead_one_is_reclaimed_by_the_next_start(
        api, make_user, make_video):
    api_liked_video(api, make_user, make_video, "sn-life", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    # A restore whose holder died right after its start: its row building, its lease not yet expired.
    grant = leases.lease_acquire(resource=restore.RESTORE_LEASE, holder="dying-worker", ttl_s=30)
    with transaction.atomic(using="default"):
        dead = generation_start(restore.LIFECYCLE, actor=OPERATOR, params={"snapshotId": snap.pk}, grant=grant)
    # Counter-example: while its lease is held it is alive; the next restore is refused and takes nothing.
    with pytest.raises(restore.RestoreFailed, match="another restore is running"):
        restore.restore_execute(snap.pk, actor=OPERATOR)
    assert RecoveryRestore.objects.get(pk=dead.pk).status == "SHADOW"
    lease_expire(grant)
    report = restore.restore_execute(snap.pk, actor=OPERATOR)
    dead.refresh_from_db()
    assert dead.status == "FAILED" and dead.failure_reason.startswith("abandoned")
    assert CountProjectionGeneration.objects.get(pk=dead.count_generation).status == "RETIRED"  # never switched in
    done = RecoveryRestore.objects.get(pk=report["restore"])
    assert (done.status, done.count_generation, done.replaced_generation) == ("ACTIVE", report["generation"], active)
    assert count_routing.load_generation().generation == report["generation"]
    assert report["previousGeneration"] == active and report["identityDiffs"] == [] and report["fenceMs"] >= 0
    # One record when each started, one when it ended, with the outcome; nothing else names them.
    assert [a for a, _o in _restore_actions(dead.pk)] == ["restore.rebuild_start", "restore.rebuild_abandoned"]
    assert _restore_actions(done.pk)[1:] == [("restore.rebuild_activate", "active")]
    assert len(_restore_actions(done.pk)) == 2
    # The daily test-restore is a dry run of the same lifecycle: verified, RETIRED, never switched in.
    drill = restore.test_restore(snap.pk, actor=OPERATOR)
    assert drill["ok"] is True, drill
    scratch = RecoveryRestore.objects.get(pk=drill["restore"])
    assert (scratch.status, scratch.scratch, scratch.activated_at) == ("RETIRED", True, None)
    assert RecoveryRestore.objects.get(pk=done.pk).status == "ACTIVE"  # the drill retired no restore
    assert [a for a, _o in _restore_actions(scratch.pk)] == ["restore.rebuild_start", "restore.rebuild_verified"]


@pytest.mark.parametrize("ticks", [True, False], ids=["renewed", "not_renewed_counter_example"])
def test_a_slow_restore_keeps_its_lease_past_the_ttl_by_renewing_it_as_it_works(
        api, make_user, make_video, monkeypatch, settings, ticks):
    api_liked_video(api, make_user, make_video, "sn-slow", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    settings.OPS_JOB_LEASE_S = 1.0  # the restore's lease: 1 s, renewed by its ticks at most every 0.25 s
    if not ticks:
        monkeypatch.setattr(generations_engine, "_tick", lambda sl: None)
    seen = _slow_first_load(monkeypatch, pieces=7, pace_s=0.2, probe_after_s=1.2)
    if ticks:
        report = restore.restore_execute(snap.pk, actor=OPERATOR)
        assert seen["intruder"] is None  # 1.2 s into one chunk, past the 1 s TTL, the lease was still the restore's
        assert RecoveryRestore.objects.get(pk=report["restore"]).status == "ACTIVE"
        assert count_routing.load_generation().generation == report["generation"]
        return
    # Without the ticks the lease ran out inside the chunk, another holder took it, and the restore was
    # fenced out at its next save: FAILED, its count generation retired, the active one untouched.
    with pytest.raises(restore.RestoreFailed, match="taken over"):
        restore.restore_execute(snap.pk, actor=OPERATOR)
    assert seen["intruder"] is not None
    failed = RecoveryRestore.objects.get()
    assert failed.status == "FAILED" and "LeaseLost" in failed.failure_reason
    assert CountProjectionGeneration.objects.get(pk=failed.count_generation).status == "RETIRED"
    assert count_routing.load_generation().generation == active
    leases.lease_release(seen["intruder"])


def test_a_restore_past_its_time_limit_ends_failed_with_one_end_record(
        api, make_user, make_video, monkeypatch, settings):
    api_liked_video(api, make_user, make_video, "sn-limit", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    settings.RESTORE_TIME_LIMIT_S = 0.5
    _slow_first_load(monkeypatch, pieces=6, pace_s=0.2)  # one chunk of 1.2 s
    with pytest.raises(restore.RestoreFailed, match="time limit"):
        restore.restore_execute(snap.pk, actor=OPERATOR)
    failed = RecoveryRestore.objects.get()
    assert failed.status == "FAILED" and "time limit of 0.5 s" in failed.failure_reason
    assert CountProjectionGeneration.objects.get(pk=failed.count_generation).status == "RETIRED"
    assert count_routing.load_generation().generation == active  # never switched in
    assert _restore_actions(failed.pk)[1:] == [("restore.rebuild_failed", "failed")]
    assert len(_restore_actions(failed.pk)) == 2
    # Counter-example: the same slow restore within its limit switches in.
    settings.RESTORE_TIME_LIMIT_S = 60.0
    _slow_first_load(monkeypatch, pieces=6, pace_s=0.2)
    report = restore.restore_execute(snap.pk, actor=OPERATOR)
    assert RecoveryRestore.objects.get(pk=report["restore"]).status == "ACTIVE"


def test_a_restore_whose_worker_was_killed_is_reclaimed_with_its_job_and_the_next_one_switches_in(
        api, make_user, make_video):
    """The restore of an approved repair runs in the repair's job on a worker, which is SIGKILLed during the
    load: nothing marks anything then. Once the worker's leases expired the sweeper fails the job, and with it
    the repair and the restore (its count generation retired); reads never left the active generation, and
    the next restore is accepted."""
    api_liked_video(api, make_user, make_video, "sn-kill", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    req = repair.repair_request(actor=REQUESTER, source=f"snapshot:{snap.pk}", reason="partition lost")
    req = repair.repair_approve(repair_id=req.pk, actor=APPROVER)
    worker = drills.start(["manage.py", "shell", "-c", "from likes_project.opsjobs.services import job_run_inline; "
                           f"job_run_inline({req.job_id})"], OPS_JOB_LEASE_S="1", GENERATION_THROTTLE_S="0.5")
    try:
        row = drills.wait_for(lambda: next((r for r in RecoveryRestore.objects.filter(status="BACKFILLING")
                                            if r.progress.get("cursor")), None),
                              what="the restore's load to be under way")
    finally:
        output = drills.kill(worker)
    row.refresh_from_db()
    job = OpsJob.objects.get(pk=req.job_id)
    # Counter-example: without the reclaim the dead restore stays building (and its job running) for ever.
    assert row.status == "BACKFILLING" and row.job_id == job.pk, output
    assert job.status == "RUNNING" and job.holder
    drills.wait_for(lambda: not Lease.objects.filter(resource__in=[restore.RESTORE_LEASE, f"opsjob:{job.pk}"],
                                                     expires_at__gte=timezone.now()).exists(),
                    what="the dead worker's leases to expire")
    assert job.pk in jobs_sweep().abandoned
    row.refresh_from_db()
    assert row.status == "FAILED" and row.failure_reason.startswith("abandoned")
    assert AuditRecord.objects.filter(action="restore.rebuild_abandoned", target_id=str(row.pk), job_id=job.pk).exists()
    assert CountProjectionGeneration.objects.get(pk=row.count_generation).status == "RETIRED"
    assert RepairRequest.objects.get(pk=req.pk).status == "FAILED"
    assert count_routing.load_generation().generation == active
    report = restore.restore_execute(snap.pk, actor=OPERATOR)
    assert RecoveryRestore.objects.get(pk=report["restore"]).status == "ACTIVE"
