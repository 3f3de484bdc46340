"""Check runs (issue 11; OPS-4), read-only. The one write: "Start a check" (`reconciliation.run_check`), a
form (mode; videos one a line, or all) that starts the check as an ops job (`reconciliation.jobs`) and shows
the job's page; nothing runs in the request."""

from __future__ import annotations

from django.contrib import admin

from likes_project.admin_kit import admin_url, millis_field
from likes_project.ledgers.console import json_field
from reconciliation.admin.common import StatusAdmin, audit_field, link, link_field, list_text, shortened, table
from reconciliation.forms import CheckStartForm
from reconciliation.models import CheckRun

DIFFS_SHOWN = 100  # diffs listed on a run's page (the rest are one link away)


@admin.register(CheckRun)
class CheckRunAdmin(StatusAdmin):
    # The list fits a laptop's screen: the scope and the refusal are cut short there (the run's page has them whole).
    list_display = ("id", "mode", "kind", "status_code", "scope_short", "checked", "diffs_found", "barrier_held",
                    "refused_short", "created_at", "finished_at")
    list_filter = ("mode", "status", "kind")
    search_fields = ("=id", "=actor", "schedule")
    ordering = ("-id",)
    fields = ("mode", "kind", "status_code", "scope_text", "checked", "total", "diffs_found", "diffs_fixed",
              "barrier_held", "refused_because", "watermarks_json", "skipped_json", "diffs_table", "actor",
              "channel", "schedule", "job_link", "repair_link", "checkpoint", "audit_link", "created_at",
              "started_at", "finished_at")
    readonly_fields = ("status_code", "scope_text", "barrier_held", "watermarks_json", "skipped_json", "diffs_table",
                       "job_link", "repair_link", "audit_link")
    change_list_template = "reconciliation/admin/checkrun_change_list.html"
    change_form_template = "reconciliation/admin/checkrun_change_form.html"
    pages = [CheckStartForm.page("start/", "reconciliation_check_start")]

    @admin.display(description="scope")
    def scope_text(self, run: CheckRun) -> str:
        scope = run.scope or {}
        if scope.get("all"):
            return "all videos"
        if "bucketRange" in scope:
            low, high = scope["bucketRange"]
            return f"all videos, virtual buckets {low}..{high}"
        videos = scope.get("videos", [])
        return f"{len(videos)} video(s): {list_text(videos)}"

    @admin.display(description="scope")
    def scope_short(self, run: CheckRun) -> str:
        return shortened(self.scope_text(run), 60)

    @admin.display(description="refused because")
    def refused_short(self, run: CheckRun) -> str:
        return shortened(run.refused_because, 80) or "-"

    barrier_held = millis_field("barrier_held_ms", "barrier held")
    watermarks_json = json_field("watermarks", "run-watermarks", "watermarks")
    skipped_json = json_field("skipped", "run-skipped", "skipped", empty="none")

    @admin.display(description="diffs")
    def diffs_table(self, run: CheckRun) -> str:
        shown = list(run.diffs.order_by("id")[:DIFFS_SHOWN])
        if not shown:
            return "none"
        return table("run-diffs", ("diff", "video", "virtual bucket", "layer", "expected", "actual", "status"),
                     ((link("reconciliation_checkdiff_change", d.pk), d.video_id,
                       "-" if d.virtual_bucket is None else d.virtual_bucket, d.get_layer_display(), d.expected,
                       d.actual, d.status) for d in shown),
                     row_css="run-diff", template="reconciliation/admin/run_diffs.html", run_id=run.pk,
                     every=admin_url("reconciliation_checkdiff_changelist", query={"run__id__exact": run.pk}))

    job_link = link_field("opsjobs_opsjob_change", "job_id", "ops job")
    repair_link = link_field("reconciliation_repairrequest_change", "repair_id", "verifies repair")
    audit_link = audit_field("check_run")
