"""The relation slot move ledger in the console (issue 16 §3), read-only: every step goes through
`relations.services.slot_moves.ledger`, which checks the workflow, the permission's second person and audits it.
"Plan a slot move" (`relations.plan_relationslotmove`) is a page; Approve, Resume (POST-only buttons) and Abort
(a reason first) on a move's page need `relations.approve_relationslotmove`. Approve and resume only start the
system's job; nothing long runs in a request."""

from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_http_methods, require_POST

from likes_project.admin_kit import AdminPage, ReadOnlyAdmin, ReasonForm, render_page, require_permission
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError
from likes_project.opsjobs.models import OpsJob
from likes_project.ranges import ranges_label
from relations import routing
from relations.models import SLOT_MOVE_TERMINAL, RelationSlotMove, SlotMoveState
from relations.services.slot_moves import ledger


def _move_url(move_id) -> str:
    return reverse("admin:relations_relationslotmove_change", args=[move_id])


class SlotMovePlanForm(forms.Form):
    slots = forms.CharField(label="Logical slots", max_length=2000,
                            help_text="Ranges of the contract's logical slots, all on one shard: 128-191, or 0,2,4.")
    target = forms.ChoiceField(label="Target shard", help_text="The relation shard the slots move onto.")
    reason = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                             help_text="Required; recorded in the ledger and the audit log.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:
            contract = routing.active_contract()
            held = {a: contract.slot_aliases.count(a) for a in settings.RELATION_SHARD_ALIASES}
        except routing.ContractMissing:
            held = {}
        self.fields["target"].choices = [(a, f"{a} ({held.get(a, 0)} slots now)")
                                         for a in settings.RELATION_SHARD_ALIASES]

    def clean_reason(self):
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("Give a reason.", code="reason_required")
        return reason


_PLAN_ERROR_FIELDS = {"invalid_slots": "slots", "already_on_target": "slots", "several_sources": "slots",
                      "slot_move_overlap": "slots", "unknown_shard": "target", "reason_required": "reason"}


@require_http_methods(["GET", "POST"])
def slot_move_plan_view(request, *, admin_site):
    """Plan a slot move (AWAITING_APPROVAL) through `ledger.move_plan`; a refusal is a form error and writes
    nothing. Nothing runs until another operator approves it."""
    require_permission(request, ledger.PLAN_PERMISSION)
    form = SlotMovePlanForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            m = ledger.move_plan(slots=form.cleaned_data["slots"], target=form.cleaned_data["target"],
                                 reason=form.cleaned_data["reason"], actor=admin_actor(request.user))
        except DomainError as exc:
            form.add_error(_PLAN_ERROR_FIELDS.get(exc.code), f"{exc.message} ({exc.code})")
        else:
            messages.success(request, f"Planned slot move {m.pk}: slots {ranges_label(m.slots)} {m.source_alias} -> "
                                      f"{m.target_alias}, {m.rows_to_copy} rows to copy. It waits for another "
                                      "operator's approval.")
            return HttpResponseRedirect(_move_url(m.pk))
    return render_page(
        request, admin_site, "admin_kit/form_page.html", title="Plan a slot move", form=form,
        submit="Plan the slot move", body_class="slot-move-plan",
        intro="Moves logical relation slots (the users they hold, their likes and commands) from their shard onto "
              "another, online. Planning writes only the ledger row: the move waits for another operator's "
              "approval, then the system copies the rows, applies the changes captured meanwhile, pauses the slots' "
              f"commands for the switch (at most {settings.RELATION_MOVE_MAX_PAUSE_MS} ms) and verifies the copy, "
              "as an ops job.")


def _refused(request, move_id, what: str, exc: DomainError) -> HttpResponseRedirect:
    messages.error(request, f"Slot move {move_id} was not {what} ({exc.code}): {exc.message}")
    known = RelationSlotMove.objects.filter(pk=move_id).exists()
    return HttpResponseRedirect(_move_url(move_id) if known else
                                reverse("admin:relations_relationslotmove_changelist"))


def _started(request, m: RelationSlotMove, what: str) -> HttpResponseRedirect:
    messages.success(request, format_html('{} slot move {}: it is {}; the system runs it as <a href="{}">job {}</a>.',
                                          what, m.pk, m.state, reverse("admin:opsjobs_opsjob_change",
                                                                       args=[m.job_id]), m.job_id))
    return HttpResponseRedirect(_move_url(m.pk))


@require_POST
def slot_move_approve_view(request, move_id: int, *, admin_site):
    require_permission(request, ledger.APPROVE_PERMISSION)
    try:
        m = ledger.move_approve(move_id=move_id, actor=admin_actor(request.user))
    except DomainError as exc:
        return _refused(request, move_id, "approved", exc)
    return _started(request, m, "Approved")


@require_POST
def slot_move_resume_view(request, move_id: int, *, admin_site):
    require_permission(request, ledger.APPROVE_PERMISSION)
    try:
        m = ledger.move_resume(move_id=move_id, actor=admin_actor(request.user))
    except DomainError as exc:
        return _refused(request, move_id, "resumed", exc)
    return _started(request, m, "Resumed")


@require_http_methods(["GET", "POST"])
def slot_move_abort_view(request, move_id: int, *, admin_site):
    require_permission(request, ledger.APPROVE_PERMISSION)
    try:
        m = ledger.move_get(move_id)
    except DomainError as exc:
        return _refused(request, move_id, "aborted", exc)
    form = ReasonForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            aborted = ledger.move_abort(move_id=m.pk, actor=admin_actor(request.user),
                                        reason=form.cleaned_data["reason"])
        except DomainError as exc:
            return _refused(request, m.pk, "aborted", exc)
        messages.success(request, f"Aborted slot move {aborted.pk} (it was {m.state}): slots "
                                  f"{ranges_label(aborted.slots)} stay on {aborted.source_alias}.")
        return HttpResponseRedirect(_move_url(aborted.pk))
    return render_page(request, admin_site, "admin_kit/form_page.html", title=f"Abort slot move {m.pk}", form=form,
                       submit="Abort the slot move", body_class="slot-move-abort",
                       intro=f"Slot move {m.pk} is {m.state}. Before its switch an abort gives the slots back to "
                             f"{m.source_alias} and removes the copy on {m.target_alias}; after it, it is refused.")


def slot_move_offers(user, m: RelationSlotMove) -> dict[str, bool]:
    """Which buttons a move's page offers `user` (the service decides again on the POST)."""
    approver = user.has_perm(ledger.APPROVE_PERMISSION)
    resumable = ((m.state not in SLOT_MOVE_TERMINAL and m.state != SlotMoveState.AWAITING_APPROVAL)
                 or (m.state == SlotMoveState.RETIRED and m.source_cleaned_at is None))
    return {"approve": approver and m.state == SlotMoveState.AWAITING_APPROVAL, "resume": approver and resumable,
            "abort": approver and m.state in ledger.BEFORE_SWITCH and not m.new_contract_version,
            "own": m.requested_by == user.get_username()}


@admin.register(RelationSlotMove)
class RelationSlotMoveAdmin(ReadOnlyAdmin):
    """The slot move ledger, read-only: which slots move where, how far the copy and the catch-up are, the
    contract versions, the measured write pause, who asked and who approved."""

    list_display = ("id", "state_code", "slot_range", "route", "copy_progress", "captured_applied",
                    "write_pause", "requested_by", "approved_by", "created_at", "cutover_at", "error_text")
    list_filter = ("state", "target_alias", "source_alias")
    search_fields = ("=id", "=requested_by", "=approved_by", "reason")
    ordering = ("-id",)
    fields = ("state_code", "slot_range", "route", "contract_version", "new_contract_version", "copy_progress",
              "captured_applied", "catchup_passes", "write_pause", "report_json", "reason", "requested_by",
              "approved_by", "approved_at", "abort_reason", "error", "job_id", "created_at", "state_changed_at",
              "cutover_at", "verified_at", "finished_at", "source_cleanup_after", "source_cleaned_at")
    readonly_fields = ("state_code", "slot_range", "route", "copy_progress", "write_pause", "report_json")
    change_list_template = "relations/admin/relationslotmove_change_list.html"
    change_form_template = "relations/admin/relationslotmove_change_form.html"
    pages = [
        AdminPage("plan/", slot_move_plan_view, name="relations_slot_move_plan", title="Plan a slot move",
                  permission=ledger.PLAN_PERMISSION),
        AdminPage("<int:move_id>/approve/", slot_move_approve_view, name="relations_slot_move_approve",
                  title="Approve a slot move", permission=ledger.APPROVE_PERMISSION, listed=False),
        AdminPage("<int:move_id>/resume/", slot_move_resume_view, name="relations_slot_move_resume",
                  title="Resume a slot move", permission=ledger.APPROVE_PERMISSION, listed=False),
        AdminPage("<int:move_id>/abort/", slot_move_abort_view, name="relations_slot_move_abort",
                  title="Abort a slot move", permission=ledger.APPROVE_PERMISSION, listed=False),
    ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        m = self.get_object(request, unquote(object_id))
        extra = {}
        if m is not None:
            job = OpsJob.objects.filter(pk=m.job_id).only("status", "finished_at").first() if m.job_id else None
            extra = {"offers": slot_move_offers(request.user, m), "running": job is not None and not job.finished}
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    @admin.display(description="state", ordering="state")
    def state_code(self, m: RelationSlotMove) -> str:
        return format_html('<span class="state-code">{}</span>', m.state)

    @admin.display(description="slots")
    def slot_range(self, m: RelationSlotMove) -> str:
        return f"{ranges_label(m.slots) or '-'} ({len(m.slots)})"

    @admin.display(description="source \u2192 target", ordering="target_alias")
    def route(self, m: RelationSlotMove) -> str:
        return f"{m.source_alias} \u2192 {m.target_alias}"

    @admin.display(description="copied / rows to copy", ordering="copied_rows")
    def copy_progress(self, m: RelationSlotMove) -> str:
        return f"{m.copied_rows} / {m.rows_to_copy}"

    @admin.display(description="write pause", ordering="write_pause_ms")
    def write_pause(self, m: RelationSlotMove) -> str:
        return "-" if m.write_pause_ms is None else f"{m.write_pause_ms:.1f} ms"

    @admin.display(description="error")
    def error_text(self, m: RelationSlotMove) -> str:
        return format_html('<span class="slot-move-error">{}</span>', m.error[:200]) if m.error else "-"

    @admin.display(description="report (relation_slot_move_show --json)")
    def report_json(self, m: RelationSlotMove) -> str:
        return format_html('<pre class="slot-move-report">{}</pre>',
                           json.dumps(ledger.move_report(m), indent=2, sort_keys=True, default=str))
