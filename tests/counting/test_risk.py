"""The risk ledger (issue 14 §4; RISK-3 … RISK-5, REC-2, OPS-6, PRIV-1): a ring's likes hidden from the
displayed count and restored exactly, against the real projector, partitions and display snapshot; the
unlike / like-again interleavings; an idempotent apply; maker-checker; the likers list; reconciliation's
identity display = raw - hidden, with its counter-example."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connections, transaction
from django.urls import reverse

from counting.models import VideoDisplayCount
from counting.risk import services
from counting.risk.models import RiskDecision, RiskRelationState, RiskStatus
from likes_project.audit.models import AuditRecord
from likes_project.audit.services import Actor
from likes_project.errors import DomainError
from likes_project.opsjobs.services import job_run_inline
from relations.models import LikeRelation, UserPrivacy
from tests.counting.helpers import drain_all
from tests.reconciliation.helpers import displayed, member_of, roles_ensure, run_check
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

MAKER = Actor(name="risk-maker", channel="cli")
CHECKER = Actor(name="risk-checker", channel="cli")


def member(group: str):
    from django.contrib.auth.models import Group

    roles_ensure()
    user = member_of(group)
    user.groups.add(Group.objects.get(name=group))
    return user


def ring_video(make_user, make_video, video_id: str, *, honest: int, ring: int):
    author = make_user()
    make_video(video_id, author)
    honest_users = [make_user() for _ in range(honest)]
    ring_users = [make_user() for _ in range(ring)]
    for u in honest_users + ring_users:
        cmd(u, video_id, "LIKED")
    drain_all()
    return author, honest_users, ring_users


def hide(video_id: str, users, *, run: bool = True) -> RiskDecision:
    d = services.risk_hide_request(actor=MAKER, video_id=video_id, usernames=[u.username for u in users],
                                   reason="ring of fake accounts", evidence="same device fingerprint")
    d = services.risk_approve(decision_id=d.pk, actor=CHECKER)
    if run:
        job_run_inline(d.job_id)
    return services.risk_get(d.pk)


def restore(hide_decision: RiskDecision) -> RiskDecision:
    d = services.risk_restore_request(actor=MAKER, decision_id=hide_decision.pk, reason="appeal accepted")
    d = services.risk_approve(decision_id=d.pk, actor=CHECKER)
    job_run_inline(d.job_id)
    return services.risk_get(d.pk)


def snapshot_row(video_id: str) -> tuple[int, int, int]:
    row = VideoDisplayCount.objects.get(video_id=video_id)
    return row.raw_active_count, row.risk_hidden_count, row.display_count


def facts(video_id: str) -> dict[int, tuple[str, int]]:
    from django.conf import settings

    out = {}
    for alias in settings.RELATION_SHARD_ALIASES:
        for r in LikeRelation.objects.using(alias).filter(video_id=video_id):
            out[r.user_id] = (r.state, r.relation_version)
    return out


def test_a_hidden_then_restored_ring_moves_the_display_exactly_and_never_the_facts(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rk-ring", honest=3, ring=5)
    assert displayed("rk-ring") == 8
    before = facts("rk-ring")
    d = hide("rk-ring", ring)
    assert d.status == RiskStatus.APPLIED and services.risk_hidden_count(d) == 5
    assert displayed("rk-ring") == 3  # what it would be without the ring
    assert snapshot_row("rk-ring") == (8, 5, 3)  # the raw count keeps the ring; the hidden count says why
    assert facts("rk-ring") == before  # RISK-4: the relations are never changed
    r = restore(d)
    assert r.status == RiskStatus.APPLIED and services.risk_get(d.pk).status == RiskStatus.RESTORED
    assert services.risk_hidden_count(services.risk_get(d.pk)) == 0 and services.risk_hidden_count(r) == 0
    assert displayed("rk-ring") == 8 and snapshot_row("rk-ring") == (8, 0, 8)
    assert facts("rk-ring") == before
    actions = set(AuditRecord.objects.filter(target_type="risk_decision").values_list("action", flat=True))
    assert {"risk.hide.request", "risk.approve", "risk.hide.apply", "risk.restore.request",
            "risk.restore.apply"} <= actions


def test_a_hidden_liker_who_unlikes_is_not_subtracted_twice_and_liking_again_stays_hidden(make_user, make_video):
    _author, honest, ring = ring_video(make_user, make_video, "rk-unlike", honest=2, ring=3)
    d = hide("rk-unlike", ring)
    assert displayed("rk-unlike") == 2
    cmd(ring[0], "rk-unlike", "UNLIKED")
    drain_all()
    assert displayed("rk-unlike") == 2 and snapshot_row("rk-unlike") == (4, 2, 2)  # not 1: no double subtraction
    cmd(ring[0], "rk-unlike", "LIKED")  # likes again while the decision stands: still hidden
    drain_all()
    assert displayed("rk-unlike") == 2 and snapshot_row("rk-unlike") == (5, 3, 2)
    cmd(honest[0], "rk-unlike", "UNLIKED")  # an honest unlike still counts
    drain_all()
    assert displayed("rk-unlike") == 1
    restore(d)
    assert displayed("rk-unlike") == 4 and snapshot_row("rk-unlike") == (4, 0, 4)


def test_changes_during_the_hide_and_a_listed_user_who_likes_only_later(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rk-during", honest=2, ring=3)
    late = make_user()  # listed in the decision, likes only after it applied
    d = hide("rk-during", [*ring, late], run=False)  # approved, its job not run yet
    assert d.status == RiskStatus.APPROVED
    cmd(ring[1], "rk-during", "UNLIKED")  # between the approval and the apply
    drain_all()
    assert displayed("rk-during") == 4
    job_run_inline(d.job_id)
    assert services.risk_get(d.pk).status == RiskStatus.APPLIED
    assert displayed("rk-during") == 2
    cmd(late, "rk-during", "LIKED")
    cmd(ring[1], "rk-during", "LIKED")
    drain_all()
    assert displayed("rk-during") == 2 and snapshot_row("rk-during") == (6, 4, 2)
    restore(services.risk_get(d.pk))
    assert displayed("rk-during") == 6


def test_rerunning_the_apply_is_idempotent_and_an_older_decision_never_undoes_a_newer(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rk-rerun", honest=1, ring=4)
    d = hide("rk-rerun", ring)
    assert displayed("rk-rerun") == 1
    states = set(RiskRelationState.objects.filter(video_id="rk-rerun").values_list("user_id", "hidden",
                                                                                   "risk_version"))
    again, resume = services.risk_apply(d.pk)  # a re-run after a crash past every commit
    assert resume is None and again.status == RiskStatus.APPLIED
    assert set(RiskRelationState.objects.filter(video_id="rk-rerun").values_list("user_id", "hidden",
                                                                                 "risk_version")) == states
    assert displayed("rk-rerun") == 1
    # A crash in the middle: the first chunk applied, the rest not; the resumed job finishes it.
    r = services.risk_restore_request(actor=MAKER, decision_id=d.pk, reason="appeal")
    r = services.risk_approve(decision_id=r.pk, actor=CHECKER)
    services._states_write(r, services._desired(r, r.user_ids[:2]))
    assert displayed("rk-rerun") == 1  # no dirty mark yet, the snapshot is not due
    job_run_inline(r.job_id)
    assert displayed("rk-rerun") == 5
    services.risk_apply(d.pk)  # the old hide's run again, after its restore: an older risk version
    assert not RiskRelationState.objects.filter(video_id="rk-rerun", hidden=True).exists()
    assert services.risk_get(d.pk).status == RiskStatus.RESTORED
    assert displayed("rk-rerun") == 5


def test_a_restore_keeps_users_another_standing_hide_covers(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rk-overlap", honest=1, ring=4)
    first = hide("rk-overlap", ring[:3])
    second = hide("rk-overlap", ring[2:])
    assert displayed("rk-overlap") == 1
    r = restore(first)
    assert services.risk_hidden_count(r) == 1  # ring[2] is still hidden by the second hide
    assert displayed("rk-overlap") == 3
    restore(second)
    assert displayed("rk-overlap") == 5


def test_self_approval_is_refused_by_the_service_and_by_the_database(make_user, make_video):
    ring_video(make_user, make_video, "rk-self", honest=1, ring=2)
    user = make_user()
    d = services.risk_hide_request(actor=MAKER, video_id="rk-self", usernames=[user.username], reason="r")
    with pytest.raises(DomainError) as err:
        services.risk_approve(decision_id=d.pk, actor=MAKER)
    assert err.value.code == "self_approval"
    assert services.risk_get(d.pk).status == RiskStatus.AWAITING_APPROVAL
    assert AuditRecord.objects.filter(action="risk.approve", outcome="refused", target_id=str(d.pk)).exists()
    with pytest.raises(IntegrityError), transaction.atomic():  # the check constraint, whoever writes
        RiskDecision.objects.filter(pk=d.pk).update(approved_by=MAKER.name, approved_hash=d.params_hash)
    with pytest.raises(IntegrityError), transaction.atomic():  # an approval bound to other parameters
        RiskDecision.objects.filter(pk=d.pk).update(approved_by=CHECKER.name, approved_hash="0" * 64)
    # Parameters edited after the request void the approval.
    RiskDecision.objects.filter(pk=d.pk).update(params={**d.params, "users": [1]})
    with pytest.raises(DomainError) as err:
        services.risk_approve(decision_id=d.pk, actor=CHECKER)
    assert err.value.code == "approval_void"


@pytest.mark.parametrize("bad, code", [
    ({"video_id": "rk-none"}, "video_not_found"),
    ({"usernames": []}, "users_required"),
    ({"usernames": ["no-such-user-xyz"]}, "unknown_user"),
    ({"reason": "  "}, "reason_required"),
])
def test_bad_input_is_refused_with_a_code_and_writes_nothing(make_user, make_video, bad, code):
    make_video("rk-bad", make_user())
    user = make_user()
    args = {"actor": MAKER, "video_id": "rk-bad", "usernames": [user.username], "reason": "r"} | bad
    with pytest.raises(DomainError) as err:
        services.risk_hide_request(**args)
    assert err.value.code == code
    assert not RiskDecision.objects.exists() and not AuditRecord.objects.filter(target_type="risk_decision").exists()


def test_the_likers_list_omits_hidden_likers_except_for_operators(make_user, make_video, api):
    author, honest, ring = ring_video(make_user, make_video, "rk-likers", honest=2, ring=2)
    UserPrivacy.objects.create(user_id=author.pk, likers_public=True)
    viewer = make_user()
    operator = member("likes-operator")
    approver = member("likes-approver")  # approving is not operating: no hidden likers for them

    def likers(user, recent=False):
        r = api.as_user(user).get("/v1/videos/rk-likers/likers" + ("/recent" if recent else ""), {"limit": 50})
        assert r.status_code == 200, r.content
        return {i["userId"] for i in r.json()["items"]}

    everyone = {u.pk for u in honest + ring}
    assert likers(viewer) == everyone
    d = hide("rk-likers", ring)
    assert likers(viewer) == likers(author) == {u.pk for u in honest}  # the author too
    assert likers(viewer, recent=True) == {u.pk for u in honest}
    assert likers(operator) == everyone
    assert likers(operator, recent=True) & {u.pk for u in ring}  # recent: the 3 newest, the ring liked last
    assert likers(approver) == {u.pk for u in honest}
    restore(d)
    assert likers(viewer) == everyone


def test_identity_passes_after_hide_and_restore_and_fails_when_risk_hidden_is_corrupted(make_user, make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rk-rec", honest=2, ring=3)
    d = hide("rk-rec", ring)
    assert displayed("rk-rec") == 2
    run = run_check("identity", videos=["rk-rec"])
    assert run.status == "PASSED", list(run.diffs.values("layer", "expected", "actual", "detail"))
    # Counter-example: the display's risk_hidden corrupted in SQL (display_count kept consistent with it).
    with connections["default"].cursor() as cursor:
        cursor.execute(f"UPDATE {VideoDisplayCount._meta.db_table} SET risk_hidden_count = 1, display_count = 4 "
                       "WHERE video_id = %s", ["rk-rec"])
    run = run_check("identity", videos=["rk-rec"])
    assert run.status == "FAILED"
    [diff] = run.diffs.all()
    assert (diff.layer, diff.expected, diff.actual) == ("display", 2, 4)
    # ... and a display_count that does not equal raw - hidden.
    with connections["default"].cursor() as cursor:
        cursor.execute(f"UPDATE {VideoDisplayCount._meta.db_table} SET risk_hidden_count = 3, display_count = 5 "
                       "WHERE video_id = %s", ["rk-rec"])
    assert run_check("identity", videos=["rk-rec"]).status == "FAILED"
    restore(d)
    assert displayed("rk-rec") == 5
    assert run_check("identity", videos=["rk-rec"]).status == "PASSED"


# --- the console --------------------------------------------------------------------------------------


def console(username: str, *groups: str):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    roles_ensure()
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    user.groups.add(*Group.objects.filter(name__in=groups))
    client = Client()
    client.force_login(user)
    return user, client


def test_the_console_requests_approves_and_restores_with_permissions_and_audit(make_user, make_video):
    from django.urls import reverse

    _author, _honest, ring = ring_video(make_user, make_video, "rk-admin", honest=2, ring=3)
    _viewer, viewer = console("risk-viewer", "likes-viewer")
    operator_user, operator = console("risk-operator", "likes-operator")
    _approver_user, approver = console("risk-approver", "likes-approver")
    request_url = reverse("admin:risk_hide_request")
    form = {"video": "rk-admin", "users": "\n".join(u.username for u in ring), "reason": "ring",
            "evidence": "one device", "display_count": "0", "risk_hidden_count": "99"}
    assert viewer.get(request_url).status_code == 403 and viewer.post(request_url, form).status_code == 403
    assert approver.post(request_url, form).status_code == 403
    bad = operator.post(request_url, {**form, "video": "rk-nope"})
    assert bad.status_code == 200 and "video_not_found" in bad.content.decode()
    assert not RiskDecision.objects.exists()
    done = operator.post(request_url, form)
    assert done.status_code == 302
    d = RiskDecision.objects.get()
    assert (d.requested_by, d.requested_channel, d.status) == ("risk-operator", "admin", "AWAITING_APPROVAL")
    assert d.evidence == "one device" and sorted(d.user_ids) == sorted(u.pk for u in ring)
    page = viewer.get(reverse("admin:risk_riskdecision_change", args=[d.pk])).content.decode()
    assert "risk-approve-form" not in page and ring[0].username in page  # a viewer sees the users, no button
    own = operator.get(reverse("admin:risk_riskdecision_change", args=[d.pk])).content.decode()
    assert "risk-approve-form" not in own  # an operator is no approver
    approve_url = reverse("admin:risk_approve", args=[d.pk])
    assert operator.post(approve_url).status_code == 403
    # The approver's permission, held by the requester too: still refused (self_approval).
    from django.contrib.auth.models import Group

    operator_user.groups.add(Group.objects.get(name="likes-approver"))
    refused = operator.post(approve_url, follow=True)
    assert "self_approval" in refused.content.decode()
    assert RiskDecision.objects.get(pk=d.pk).status == "AWAITING_APPROVAL"
    assert "risk-approve-form" in approver.get(reverse("admin:risk_riskdecision_change", args=[d.pk])).content.decode()
    assert approver.post(approve_url).status_code == 302
    d = services.risk_get(d.pk)
    assert d.approved_by == "risk-approver" and d.status == "APPROVED"  # the web request ran nothing
    job_run_inline(d.job_id)
    assert displayed("rk-admin") == 2
    page = viewer.get(reverse("admin:risk_riskdecision_change", args=[d.pk])).content.decode()
    assert "5 - 3 - 0 = 2" in page and "APPLIED" in page
    restore_url = reverse("admin:risk_restore", args=[d.pk])
    assert viewer.post(restore_url, {"reason": "appeal"}).status_code == 403
    assert operator.post(restore_url, {"reason": "  "}).status_code == 200  # a reason first
    assert operator.post(restore_url, {"reason": "appeal"}).status_code == 302
    r = RiskDecision.objects.get(kind="RESTORE")
    assert approver.post(reverse("admin:risk_approve", args=[r.pk])).status_code == 302
    job_run_inline(services.risk_get(r.pk).job_id)
    assert displayed("rk-admin") == 5
    actions = list(AuditRecord.objects.filter(target_type="risk_decision", channel="admin")
                   .values_list("action", "actor", "outcome"))
    assert ("risk.hide.request", "risk-operator", "applied") in actions
    assert ("risk.approve", "risk-operator", "refused") in actions
    assert ("risk.approve", "risk-approver", "applied") in actions
    assert ("risk.restore.request", "risk-operator", "applied") in actions
    assert viewer.get(reverse("admin:risk_riskdecision_changelist")).status_code == 200


def test_the_console_rejects_with_a_reason_and_a_refused_step_says_why(make_user, make_video):
    """Reject on a decision's page: a reason first, an approver's permission, then REJECTED with its audit; a
    step the service refuses (rejecting twice, an unknown decision) says its code and goes back, writing nothing."""
    _author, _honest, ring = ring_video(make_user, make_video, "rk-reject", honest=1, ring=2)
    d = services.risk_hide_request(actor=MAKER, video_id="rk-reject", usernames=[u.username for u in ring],
                                   reason="ring", evidence="one device")
    _viewer_user, viewer = console("reject-viewer", "likes-viewer")
    _approver_user, approver = console("reject-approver", "likes-approver")
    reject_url = reverse("admin:risk_reject", args=[d.pk])
    assert viewer.post(reject_url, {"reason": "no ring"}).status_code == 403
    assert approver.post(reject_url, {"reason": " "}).status_code == 200  # the form again: a reason first
    done = approver.post(reject_url, {"reason": "no ring"})
    assert done.status_code == 302 and done["Location"] == reverse("admin:risk_riskdecision_change", args=[d.pk])
    d = services.risk_get(d.pk)
    assert (d.status, d.rejected_by, d.error) == ("REJECTED", "reject-approver", "no ring")
    again = approver.post(reject_url, {"reason": "twice"}, follow=True)
    assert "was not rejected" in again.content.decode() and services.risk_get(d.pk).error == "no ring"
    unknown = approver.post(reverse("admin:risk_reject", args=[999999]), {"reason": "none"})
    assert unknown["Location"] == reverse("admin:risk_riskdecision_changelist")
    actions = list(AuditRecord.objects.filter(target_type="risk_decision", target_id=str(d.pk))
                   .values_list("action", "actor", "outcome"))
    assert actions.count(("risk.reject", "reject-approver", "applied")) == 1  # the refused ones wrote nothing
