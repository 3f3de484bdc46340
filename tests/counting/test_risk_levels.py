"""An account's risk level (issue 32 §1, RISK-3, REC-2): requested by one operator, approved by another, applied by
the system's job. Down-weight keeps the relations and takes the account's likes out of public counts
(`policy_hidden_count`); freeze also refuses its commands with 403 `account_frozen`, writing nothing; clear brings
every like back exactly. Reconciliation checks policy_hidden as a layer of its own, with its counter-example. Real
PostgreSQL, Redis, projector and display snapshot."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from counting.models import VideoDisplayCount
from counting.risk import accounts, services
from counting.risk.models import RiskDecision
from likes_project.audit.models import AuditRecord
from likes_project.audit.services import Actor
from likes_project.errors import DomainError
from likes_project.opsjobs.services import job_run_inline
from relations.models import AccountStatus, LikeCommand
from tests.counting.helpers import drain_all
from tests.factories import put_like
from tests.reconciliation.helpers import displayed, member_of, roles_ensure, run_check
from tests.relations.helpers import body_of, cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

MAKER = Actor(name="level-maker", channel="cli")
CHECKER = Actor(name="level-checker", channel="cli")


def level(user, name: str, *, run: bool = True) -> RiskDecision:
    d = accounts.risk_account_request(actor=MAKER, username=user.username, level=name, reason="a ring's member",
                                      evidence="one device, nine accounts")
    d = services.risk_approve(decision_id=d.pk, actor=CHECKER)
    if run:
        job_run_inline(d.job_id)
    return services.risk_get(d.pk)


@pytest.fixture
def liked(make_user, make_video):
    """Two videos: four honest likes and the suspect's on each."""
    author = make_user()
    suspect = make_user()
    for video_id in ("rl-a", "rl-b"):
        make_video(video_id, author)
        for u in [make_user() for _ in range(4)] + [suspect]:
            cmd(u, video_id, "LIKED")
    drain_all()
    assert displayed("rl-a") == displayed("rl-b") == 5
    return suspect


def test_a_frozen_account_is_refused_its_likes_leave_the_counts_and_clear_brings_them_back(liked, api):
    decision = level(liked, "freeze")
    assert (decision.status, services.risk_report(decision)) == ("APPLIED", {
        "riskId": decision.pk, "status": "APPLIED", "level": "freeze"})
    assert displayed("rl-a") == displayed("rl-b") == 4  # out of the public counts
    row = VideoDisplayCount.objects.get(video_id="rl-a")
    assert (row.raw_active_count, row.risk_hidden_count, row.policy_hidden_count) == (5, 0, 1)

    commands = LikeCommand.objects.using("rel_00").count() + LikeCommand.objects.using("rel_01").count()
    resp = put_like(api.as_user(liked), "rl-a", "UNLIKED", "frozen-1")
    assert resp.status_code == 403 and body_of(resp)["code"] == "account_frozen"
    assert body_of(resp)["currentRelation"]["state"] == "LIKED"  # the relation stays
    assert LikeCommand.objects.using("rel_00").count() + LikeCommand.objects.using("rel_01").count() == commands
    run = run_check("identity", videos=["rl-a", "rl-b"])
    assert run.status == "PASSED", list(run.diffs.values())

    level(liked, "clear")
    assert displayed("rl-a") == displayed("rl-b") == 5  # back exactly
    assert put_like(api.as_user(liked), "rl-a", "UNLIKED", "thawed-1").status_code == 200
    assert AuditRecord.objects.filter(action="risk.account.apply").count() == 2


def test_a_downweighted_account_keeps_liking_and_its_likes_stay_out(liked, api, make_video, make_user):
    level(liked, "downweight")
    assert displayed("rl-a") == 4
    make_video("rl-new", make_user())
    assert put_like(api.as_user(liked), "rl-new", "LIKED", "dw-1").status_code == 200  # commands go through
    drain_all()
    assert displayed("rl-new") == 0  # a new like of a down-weighted account is out at once
    assert AccountStatus.objects.get(user_id=liked.pk).risk_level == "downweight"


def test_nothing_changes_before_the_approval_and_the_requester_cannot_approve(liked):
    d = accounts.risk_account_request(actor=MAKER, username=liked.username, level="freeze", reason="suspect")
    assert displayed("rl-a") == 5 and not AccountStatus.objects.filter(user_id=liked.pk).exists()
    with pytest.raises(DomainError) as refused:
        services.risk_approve(decision_id=d.pk, actor=MAKER)
    assert refused.value.code == "self_approval"
    assert services.risk_get(d.pk).status == "AWAITING_APPROVAL"


def test_an_older_decision_applied_late_does_not_undo_a_newer_one(liked):
    older = level(liked, "freeze", run=False)
    newer = level(liked, "clear")
    job_run_inline(older.job_id)  # the older one's job runs last
    assert services.risk_get(older.pk).status == "APPLIED"
    assert AccountStatus.objects.get(user_id=liked.pk).risk_level == "none"  # the newer version stands
    assert newer.risk_version > older.risk_version and displayed("rl-a") == 5


def test_reconciliation_finds_a_policy_hidden_count_that_disagrees(liked):
    level(liked, "downweight")
    assert displayed("rl-a") == 4
    VideoDisplayCount.objects.filter(video_id="rl-a").update(policy_hidden_count=0, display_count=5)  # damage
    run = run_check("identity", videos=["rl-a", "rl-b"])
    assert run.status == "FAILED"
    [diff] = run.diffs.all()
    assert (diff.video_id, diff.layer, diff.expected, diff.actual) == ("rl-a", "policy_hidden", 1, 0)


@pytest.mark.parametrize("argv, code", [
    (["nobody-at-all", "--level", "freeze", "--reason", "r", "--actor", "{maker}"], "unknown_user"),
    (["{user}", "--level", "freeze", "--reason", " ", "--actor", "{maker}"], "reason_required"),
])
def test_the_command_refuses_bad_input_and_writes_nothing(liked, argv, code):
    from django.contrib.auth.models import Group

    roles_ensure()
    maker = member_of("likes-operator")
    maker.groups.add(Group.objects.get(name="likes-operator"))
    argv = [a.format(user=liked.username, maker=maker.username) for a in argv]
    with pytest.raises(CommandError) as refused:
        call_command("risk_account", *argv)
    assert code in str(refused.value)
    assert not RiskDecision.objects.exists()


def test_the_console_requests_a_level_and_another_operator_approves_it(liked):
    from django.contrib.auth.models import Group
    from django.test import Client
    from django.urls import reverse

    roles_ensure()
    clients = {}
    for role in ("likes-operator", "likes-approver"):
        member = member_of(role)
        member.groups.add(Group.objects.get(name=role))
        member.is_staff = True
        member.save(update_fields=["is_staff"])
        clients[role] = Client()
        clients[role].force_login(member)
    page = clients["likes-operator"].get("/admin/risk/riskdecision/account/", {"username": liked.username})
    assert page.status_code == 200 and f'value="{liked.username}"' in page.content.decode()
    typo = clients["likes-operator"].post("/admin/risk/riskdecision/account/", {
        "username": "nobody-at-all", "level": "freeze", "reason": "ring"})
    assert typo.status_code == 200 and "unknown_user" in typo.content.decode() and not RiskDecision.objects.exists()
    sent = clients["likes-operator"].post("/admin/risk/riskdecision/account/", {
        "username": liked.username, "level": "freeze", "reason": "ring", "evidence": "one device"})
    d = RiskDecision.objects.get()
    assert sent.status_code == 302 and (d.kind, d.params["level"], d.status) == ("ACCOUNT", "freeze",
                                                                                 "AWAITING_APPROVAL")
    approved = clients["likes-approver"].post(reverse("admin:risk_approve", args=[d.pk]))
    assert approved.status_code == 302
    job_run_inline(services.risk_get(d.pk).job_id)
    assert AccountStatus.objects.get(user_id=liked.pk).risk_level == "freeze" and displayed("rl-a") == 4
