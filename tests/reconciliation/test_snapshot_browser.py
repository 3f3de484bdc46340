"""A restore from a recovery snapshot, in a real browser (D56; the fixtures of tests/browser.py): operator
A takes a snapshot from the console, which starts its job and shows the job's page; the job runs (here, in
the test process, as a worker would); A sees the snapshot SEALED with its whole offset vector. The
projection is then damaged by hand; A requests a restore from the snapshot's page; B approves it; the
system's repair job runs and B sees it SUCCEEDED, the damaged relation back. What each one sees is
checked against the databases."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from counting import routing as count_routing
from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline
from reconciliation.models import CheckRun, RecoverySnapshot, RepairRequest
from tests.browser import approve_here, console_user, field, page_as, path_is, submit, submit_for_new_row
from tests.factories import make_user, make_video
from tests.reconciliation.helpers import LIVE_STORES, liked_video, projection_delete, projection_rows

pytestmark = [pytest.mark.topology_independent, *LIVE_STORES]

SNAPSHOTS_URL = "/admin/reconciliation/recoverysnapshot/"
REPAIRS_URL = "/admin/reconciliation/repairrequest/"
VIDEO = "br-snap-1"
LIKES = 3


def test_an_operator_takes_a_snapshot_and_restores_from_it_with_a_second_operators_approval(open_page):
    _video, likers = liked_video(make_user, make_video, VIDEO, LIKES)
    a = console_user("br-snap-a", "likes-operator")
    b = console_user("br-snap-b", "likes-approver")

    # --- A takes a snapshot: the page starts its job and shows it; nothing is built in the request ------
    page_a = page_as(open_page, a.username, next_path=SNAPSHOTS_URL)
    page_a.locator(".object-tools a", has_text="Take a snapshot").click()
    page_a.wait_for_url(path_is(f"{SNAPSHOTS_URL}take/"))
    page_a.locator("#id_reason").fill("before the partition maintenance")
    submit(page_a, "Take the snapshot")
    job = OpsJob.objects.get(kind="recovery.snapshot")
    page_a.wait_for_url(path_is(f"/admin/opsjobs/opsjob/{job.pk}/change/"))
    expect(page_a.locator(".messagelist")).to_contain_text(f"Started job {job.pk} (recovery.snapshot)")
    snap = RecoverySnapshot.objects.get()
    assert (snap.status, snap.offsets, snap.artifacts, job.status) == ("BUILDING", [], [], "QUEUED")

    # --- the job runs (a worker's, run here); A's snapshot page shows it SEALED, with its vector ------------
    job = job_run_inline(job.pk)
    assert job.status == "SUCCEEDED", job.last_error
    snap.refresh_from_db()
    assert snap.status == "SEALED", snap.failure
    snapshot_path = f"{SNAPSHOTS_URL}{snap.pk}/change/"
    page_a.goto(SNAPSHOTS_URL)
    page_a.locator("#result_list a", has_text=str(snap.pk)).first.click()
    page_a.wait_for_url(path_is(snapshot_path))
    expect(field(page_a, "status_code")).to_have_text("SEALED")
    vector = page_a.locator("table.snapshot-offsets tr.snapshot-offsets-row")
    expect(vector).to_have_count(len(streams.all_partitions()))  # every partition, untouched ones too
    for row, offset in zip(vector.all(), snap.offsets, strict=True):
        expect(row).to_contain_text(offset["nextOffset"])
    expect(page_a.locator("table.snapshot-artifacts tr.snapshot-artifacts-row")).to_have_count(len(snap.artifacts))
    expect(page_a.locator("#snapshot-verify-form")).to_be_visible()

    # --- the projection is damaged after the snapshot: a LIKED relation lost -------------------------------
    old = count_routing.load_generation()
    projection_delete(likers[0].pk, VIDEO)
    assert likers[0].pk not in projection_rows(VIDEO)

    # --- A requests a restore from the snapshot's page -----------------------------------------------------
    page_a.locator("a.snapshot-restore").click()
    page_a.wait_for_url(path_is(f"{REPAIRS_URL}request/"))
    expect(page_a.locator(f"input[name=source][value='snapshot:{snap.pk}']")).to_be_checked()
    page_a.locator("#id_reason").fill("a LIKED relation lost from the projection")
    req, repair_path = submit_for_new_row(page_a, "Request the repair", RepairRequest)
    expect(page_a.locator(".messagelist")).to_contain_text(f"of the whole projection from snapshot:{snap.pk}")
    expect(field(page_a, "status_code")).to_have_text("AWAITING_APPROVAL")
    expect(field(page_a, "source")).to_have_text(f"snapshot:{snap.pk}")
    assert (req.params["source"], req.params["videos"], req.requested_by) == (f"snapshot:{snap.pk}", [], a.username)

    # --- B approves it; the system runs it; B's page follows it to SUCCEEDED --------------------------------
    page_b = page_as(open_page, b.username, next_path=repair_path)
    approve_here(page_b, "repair-approve-form")
    expect(page_b.locator(".messagelist .success")).to_contain_text(f"Approved repair {req.pk}")
    req.refresh_from_db()
    assert (req.status, req.approved_by) == ("APPROVED", b.username)
    job = job_run_inline(req.job_id)
    assert job.status == "SUCCEEDED", job.last_error
    req.refresh_from_db()
    assert req.status == "SUCCEEDED", (req.error, req.result)
    page_b.reload()
    expect(field(page_b, "status_code")).to_have_text("SUCCEEDED")
    totals = page_b.locator("table.repair-before-after tr.repair-total")
    expect(totals.filter(has_text="generation")).to_have_text(
        re.compile(rf"generation\s*{old.generation}\s*{req.result['generation']}"))
    expect(totals.filter(has_text="LIKED relations")).to_have_text(
        re.compile(rf"LIKED relations\s*{LIKES - 1}\s*{LIKES}"))  # the damaged generation, then the restored one

    # the relation is back in a new generation, as the exact check after the restore proved
    new = count_routing.load_generation()
    assert new.generation == req.result["generation"] != old.generation
    assert likers[0].pk in projection_rows(VIDEO) and len(projection_rows(VIDEO)) == LIKES
    verify = CheckRun.objects.get(pk=req.verify_run_id)
    assert (verify.mode, verify.kind, verify.status) == ("exact", "after_repair", "PASSED")

    snapshot_actions = list(AuditRecord.objects.filter(target_type="recovery_snapshot", target_id=str(snap.pk))
                            .order_by("id").values_list("action", "actor"))
    assert snapshot_actions == [("snapshot.create", a.username), ("snapshot.finish", a.username)]
    actions = list(AuditRecord.objects.filter(target_type="repair", target_id=str(req.pk)).order_by("id")
                   .values_list("action", "actor", "outcome"))
    assert actions == [("repair.request", a.username, "applied"), ("repair.approve", b.username, "applied"),
                       ("repair.execute", "repair-executor", "succeeded")]
