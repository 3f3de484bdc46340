"""The reconciliation commands' contracts (issue 11 §5): the JSON last line of each, the exit statuses
(reconcile: 0 PASSED, 1 FAILED, 2 REFUSED; repair_approve non-zero when refused or FAILED), `--video`
repeatable and `--all`, bad input as a clean CommandError with a stable code that writes nothing, and
`--actor` holding the permission its role (a console role group) gives."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from counting.services.projection import COUNT_CONSUMER
from likes_project.audit.models import AuditRecord
from likes_project.eventlog.services import consumer_switch_set
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline
from reconciliation.models import CheckDiff, CheckRun, DiffTransition, RepairRequest
from tests.factories import TEST_ACTOR
from tests.reconciliation.helpers import (
    LIVE_STORES,
    api_liked_video,
    bucket_add,
    job_worker,
    manage,
    member_of,
)

# The commands' contracts (output, exit statuses, refusals): the checks and repairs they run are `topology` tests
# of their own (test_exact, test_repair, test_modes), so this module runs on `single` only (D100).
pytestmark = [pytest.mark.topology_independent, *LIVE_STORES]

REPORT_KEYS = {"runId", "mode", "status", "checked", "diffs", "diffsFixed", "watermarks", "skipped"}
WATERMARK_KEYS = {"sourceShards", "offsetVector", "bucketSpaceVersion", "generation", "manifestId"}
DIFF_KEYS = {"videoId", "layer", "expected", "actual", "diffId"}  # + "virtualBucket" on the bucket layer
RECORD_KEYS = {"repairId", "status", "params", "paramsHash", "requestedBy", "approvedBy", "approvedAt", "reason",
               "before", "after", "watermarksBefore", "watermarksAfter", "result", "error", "jobId",
               "verifyRunId", "createdAt", "finishedAt"}


def _written() -> dict[str, int]:
    return {model.__name__: model.objects.count()
            for model in (CheckRun, CheckDiff, DiffTransition, RepairRequest, OpsJob, AuditRecord)}


def _request(video_id: str, requester, *extra) -> int:
    ran = manage("repair_request", "--video", video_id, "--source", "facts", "--reason", "count off",
                 "--actor", requester.username, "--json", *extra)
    assert ran.code == 0, ran.err
    return ran.json["repairId"]


# --- the roles -------------------------------------------------------------------------------------


@pytest.mark.django_db(databases="__all__")  # not transactional: the migrated database as it is
def test_the_roles_are_groups_made_by_the_migration_with_their_permissions():
    perms = {g.name: {f"{p.content_type.app_label}.{p.codename}" for p in g.permissions.all()}
             for g in Group.objects.filter(name__in=["likes-viewer", "likes-operator", "likes-approver"])}
    assert set(perms) == {"likes-viewer", "likes-operator", "likes-approver"}
    actions = {"reconciliation.run_check", "reconciliation.triage_diff", "reconciliation.request_repair",
               "reconciliation.approve_repair"}
    assert "reconciliation.view_repairrequest" in perms["likes-viewer"] and not perms["likes-viewer"] & actions
    assert perms["likes-operator"] & actions == {"reconciliation.run_check", "reconciliation.triage_diff",
                                                 "reconciliation.request_repair"}
    assert perms["likes-approver"] & actions == {"reconciliation.approve_repair"}
    assert perms["likes-viewer"] <= perms["likes-operator"] and perms["likes-viewer"] <= perms["likes-approver"]


def test_the_actor_must_hold_the_permission_of_its_role(api, make_user, make_video):
    video, users = api_liked_video(api, make_user, make_video, "cm-roles", 2)
    bucket_add(users[0].pk, video.video_id, 3)
    viewer, operator = member_of("likes-viewer"), member_of("likes-operator")
    approver = member_of("likes-approver")
    refused = manage("reconcile", "--mode", "identity", "--video", video.video_id, "--actor", viewer.username,
                     "--json")
    assert refused.code != 0 and refused.json["code"] == "permission_denied"
    assert refused.json["message"] == f"{viewer.username!r} lacks the permission reconciliation.run_check."
    assert manage("reconcile", "--mode", "identity", "--video", video.video_id, "--actor", operator.username,
                  "--json").json["status"] == "FAILED"
    ran = manage("repair_request", "--video", video.video_id, "--source", "facts", "--reason", "r",
                 "--actor", approver.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "permission_denied"
    repair_id = _request(video.video_id, operator)
    ran = manage("repair_approve", str(repair_id), "--actor", operator.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "permission_denied"  # an operator is no approver
    ran = manage("repair_approve", str(repair_id), "--actor", approver.username, "--json")
    assert ran.code == 0 and ran.json["status"] == "APPROVED"
    req = RepairRequest.objects.get(pk=repair_id)
    assert (req.requested_by, req.approved_by) == (operator.username, approver.username)
    job_run_inline(req.job_id)
    assert RepairRequest.objects.get(pk=repair_id).status == "SUCCEEDED"


# --- reconcile -------------------------------------------------------------------------------------


def test_reconcile_passed_prints_its_report_and_exits_0(api, make_user, make_video):
    video, _ = api_liked_video(api, make_user, make_video, "cm-pass", 3)
    for mode in ("identity", "coverage", "exact"):
        ran = manage("reconcile", "--mode", mode, "--video", video.video_id, "--json")
        assert ran.code == 0, ran.err
        report = ran.json
        expected = REPORT_KEYS | ({"barrierHeldMs"} if mode == "exact" else set())
        assert set(report) == expected, report
        assert (report["mode"], report["status"], report["diffs"]) == (mode, "PASSED", [])
        assert report["checked"] == (1 if mode == "identity" else 3)
        assert set(report["watermarks"]) == WATERMARK_KEYS
        assert report["watermarks"]["generation"] and report["watermarks"]["manifestId"]
        assert set(report["watermarks"]["sourceShards"]) == {"rel_00", "rel_01"}
        run = CheckRun.objects.get(pk=report["runId"])
        assert (run.mode, run.status, run.scope) == (mode, "PASSED", {"videos": [video.video_id]})
    assert report["barrierHeldMs"] >= 0


def test_reconcile_failed_exits_1_with_each_diff(api, make_user, make_video):
    video, users = api_liked_video(api, make_user, make_video, "cm-fail", 3)
    bucket_add(users[0].pk, video.video_id, 3)
    ran = manage("reconcile", "--mode", "identity", "--video", video.video_id, "--json")
    assert ran.code == 1
    report = ran.json
    assert report["status"] == "FAILED" and "refusedBecause" not in report
    [bucket] = [d for d in report["diffs"] if d["layer"] == "buckets"]
    assert set(bucket) == DIFF_KEYS | {"virtualBucket"}
    assert (bucket["videoId"], bucket["actual"] - bucket["expected"]) == (video.video_id, 3)
    assert CheckDiff.objects.get(pk=bucket["diffId"]).run_id == report["runId"]


def test_reconcile_refused_exits_2_with_the_reason(api, make_user, make_video):
    video, _ = api_liked_video(api, make_user, make_video, "cm-refused", 1)
    consumer_switch_set(consumer=COUNT_CONSUMER, paused=True, reason="test", actor=TEST_ACTOR)
    ran = manage("reconcile", "--mode", "exact", "--video", video.video_id, "--json")
    assert ran.code == 2
    assert ran.json["status"] == "REFUSED" and "paused" in ran.json["refusedBecause"] and ran.json["diffs"] == []
    assert set(ran.json) - {"barrierHeldMs"} == REPORT_KEYS | {"refusedBecause"}
    text = manage("reconcile", "--mode", "exact", "--video", video.video_id)
    assert text.code == 2 and ": REFUSED" in text.out and "refused: the count consumer is paused" in text.out


def test_reconcile_video_is_repeatable_and_all_checks_every_video(api, make_user, make_video):
    for name, likes in (("cm-scope-a", 1), ("cm-scope-b", 2), ("cm-scope-c", 1)):
        api_liked_video(api, make_user, make_video, name, likes)
    ran = manage("reconcile", "--mode", "identity", "--video", "cm-scope-b", "--video", "cm-scope-a",
                 "--video", "cm-scope-b", "--json")
    assert ran.code == 0 and ran.json["checked"] == 2
    assert CheckRun.objects.get(pk=ran.json["runId"]).scope == {"videos": ["cm-scope-a", "cm-scope-b"]}
    ran = manage("reconcile", "--mode", "coverage", "--all", "--json")
    assert ran.code == 0 and ran.json["checked"] == 4  # every relation of every video
    assert CheckRun.objects.get(pk=ran.json["runId"]).scope == {"all": True}
    text = manage("reconcile", "--mode", "identity", "--all")
    assert text.code == 0
    assert text.out.strip().splitlines()[0].endswith(": PASSED, 3 checked, 0 diffs") and "{" not in text.out


# --- bad input -------------------------------------------------------------------------------------

BAD_INPUT = {
    "reconcile_without_a_scope": (["reconcile", "--mode", "identity"], "invalid_scope"),
    "reconcile_with_both_scopes": (["reconcile", "--mode", "identity", "--video", "{video}", "--all"],
                                   "invalid_scope"),
    # A typo is refused, not recorded as a PASSED run over nothing that becomes the front page's verdict (issue 32).
    "reconcile_of_a_malformed_video_id": (["reconcile", "--mode", "identity", "--video", "bad id!"],
                                          "invalid_video_id"),
    "reconcile_of_an_unknown_video": (["reconcile", "--mode", "coverage", "--video", "cm-no-such-video"],
                                      "video_not_found"),
    "reconcile_of_a_known_and_an_unknown_video": (["reconcile", "--mode", "exact", "--video", "{video}",
                                                  "--video", "cm-no-such-video"], "video_not_found"),
    "reconcile_by_an_unknown_actor": (["reconcile", "--mode", "identity", "--video", "{video}",
                                       "--actor", "nobody-here"], "unknown_actor"),
    "reconcile_by_an_actor_without_the_permission": (["reconcile", "--mode", "exact", "--video", "{video}",
                                                      "--actor", "{clerk}"], "permission_denied"),
    "repair_request_without_a_scope": (["repair_request", "--source", "facts", "--reason", "r",
                                        "--actor", "{operator}"], "invalid_scope"),
    "repair_request_with_a_blank_reason": (["repair_request", "--video", "{video}", "--source", "facts",
                                            "--reason", "   ", "--actor", "{operator}"], "reason_required"),
    "repair_request_of_an_unknown_diff": (["repair_request", "--diff", "999999", "--source", "facts",
                                           "--reason", "r", "--actor", "{operator}"], "diff_not_found"),
    "repair_request_by_an_unknown_actor": (["repair_request", "--video", "{video}", "--source", "facts",
                                            "--reason", "r", "--actor", "nobody-here"], "unknown_actor"),
    "repair_request_by_an_actor_without_the_permission": (["repair_request", "--video", "{video}", "--source",
                                                           "facts", "--reason", "r", "--actor", "{clerk}"],
                                                          "permission_denied"),
    "repair_approve_of_an_unknown_repair": (["repair_approve", "999999", "--actor", "{approver}"],
                                            "repair_not_found"),
    "repair_approve_by_an_unknown_actor": (["repair_approve", "{repair}", "--actor", "nobody-here"],
                                           "unknown_actor"),
    "repair_approve_by_an_actor_without_the_permission": (["repair_approve", "{repair}", "--actor", "{clerk}"],
                                                          "permission_denied"),
    "repair_show_of_an_unknown_repair": (["repair_show", "999999"], "repair_not_found"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_clean_error_with_a_stable_code_and_writes_nothing(api, make_user, make_video, case):
    video, _ = api_liked_video(api, make_user, make_video, "cm-bad", 1)
    operator, approver = member_of("likes-operator"), member_of("likes-approver")
    clerk = make_user()  # a user with no permission at all
    repair_id = _request(video.video_id, operator)
    argv, code = BAD_INPUT[case]
    argv = [a.format(video=video.video_id, operator=operator.username, approver=approver.username,
                     clerk=clerk.username, repair=repair_id) for a in argv]
    before = _written()
    ran = manage(*argv, "--json")
    assert ran.code == (3 if argv[0] == "reconcile" else 1), ran.err  # reconcile: 3, no run was made
    assert ran.json["code"] == code and ran.json["message"], ran.out
    assert "Traceback" not in ran.err and ran.err.strip()
    assert _written() == before
    text = manage(*argv)  # without --json: the same refusal, as text, nothing on stdout
    assert text.code != 0 and text.out == "" and f"{code}: " in text.err
    assert _written() == before
    assert RepairRequest.objects.get(pk=repair_id).status == "AWAITING_APPROVAL"


def test_a_usage_error_is_a_clean_error_that_writes_nothing(api, make_user, make_video):
    video, _ = api_liked_video(api, make_user, make_video, "cm-usage", 1)
    operator = member_of("likes-operator")
    before = _written()
    for argv in (["reconcile", "--mode", "nonsense", "--all"],
                 ["repair_request", "--video", video.video_id, "--source", "snapshot", "--reason", "r",
                  "--actor", operator.username],
                 ["repair_request", "--video", video.video_id, "--source", "facts", "--actor", operator.username]):
        ran = manage(*argv)
        assert ran.code != 0 and "Traceback" not in ran.err, argv
    assert _written() == before


# --- the repair commands ---------------------------------------------------------------------------


def test_repair_request_prints_its_contract(api, make_user, make_video):
    video, users = api_liked_video(api, make_user, make_video, "cm-req", 2)
    other, _ = api_liked_video(api, make_user, make_video, "cm-req-2", 2)
    bucket_add(users[0].pk, video.video_id, 3)
    operator = member_of("likes-operator")
    found = manage("reconcile", "--mode", "identity", "--video", video.video_id, "--json").json["diffs"]
    diff_ids = [d["diffId"] for d in found]
    argv = [x for d in diff_ids for x in ("--diff", str(d))]
    ran = manage("repair_request", *argv, "--video", other.video_id, "--source", "facts", "--reason", "off by 3",
                 "--actor", operator.username, "--json")
    assert ran.code == 0
    assert set(ran.json) == {"repairId", "status"} and ran.json["status"] == "AWAITING_APPROVAL"
    req = RepairRequest.objects.get(pk=ran.json["repairId"])
    assert req.params == {"videos": sorted([video.video_id, other.video_id]), "source": "facts",
                          "reason": "off by 3", "diffs": sorted(diff_ids)}
    assert (req.requested_by, req.requested_channel) == (operator.username, "cli")
    text = manage("repair_request", "--video", other.video_id, "--source", "facts", "--reason", "again",
                  "--actor", operator.username)
    assert text.code == 0 and "AWAITING_APPROVAL" in text.out and "repair_approve" in text.out


def test_repair_approve_prints_its_contract_and_refuses_self_approval_superusers_included(
        api, make_user, make_video):
    video, users = api_liked_video(api, make_user, make_video, "cm-approve", 3)
    bucket_add(users[0].pk, video.video_id, 3)
    boss = get_user_model().objects.create_superuser("cm-boss", password="pw")
    approver = member_of("likes-approver")
    repair_id = _request(video.video_id, boss)
    ran = manage("repair_approve", str(repair_id), "--actor", boss.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "self_approval", ran.out
    assert "self_approval" in ran.err
    req = RepairRequest.objects.get(pk=repair_id)
    assert (req.status, req.approved_by, req.job_id) == ("AWAITING_APPROVAL", "", None)
    with job_worker():
        ran = manage("repair_approve", str(repair_id), "--actor", approver.username, "--wait", "--json")
    assert ran.code == 0, ran.err
    assert set(ran.json) == {"repairId", "status", "before", "after"}
    assert (ran.json["repairId"], ran.json["status"]) == (repair_id, "SUCCEEDED")
    assert ran.json["before"][video.video_id]["buckets"] == 6 and ran.json["after"][video.video_id]["buckets"] == 3
    again = manage("repair_approve", str(repair_id), "--actor", approver.username, "--json")
    assert again.code != 0 and again.json["code"] == "repair_not_awaiting_approval"


def test_repair_approve_exits_non_zero_when_the_repair_failed(api, make_user, make_video):
    video, users = api_liked_video(api, make_user, make_video, "cm-approve-fail", 2)
    bucket_add(users[0].pk, video.video_id, 3)
    operator, approver = member_of("likes-operator"), member_of("likes-approver")
    repair_id = _request(video.video_id, operator)
    consumer_switch_set(consumer=COUNT_CONSUMER, paused=True, reason="test", actor=TEST_ACTOR)
    with job_worker():
        ran = manage("repair_approve", str(repair_id), "--actor", approver.username, "--wait", "--json")
    assert ran.code != 0
    assert ran.json["status"] == "FAILED" and set(ran.json) == {"repairId", "status", "before", "after"}
    req = RepairRequest.objects.get(pk=repair_id)
    assert req.status == "FAILED" and "REFUSED" in req.error
    assert CheckRun.objects.get(pk=req.verify_run_id).status == "REFUSED"


def test_repair_approve_without_wait_leaves_it_to_the_workers(api, make_user, make_video):
    video, users = api_liked_video(api, make_user, make_video, "cm-approve-async", 2)
    bucket_add(users[0].pk, video.video_id, 3)
    operator, approver = member_of("likes-operator"), member_of("likes-approver")
    repair_id = _request(video.video_id, operator)
    ran = manage("repair_approve", str(repair_id), "--actor", approver.username, "--json")
    assert ran.code == 0 and ran.json["status"] == "APPROVED" and ran.json["before"] == {}
    req = RepairRequest.objects.get(pk=repair_id)
    assert OpsJob.objects.get(pk=req.job_id).status == "QUEUED"
    job_run_inline(req.job_id)
    assert RepairRequest.objects.get(pk=repair_id).status == "SUCCEEDED"


def test_repair_show_prints_the_whole_record(api, make_user, make_video):
    video, users = api_liked_video(api, make_user, make_video, "cm-show", 2)
    bucket_add(users[0].pk, video.video_id, 3)
    operator, approver = member_of("likes-operator"), member_of("likes-approver")
    repair_id = _request(video.video_id, operator)
    pending = manage("repair_show", str(repair_id), "--json")
    assert pending.code == 0 and set(pending.json) == RECORD_KEYS
    assert (pending.json["status"], pending.json["approvedBy"], pending.json["finishedAt"]) == (
        "AWAITING_APPROVAL", None, None)
    manage("repair_approve", str(repair_id), "--actor", approver.username)
    job_run_inline(RepairRequest.objects.get(pk=repair_id).job_id)
    shown = manage("repair_show", str(repair_id), "--json").json
    assert set(shown) == RECORD_KEYS
    req = RepairRequest.objects.get(pk=repair_id)
    assert shown["status"] == "SUCCEEDED" and shown["error"] is None
    assert (shown["requestedBy"], shown["approvedBy"], shown["reason"]) == (operator.username, approver.username,
                                                                            "count off")
    assert shown["params"] == req.params and shown["paramsHash"] == req.params_hash
    assert set(shown["watermarksBefore"]) >= WATERMARK_KEYS and set(shown["watermarksAfter"]) >= WATERMARK_KEYS
    assert shown["before"][video.video_id]["buckets"] == 5 and shown["after"][video.video_id]["buckets"] == 2
    assert shown["jobId"] == req.job_id and shown["verifyRunId"] == req.verify_run_id
    assert shown["result"]["layers"]["buckets"] == [video.video_id]
    text = manage("repair_show", str(repair_id))
    assert text.code == 0 and f"approvedBy: \"{approver.username}\"" in text.out
