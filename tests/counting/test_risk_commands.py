"""The risk commands' contracts (issue 14 §4): risk_hide / risk_approve / risk_restore print
{"riskId", "status", "hiddenCount"} as the last line with --json; self-approval and bad input are refused
with a stable code, a non-zero exit and nothing written; --wait follows the apply job to its end."""

from __future__ import annotations

import pytest

from counting.risk.models import RiskDecision
from likes_project.audit.models import AuditRecord
from likes_project.opsjobs.models import OpsJob
from tests.counting.test_risk import member, ring_video
from tests.reconciliation.helpers import displayed, job_worker, manage

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True),
              pytest.mark.usefixtures("close_db_connections")]

KEYS = {"riskId", "status", "hiddenCount"}


def _written() -> tuple[int, int, int]:
    return (RiskDecision.objects.count(), OpsJob.objects.count(),
            AuditRecord.objects.filter(target_type="risk_decision").count())


def test_hide_approve_wait_restore_through_the_commands(make_user, make_video, tmp_path):
    _author, _honest, ring = ring_video(make_user, make_video, "rkc-ring", honest=2, ring=3)
    operator, approver = member("likes-operator"), member("likes-approver")
    users_file = tmp_path / "ring.txt"
    users_file.write_text("# the ring\n" + "\n".join(u.username for u in ring[1:]) + "\n\n")
    ran = manage("risk_hide", "--video", "rkc-ring", "--user", ring[0].username, "--users-file", str(users_file),
                 "--reason", "ring", "--actor", operator.username, "--json")
    assert ran.code == 0, ran.err
    assert set(ran.json) == KEYS and ran.json["status"] == "AWAITING_APPROVAL" and ran.json["hiddenCount"] == 0
    hide_id = ran.json["riskId"]
    assert sorted(RiskDecision.objects.get(pk=hide_id).user_ids) == sorted(u.pk for u in ring)

    refused = manage("risk_approve", str(hide_id), "--actor", operator.username, "--json")
    assert refused.code != 0 and refused.json["code"] == "permission_denied"  # an operator is no approver
    with job_worker():
        ran = manage("risk_approve", str(hide_id), "--actor", approver.username, "--wait", "--json")
    assert ran.code == 0, ran.err
    assert ran.json == {"riskId": hide_id, "status": "APPLIED", "hiddenCount": 3}
    assert displayed("rkc-ring") == 2

    ran = manage("risk_restore", str(hide_id), "--reason", "appeal", "--actor", operator.username, "--json")
    assert ran.code == 0 and set(ran.json) == KEYS and ran.json["status"] == "AWAITING_APPROVAL"
    restore_id = ran.json["riskId"]
    with job_worker():
        ran = manage("risk_approve", str(restore_id), "--actor", approver.username, "--wait", "--json")
    assert ran.json == {"riskId": restore_id, "status": "APPLIED", "hiddenCount": 0}
    assert RiskDecision.objects.get(pk=hide_id).status == "RESTORED"
    assert displayed("rkc-ring") == 5


def test_self_approval_is_refused_with_its_code_and_a_non_zero_exit(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rkc-self", honest=1, ring=1)
    both = member("likes-operator")
    from django.contrib.auth.models import Group

    both.groups.add(Group.objects.get(name="likes-approver"))
    ran = manage("risk_hide", "--video", "rkc-self", "--user", ring[0].username, "--reason", "r",
                 "--actor", both.username, "--json")
    ran = manage("risk_approve", str(ran.json["riskId"]), "--actor", both.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "self_approval"
    assert RiskDecision.objects.get().status == "AWAITING_APPROVAL" and not OpsJob.objects.exists()


@pytest.mark.parametrize("args, code", [
    (["--video", "rkc-missing", "--user", "{user}", "--reason", "r"], "video_not_found"),
    (["--video", "rkc-bad", "--users-file", "{empty}", "--reason", "r"], "users_required"),
    (["--video", "rkc-bad", "--users-file", "{missing}", "--reason", "r"], "users_file_unreadable"),
    (["--video", "rkc-bad", "--user", "{user}"], "reason_required"),
    (["--video", "rkc-bad", "--user", "nobody-at-all", "--reason", "r"], "unknown_user"),
])
def test_bad_input_is_refused_with_a_stable_code_and_nothing_written(make_user, make_video, tmp_path, args, code):
    make_video("rkc-bad", make_user())
    user = make_user()
    operator = member("likes-operator")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# nobody\n")
    fill = {"{user}": user.username, "{empty}": str(empty), "{missing}": str(tmp_path / "nope.txt")}
    before = _written()
    ran = manage("risk_hide", *[fill.get(a, a) for a in args], "--actor", operator.username, "--json")
    assert ran.code != 0 and ran.json["code"] == code, (ran.out, ran.err)
    assert _written() == before


def test_a_viewer_cannot_request_and_a_restore_needs_an_applied_hide(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rkc-perm", honest=1, ring=1)
    viewer, operator = member("likes-viewer"), member("likes-operator")
    ran = manage("risk_hide", "--video", "rkc-perm", "--user", ring[0].username, "--reason", "r",
                 "--actor", viewer.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "permission_denied"
    ran = manage("risk_hide", "--video", "rkc-perm", "--user", ring[0].username, "--reason", "r",
                 "--actor", operator.username, "--json")
    ran = manage("risk_restore", str(ran.json["riskId"]), "--reason", "r", "--actor", operator.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "risk_not_restorable"
    ran = manage("risk_restore", "999999", "--reason", "r", "--actor", operator.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "risk_not_found"


def test_a_rejected_hide_hides_nothing_and_cannot_be_approved_afterwards(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rkc-reject", honest=1, ring=2)
    operator, approver = member("likes-operator"), member("likes-approver")
    ran = manage("risk_hide", "--video", "rkc-reject", "--user", ring[0].username, "--user", ring[1].username,
                 "--reason", "r", "--actor", operator.username, "--json")
    risk_id = str(ran.json["riskId"])
    refused = manage("risk_reject", risk_id, "--actor", approver.username, "--json")
    assert refused.code != 0 and refused.json["code"] == "reason_required"
    ran = manage("risk_reject", risk_id, "--reason", "not a ring", "--actor", approver.username, "--json")
    assert ran.code == 0 and ran.json == {"riskId": int(risk_id), "status": "REJECTED", "hiddenCount": 0}
    ran = manage("risk_approve", risk_id, "--actor", approver.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "risk_not_awaiting_approval"
    assert not OpsJob.objects.exists() and displayed("rkc-reject") == 3


def test_risk_account_then_risk_approve_wait_sets_the_level_through_the_commands(make_user, make_video):
    """Issue 32 §1's contract: `risk_account USERNAME --level ... --json` prints {"riskId", "status"};
    `risk_approve ID --actor OTHER --wait` applies it; the account's likes leave the public count."""
    _author, _honest, ring = ring_video(make_user, make_video, "rkc-level", honest=2, ring=1)
    operator, approver = member("likes-operator"), member("likes-approver")
    ran = manage("risk_account", ring[0].username, "--level", "downweight", "--reason", "ring", "--actor",
                 operator.username, "--json")
    assert ran.code == 0, ran.err
    assert set(ran.json) == {"riskId", "status"} and ran.json["status"] == "AWAITING_APPROVAL"
    with job_worker():
        ran = manage("risk_approve", str(ran.json["riskId"]), "--actor", approver.username, "--wait", "--json")
    assert ran.code == 0, ran.err
    assert ran.json["status"] == "APPLIED" and ran.json["level"] == "downweight"
    assert displayed("rkc-level") == 2
    refused = manage("risk_account", ring[0].username, "--level", "banish", "--reason", "r", "--actor",
                     operator.username)
    assert refused.code != 0 and "invalid choice" in refused.err  # argparse: a usage error, nothing written
