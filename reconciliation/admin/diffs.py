"""A check run's diffs (issue 11; OPS-4, OPS-7) and their transitions, read-only. The writes are admin
actions, each asking for a reason first and going through its service, which checks the workflow and writes
the audit record:

* take (FIXING), ignore, reopen (`reconciliation.triage_diff`): `diffs.diffs_set_status`;
* request a repair of the selected diffs' videos from the facts (`reconciliation.request_repair`):
  `repair.repair_request`; another operator approves it (`reconciliation.admin.repairs`).
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from likes_project.admin_kit import ReadOnlyAdmin, admin_url, preset_action, reason_action
from likes_project.audit.services import admin_actor
from likes_project.ledgers.console import json_field
from reconciliation.admin.common import StatusAdmin, audit_field, link, link_field, table
from reconciliation.models import CheckDiff, DiffStatus, DiffTransition
from reconciliation.services import diffs, repair


@admin.register(CheckDiff)
class CheckDiffAdmin(StatusAdmin):
    """A run's disagreements, with their workflow. Each action asks for a reason first."""

    list_display = ("id", "run_link", "video_id", "virtual_bucket", "layer", "expected", "actual", "status_code",
                    "owner", "repair_link", "created_at")
    list_filter = ("layer", "status", "run__mode")
    search_fields = ("=video_id",)
    search_help_text = "A video id"
    ordering = ("-id",)
    list_select_related = ("run",)
    fields = ("run_link", "video_id", "virtual_bucket", "layer", "expected", "actual", "difference", "status_code",
              "owner", "reason", "status_changed_at", "repair_link", "transitions_table", "detail_json", "audit_link",
              "created_at")
    readonly_fields = ("status_code", "run_link", "difference", "repair_link", "transitions_table", "detail_json",
                       "audit_link")
    actions = ["take", "ignore", "reopen", "request_repair"]

    def has_triage_permission(self, request) -> bool:
        return request.user.has_perm(diffs.TRIAGE_PERMISSION)

    def has_request_permission(self, request) -> bool:
        return request.user.has_perm(repair.REQUEST_PERMISSION)

    def _set_status(self, request, queryset, *, to: str, title: str, submit: str, intro: str):
        def apply(ids, reason):
            done = diffs.diffs_set_status(ids=ids, to=to, actor=admin_actor(request.user), reason=reason)
            return f"{len(done)} diff(s) now {to}: {', '.join(str(d.pk) for d in done)}."

        return reason_action(self, request, queryset, title=title, submit=submit, intro=intro, apply=apply)

    take = preset_action(_set_status, "Take the selected diffs (FIXING)", permissions=["triage"], to=DiffStatus.FIXING,
                         title="Take diffs", submit="Take",
                         intro="You become the owner of these diffs while you fix them (NEW -> FIXING). The change is "
                               "recorded on each diff and audited, with your reason.")
    ignore = preset_action(_set_status, "Ignore the selected diffs", permissions=["triage"], to=DiffStatus.IGNORED,
                           title="Ignore diffs", submit="Ignore",
                           intro="These diffs will not be fixed (a known, accepted disagreement). They can be reopened "
                                 "later; the change is recorded and audited, with your reason.")
    reopen = preset_action(_set_status, "Reopen the selected diffs (NEW)", permissions=["triage"], to=DiffStatus.NEW,
                           title="Reopen diffs", submit="Reopen",
                           intro="FIXING or IGNORED diffs become NEW again, without an owner's fix. The change is "
                                 "recorded and audited, with your reason.")

    @admin.action(description="Request a repair from the facts for the selected diffs", permissions=["request"])
    def request_repair(self, request, queryset):
        def apply(ids, reason):
            req = repair.repair_request(actor=admin_actor(request.user), source="facts", reason=reason, diff_ids=ids)
            return format_html('Requested <a href="{}" class="repair-requested">repair {}</a> of {} video(s) from '
                               "the facts; it waits for another operator's approval.",
                               admin_url("reconciliation_repairrequest_change", req.pk), req.pk, len(req.video_ids))

        return reason_action(self, request, queryset, title="Request a repair from the facts", submit="Request repair",
                             intro="Asks for the selected diffs' videos to be rebuilt from the relation facts (only "
                                   "the broken layer of each). The diffs become FIXING, linked to the request. It "
                                   "runs once a different operator approves it.", apply=apply)

    @admin.display(description="run", ordering="run_id")
    def run_link(self, diff: CheckDiff) -> str:
        return link("reconciliation_checkrun_change", diff.run_id, f"{diff.run_id} ({diff.run.mode})")

    @admin.display(description="actual - expected")
    def difference(self, diff: CheckDiff) -> str:
        return f"{diff.actual - diff.expected:+d}"

    repair_link = link_field("reconciliation_repairrequest_change", "repair_id", "repair")

    @admin.display(description="transitions")
    def transitions_table(self, diff: CheckDiff) -> str:
        transitions = list(diff.transitions.order_by("id"))
        if not transitions:
            return "none"
        return table("diff-transitions", ("at (UTC)", "from", "to", "by", "reason"),
                     ((f"{t.at:%Y-%m-%d %H:%M:%S}", t.from_status, t.to_status, t.actor, t.reason)
                      for t in transitions), row_css="diff-transition")

    detail_json = json_field("detail", "diff-detail", "evidence")
    audit_link = audit_field("diff")


@admin.register(DiffTransition)
class DiffTransitionAdmin(ReadOnlyAdmin):
    list_display = ("id", "diff_link", "from_status", "to_status", "actor", "reason", "at")
    list_filter = ("to_status",)
    search_fields = ("=diff__id", "=actor")
    ordering = ("-id",)

    diff_link = link_field("reconciliation_checkdiff_change", "diff_id", "diff", ordering="diff_id")
