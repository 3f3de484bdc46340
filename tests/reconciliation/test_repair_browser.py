"""A repair with maker-checker approval, in a real browser (D56; the fixtures of tests/browser.py):
a video's bucket is damaged by hand, an identity check finds it; operator A finds the diff, requests
a repair of it from the facts with a reason, and is refused when approving it; operator B approves;
the system's repair job runs (here, in the test process, as a worker would) and B sees it SUCCEEDED,
with the count equal to the facts again. What each one sees is checked against the databases."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from counting import selectors
from likes_project.audit.models import AuditRecord
from likes_project.opsjobs.services import job_run_inline
from reconciliation.models import CheckDiff, CheckRun, RepairRequest
from tests.browser import console_user, field, page_as, path_is, submit
from tests.factories import make_user, make_video
from tests.reconciliation.helpers import bucket_add, liked_video, run_check

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
DIFFS_URL = "/admin/reconciliation/checkdiff/"
REPAIRS_URL = "/admin/reconciliation/repairrequest/"
VIDEO = "br-rep-1"
LIKES = 4


def routed_sum(video_id: str) -> int:
    return selectors.video_vbuckets_get(video_id=video_id).routed_sum


def test_a_damaged_count_is_repaired_from_the_facts_with_a_second_operators_approval(open_page):
    _video, likers = liked_video(make_user, make_video, VIDEO, LIKES)
    liked_video(make_user, make_video, "br-rep-healthy", 2)
    bucket_add(likers[0].pk, VIDEO, 3)  # damage: +3 on one bucket (the projection and the facts still say LIKES)
    assert routed_sum(VIDEO) == LIKES + 3
    run = run_check("identity", videos=[VIDEO, "br-rep-healthy"])
    assert run.status == "FAILED"
    [diff] = run.diffs.filter(layer="buckets")
    assert (diff.video_id, diff.actual - diff.expected, diff.status) == (VIDEO, 3, "NEW")

    a = console_user("br-op-a", "likes-operator", "likes-approver")  # may approve, just not their own request
    b = console_user("br-op-b", "likes-approver")

    # --- A finds the diff and requests a repair of it, with a reason -------------------------------
    page_a = page_as(open_page, a.username, next_path=DIFFS_URL)
    page_a.locator("#searchbar").fill(VIDEO)
    page_a.locator("#changelist-search input[type=submit]").click()
    buckets_layer = page_a.locator("td.field-layer", has_text="buckets vs projection")
    row = page_a.locator("#result_list tbody tr", has=buckets_layer)
    expect(row).to_have_count(1)
    expect(row.locator(".status-code")).to_have_text("NEW")
    row.locator("input[name=_selected_action]").check()
    page_a.locator("select[name=action]").select_option("request_repair")
    page_a.locator("button[name=index]").click()
    expect(page_a.locator("h1")).to_have_text("Request a repair from the facts")
    expect(page_a.locator("ul.reason-action-objects li")).to_contain_text(VIDEO)
    assert RepairRequest.objects.count() == 0  # asking is not doing
    page_a.locator("#id_reason").fill("bucket +3 found by the identity check")
    submit(page_a, "Request repair")
    page_a.wait_for_url(path_is(DIFFS_URL))
    expect(page_a.locator(".messagelist")).to_contain_text("it waits for another operator's approval")

    req = RepairRequest.objects.get()
    assert (req.status, req.requested_by, req.params["videos"], req.params["diffs"]) == (
        "AWAITING_APPROVAL", a.username, [VIDEO], [diff.pk])
    assert CheckDiff.objects.get(pk=diff.pk).status == "FIXING"

    repair_path = f"{REPAIRS_URL}{req.pk}/change/"
    page_a.locator(".messagelist a.repair-requested").click()
    page_a.wait_for_url(path_is(repair_path))
    expect(field(page_a, "status_code")).to_have_text("AWAITING_APPROVAL")
    expect(field(page_a, "params_hash")).to_have_text(req.params_hash)
    expect(page_a.locator(".repair-own")).to_be_visible()

    # --- A's own approval is refused; nothing changes ------------------------------------------------
    page_a.locator("#repair-approve-form input[type=submit]").click()
    page_a.wait_for_url(path_is(repair_path))
    expect(page_a.locator(".messagelist .error")).to_contain_text(
        "(self_approval): The requester of a repair cannot approve it; another operator must.")
    expect(field(page_a, "status_code")).to_have_text("AWAITING_APPROVAL")
    req.refresh_from_db()
    assert (req.status, req.approved_by, req.job_id) == ("AWAITING_APPROVAL", "", None)
    assert routed_sum(VIDEO) == LIKES + 3

    # --- B approves it ---------------------------------------------------------------------------
    page_b = page_as(open_page, b.username, next_path=REPAIRS_URL)
    page_b.locator("#result_list a", has_text=str(req.pk)).first.click()
    page_b.wait_for_url(path_is(repair_path))
    expect(page_b.locator(".repair-own")).to_have_count(0)
    page_b.locator("#repair-approve-form input[type=submit]").click()
    page_b.wait_for_url(path_is(repair_path))
    expect(page_b.locator(".messagelist .success")).to_contain_text(f"Approved repair {req.pk}")
    expect(field(page_b, "status_code")).to_have_text("APPROVED")
    expect(field(page_b, "approved_by")).to_have_text(b.username)
    expect(page_b.locator("#repair-approve-form")).to_have_count(0)
    req.refresh_from_db()
    assert (req.status, req.approved_by, req.approved_hash) == ("APPROVED", b.username, req.params_hash)

    # --- the system runs it (a worker's job, run here); B's page follows it to SUCCEEDED ----------------
    job = job_run_inline(req.job_id)
    assert job.status == "SUCCEEDED", job.last_error
    req.refresh_from_db()
    assert req.status == "SUCCEEDED", req.error
    expect(field(page_b, "status_code")).to_have_text("SUCCEEDED")  # on the page's own refresh
    page_b.reload()
    expect(field(page_b, "status_code")).to_have_text("SUCCEEDED")
    expect(page_b.locator("meta[http-equiv=refresh]")).to_have_count(0)
    layers = page_b.locator("table.repair-before-after tr.repair-layer")
    expect(layers.filter(has_text="buckets")).to_have_text(re.compile(rf"{VIDEO}\s*buckets\s*{LIKES + 3}\s*{LIKES}"))
    expect(layers.filter(has_text="facts")).to_have_text(re.compile(rf"{VIDEO}\s*facts\s*{LIKES}\s*{LIKES}"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    page_b.screenshot(path=str(SHOTS / "repair.png"), full_page=True)  # the flow's last page (issue 14 §7)

    # the count equals the facts, as the exact check after the repair proved
    assert routed_sum(VIDEO) == LIKES
    assert req.after[VIDEO]["buckets"] == req.after[VIDEO]["facts"] == req.after[VIDEO]["projection"] == LIKES
    verify = CheckRun.objects.get(pk=req.verify_run_id)
    assert (verify.mode, verify.kind, verify.status, verify.repair_id) == ("exact", "after_repair", "PASSED", req.pk)
    page_b.locator(".field-verify_link a").click()
    page_b.wait_for_url(path_is(f"/admin/reconciliation/checkrun/{verify.pk}/change/"))
    expect(field(page_b, "status_code")).to_have_text("PASSED")
    assert CheckDiff.objects.get(pk=diff.pk).status == "FIXED"

    actions = list(AuditRecord.objects.filter(target_type="repair", target_id=str(req.pk)).order_by("id")
                   .values_list("action", "actor", "outcome"))
    assert actions == [("repair.request", a.username, "applied"), ("repair.approve", a.username, "refused"),
                       ("repair.approve", b.username, "applied"), ("repair.execute", "repair-executor", "succeeded")]

