"""A ring's likes hidden and restored in a real browser (issue 14 §4; the fixtures of tests/browser.py):
operator A requests hiding a ring of accounts on a video from the risk ledger's "Request a risk hide"
page; approver B approves it on the decision's page; the system's job applies it (run here, as a worker
would) and the displayed count drops by the ring; A requests the restore, B approves it, and the count is
back. Each page is checked against the ledger and the display snapshot; docs/console/risk-ring.png is
the decision's page with the ring hidden."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from counting.risk.models import RiskDecision
from likes_project.opsjobs.services import job_run_inline
from tests.browser import approve_here, console_user, field, page_as, path_is, submit_for_new_row
from tests.counting.test_risk import ring_video
from tests.reconciliation.helpers import LIVE_STORES, displayed

pytestmark = [pytest.mark.topology_independent, *LIVE_STORES]

LEDGER_URL = "/admin/risk/riskdecision/"
REQUEST_URL = "/admin/risk/riskdecision/request/"
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"


def test_an_operator_hides_a_ring_another_approves_and_the_restore_brings_the_count_back(open_page, make_user,
                                                                                        make_video):
    _author, _honest, ring = ring_video(make_user, make_video, "rkb-ring", honest=4, ring=3)
    assert displayed("rkb-ring") == 7
    a = console_user("br-risk-a", "likes-operator")
    b = console_user("br-risk-b", "likes-approver")

    # --- A requests the hide: the decision's page follows, waiting for approval ------------------------
    page_a = page_as(open_page, a.username, next_path=LEDGER_URL)
    page_a.locator(".object-tools a", has_text="Request a risk hide").click()
    page_a.wait_for_url(path_is(REQUEST_URL))
    page_a.locator("#id_video").fill("rkb-ring")
    page_a.locator("#id_users").fill("\n".join(u.username for u in ring))
    page_a.locator("#id_reason").fill("a ring of fake accounts")
    page_a.locator("#id_evidence").fill("one device fingerprint, accounts created within a minute")
    hide, hide_path = submit_for_new_row(page_a, "Request the hide", RiskDecision)
    expect(page_a.locator(".messagelist .success")).to_contain_text(f"Requested risk decision {hide.pk}: hide 3 users")
    expect(field(page_a, "status_code")).to_have_text("AWAITING_APPROVAL")
    expect(page_a.locator("#risk-approve-form")).to_have_count(0)  # an operator does not approve
    assert (hide.requested_by, hide.status) == (a.username, "AWAITING_APPROVAL")

    # --- B approves it; the system's job applies it; the count drops by the ring ------------------------
    page_b = page_as(open_page, b.username, next_path=hide_path)
    approve_here(page_b, "risk-approve-form")
    expect(page_b.locator(".messagelist .success")).to_contain_text(f"Approved risk decision {hide.pk}")
    hide.refresh_from_db()
    assert (hide.status, hide.approved_by) == ("APPROVED", b.username)
    job_run_inline(hide.job_id)
    assert displayed("rkb-ring") == 4
    page_b.goto(page_b.url)
    expect(field(page_b, "status_code")).to_have_text("APPLIED")
    expect(field(page_b, "hidden_now")).to_have_text("3")
    expect(page_b.locator(".risk-display")).to_have_text("7 - 3 - 0 = 4")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page_b.screenshot(path=str(SHOTS / "risk-ring.png"), full_page=True)

    # --- A requests the restore, B approves it; the count is back ---------------------------------------
    page_a.goto(page_a.url)
    page_a.locator(".object-tools a.risk-restore").click()
    page_a.locator("#id_reason").fill("appeal accepted")
    restore, restore_path = submit_for_new_row(page_a, "Request the restore", RiskDecision, kind="RESTORE")
    page_b.goto(f"{page_b.url.split('/admin/')[0]}{restore_path}")
    approve_here(page_b, "risk-approve-form")
    restore.refresh_from_db()
    job_run_inline(restore.job_id)
    assert displayed("rkb-ring") == 7
    page_b.goto(page_b.url.replace(restore_path, hide_path))
    expect(field(page_b, "status_code")).to_have_text("RESTORED")
    expect(page_b.locator(".risk-display")).to_have_text("7 - 0 - 0 = 7")
