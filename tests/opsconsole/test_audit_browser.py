"""The audit chain's console page in a real browser (D56, D82; the fixtures of tests/browser.py): an operator
starts a verification, which is an ops job (run here as the workers run it), and sees the chain verified
up to the head; after a row is edited in SQL, as an attacker holding the database's superuser would, the
next verification shows it BROKEN at that row's seq. The last page is saved as docs/console/audit-chain.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connections, transaction
from playwright.sync_api import expect

from likes_project.audit.jobs import VERIFY_JOB
from likes_project.audit.models import AuditChainVerification, AuditRecord
from likes_project.audit.services import audit_record, chain_checkpoint_write
from likes_project.opsjobs.models import OpsJob
from tests.browser import console_user, page_as, path_is
from tests.factories import TEST_ACTOR, run_jobs
from tests.reconciliation.helpers import LIVE_STORES

pytestmark = [pytest.mark.topology_independent, *LIVE_STORES]

CHAIN_URL = "/admin/audit/auditrecord/chain/"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "console" / "audit-chain.png"
TABLE = AuditRecord._meta.db_table


def start_verification(page) -> OpsJob:
    """Press "Verify the chain": the job's page follows; the job is then run as the workers run it."""
    page.locator("#chain-verify-form input[type=submit]").click()
    job = OpsJob.objects.filter(kind=VERIFY_JOB).latest("id")
    page.wait_for_url(path_is(f"/admin/opsjobs/opsjob/{job.pk}/change/"))
    expect(page.locator(".messagelist .success")).to_contain_text(f"Started job {job.pk} ({VERIFY_JOB})")
    assert job.status == "QUEUED"  # nothing was verified inside the request
    run_jobs()
    job.refresh_from_db()
    assert job.status == "SUCCEEDED", job.last_error
    return job


def test_an_operator_verifies_the_chain_and_sees_an_edited_row(open_page):
    for n in range(4):
        with transaction.atomic(using="default"):
            audit_record(actor=TEST_ACTOR, action="test.browser", target_type="test", target_id=f"b-{n}",
                         params={"n": n})
    checkpoint = chain_checkpoint_write()
    op = console_user("br-audit-op", "likes-operator")
    viewer = console_user("br-audit-viewer", "likes-viewer")

    # a viewer sees the state, without the form
    page_v = page_as(open_page, viewer.username, next_path=CHAIN_URL)
    expect(page_v.locator("#chain-verdict")).to_have_text("Never verified.")
    expect(page_v.locator("#chain-verify-form")).to_have_count(0)

    page = page_as(open_page, op.username, next_path=CHAIN_URL)
    expect(page.locator("#chain-head")).to_contain_text(f"seq {checkpoint.seq}")
    expect(page.locator("#chain-head")).to_contain_text(f"{checkpoint.pk}: seq {checkpoint.seq}")

    job = start_verification(page)
    verification = AuditChainVerification.objects.get(job_id=job.pk)
    assert (verification.status, verification.checkpoint_id) == ("INTACT", checkpoint.pk)
    page.goto(CHAIN_URL)
    expect(page.locator("#chain-verdict")).to_contain_text("Chain verified")
    expect(page.locator("#chain-verdict")).to_contain_text(f"up to seq {verification.head_seq}")
    expect(page.locator("#chain-verification")).to_contain_text(f"by {op.username} (admin)")

    # the attacker: the append-only trigger off, one row's params changed, the trigger on again
    victim = AuditRecord.objects.get(action="test.browser", target_id="b-2")
    with connections["default"].cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER pgtrigger_audit_append_only_ecc7d")
        cursor.execute(f"UPDATE {TABLE} SET params = '{{\"n\": 99}}' WHERE id = %s", [victim.pk])
        cursor.execute(f"ALTER TABLE {TABLE} ENABLE TRIGGER pgtrigger_audit_append_only_ecc7d")

    job = start_verification(page)
    assert AuditChainVerification.objects.get(job_id=job.pk).broken_seq == victim.seq
    page.goto(CHAIN_URL)
    expect(page.locator("#chain-verdict")).to_contain_text(f"BROKEN at seq {victim.seq}")
    expect(page.locator("#chain-verdict")).to_contain_text("row_changed")
    # the viewer sees it too
    page_v.goto(CHAIN_URL)
    expect(page_v.locator("#chain-verdict")).to_contain_text(f"BROKEN at seq {victim.seq}")
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 0
