"""A virtual-bucket migration planned and approved in a real browser (D56; the fixtures of tests/browser.py):
operator A plans moving buckets 0-3 onto cnt_02 (the test databases' third count partition, which the
bootstrap routes left empty) from the console's "Plan a migration" page and lands on the new ledger row,
AWAITING_APPROVAL; approver B opens that row and approves it; B sees it PREPARE, with the system's job
started. The job is not run (the protocol is tested on its own): what each one sees is checked against
the ledger and the audit log."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from counting import routing
from counting.models import BucketMigration
from counting.services.migration import ledger
from likes_project.audit.models import AuditRecord
from likes_project.opsjobs.models import OpsJob
from tests.browser import approve_here, console_user, field, page_as, path_is, submit_for_new_row
from tests.reconciliation.helpers import LIVE_STORES

pytestmark = [pytest.mark.topology_independent, *LIVE_STORES]

LEDGER_URL = "/admin/counting/bucketmigration/"
PLAN_URL = "/admin/counting/bucketmigration/plan/"
TARGET = "cnt_02"


def test_an_operator_plans_a_migration_and_another_operator_approves_it(open_page):
    gen = routing.active()
    assert gen.buckets_on(TARGET) == [] and {gen.routes[vb].partition for vb in range(4)} <= {"cnt_00", "cnt_01"}
    a = console_user("br-mig-a", "likes-operator")
    b = console_user("br-mig-b", "likes-approver")

    # --- A plans it from the console: the ledger row's page follows, waiting for approval -------------
    page_a = page_as(open_page, a.username, next_path=LEDGER_URL)
    page_a.locator(".object-tools a", has_text="Plan a migration").click()
    page_a.wait_for_url(path_is(PLAN_URL))
    page_a.locator("#id_target").select_option(TARGET)
    page_a.locator("#id_buckets").fill("0-3")
    page_a.locator("#id_reason").fill("scale out onto cnt_02")
    m, row_path = submit_for_new_row(page_a, "Plan the migration", BucketMigration)
    expect(page_a.locator(".messagelist .success")).to_contain_text(f"Planned migration {m.pk}: buckets 0-3 (4)")
    expect(field(page_a, "state_code")).to_have_text("AWAITING_APPROVAL")
    expect(field(page_a, "bucket_range")).to_have_text("0-3")
    expect(page_a.locator("#migration-approve-form")).to_have_count(0)  # an operator does not approve
    assert (m.state, m.buckets, m.target_partition, m.requested_by) == ("AWAITING_APPROVAL", [0, 1, 2, 3], TARGET,
                                                                        a.username)
    assert not OpsJob.objects.exists()

    # --- B approves it: PREPARE, and the system's job is started (not run here) ------------------------
    page_b = page_as(open_page, b.username, next_path=row_path)
    expect(field(page_b, "state_code")).to_have_text("AWAITING_APPROVAL")
    approve_here(page_b, "migration-approve-form")
    expect(page_b.locator(".messagelist .success")).to_contain_text(f"Approved migration {m.pk}: it is PREPARE")
    expect(field(page_b, "state_code")).to_have_text("PREPARE")
    expect(field(page_b, "approved_by")).to_have_text(b.username)
    m.refresh_from_db()
    job = OpsJob.objects.get()
    assert (m.state, m.approved_by, m.job_id) == ("PREPARE", b.username, job.pk)
    assert (job.kind, job.params, job.status) == (ledger.MIGRATION_JOB, {"migrationId": m.pk}, "QUEUED")

    # and the ledger lists it so
    page_b.goto(LEDGER_URL)
    expect(page_b.locator("#result_list tbody tr")).to_have_count(1)
    expect(page_b.locator("#result_list .state-code")).to_have_text("PREPARE")

    actions = list(AuditRecord.objects.filter(target_type="bucket_migration", target_id=str(m.pk)).order_by("id")
                   .values_list("action", "actor", "channel"))
    assert actions == [("bucket_migration.plan", a.username, "admin"),
                       ("bucket_migration.prepare", b.username, "admin")]
