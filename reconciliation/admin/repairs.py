"""Repair requests (issue 11; OPS-7, OPS-8), restores included, read-only; and the auto-repair switch. The
writes go through the repair service, which checks the workflow and writes the audit record:

* "Request a repair" (`reconciliation.request_repair`, a reason): the videos typed one a line, from the facts;
  or the whole projection from a SEALED snapshot (a restore is a repair: a snapshot's "Restore from this
  snapshot" opens this page with it chosen).
* Approve (`reconciliation.approve_repair`), a button on a repair's page and an action: through
  `repair.repair_approve`, which refuses the requester (superusers included) and starts the system's repair
  job. A refusal is a message; nothing changes.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.utils.html import format_html
from django.views.decorators.http import require_http_methods, require_POST

from likes_project.admin_kit import (
    AdminPage,
    RuntimeSwitchAdmin,
    admin_url,
    query_initial,
    render_page,
    require_permission,
)
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError
from likes_project.ledgers.console import json_field
from reconciliation.admin.common import StatusAdmin, audit_field, link_field, list_text, table
from reconciliation.forms import FACTS, RepairRequestForm
from reconciliation.models import AutoRepairSwitch, CheckDiff, RepairRequest
from reconciliation.services import repair

LAYERS = ("facts", "projection", "buckets", "display")  # a repair's before / after, a row each per video
TOTALS = (("generation", "generation"), ("likedRelations", "LIKED relations"), ("bucketSum", "sum of buckets"))


def _repair_url(repair_id) -> str:
    return admin_url("reconciliation_repairrequest_change", repair_id)


@require_http_methods(["GET", "POST"])
def repair_request_view(request, *, admin_site):
    """Request a repair of the videos typed (one a line) from the facts, or of the whole projection from a
    SEALED snapshot (`?source=snapshot:<id>` chooses it: a snapshot's "Restore" link); shows the request's
    page."""
    require_permission(request, repair.REQUEST_PERMISSION)
    wanted = request.GET.get("source", FACTS)
    form = RepairRequestForm(request.POST if request.method == "POST" else None,
                             initial={**query_initial(request, RepairRequestForm), "source": wanted})
    if request.method == "GET" and not form.offers(wanted):
        messages.warning(request, f"{wanted} is not a sealed snapshot (any more); choose what to repair from.")
        form.initial["source"] = FACTS
    if form.is_valid():
        source, videos = form.cleaned_data["source"], form.cleaned_data["videos"]
        try:
            req = repair.repair_request(actor=admin_actor(request.user), source=source,
                                        reason=form.cleaned_data["reason"], videos=videos or None)
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            what = (f"of {len(req.video_ids)} video(s) from the facts" if source == FACTS else
                    f"of the whole projection from {source}")
            messages.success(request, f"Requested repair {req.pk} {what}; it waits for another operator's "
                                      "approval.")
            return HttpResponseRedirect(_repair_url(req.pk))
    return render_page(request, admin_site, "admin_kit/form_page.html", title="Request a repair", form=form,
                       submit="Request the repair",
                       intro="From the facts: rebuilds these videos' counts from the relation facts; per video the "
                             "broken layer is found first (projection, buckets or display) and only it is rebuilt. "
                             "From a sealed snapshot: the whole projection is loaded from it into a new generation, "
                             "the event log replayed from its offsets, checked, and switched in. Either way an exact "
                             "check verifies the result, and it runs only once a different operator approved exactly "
                             "these parameters. Prefer requesting a repair from a check's diffs, which records why.")


def _restored_snapshot(req: RepairRequest) -> int | None:
    """The snapshot a restore request names (`snapshot:<id>`), None for a repair from the facts."""
    raw = req.params.get("source", "")
    number = raw[len(repair.SNAPSHOT_SOURCE):]
    if not raw.startswith(repair.SNAPSHOT_SOURCE) or not (number.isascii() and number.isdigit()):
        return None
    return int(number)


def _approve(request, repair_id) -> bool:
    """One approval through the service, its outcome as a message."""
    try:
        req = repair.repair_approve(repair_id=repair_id, actor=admin_actor(request.user))
    except DomainError as exc:
        code = exc.as_dict().get("code", exc.code)  # a Conflict's own code travels in its extra
        messages.error(request, f"Repair {repair_id} was not approved ({code}): {exc.message}")
        return False
    messages.success(request, format_html('Approved repair {}; the system runs it as <a href="{}">job {}</a>.',
                                          req.pk, admin_url("opsjobs_opsjob_change", req.job_id), req.job_id))
    return True


@require_POST
def repair_approve_view(request, repair_id: int, *, admin_site):
    """The Approve button of a repair's page (POST only); back to the page, with the outcome."""
    require_permission(request, repair.APPROVE_PERMISSION)
    _approve(request, repair_id)
    return HttpResponseRedirect(_repair_url(repair_id))


@admin.register(RepairRequest)
class RepairRequestAdmin(StatusAdmin):
    """Repair requests (OPS-7): who asked, who approved, exactly which parameters, before / after, both
    watermark sets, the job that ran it and the exact check that verified it."""

    list_display = ("id", "status_code", "videos_text", "requested_by", "approved_by", "created_at", "finished_at",
                    "job_link", "verify_link")
    list_filter = ("status",)
    search_fields = ("reason",)  # see get_search_results: a video id
    search_help_text = "A video id"
    ordering = ("-id",)
    fields = ("status_code", "videos_text", "source", "reason", "requested_by", "requested_channel", "approved_by",
              "approved_at", "params_json", "params_hash", "approved_hash", "before_after", "before_json",
              "after_json", "watermarks_before_json", "watermarks_after_json", "result_json", "error", "job_link",
              "verify_link", "diffs_link", "audit_link", "created_at", "finished_at")
    readonly_fields = ("status_code", "videos_text", "source", "params_json", "before_after", "before_json",
                       "after_json", "watermarks_before_json", "watermarks_after_json", "result_json", "job_link",
                       "verify_link", "diffs_link", "audit_link")
    actions = ["approve"]
    change_list_template = "reconciliation/admin/repairrequest_change_list.html"
    change_form_template = "reconciliation/admin/repairrequest_change_form.html"
    pages = [
        AdminPage("request/", repair_request_view, name="reconciliation_repair_request", title="Request a repair",
                  permission=repair.REQUEST_PERMISSION),
        AdminPage("<int:repair_id>/approve/", repair_approve_view, name="reconciliation_repair_approve",
                  title="Approve a repair", permission=repair.APPROVE_PERMISSION, listed=False),
    ]

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(params__videos__contains=[term]), False

    def has_approve_permission(self, request) -> bool:
        return request.user.has_perm(repair.APPROVE_PERMISSION)

    @admin.action(description="Approve the selected repair requests", permissions=["approve"])
    def approve(self, request, queryset):
        for pk in queryset.order_by("pk").values_list("pk", flat=True):
            _approve(request, pk)

    @admin.display(description="videos")
    def videos_text(self, req: RepairRequest) -> str:
        if _restored_snapshot(req) is not None and not req.video_ids:
            return "all (a restore replaces the whole projection)"
        return f"{len(req.video_ids)}: {list_text(req.video_ids)}"

    @admin.display(description="source")
    def source(self, req: RepairRequest) -> str:
        snapshot_id = _restored_snapshot(req)
        if snapshot_id is None:
            return req.params.get("source", "")
        return format_html('<a href="{}" class="repair-snapshot">{}</a>',
                           admin_url("reconciliation_recoverysnapshot_change", snapshot_id), req.params["source"])

    params_json = json_field("params", "repair-params", "parameters (approved by hash)")

    @admin.display(description="before / after")
    def before_after(self, req: RepairRequest) -> str:
        if not req.before and not req.after:
            return "not run yet"
        if _restored_snapshot(req) is not None:
            # A restore's: whole generations' totals (`restore.generation_totals`), not videos.
            return table("repair-before-after", ("whole projection", "before", "after"),
                         ((label, req.before.get(key, "-"), req.after.get(key, "-")) for key, label in TOTALS),
                         row_css="repair-total")
        rows = []
        for video in sorted(set(req.before) | set(req.after)):
            before, after = req.before.get(video, {}), req.after.get(video, {})
            rows += [(video, layer, before.get(layer, "-"), after.get(layer, "-")) for layer in LAYERS]
        return table("repair-before-after", ("video", "layer", "before", "after"), rows, row_css="repair-layer")

    before_json = json_field("before", "repair-before", "before (raw)")
    after_json = json_field("after", "repair-after", "after (raw)")
    watermarks_before_json = json_field("watermarks_before", "repair-watermarks-before", "watermarks before")
    watermarks_after_json = json_field("watermarks_after", "repair-watermarks-after", "watermarks after")
    result_json = json_field("result", "repair-result", "result")
    job_link = link_field("opsjobs_opsjob_change", "job_id", "ops job")
    verify_link = link_field("reconciliation_checkrun_change", "verify_run_id", "verify run")

    @admin.display(description="diffs")
    def diffs_link(self, req: RepairRequest) -> str:
        ids = list(CheckDiff.objects.filter(repair_id=req.pk).order_by("id").values_list("id", flat=True))
        if not ids:
            return "none"
        url = admin_url("reconciliation_checkdiff_changelist", query={"repair_id": req.pk})
        return format_html('<a href="{}">{} diff(s): {}</a>', url, len(ids), list_text([str(i) for i in ids]))

    audit_link = audit_field("repair")


@admin.register(AutoRepairSwitch)
class AutoRepairSwitchAdmin(RuntimeSwitchAdmin):
    """The auto-repair pause (issue 14 §3): while set, check runs record count-cache diffs without fixing them."""
