"""Recovery snapshots (issue 12), read-only; `reconciliation.create_snapshot` may start their jobs, whose
verdicts the services audit when the jobs run. Nothing is built in the request:

* "Take a snapshot" (a reason): starts the snapshot job (`jobs.SNAPSHOT_JOB`), which creates the row and
  builds it on the workers; the job's page follows.
* Verify and Test-restore, buttons on a snapshot's page and actions (one snapshot each): start their jobs
  the same way.

A restore is a repair (`reconciliation.admin.repairs`): "Restore from this snapshot" on a SEALED snapshot's
page opens "Request a repair" with the snapshot chosen, and another operator approves it as any.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from likes_project.admin_kit import (
    AdminPage,
    admin_url,
    millis_field,
    preset_action,
    require_permission,
    start_job_or_message,
)
from likes_project.errors import DomainError
from likes_project.ledgers.console import json_field
from likes_project.opsjobs.models import OpsJob
from reconciliation.admin.common import StatusAdmin, audit_field, link, table
from reconciliation.forms import SnapshotTakeForm
from reconciliation.jobs import SNAPSHOT_PERMISSION, SNAPSHOT_TEST_JOB, SNAPSHOT_VERIFY_JOB
from reconciliation.models import RecoverySnapshot
from reconciliation.services.recovery.snapshot import snapshot_get


def _snapshot_job(request, admin_site, snapshot_id, *, kind: str):
    """Start `kind` (verify, test-restore) for one snapshot: the job's page, or the refusal as a message."""
    try:
        snap = snapshot_get(snapshot_id)
    except DomainError as exc:
        messages.error(request, exc.message)
        return HttpResponseRedirect(admin_url("reconciliation_recoverysnapshot_changelist"))
    response = start_job_or_message(request, admin_site, kind=kind, params={"snapshotId": snap.pk},
                                    target=f"snapshot {snap.pk}")
    return response or HttpResponseRedirect(admin_url("reconciliation_recoverysnapshot_change", snap.pk))


@require_POST
def snapshot_verify_view(request, snapshot_id: int, *, admin_site):
    """The Verify button of a snapshot's page (POST only): starts the verification job."""
    require_permission(request, SNAPSHOT_PERMISSION)
    return _snapshot_job(request, admin_site, snapshot_id, kind=SNAPSHOT_VERIFY_JOB)


@require_POST
def snapshot_test_restore_view(request, snapshot_id: int, *, admin_site):
    """The Test-restore button of a snapshot's page (POST only): starts the drill's job."""
    require_permission(request, SNAPSHOT_PERMISSION)
    return _snapshot_job(request, admin_site, snapshot_id, kind=SNAPSHOT_TEST_JOB)


def _artifact_rows(snap: RecoverySnapshot, kind: str) -> int:
    return sum(int(a.get("rows") or 0) for a in snap.artifacts if a.get("kind") == kind)


@admin.register(RecoverySnapshot)
class RecoverySnapshotAdmin(StatusAdmin):
    """Recovery snapshots (issue 12): the cut (the whole offset vector), the artifacts with their checksums,
    how long dispatch was paused, the last test-restore's verdict, and the jobs and audit records."""

    list_display = ("id", "status_code", "generation", "created_at", "dispatch_pause", "rows_text", "test_verdict",
                    "started_by", "reason")
    list_filter = ("status",)
    search_fields = ("=id", "=started_by", "reason")
    ordering = ("-id",)
    fields = ("status_code", "reason", "started_by", "channel", "generation", "bucket_space_version", "manifest_id",
              "stream_contract_version", "offsets_table", "artifacts_table", "dispatch_pause", "timings_json",
              "failure", "dead_letters_at_cut", "test_verdict", "tested_at", "test_result_json", "jobs_table",
              "audit_link", "created_at", "sealed_at", "finished_at")
    readonly_fields = ("status_code", "offsets_table", "artifacts_table", "dispatch_pause", "timings_json",
                       "test_verdict", "test_result_json", "jobs_table", "audit_link")
    actions = ["verify", "test_restore"]
    change_list_template = "reconciliation/admin/recoverysnapshot_change_list.html"
    change_form_template = "reconciliation/admin/recoverysnapshot_change_form.html"
    pages = [
        SnapshotTakeForm.page("take/", "reconciliation_snapshot_take"),
        AdminPage("<int:snapshot_id>/verify/", snapshot_verify_view, name="reconciliation_snapshot_verify",
                  title="Verify a snapshot", permission=SNAPSHOT_PERMISSION, listed=False),
        AdminPage("<int:snapshot_id>/test-restore/", snapshot_test_restore_view,
                  name="reconciliation_snapshot_test_restore", title="Test-restore a snapshot",
                  permission=SNAPSHOT_PERMISSION, listed=False),
    ]

    def has_snapshot_permission(self, request) -> bool:
        return request.user.has_perm(SNAPSHOT_PERMISSION)

    def _one_job(self, request, queryset, *, kind: str):
        # One job per snapshot, each followed on its own page: an action starts one.
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one snapshot: each one is verified or test-restored by its "
                                       "own job, shown on its page.", messages.ERROR)
            return None
        return _snapshot_job(request, self.admin_site, queryset.get().pk, kind=kind)

    verify = preset_action(_one_job, "Verify the selected snapshot (a job)", permissions=["snapshot"],
                           kind=SNAPSHOT_VERIFY_JOB)
    test_restore = preset_action(_one_job, "Test-restore the selected snapshot into a scratch generation (a job)",
                                 permissions=["snapshot"], kind=SNAPSHOT_TEST_JOB)

    dispatch_pause = millis_field("dispatch_paused_ms", "dispatch paused")

    @admin.display(description="rows")
    def rows_text(self, snap: RecoverySnapshot) -> str:
        if not snap.artifacts:
            return "-"
        return f"{_artifact_rows(snap, 'projection')} relations, {_artifact_rows(snap, 'vbuckets')} buckets"

    @admin.display(description="test-restore")
    def test_verdict(self, snap: RecoverySnapshot) -> str:
        if not snap.test_result:
            return "never"
        ok = snap.test_result.get("ok")
        return format_html('<span class="test-verdict">{}</span>', "ok" if ok else "FAILED")

    @admin.display(description="offset vector")
    def offsets_table(self, snap: RecoverySnapshot) -> str:
        if not snap.offsets:
            return "none (no cut was recorded)"
        return table("snapshot-offsets", ("topic", "partition", "through (in the snapshot)",
                                          "nextOffset (the replay starts here)", "stream entries added at the cut"),
                     ((o.get("topic", ""), o.get("partition"), o.get("through"), o.get("nextOffset"),
                       o.get("streamAdded", "-")) for o in snap.offsets))

    @admin.display(description="artifacts")
    def artifacts_table(self, snap: RecoverySnapshot) -> str:
        if not snap.artifacts:
            return "none"
        return table("snapshot-artifacts", ("kind", "partition", "uri", "rows", "sha256", "bytes"),
                     ((a.get("kind"), a.get("partition"), a.get("uri"), a.get("rows"), a.get("sha256"),
                       a.get("bytes")) for a in snap.artifacts))

    timings_json = json_field("timings", "snapshot-timings", "timings (ms)", empty="-")
    test_result_json = json_field("test_result", "snapshot-test-result", "last test-restore", empty="never")

    @admin.display(description="ops jobs")
    def jobs_table(self, snap: RecoverySnapshot) -> str:
        jobs = OpsJob.objects.filter(pk=snap.job_id) | OpsJob.objects.filter(
            kind__in=[SNAPSHOT_VERIFY_JOB, SNAPSHOT_TEST_JOB], params__snapshotId=snap.pk)
        shown = list(jobs.order_by("id")[:20])
        if not shown:
            return "-"
        return table("snapshot-jobs", ("job", "kind", "status", "by", "message"),
                     ((link("opsjobs_opsjob_change", j.pk), j.kind, j.status, j.actor, j.message) for j in shown))

    audit_link = audit_field("recovery_snapshot")
