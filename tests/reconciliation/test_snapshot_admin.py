"""The console's side of issue 12: recovery snapshots in the admin (read-only), the "Take a snapshot" page
and the Verify / Test-restore buttons and actions, each starting its ops job and never building in the
request, refused (403, or not offered) without `reconciliation.create_snapshot`; and the repair request
page's choice between the facts and a SEALED snapshot, whose bad input is a form error.

The snapshots here are rows written by hand (a SEALED one with a vector and artifacts) or made by the
snapshot job's create step; a snapshot built for real, restored and approved is
tests/reconciliation/test_snapshot_browser.py."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import reverse

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import admin_actor
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline
from reconciliation.admin import RecoverySnapshotAdmin
from reconciliation.models import RecoverySnapshot, RepairRequest
from reconciliation.services import repair
from tests.reconciliation.helpers import assert_read_only, audits, logged_in, shown_messages

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

SNAPSHOTS_URL = "/admin/reconciliation/recoverysnapshot/"
TAKE_URL = "/admin/reconciliation/recoverysnapshot/take/"
REQUEST_URL = "/admin/reconciliation/repairrequest/request/"
SHA = "ab" * 32


# --- helpers -----------------------------------------------------------------------------------


def snapshot_row(status: str = "SEALED", **fields) -> RecoverySnapshot:
    """A snapshot row as a finished build leaves it: two stream partitions in its vector (one never
    consumed), both artifacts of one count partition."""
    defaults = dict(
        status=status, reason="tests", started_by="tests-operator", channel="cli", generation=3,
        bucket_space_version=1, manifest_id=7, stream_contract_version=1, dispatch_paused_ms=12.345,
        offsets=[{"topic": "likes", "partition": 0, "through": "1700000000000-4", "nextOffset": "1700000000000-5",
                  "streamAdded": 9},
                 {"topic": "likes", "partition": 1, "through": "0-0", "nextOffset": "0-1", "streamAdded": 0}],
        artifacts=[{"kind": "projection", "partition": "count_p0", "uri": "file://snapshot-000001/projection.gz",
                    "rows": 40, "sha256": SHA, "bytes": 1234},
                   {"kind": "vbuckets", "partition": "count_p0", "uri": "file://snapshot-000001/vbuckets.gz",
                    "rows": 6, "sha256": "cd" * 32, "bytes": 321}],
        timings={"cutMs": 20.5, "dumpMs": 100.25, "totalMs": 150.0},
    )
    if status == "FAILED":
        defaults.update(offsets=[], artifacts=[], failure="aborted: a lease changed hands")
    return RecoverySnapshot.objects.create(**{**defaults, **fields})


URL_NAMES = {"change": "reconciliation_recoverysnapshot_change", "verify": "reconciliation_snapshot_verify",
             "drill": "reconciliation_snapshot_test_restore", "job": "opsjobs_opsjob_change"}


def page_url(page: str, pk: int) -> str:
    """The console URL of a snapshot's change page, verify or drill (test-restore) form, or of a job's page."""
    return reverse(f"admin:{URL_NAMES[page]}", args=[pk])


def act(client, action: str, snaps, **extra):
    return client.post(SNAPSHOTS_URL, {"action": action, "_selected_action": [s.pk for s in snaps]}, **extra)


# --- the table ---------------------------------------------------------------------------------


def test_snapshots_are_on_the_console_site_and_read_only_even_for_a_superuser():
    assert isinstance(admin.site.get_model_admin(RecoverySnapshot), RecoverySnapshotAdmin)
    snap = snapshot_row()
    _su, client = logged_in("snap-super", superuser=True)
    assert_read_only(client, snap, {"status": "FAILED"})
    assert RecoverySnapshot.objects.get(pk=snap.pk).status == "SEALED"


def test_a_viewer_sees_the_snapshots_vector_and_artifacts_and_cannot_act():
    sealed = snapshot_row(test_result={"ok": True, "snapshotId": 1}, tested_at="2026-01-01T00:00:00Z")
    failed = snapshot_row("FAILED")
    _viewer, client = logged_in("snap-viewer", "likes-viewer")

    listing = client.get(SNAPSHOTS_URL)
    assert listing.status_code == 200 and listing.context["cl"].result_count == 2
    text = listing.content.decode()
    assert "12.3 ms" in text and "40 relations, 6 buckets" in text  # dispatch pause, rows
    assert '<span class="test-verdict">ok</span>' in text and "never" in text  # the drill's verdict
    assert TAKE_URL not in text and TAKE_URL not in client.get("/admin/").content.decode()
    assert not any(f'value="{a}"' in text for a in ("verify", "test_restore"))
    assert client.get(SNAPSHOTS_URL, {"status__exact": "FAILED"}).context["cl"].result_count == 1

    page = client.get(page_url("change", sealed.pk)).content.decode()
    assert page.count('class="snapshot-offsets-row"') == 2  # the whole vector, the untouched partition too
    assert "1700000000000-5" in page and "0-1" in page
    assert page.count('class="snapshot-artifacts-row"') == 2 and SHA in page and "1234" in page
    assert "snapshot-timings" in page and "dumpMs" in page
    assert f"target_type=recovery_snapshot&amp;target_id={sealed.pk}" in page  # its audit records
    # nothing to press: no Verify / Test-restore buttons, no restore link (a viewer requests no repair)
    assert "snapshot-verify-form" not in page and "snapshot-restore" not in page
    assert "aborted: a lease changed hands" in client.get(page_url("change", failed.pk)).content.decode()

    assert client.get(TAKE_URL).status_code == 403
    assert client.post(TAKE_URL, {"reason": "trying"}).status_code == 403
    assert client.post(page_url("verify", sealed.pk)).status_code == 403
    assert client.post(page_url("drill", sealed.pk)).status_code == 403
    for action in ("verify", "test_restore"):
        resp = act(client, action, [sealed])
        assert resp.status_code == 200, action  # no such action for them: the changelist again
    assert OpsJob.objects.count() == 0 and AuditRecord.objects.count() == 0
    assert RecoverySnapshot.objects.count() == 2


def test_an_approver_alone_cannot_take_verify_or_test_restore():
    snap = snapshot_row()
    _approver, client = logged_in("snap-approver", "likes-approver")
    assert client.get(page_url("change", snap.pk)).status_code == 200  # may look
    assert client.post(TAKE_URL, {"reason": "x"}).status_code == 403
    assert client.post(page_url("verify", snap.pk)).status_code == 403
    assert client.post(page_url("drill", snap.pk)).status_code == 403
    assert OpsJob.objects.count() == 0 and RecoverySnapshot.objects.count() == 1


def test_the_pages_refuse_anonymous_users(client):
    snap = snapshot_row()
    for url in (TAKE_URL, SNAPSHOTS_URL, page_url("change", snap.pk)):
        resp = client.get(url)
        assert resp.status_code == 302 and "/admin/login/" in resp.url
    assert client.post(page_url("verify", snap.pk)).status_code == 302
    assert OpsJob.objects.count() == 0


# --- take a snapshot ---------------------------------------------------------------------------


def test_an_operator_takes_a_snapshot_as_a_job_that_the_request_does_not_run():
    op, client = logged_in("snap-operator", "likes-operator")
    assert TAKE_URL in client.get("/admin/").content.decode()  # listed under Reconciliation
    assert TAKE_URL in client.get(SNAPSHOTS_URL).content.decode()
    form = client.get(TAKE_URL)
    assert form.status_code == 200 and 'name="reason"' in form.content.decode()

    resp = client.post(TAKE_URL, {"reason": "  before the partition migration  "})
    job = OpsJob.objects.get()
    assert resp.status_code == 302 and resp.url == page_url("job", job.pk)
    snap = RecoverySnapshot.objects.get()
    assert (job.kind, job.actor, job.channel, job.status, job.target) == (
        "recovery.snapshot", op.username, "admin", "QUEUED", f"snapshot {snap.pk}")
    assert job.params == {"reason": "before the partition migration", "snapshotId": snap.pk}
    # Started, not built: the row waits for the workers, with no cut, no artifact, no pause recorded.
    assert (snap.status, snap.job_id, snap.started_by, snap.channel, snap.reason) == (
        "BUILDING", job.pk, op.username, "admin", "before the partition migration")
    assert (snap.offsets, snap.artifacts, snap.dispatch_paused_ms, snap.generation) == ([], [], None, None)
    [started] = audits("job.start")
    assert (started.actor, started.channel, started.target_type, started.target_id) == (
        op.username, "admin", "ops_job", str(job.pk))
    [created] = audits("snapshot.create")
    assert (created.actor, created.channel, created.target_type, created.target_id, created.params) == (
        op.username, "admin", "recovery_snapshot", str(snap.pk), {"reason": "before the partition migration"})
    assert audits("snapshot.finish") == []
    assert "Started job" in " ".join(shown_messages(client.get(resp.url)))

    page = client.get(page_url("change", snap.pk)).content.decode()
    assert 'http-equiv="refresh"' in page  # BUILDING: the page follows the build
    assert "snapshot-verify-form" not in page and "snapshot-restore" not in page  # not SEALED yet
    assert f'href="{page_url("job", job.pk)}"' in page  # its job


@pytest.mark.parametrize("data", [{}, {"reason": ""}, {"reason": "   \n "}])
def test_a_snapshot_without_a_reason_is_a_form_error_and_starts_nothing(data):
    _op, client = logged_in("snap-typo", "likes-operator")
    resp = client.post(TAKE_URL, data)
    assert resp.status_code == 200 and not resp.context["form"].is_valid()
    assert resp.context["form"].errors["reason"]
    assert OpsJob.objects.count() == 0 and RecoverySnapshot.objects.count() == 0 and AuditRecord.objects.count() == 0


# --- verify and test-restore -------------------------------------------------------------------


@pytest.mark.parametrize("form, kind", [("verify", "recovery.verify"), ("drill", "recovery.test_restore")])
def test_an_operator_starts_a_verification_or_a_test_restore_as_a_job(form, kind):
    snap = snapshot_row()
    op, client = logged_in("snap-checker", "likes-operator")
    page = client.get(page_url("change", snap.pk)).content.decode()
    assert f'action="{page_url(form, snap.pk)}"' in page and 'http-equiv="refresh"' not in page

    assert client.get(page_url(form, snap.pk)).status_code == 405  # only a POST starts it
    resp = client.post(page_url(form, snap.pk))
    job = OpsJob.objects.get()
    assert resp.status_code == 302 and resp.url == page_url("job", job.pk)
    assert (job.kind, job.actor, job.status, job.params, job.target) == (
        kind, op.username, "QUEUED", {"snapshotId": snap.pk}, f"snapshot {snap.pk}")
    [started] = audits("job.start")
    assert (started.actor, started.channel, started.target_id) == (op.username, "admin", str(job.pk))
    # Not run in the request: no verdict yet, on the snapshot or in the audit log.
    snap.refresh_from_db()
    assert (snap.tested_at, snap.test_result) == (None, {})
    assert AuditRecord.objects.filter(target_type="recovery_snapshot").count() == 0
    page = client.get(page_url("change", snap.pk)).content.decode()
    assert f'href="{page_url("job", job.pk)}"' in page and kind in page  # the snapshot's jobs list it


def test_the_verification_job_records_its_verdict_in_the_audit_log():
    snap = snapshot_row()  # artifacts that do not exist: unusable, with the reasons
    _op, client = logged_in("snap-verifier", "likes-operator")
    client.post(page_url("verify", snap.pk))
    job = job_run_inline(OpsJob.objects.get().pk)
    assert job.status == "SUCCEEDED", job.last_error
    assert job.result["usable"] is False and job.result["problems"]
    [verdict] = audits("snapshot.verify")
    assert (verdict.actor, verdict.channel, verdict.target_id, verdict.outcome) == (
        "snap-verifier", "admin", str(snap.pk), "unusable")


def test_verifying_a_snapshot_that_does_not_exist_is_a_message_not_a_500():
    _op, client = logged_in("snap-ghost", "likes-operator")
    for url in (page_url("verify", 99999), page_url("drill", 99999)):
        resp = client.post(url, follow=True)
        assert resp.status_code == 200
        assert resp.redirect_chain == [(SNAPSHOTS_URL, 302)]
        assert any("No recovery snapshot 99999" in m for m in shown_messages(resp))
    assert OpsJob.objects.count() == 0 and AuditRecord.objects.count() == 0


def test_the_actions_start_one_job_for_one_snapshot_and_refuse_several():
    first, second = snapshot_row(), snapshot_row()
    _op, client = logged_in("snap-actor", "likes-operator")
    listing = client.get(SNAPSHOTS_URL).content.decode()
    assert 'value="verify"' in listing and 'value="test_restore"' in listing

    resp = act(client, "verify", [first, second], follow=True)
    assert any("Select exactly one snapshot" in m for m in shown_messages(resp))
    assert OpsJob.objects.count() == 0

    resp = act(client, "test_restore", [second])
    job = OpsJob.objects.get()
    assert resp.status_code == 302 and resp.url == page_url("job", job.pk)
    assert (job.kind, job.params) == ("recovery.test_restore", {"snapshotId": second.pk})
    assert len(audits("job.start")) == 1


def test_a_snapshot_that_is_not_sealed_offers_no_buttons_and_no_restore():
    failed = snapshot_row("FAILED")
    _op, client = logged_in("snap-failed", "likes-operator")
    page = client.get(page_url("change", failed.pk)).content.decode()
    assert "snapshot-verify-form" not in page and "snapshot-test-restore-form" not in page
    assert "snapshot-restore" not in page
    sealed = snapshot_row()  # counter-example: a SEALED one offers all three
    page = client.get(page_url("change", sealed.pk)).content.decode()
    assert "snapshot-verify-form" in page and "snapshot-test-restore-form" in page
    assert f"{REQUEST_URL}?source=snapshot:{sealed.pk}" in page


# --- a restore is a repair ---------------------------------------------------------------------


def test_restore_from_this_snapshot_opens_the_request_form_with_it_chosen_and_requests_it():
    snap = snapshot_row()
    snapshot_row("FAILED")
    op, client = logged_in("restore-requester", "likes-operator")
    form = client.get(f"{REQUEST_URL}?source=snapshot:{snap.pk}")
    assert form.status_code == 200
    bound = form.context["form"]
    assert [v for v, _label in bound.fields["source"].choices] == ["facts", f"snapshot:{snap.pk}"]  # SEALED only
    assert bound["source"].value() == f"snapshot:{snap.pk}"
    assert re.search(rf'<input[^>]*value="snapshot:{snap.pk}"[^>]*checked', form.content.decode())
    assert client.get(REQUEST_URL).context["form"]["source"].value() == "facts"  # counter-example: the default

    resp = client.post(REQUEST_URL, {"source": f"snapshot:{snap.pk}", "videos": "", "reason": "partition 0 lost"})
    req = RepairRequest.objects.get()
    assert resp.status_code == 302 and resp.url == reverse("admin:reconciliation_repairrequest_change", args=[req.pk])
    assert req.params == {"videos": [], "source": f"snapshot:{snap.pk}", "reason": "partition 0 lost", "diffs": []}
    assert (req.status, req.requested_by) == ("AWAITING_APPROVAL", op.username)
    [record] = audits("repair.request")
    assert (record.actor, record.channel, record.target_id) == (op.username, "admin", str(req.pk))

    page = client.get(resp.url)
    assert any(f"of the whole projection from snapshot:{snap.pk}" in m for m in shown_messages(page))
    text = page.content.decode()
    assert "all (a restore replaces the whole projection)" in text
    assert f'href="{page_url("change", snap.pk)}" class="repair-snapshot"' in text


def test_a_finished_restore_shows_its_totals_before_and_after():
    snap = snapshot_row()
    req = repair.repair_request(actor=admin_actor(get_user_model().objects.create_user("restorer")),
                                source=f"snapshot:{snap.pk}", reason="tests")
    RepairRequest.objects.filter(pk=req.pk).update(
        status="SUCCEEDED", before={"generation": 3, "likedRelations": 40, "bucketSum": 41},
        after={"generation": 4, "likedRelations": 40, "bucketSum": 40})
    _viewer, client = logged_in("restore-viewer", "likes-viewer")
    resp = client.get(reverse("admin:reconciliation_repairrequest_change", args=[req.pk]))
    assert resp.status_code == 200  # whole-projection totals, not per-video layers
    text = resp.content.decode()
    assert text.count('class="repair-total"') == 3 and "sum of buckets" in text and "41" in text


@pytest.mark.parametrize("data, error", [
    ({"source": "facts", "videos": "", "reason": "x"}, "This field is required."),
    ({"videos": "", "reason": "x"}, "This field is required."),  # no source sent: the facts, as before
    ({"source": "SEALED_SNAPSHOT", "videos": "vid-a\nbad id", "reason": "x"}, "Line 2: videoId must be 1-64"),
    ({"source": "SEALED_SNAPSHOT", "videos": "vid-a", "reason": "x"}, "leave Videos empty"),
    ({"source": "SEALED_SNAPSHOT", "videos": "", "reason": "  "}, "This field is required."),
    ({"source": "FAILED_SNAPSHOT", "reason": "x"}, "Select a valid choice."),
    ({"source": "snapshot:99999", "reason": "x"}, "Select a valid choice."),
    ({"source": "snapshot:abc", "reason": "x"}, "Select a valid choice."),
    ({"source": "backup", "reason": "x"}, "Select a valid choice."),
])
def test_bad_repair_input_is_a_form_error_and_requests_nothing(data, error):
    sealed, failed = snapshot_row(), snapshot_row("FAILED")
    _op, client = logged_in("restore-typo", "likes-operator")
    named = {"SEALED_SNAPSHOT": f"snapshot:{sealed.pk}", "FAILED_SNAPSHOT": f"snapshot:{failed.pk}"}
    data = {k: named.get(v, v) for k, v in data.items()}
    resp = client.post(REQUEST_URL, data)
    assert resp.status_code == 200
    assert error in resp.content.decode().replace("&quot;", '"'), data
    assert not resp.context["form"].is_valid()
    assert RepairRequest.objects.count() == 0 and AuditRecord.objects.count() == 0


def test_a_restore_link_to_a_snapshot_no_longer_sealed_is_a_warning_and_the_facts_are_chosen():
    expired = snapshot_row("EXPIRED")
    _op, client = logged_in("restore-late", "likes-operator")
    resp = client.get(f"{REQUEST_URL}?source=snapshot:{expired.pk}")
    assert resp.status_code == 200
    assert any(f"snapshot:{expired.pk} is not a sealed snapshot" in m for m in shown_messages(resp))
    assert resp.context["form"]["source"].value() == "facts"
    assert RepairRequest.objects.count() == 0
