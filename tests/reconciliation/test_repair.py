"""Repairs from the facts with maker-checker approval (issue 11 §3, §4; REPAIR-1, 3, 4, 6, INV-10, T29):
self-approval and changed parameters are refused (by the service and by the database), damage injected
by hand on each layer is found by the mode that owns it and repaired from the facts, the repair of one
video leaves the others alone, and every action leaves its audit record."""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError

from likes_project import metrics
from likes_project.approvals import SelfApproval
from likes_project.audit.models import AuditRecord
from likes_project.errors import Conflict
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline
from reconciliation.models import CheckRun, DiffStatus, RepairRequest
from reconciliation.services import diffs, repair
from tests.counting.helpers import drain
from tests.reconciliation import helpers as live

pytestmark = [pytest.mark.topology, *live.LIVE_STORES]

REC7 = {"sourceShards", "offsetVector", "bucketSpaceVersion", "generation", "manifestId"}


def _requested(video_id: str, *, diff_ids=None, actor=live.REQUESTER) -> RepairRequest:
    return repair.repair_request(actor=actor, source="facts", reason="count off after the incident",
                                 videos=None if diff_ids else [video_id], diff_ids=diff_ids)


def _run_repair(req: RepairRequest) -> RepairRequest:
    """The system runs the approved repair (its ops job, as a worker would)."""
    job_run_inline(req.job_id)
    req.refresh_from_db()
    return req


def _audits(action: str, target_id) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action=action, target_id=str(target_id)).order_by("id"))


# --- maker-checker -----------------------------------------------------------------------------------


def test_the_requester_cannot_approve_their_own_repair(api, make_user, make_video):
    video, users = live.api_liked_video(api, make_user, make_video, "rp-self", 2)
    live.bucket_add(users[0].pk, video.video_id, 3)
    req = _requested(video.video_id)
    assert req.status == "AWAITING_APPROVAL" and req.requested_by == live.REQUESTER.name
    with pytest.raises(SelfApproval) as refused:
        repair.repair_approve(repair_id=req.pk, actor=live.REQUESTER)
    assert refused.value.code == "self_approval"
    req.refresh_from_db()
    assert (req.status, req.approved_by, req.approved_hash, req.job_id) == ("AWAITING_APPROVAL", "", "", None)
    assert not OpsJob.objects.filter(kind=repair.REPAIR_JOB).exists()
    [record] = _audits("repair.approve", req.pk)
    assert (record.actor, record.outcome, record.params) == (live.REQUESTER.name, "refused",
                                                             {"reason": "self_approval"})
    # Counter-example: another operator's approval is taken, bound to the request's hash.
    req = repair.repair_approve(repair_id=req.pk, actor=live.APPROVER)
    assert (req.status, req.approved_by, req.approved_hash) == ("APPROVED", live.APPROVER.name, req.params_hash)
    assert req.job_id is not None and OpsJob.objects.get(pk=req.job_id).kind == repair.REPAIR_JOB


def test_the_database_refuses_an_approval_by_the_requester_or_of_other_parameters(api, make_user, make_video):
    video, _ = live.api_liked_video(api, make_user, make_video, "rp-db", 1)
    req = _requested(video.video_id)
    rows = RepairRequest.objects.filter(pk=req.pk)
    with pytest.raises(IntegrityError, match="repair_not_approved_by_requester"):
        rows.update(approved_by=req.requested_by, approved_hash=req.params_hash, status="APPROVED")
    with pytest.raises(IntegrityError, match="repair_approval_bound_to_params"):
        rows.update(approved_by=live.APPROVER.name, approved_hash="0" * 64, status="APPROVED")
    req.refresh_from_db()
    assert (req.status, req.approved_by) == ("AWAITING_APPROVAL", "")
    # Counter-example: another person approving exactly these parameters is what the database admits.
    assert rows.update(approved_by=live.APPROVER.name, approved_hash=req.params_hash, status="APPROVED") == 1


def test_a_parameter_changed_after_the_request_voids_the_approval(api, make_user, make_video):
    video, users = live.api_liked_video(api, make_user, make_video, "rp-void", 2)
    make_video("rp-void-other", make_user())
    live.bucket_add(users[0].pk, video.video_id, 3)
    req = _requested(video.video_id)
    RepairRequest.objects.filter(pk=req.pk).update(params={**req.params, "videos": [video.video_id, "rp-void-other"]})
    with pytest.raises(Conflict) as void:
        repair.repair_approve(repair_id=req.pk, actor=live.APPROVER)
    assert void.value.code == "approval_void"
    req.refresh_from_db()
    assert (req.status, req.approved_by, req.job_id) == ("VOID", "", None) and req.error
    assert [r.outcome for r in _audits("repair.void", req.pk)] == ["void"]
    assert not _audits("repair.approve", req.pk)
    assert not OpsJob.objects.filter(kind=repair.REPAIR_JOB).exists()
    with pytest.raises(Conflict, match="VOID"):  # and it stays void
        repair.repair_approve(repair_id=req.pk, actor=live.APPROVER)
    assert live.run_check("identity", videos=[video.video_id]).status == "FAILED"  # nothing was repaired


def test_a_parameter_changed_after_the_approval_voids_the_execution(api, make_user, make_video):
    video, users = live.api_liked_video(api, make_user, make_video, "rp-void-late", 2)
    live.bucket_add(users[0].pk, video.video_id, 3)
    req = repair.repair_approve(repair_id=_requested(video.video_id).pk, actor=live.APPROVER)
    RepairRequest.objects.filter(pk=req.pk).update(params={**req.params, "reason": "something else"})
    req = _run_repair(req)
    assert req.status == "VOID" and "changed after the approval" in req.error
    [void] = _audits("repair.void", req.pk)
    assert (void.actor, void.channel) == (repair.EXECUTOR, "system")
    assert not _audits("repair.execute", req.pk)
    assert live.run_check("identity", videos=[video.video_id]).status == "FAILED"  # nothing was repaired
    # Counter-example: the same repair requested again and left alone runs.
    again = _run_repair(repair.repair_approve(repair_id=_requested(video.video_id).pk, actor=live.APPROVER))
    assert again.status == "SUCCEEDED", again.error
    assert live.run_check("identity", videos=[video.video_id]).status == "PASSED"


# --- damage on each layer, found and repaired from the facts -----------------------------------------


def _plus_three(video_id, users, api, make_user):
    live.bucket_add(users[0].pk, video_id, 3)
    return 4


def _lost_row(video_id, users, api, make_user):
    live.projection_delete(users[1].pk, video_id)
    return 4


def _phantom(video_id, users, api, make_user):
    live.projection_phantom(make_user().pk, video_id)  # a user who never liked it
    return 4


def _frozen(video_id, users, api, make_user):
    """The bucket of users[2] frozen by hand; then users[2] unlikes through the API: the projector sets
    that event aside (the bucket is frozen), so the projection missed it."""
    live.bucket_freeze(users[2].pk, video_id)
    assert live.api_like(api, users[2], video_id, "UNLIKED").status_code == 200
    drain()
    return 3


def _display(video_id, users, api, make_user):
    live.display_add(video_id, 5)
    return 4


# kind -> (damage, the mode that finds it, the layer it names, the mode that cannot see it, the layers repaired)
DAMAGE = {
    "bucket_plus_three": (_plus_three, "identity", "buckets", "coverage", {"buckets"}),
    "projection_row_lost_with_its_bucket": (_lost_row, "coverage", "projection", None, {"projection"}),
    "phantom_liked_projection_row": (_phantom, "coverage", "projection", None, {"projection"}),
    "frozen_bucket_missing_an_event": (_frozen, "coverage", "projection", None, {"projection"}),
    "display_snapshot_off": (_display, "identity", "display", "coverage", {"display"}),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damage_by_hand_is_found_by_its_mode_and_repaired_from_the_facts(api, make_user, make_video, kind):
    damage, finder, layer, blind, repaired = DAMAGE[kind]
    video, users = live.api_liked_video(api, make_user, make_video, f"rp-{kind[:40]}", 4)
    v = video.video_id
    acknowledged = damage(v, users, api, make_user)  # the likes the API acknowledged, after the damage
    assert len(live.facts_liked(v)) == acknowledged
    if blind is not None:
        assert live.run_check(blind, videos=[v]).status == "PASSED"  # not that mode's layer
    if layer == "projection":  # the identity holds: the buckets agree with the damaged projection
        assert not [d for d in live.run_check("identity", videos=[v]).diffs.all()
                    if d.layer == "buckets" and not d.detail.get("frozen")]
    found = live.run_check(finder, videos=[v])
    assert found.status == "FAILED"
    assert layer in {d.layer for d in found.diffs.all()}, list(found.diffs.values())
    # Exact mode sees it too, but for the display layer, which it does not claim (it proves the
    # projection and its buckets against the facts; the display layer is identity's).
    assert live.run_check("exact", videos=[v]).status == ("PASSED" if layer == "display" else "FAILED")
    buckets_before = live.bucket_versions(v)

    diff_ids = [d.pk for d in found.diffs.all()]
    req = _requested(v, diff_ids=diff_ids)
    assert req.params == {"videos": [v], "source": "facts", "reason": "count off after the incident",
                          "diffs": sorted(diff_ids)}
    assert {d.status for d in found.diffs.all()} == {DiffStatus.FIXING}
    req = _run_repair(repair.repair_approve(repair_id=req.pk, actor=live.APPROVER))

    assert req.status == "SUCCEEDED", (req.error, req.result)
    broken = {name for name, videos in req.result["layers"].items() if videos}
    assert broken == repaired, req.result["layers"]
    if repaired == {"display"}:  # a display error rebuilds only the display layer
        assert live.bucket_versions(v) == buckets_before
    verify = CheckRun.objects.get(pk=req.verify_run_id)
    assert (verify.mode, verify.kind, verify.status, verify.repair_id) == ("exact", "after_repair", "PASSED", req.pk)
    for mode in ("identity", "coverage", "exact"):
        run = live.run_check(mode, videos=[v])
        assert run.status == "PASSED", (mode, list(run.diffs.values()))
    assert live.displayed(v) == acknowledged == len(live.facts_liked(v))
    # The record (REPAIR-6): who, why, what, against which watermarks, and each video's before / after.
    assert (req.requested_by, req.approved_by, req.reason) == (live.REQUESTER.name, live.APPROVER.name,
                                                               "count off after the incident")
    assert set(req.watermarks_before) >= REC7 and set(req.watermarks_after) >= REC7
    assert set(req.before) == set(req.after) == {v}
    assert req.after[v]["facts"] == req.after[v]["projection"] == req.after[v]["buckets"] == acknowledged
    assert req.after[v]["display"] == acknowledged and req.after[v]["frozenBuckets"] == []
    assert req.before[v] != req.after[v]
    for d in found.diffs.all():
        assert (d.status, d.repair_id) == (DiffStatus.FIXED, req.pk)
        assert [(t.from_status, t.to_status, t.actor) for t in d.transitions.all()] == [
            ("NEW", "FIXING", live.REQUESTER.name), ("FIXING", "FIXED", repair.EXECUTOR)]


def test_a_bucket_repair_recounts_from_the_projection_and_says_what_it_changed(api, make_user, make_video):
    video, users = live.api_liked_video(api, make_user, make_video, "rp-recount", 3)
    live.bucket_add(users[0].pk, video.video_id, 3)
    timed = metrics.value("likes_repair_duration_seconds_count", status="SUCCEEDED", source="facts")
    req = _run_repair(repair.repair_approve(repair_id=_requested(video.video_id).pk, actor=live.APPROVER))
    assert req.status == "SUCCEEDED"
    # M14: its duration is observed, by outcome and source (issue 32 §2).
    assert metrics.value("likes_repair_duration_seconds_count", status="SUCCEEDED", source="facts") == timed + 1
    [(_vb, (was, now))] = req.result["recount"][video.video_id].items()
    assert now == was - 3
    assert (req.before[video.video_id]["buckets"], req.after[video.video_id]["buckets"]) == (6, 3)
    assert "rebuild" not in req.result  # the projection was right: it was not rewritten


# --- T29 ---------------------------------------------------------------------------------------------


# spec §7 drill 14: a repair during live consumption, nothing overwritten.
def test_t29_a_repair_of_one_video_leaves_the_others_rows_alone_while_both_keep_receiving_likes(
        api, make_user, make_video, monkeypatch):
    a, a_users = live.api_liked_video(api, make_user, make_video, "rp-t29-a", 4)
    b, _b_users = live.api_liked_video(api, make_user, make_video, "rp-t29-b", 4)
    live.projection_delete(a_users[0].pk, a.video_id)  # A's projection missed a like: a rebuild from the facts
    b_rows = live.projection_rows(b.video_id)
    latecomer, b_first = make_user(), make_user()
    b_answers: list[tuple[int, int]] = []

    # Between the repair's scan of the facts and its cut: a new like of A, an unlike of A (v2 over the
    # scan's v1), and a like of B. The scan's baseline must not win over them.
    real_held_cut = repair.held_cut
    window = []

    def held_cut_after_live_writes(videos, **kw):
        if not window:
            window.append([live.Background(live.api_like, api, latecomer, a.video_id).join().status_code,
                           live.Background(live.api_like, api, a_users[1], a.video_id, "UNLIKED").join().status_code,
                           live.Background(live.api_like, api, b_first, b.video_id).join().status_code])
        return real_held_cut(videos, **kw)

    monkeypatch.setattr(repair, "held_cut", held_cut_after_live_writes)

    stop = threading.Event()

    def like_b():  # B keeps receiving likes through the API while A is repaired (at most 60)
        while not stop.is_set() and len(b_answers) < 60:
            u = make_user()
            b_answers.append((u.pk, live.api_like(api, u, b.video_id).status_code))

    liker = live.Background(like_b)
    live.wait_until(lambda: b_answers, what="B's first like")
    req = _run_repair(repair.repair_approve(repair_id=_requested(a.video_id).pk, actor=live.APPROVER))
    stop.set()
    liker.join()
    assert window == [[200, 200, 200]]
    assert {status for _u, status in b_answers} == {200}  # never held by A's barrier
    b_fans = {b_first.pk} | {u for u, _status in b_answers}
    assert req.status == "SUCCEEDED", (req.error, req.result)
    assert req.result["layers"]["projection"] == [a.video_id]
    rebuild = req.result["rebuild"]
    assert rebuild["tailFolded"] >= 2 and rebuild["newerThanFacts"] == []
    a_rows = live.projection_rows(a.video_id)
    assert a_rows[latecomer.pk][:2] == ("LIKED", 1)
    assert a_rows[a_users[1].pk][:2] == ("UNLIKED", 2)  # the newer version, not the scan's v1 LIKED
    assert a_rows[a_users[0].pk][:2] == ("LIKED", 1)  # the lost row, back from the facts
    # B: the rows it had are untouched, version and write time alike; its new likes were projected.
    drain()
    b_after = live.projection_rows(b.video_id)
    assert {u: b_after[u] for u in b_rows} == b_rows
    assert set(b_after) - set(b_rows) == b_fans
    assert live.displayed(a.video_id) == 4 == len(live.facts_liked(a.video_id))  # 4 + latecomer - a_users[1]
    assert live.displayed(b.video_id) == 4 + len(b_fans) == len(live.facts_liked(b.video_id))
    assert live.run_check("exact", videos=[a.video_id, b.video_id]).status == "PASSED"


# --- the audit trail ---------------------------------------------------------------------------------


def test_every_action_writes_its_audit_record(api, make_user, make_video):
    video, users = live.api_liked_video(api, make_user, make_video, "rp-audit", 2)
    live.bucket_add(users[0].pk, video.video_id, 3)
    found = live.run_check("identity", videos=[video.video_id])
    assert [r.outcome for r in _audits("reconcile.start", found.pk)] == ["applied"]
    assert [r.outcome for r in _audits("reconcile.finish", found.pk)] == ["failed"]
    assert _audits("reconcile.start", found.pk)[0].actor == live.OPERATOR.name
    [diff] = [d for d in found.diffs.all() if d.layer == "buckets"]

    req = _requested(video.video_id, diff_ids=[diff.pk])
    [asked] = _audits("repair.request", req.pk)
    assert (asked.actor, asked.params["params"], asked.params["paramsHash"]) == (live.REQUESTER.name, req.params,
                                                                                 req.params_hash)
    assert [(r.actor, r.params["from"]) for r in _audits("diff.fixing", diff.pk)] == [(live.REQUESTER.name, "NEW")]
    with pytest.raises(SelfApproval):
        repair.repair_approve(repair_id=req.pk, actor=live.REQUESTER)
    req = repair.repair_approve(repair_id=req.pk, actor=live.APPROVER)
    assert [(r.actor, r.outcome) for r in _audits("repair.approve", req.pk)] == [(live.REQUESTER.name, "refused"),
                                                                                (live.APPROVER.name, "applied")]
    req = _run_repair(req)
    [done] = _audits("repair.execute", req.pk)
    assert (done.actor, done.outcome, done.job_id) == (repair.EXECUTOR, "succeeded", req.job_id)
    assert [r.actor for r in _audits("diff.fixed", diff.pk)] == [repair.EXECUTOR]
    assert [(r.actor, r.outcome) for r in _audits("reconcile.finish", req.verify_run_id)] == [
        (repair.EXECUTOR, "passed")]

    # The triage of a diff, and a void.
    other = live.run_check("identity", videos=[video.video_id])
    assert other.status == "PASSED"
    live.bucket_add(users[1].pk, video.video_id, 1)
    [stray] = live.run_check("identity", videos=[video.video_id]).diffs.filter(layer="buckets")
    diffs.diffs_set_status(ids=[stray.pk], to=DiffStatus.IGNORED, actor=live.OPERATOR,
                           reason="known, tracked elsewhere")
    [ignored] = _audits("diff.ignored", stray.pk)
    assert (ignored.actor, ignored.params["reason"]) == (live.OPERATOR.name, "known, tracked elsewhere")
    stray.refresh_from_db()
    assert (stray.status, stray.owner, stray.reason) == ("IGNORED", live.OPERATOR.name, "known, tracked elsewhere")
    voided = _requested(video.video_id)
    RepairRequest.objects.filter(pk=voided.pk).update(params={**voided.params, "videos": []})
    with pytest.raises(Conflict):
        repair.repair_approve(repair_id=voided.pk, actor=live.APPROVER)
    assert [(r.actor, r.outcome) for r in _audits("repair.void", voided.pk)] == [(live.APPROVER.name, "void")]
