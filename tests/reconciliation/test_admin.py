"""The console's side of issue 11: check runs, diffs and repair requests in the admin. The roles (the
groups of reconciliation 0002), a check started as an ops job from a form whose bad input is a form
error, diff triage with a reason, repairs requested from diffs or videos, and the maker-checker
approval: never by the requester, superusers included. Every write is checked in the audit log.

The runs and diffs here are made through the check services (a run of the real pipeline needs
committed transactions: tests/reconciliation/test_repair_browser.py does that end to end)."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client
from django.urls import reverse

from likes_project.audit.models import AuditRecord
from likes_project.opsjobs.models import OpsJob
from reconciliation.admin import CheckDiffAdmin, CheckRunAdmin, DiffTransitionAdmin, RepairRequestAdmin
from reconciliation.models import CheckDiff, CheckRun, DiffTransition, RepairRequest
from reconciliation.services import checks, diffs, repair
from tests.factories import TEST_ACTOR, make_user
from tests.reconciliation.helpers import roles_ensure

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

RUNS_URL = "/admin/reconciliation/checkrun/"
DIFFS_URL = "/admin/reconciliation/checkdiff/"
REPAIRS_URL = "/admin/reconciliation/repairrequest/"
START_URL = "/admin/reconciliation/checkrun/start/"
REQUEST_URL = "/admin/reconciliation/repairrequest/request/"


# --- helpers -----------------------------------------------------------------------------------


def role(user, *groups: str) -> None:
    """Put `user` in the console's role groups, made again where a transactional test's flush removed them
    (idempotent)."""
    roles_ensure()
    user.groups.add(*Group.objects.filter(name__in=groups))
    assert user.groups.count() == len(groups)


def logged_in(username: str, *groups: str, superuser: bool = False):
    User = get_user_model()
    user = (User.objects.create_superuser(username, password="pw") if superuser else
            User.objects.create_user(username, password="pw", is_staff=True))
    if groups:
        role(user, *groups)
    client = Client()
    client.force_login(user)
    return user, client


def failed_run(*videos: str, layer: str = "buckets") -> CheckRun:
    """A finished identity run of `videos` that found one diff each (+3 on virtual bucket 7), through
    the check services, as a run's chunk records them."""
    with transaction.atomic(using="default"):  # check_run_create runs inside its caller's transaction
        run = checks.check_run_create(mode="identity", scope=checks.scope_normalize(videos=list(videos)),
                                      actor=TEST_ACTOR)
    checks.check_run_begin(run)
    found = [checks.Found(v, layer, 4, 7, virtual_bucket=7) for v in videos]
    checks.diffs_save(run, found)
    run.checked, run.diffs_found = len(videos), len(found)
    return checks.check_run_finish(run)


def audits(action: str, **filters) -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action=action, **filters).order_by("id"))


def act(client, url: str, action: str, objs, reason: str | None = None, **extra):
    data = {"action": action, "_selected_action": [o.pk for o in objs]}
    if reason is not None:
        data.update(confirm="1", reason=reason)
    return client.post(url, data, **extra)


def shown_messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def approve_url(req) -> str:
    return reverse("admin:reconciliation_repair_approve", args=[req.pk])


def requested(by, *videos: str) -> RepairRequest:
    from likes_project.audit.services import admin_actor

    return repair.repair_request(actor=admin_actor(by), source="facts", reason="tests", videos=list(videos))


# --- registration ------------------------------------------------------------------------------


def test_the_reconciliation_models_are_on_the_console_site():
    for model, admin_class in ((CheckRun, CheckRunAdmin), (CheckDiff, CheckDiffAdmin),
                               (DiffTransition, DiffTransitionAdmin), (RepairRequest, RepairRequestAdmin)):
        assert isinstance(admin.site.get_model_admin(model), admin_class)


def test_the_tables_are_read_only_even_for_a_superuser():
    run = failed_run("ro-1")
    diff = run.diffs.get()
    req = requested(make_user("ro-requester"), "ro-1")
    _su, client = logged_in("ro-super", superuser=True)
    for model, obj in (("checkrun", run), ("checkdiff", diff), ("repairrequest", req)):
        assert client.get(reverse(f"admin:reconciliation_{model}_add")).status_code == 403
        change = reverse(f"admin:reconciliation_{model}_change", args=[obj.pk])
        assert client.post(change, {"status": "PASSED"}).status_code == 403
        assert client.post(reverse(f"admin:reconciliation_{model}_delete", args=[obj.pk]),
                           {"post": "yes"}).status_code == 403
    assert (CheckRun.objects.get(pk=run.pk).status, CheckDiff.objects.get(pk=diff.pk).status) == ("FAILED", "NEW")
    assert act(client, DIFFS_URL, "delete_selected", [diff], reason="x").status_code == 302  # "No action selected"
    assert CheckDiff.objects.filter(pk=diff.pk).exists()


# --- viewer ------------------------------------------------------------------------------------


def test_a_viewer_sees_runs_diffs_and_repairs_and_cannot_act():
    run = failed_run("view-1", "view-2")
    diff = run.diffs.order_by("id").first()
    diffs.diffs_set_status(ids=[diff.pk], to="FIXING", actor=TEST_ACTOR, reason="looking at it")
    req = requested(make_user("view-requester"), "view-1")
    _viewer, client = logged_in("viewer", "likes-viewer")
    audits_before = AuditRecord.objects.count()

    runs = client.get(RUNS_URL)
    assert runs.status_code == 200 and runs.context["cl"].result_count == 1
    assert "2 video(s): view-1, view-2" in runs.content.decode()
    assert START_URL not in runs.content.decode()  # no link to a page they may not use
    assert START_URL not in client.get("/admin/").content.decode()
    assert REQUEST_URL not in client.get(REPAIRS_URL).content.decode()
    assert client.get(RUNS_URL, {"q": "not-a-number"}).status_code == 200
    for lookup, value, count in (("mode__exact", "identity", 1), ("mode__exact", "exact", 0),
                                 ("status__exact", "FAILED", 1), ("kind__exact", "scheduled", 0)):
        assert client.get(RUNS_URL, {lookup: value}).context["cl"].result_count == count, (lookup, value)
    CheckRun.objects.filter(pk=run.pk).update(skipped=[{"videoId": "view-3", "reason": "its bucket is frozen"}])
    run_page = client.get(reverse("admin:reconciliation_checkrun_change", args=[run.pk])).content.decode()
    assert "run-watermarks" in run_page and "manifestId" in run_page
    assert run_page.count('class="run-diff"') == 2 and "view-2" in run_page
    assert "run-skipped" in run_page and "its bucket is frozen" in run_page
    diff_page = client.get(reverse("admin:reconciliation_checkdiff_change", args=[diff.pk])).content.decode()
    assert 'class="diff-transition"' in diff_page and "looking at it" in diff_page
    repair_page = client.get(reverse("admin:reconciliation_repairrequest_change", args=[req.pk])).content.decode()
    assert "AWAITING_APPROVAL" in repair_page and req.params_hash in repair_page
    assert "repair-approve-form" not in repair_page  # no Approve button
    for url in (DIFFS_URL, REPAIRS_URL, "/admin/reconciliation/difftransition/"):
        assert client.get(url).status_code == 200

    listing = client.get(DIFFS_URL).content.decode()
    assert not any(f'value="{a}"' in listing for a in ("take", "ignore", "reopen", "request_repair"))
    assert 'value="approve"' not in client.get(REPAIRS_URL).content.decode()
    for action in ("take", "ignore", "reopen", "request_repair"):
        for reason in (None, "trying anyway"):
            resp = act(client, DIFFS_URL, action, [diff], reason)
            # the action does not exist for them: the changelist again, no reason form, nothing done
            assert resp.status_code == 200 and 'name="reason"' not in resp.content.decode(), action
    assert act(client, REPAIRS_URL, "approve", [req]).status_code == 200
    assert client.get(START_URL).status_code == 403
    assert client.post(START_URL, {"mode": "identity", "videos": "view-1"}).status_code == 403
    assert client.get(REQUEST_URL).status_code == 403
    assert client.post(REQUEST_URL, {"videos": "view-1", "reason": "x"}).status_code == 403
    assert client.post(approve_url(req)).status_code == 403

    assert CheckDiff.objects.get(pk=diff.pk).status == "FIXING"
    assert RepairRequest.objects.get(pk=req.pk).status == "AWAITING_APPROVAL"
    assert RepairRequest.objects.count() == 1 and CheckRun.objects.count() == 1 and OpsJob.objects.count() == 0
    assert AuditRecord.objects.count() == audits_before


def test_the_pages_refuse_non_staff_and_anonymous_users(client):
    user = make_user("not-staff")
    role(user, "likes-operator", "likes-approver")
    for url in (START_URL, REQUEST_URL, RUNS_URL):
        assert client.get(url).status_code == 302  # to the login page
    client.force_login(user)
    for url in (START_URL, REQUEST_URL, RUNS_URL):
        resp = client.get(url)
        assert resp.status_code == 302 and "/admin/login/" in resp.url


# --- start a check -----------------------------------------------------------------------------


def test_an_operator_starts_a_check_and_is_shown_its_job(make_user, make_video):
    author = make_user()
    for video_id in ("vid-a", "vid-b"):
        make_video(video_id, author)
    op, client = logged_in("check-operator", "likes-operator")
    index = client.get("/admin/").content.decode()
    assert START_URL in index and REQUEST_URL in index  # listed under Reconciliation
    assert START_URL in client.get(RUNS_URL).content.decode()
    form = client.get(START_URL)
    assert form.status_code == 200 and 'name="videos"' in form.content.decode()

    resp = client.post(START_URL, {"mode": "identity", "videos": " vid-b\nvid-a\n\nvid-b \n"})
    job = OpsJob.objects.get()
    assert resp.status_code == 302 and resp.url == reverse("admin:opsjobs_opsjob_change", args=[job.pk])
    run = CheckRun.objects.get()
    assert (job.kind, job.actor, job.channel, job.status) == ("reconcile.check", "check-operator", "admin", "QUEUED")
    assert job.params == {"mode": "identity", "scope": {"videos": ["vid-a", "vid-b"]}, "runId": run.pk}
    assert (run.mode, run.status, run.scope, run.actor, run.channel, run.job_id, run.total) == (
        "identity", "QUEUED", {"videos": ["vid-a", "vid-b"]}, "check-operator", "admin", job.pk, 2)
    [started] = audits("job.start")
    assert (started.actor, started.channel, started.target_id) == ("check-operator", "admin", str(job.pk))
    [record] = audits("reconcile.start")
    assert (record.actor, record.target_type, record.target_id) == ("check-operator", "check_run", str(run.pk))
    assert "Started job" in " ".join(shown_messages(client.get(resp.url)))

    client.post(START_URL, {"mode": "exact", "videos": "vid-a"})
    client.post(START_URL, {"mode": "coverage", "all_videos": "on"})
    assert [(j.kind, j.params["mode"], j.params["scope"]) for j in OpsJob.objects.order_by("id")][1:] == [
        ("reconcile.exact", "exact", {"videos": ["vid-a"]}), ("reconcile.check", "coverage", {"all": True})]
    assert len(audits("reconcile.start", actor=op.username)) == 3


@pytest.mark.parametrize("data, error", [
    ({"mode": "identity"}, "Give either some videos (one a line) or All videos."),
    ({"mode": "identity", "videos": " \n \n"}, "Give either some videos (one a line) or All videos."),
    ({"mode": "identity", "videos": "vid-a", "all_videos": "on"}, "Give either some videos or All videos, not both."),
    ({"mode": "identity", "videos": "vid-a\nnot a video id"}, "Line 2: videoId must be 1-64 characters"),
    ({"mode": "identity", "videos": "v" * 65}, "Line 1: videoId must be 1-64 characters"),
    ({"mode": "identity", "videos": "vid\x00x"}, "Line 1: videoId must be 1-64 characters"),
    ({"mode": "exact", "videos": "vid-typo"}, "No video vid-typo."),  # not a PASSED run over nothing (issue 32)
    ({"mode": "everything", "videos": "vid-a"}, "Select a valid choice."),
    ({"videos": "vid-a"}, "This field is required."),
])
def test_bad_check_input_is_a_form_error_and_starts_nothing(data, error):
    _op, client = logged_in("check-typo", "likes-operator")
    resp = client.post(START_URL, data)
    assert resp.status_code == 200
    assert error in resp.content.decode().replace("&quot;", '"')
    assert not resp.context["form"].is_valid()
    assert OpsJob.objects.count() == 0 and CheckRun.objects.count() == 0 and AuditRecord.objects.count() == 0


def test_an_approver_alone_cannot_start_a_check():
    _approver, client = logged_in("only-approver", "likes-approver")
    assert client.post(START_URL, {"mode": "identity", "videos": "vid-a"}).status_code == 403
    assert OpsJob.objects.count() == 0


# --- diff triage -------------------------------------------------------------------------------


def test_diff_triage_asks_for_a_reason_and_records_each_transition():
    run = failed_run("tri-1", "tri-2")
    first, second = run.diffs.order_by("id")
    _op, client = logged_in("triager", "likes-operator")
    assert 'value="take"' in client.get(DIFFS_URL).content.decode()

    asked = act(client, DIFFS_URL, "take", [first, second])
    page = asked.content.decode()
    assert asked.status_code == 200 and 'name="reason"' in page and "tri-1" in page and "tri-2" in page
    blank = act(client, DIFFS_URL, "take", [first], reason="   ")
    assert blank.status_code == 200 and 'class="errorlist' in blank.content.decode()
    assert CheckDiff.objects.get(pk=first.pk).status == "NEW" and audits("diff.fixing") == []

    done = act(client, DIFFS_URL, "take", [first, second], reason="bucket 7 of both, on it", follow=True)
    assert f"2 diff(s) now FIXING: {first.pk}, {second.pk}." in shown_messages(done)
    first.refresh_from_db()
    assert (first.status, first.owner, first.reason) == ("FIXING", "triager", "bucket 7 of both, on it")
    records = audits("diff.fixing")
    assert [(r.actor, r.channel, r.target_type, r.target_id) for r in records] == [
        ("triager", "admin", "diff", str(first.pk)), ("triager", "admin", "diff", str(second.pk))]
    assert records[0].params == {"from": "NEW", "reason": "bucket 7 of both, on it", "videoId": "tri-1"}

    assert act(client, DIFFS_URL, "ignore", [first], reason="known: test data").status_code == 302
    assert act(client, DIFFS_URL, "reopen", [first], reason="not known after all").status_code == 302
    assert [(t.from_status, t.to_status, t.actor, t.reason) for t in first.transitions.order_by("id")] == [
        ("NEW", "FIXING", "triager", "bucket 7 of both, on it"), ("FIXING", "IGNORED", "triager", "known: test data"),
        ("IGNORED", "NEW", "triager", "not known after all")]
    assert [(r.target_id, r.params["from"]) for r in audits("diff.ignored") + audits("diff.new")] == [
        (str(first.pk), "FIXING"), (str(first.pk), "IGNORED")]

    diff_page = client.get(reverse("admin:reconciliation_checkdiff_change", args=[first.pk])).content.decode()
    assert diff_page.count('class="diff-transition"') == 3
    assert "known: test data" in diff_page and "not known after all" in diff_page
    assert client.get(DIFFS_URL, {"status__exact": "NEW"}).context["cl"].result_count == 1
    assert client.get(DIFFS_URL, {"layer__exact": "buckets"}).context["cl"].result_count == 2
    assert client.get(DIFFS_URL, {"q": "tri-2"}).context["cl"].result_count == 1


def test_a_refused_transition_is_an_error_message_and_changes_nothing():
    run = failed_run("ref-1", "ref-2")
    ignored, new = run.diffs.order_by("id")
    diffs.diffs_set_status(ids=[ignored.pk], to="IGNORED", actor=TEST_ACTOR, reason="known")
    _op, client = logged_in("refused-triager", "likes-operator")
    audits_before = AuditRecord.objects.count()

    resp = act(client, DIFFS_URL, "take", [ignored, new], reason="both", follow=True)
    assert resp.status_code == 200
    assert f"Diff {ignored.pk} is IGNORED; it cannot become FIXING." in shown_messages(resp)
    # all or none: the NEW one was not taken either
    assert [d.status for d in CheckDiff.objects.filter(pk__in=[ignored.pk, new.pk]).order_by("id")] == [
        "IGNORED", "NEW"]
    assert AuditRecord.objects.count() == audits_before and DiffTransition.objects.count() == 1


# --- repair requests ---------------------------------------------------------------------------


def test_an_operator_requests_a_repair_from_diffs_with_a_reason():
    run = failed_run("rq-1", "rq-2")
    first, second = run.diffs.order_by("id")
    _op, client = logged_in("requester", "likes-operator")
    asked = act(client, DIFFS_URL, "request_repair", [first, second])
    assert asked.status_code == 200 and 'name="reason"' in asked.content.decode()
    assert act(client, DIFFS_URL, "request_repair", [first], reason=" ").status_code == 200
    assert RepairRequest.objects.count() == 0

    done = act(client, DIFFS_URL, "request_repair", [first, second], reason="buckets +3 after the outage",
               follow=True)
    req = RepairRequest.objects.get()
    [message] = shown_messages(done)
    assert f'href="{reverse("admin:reconciliation_repairrequest_change", args=[req.pk])}"' in message
    assert (req.status, req.requested_by, req.requested_channel, req.reason) == (
        "AWAITING_APPROVAL", "requester", "admin", "buckets +3 after the outage")
    assert req.params == {"videos": ["rq-1", "rq-2"], "source": "facts", "reason": "buckets +3 after the outage",
                          "diffs": [first.pk, second.pk]}
    assert [(d.status, d.repair_id) for d in CheckDiff.objects.order_by("id")] == [("FIXING", req.pk)] * 2
    [record] = audits("repair.request")
    assert (record.actor, record.channel, record.target_id, record.params["paramsHash"]) == (
        "requester", "admin", str(req.pk), req.params_hash)
    assert len(audits("diff.fixing", actor="requester")) == 2

    page = client.get(reverse("admin:reconciliation_repairrequest_change", args=[req.pk])).content.decode()
    assert "rq-1" in page and req.params_hash in page and f"?repair_id={req.pk}" in page
    assert client.get(DIFFS_URL, {"repair_id": req.pk}).context["cl"].result_count == 2
    audit_list = client.get("/admin/audit/auditrecord/", {"target_type": "repair", "target_id": req.pk})
    assert audit_list.context["cl"].result_count == 1  # the page's audit link
    assert client.get(DIFFS_URL, {"run__id__exact": run.pk}).context["cl"].result_count == 2  # the run's link
    assert client.get(REPAIRS_URL, {"q": "rq-2"}).context["cl"].result_count == 1
    assert client.get(REPAIRS_URL, {"q": "rq-3"}).context["cl"].result_count == 0


def test_a_repair_of_a_closed_diff_is_refused_with_a_message():
    run = failed_run("closed-1")
    diff = run.diffs.get()
    diffs.diffs_set_status(ids=[diff.pk], to="IGNORED", actor=TEST_ACTOR, reason="known")
    _op, client = logged_in("closed-requester", "likes-operator")
    resp = act(client, DIFFS_URL, "request_repair", [diff], reason="anyway", follow=True)
    assert "Only NEW or FIXING diffs can motivate a repair." in shown_messages(resp)
    assert RepairRequest.objects.count() == 0 and audits("repair.request") == []


def test_the_request_page_requests_a_repair_of_videos_and_shows_it():
    _op, client = logged_in("page-requester", "likes-operator")
    assert REQUEST_URL in client.get(REPAIRS_URL).content.decode()
    assert client.get(REQUEST_URL).status_code == 200
    for data, error in (({"videos": "", "reason": "x"}, "This field is required."),
                        ({"videos": "ok-1\nbad id", "reason": "x"}, "Line 2: videoId must be 1-64 characters"),
                        ({"videos": "ok-1", "reason": "   "}, "This field is required.")):
        resp = client.post(REQUEST_URL, data)
        assert resp.status_code == 200 and error in resp.content.decode(), data
    assert RepairRequest.objects.count() == 0 and AuditRecord.objects.count() == 0

    resp = client.post(REQUEST_URL, {"videos": "pg-2\npg-1\npg-2", "reason": "support ticket 42"})
    req = RepairRequest.objects.get()
    assert resp.status_code == 302 and resp.url == reverse("admin:reconciliation_repairrequest_change", args=[req.pk])
    assert req.params == {"videos": ["pg-1", "pg-2"], "source": "facts", "reason": "support ticket 42", "diffs": []}
    assert (req.requested_by, req.status) == ("page-requester", "AWAITING_APPROVAL")
    [record] = audits("repair.request")
    assert (record.actor, record.channel, record.target_id) == ("page-requester", "admin", str(req.pk))


# --- approval ----------------------------------------------------------------------------------


def test_an_operator_can_request_but_not_approve():
    op, client = logged_in("op-no-approve", "likes-operator")
    req = requested(op, "na-1")
    other = requested(make_user("someone-else"), "na-2")
    page = client.get(reverse("admin:reconciliation_repairrequest_change", args=[other.pk])).content.decode()
    assert "repair-approve-form" not in page
    assert 'value="approve"' not in client.get(REPAIRS_URL).content.decode()
    for r in (req, other):
        assert client.post(approve_url(r)).status_code == 403
    assert act(client, REPAIRS_URL, "approve", [req, other]).status_code == 200  # no such action for them
    assert [r.status for r in RepairRequest.objects.order_by("id")] == ["AWAITING_APPROVAL"] * 2
    assert OpsJob.objects.count() == 0 and audits("repair.approve") == []


def test_an_approver_approves_another_operators_request_and_the_system_job_starts():
    op = make_user("maker")
    req = requested(op, "ap-1")
    _approver, client = logged_in("checker", "likes-approver")
    page = client.get(reverse("admin:reconciliation_repairrequest_change", args=[req.pk])).content.decode()
    assert "repair-approve-form" in page and "repair-own" not in page

    assert client.get(approve_url(req)).status_code == 405  # only a POST approves
    resp = client.post(approve_url(req), follow=True)
    req.refresh_from_db()
    assert resp.redirect_chain == [(reverse("admin:reconciliation_repairrequest_change", args=[req.pk]), 302)]
    assert (req.status, req.approved_by, req.approved_hash) == ("APPROVED", "checker", req.params_hash)
    job = OpsJob.objects.get()
    assert (job.pk, job.kind, job.actor, job.params) == (req.job_id, "reconcile.repair", "repair-executor",
                                                         {"repairId": req.pk})
    [message] = shown_messages(resp)
    assert message.startswith(f"Approved repair {req.pk}") and f"job {job.pk}" in message
    assert "repair-approve-form" not in resp.content.decode()  # approved: no button any more
    assert 'http-equiv="refresh"' in resp.content.decode()  # the page follows the job
    [record] = audits("repair.approve")
    assert (record.actor, record.channel, record.target_id, record.outcome, record.params) == (
        "checker", "admin", str(req.pk), "applied", {"paramsHash": req.params_hash})

    again = client.post(approve_url(req), follow=True)
    assert any("repair_not_awaiting_approval" in m for m in shown_messages(again))
    assert OpsJob.objects.count() == 1 and len(audits("repair.approve")) == 1


@pytest.mark.parametrize("superuser", [True, False])
def test_the_requester_cannot_approve_their_own_repair(superuser):
    groups = () if superuser else ("likes-operator", "likes-approver")
    me, client = logged_in("self-approver", *groups, superuser=superuser)
    assert client.post(REQUEST_URL, {"videos": "own-1", "reason": "mine"}).status_code == 302
    req = RepairRequest.objects.get()
    page = client.get(reverse("admin:reconciliation_repairrequest_change", args=[req.pk])).content.decode()
    assert "repair-approve-form" in page and "repair-own" in page  # offered, with the warning

    resp = client.post(approve_url(req), follow=True)
    assert resp.status_code == 200
    [message] = shown_messages(resp)
    assert message == (f"Repair {req.pk} was not approved (self_approval): The requester of a repair cannot approve "
                       "it; another operator must.")
    resp = act(client, REPAIRS_URL, "approve", [req], follow=True)  # the changelist action: the same refusal
    assert any("(self_approval)" in m for m in shown_messages(resp))

    req.refresh_from_db()
    assert (req.status, req.approved_by, req.approved_hash, req.approved_at, req.job_id) == (
        "AWAITING_APPROVAL", "", "", None, None)
    assert OpsJob.objects.count() == 0
    refusals = audits("repair.approve")
    assert [(r.actor, r.channel, r.target_id, r.outcome, r.params) for r in refusals] == [
        (me.username, "admin", str(req.pk), "refused", {"reason": "self_approval"})] * 2


def test_the_approve_action_approves_others_and_refuses_own_requests_one_by_one():
    me, client = logged_in("mixed-approver", "likes-operator", "likes-approver")
    own = requested(me, "mx-1")
    theirs = requested(make_user("mx-other"), "mx-2")
    assert 'value="approve"' in client.get(REPAIRS_URL).content.decode()
    resp = act(client, REPAIRS_URL, "approve", [own, theirs], follow=True)
    notes = shown_messages(resp)
    assert len(notes) == 2 and "(self_approval)" in notes[0] and notes[1].startswith(f"Approved repair {theirs.pk}")
    assert [(r.pk, r.status) for r in RepairRequest.objects.order_by("id")] == [
        (own.pk, "AWAITING_APPROVAL"), (theirs.pk, "APPROVED")]
    assert [(r.target_id, r.outcome) for r in audits("repair.approve")] == [
        (str(own.pk), "refused"), (str(theirs.pk), "applied")]


def test_approving_a_repair_that_does_not_exist_is_a_message_not_a_500():
    _approver, client = logged_in("ghost-approver", "likes-approver")
    resp = client.post(reverse("admin:reconciliation_repair_approve", args=[99999]), follow=True)
    assert resp.status_code == 200
    assert any(re.search(r"Repair 99999 was not approved \(repair_not_found\)", m) for m in shown_messages(resp))
    assert OpsJob.objects.count() == 0 and AuditRecord.objects.count() == 0
