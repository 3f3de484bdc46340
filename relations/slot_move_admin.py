"""The relation slot move ledger in the console (issue 16 §3), read-only: every step goes through
`relations.services.slot_moves.ledger`, which checks the workflow, the permission's second person and audits it.
"Plan a slot move" (`relations.plan_relationslotmove`) is a page; Approve, Resume (POST-only buttons) and Abort
(a reason first) on a move's page need `relations.approve_relationslotmove`. Approve and resume only start the
system's job; nothing long runs in a request."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin

from likes_project.admin_kit import render_page
from likes_project.ledgers.console import LedgerAdmin, LedgerConsole, LedgerPlanForm
from likes_project.ranges import ranges_label
from relations import routing
from relations.models import RelationSlotMove
from relations.services.slot_moves import ledger


class SlotMovePlanForm(LedgerPlanForm):
    slots = forms.CharField(label="Logical slots", max_length=2000,
                            help_text="Ranges of the contract's logical slots, all on one shard: 128-191, or 0,2,4.")
    target = forms.ChoiceField(label="Target shard", help_text="The relation shard the slots move onto.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:
            contract = routing.active_contract()
            held = {a: contract.slot_aliases.count(a) for a in settings.RELATION_SHARD_ALIASES}
        except routing.ContractMissing:
            held = {}
        self.fields["target"].choices = [(a, f"{a} ({held.get(a, 0)} slots now)")
                                         for a in settings.RELATION_SHARD_ALIASES]


class SlotMoveConsole(LedgerConsole):
    def abort_page(self, request, admin_site, m: RelationSlotMove, form):
        return render_page(request, admin_site, "admin_kit/form_page.html", title=f"Abort slot move {m.pk}", form=form,
                           submit="Abort the slot move", body_class="slot-move-abort",
                           intro=f"Slot move {m.pk} is {m.state}. Before its switch an abort gives the slots back to "
                                 f"{m.source_alias} and removes the copy on {m.target_alias}; after it, it is refused.")

    def aborted_message(self, before: RelationSlotMove, aborted: RelationSlotMove) -> str:
        return (f"Aborted slot move {aborted.pk} (it was {before.state}): slots {ranges_label(aborted.slots)} stay on "
                f"{aborted.source_alias}.")


CONSOLE = SlotMoveConsole(ledger.LEDGER, url_prefix="relations_slot_move", title="Slot move")
PLAN_PAGE = CONSOLE.plan_page(
    form=SlotMovePlanForm, title="Plan a slot move", body_class="slot-move-plan",
    plan=lambda data, actor: ledger.move_plan(slots=data["slots"], target=data["target"], reason=data["reason"],
                                              actor=actor),
    error_fields={"invalid_slots": "slots", "already_on_target": "slots", "several_sources": "slots",
                  "slot_move_overlap": "slots", "unknown_shard": "target", "reason_required": "reason"},
    planned=lambda m: (f"Planned slot move {m.pk}: slots {ranges_label(m.slots)} {m.source_alias} -> "
                       f"{m.target_alias}, {m.rows_to_copy} rows to copy."),
    intro=lambda: (
        "Moves logical relation slots (the users they hold, their likes and commands) from their shard onto another, "
        "online. Planning writes only the ledger row: the move waits for another operator's approval, then the "
        "system copies the rows, applies the changes captured meanwhile, pauses the slots' commands for the switch "
        f"(at most {settings.RELATION_MOVE_MAX_PAUSE_MS} ms) and verifies the copy, as an ops job."))


@admin.register(RelationSlotMove)
class RelationSlotMoveAdmin(LedgerAdmin):
    """The slot move ledger, read-only: which slots move where, how far the copy and the catch-up are, the
    contract versions, the measured write pause, who asked and who approved."""

    list_display = ("id", "state_code", "slot_range", "route", "copy_progress", "captured_applied",
                    "write_pause", "requested_by", "approved_by", "created_at", "cutover_at", "error_text")
    list_filter = ("state", "target_alias", "source_alias")
    search_fields = ("=id", "=requested_by", "=approved_by", "reason")
    console, css = CONSOLE, "slot-move"
    fields = ("state_code", "slot_range", "route", "contract_version", "new_contract_version", "copy_progress",
              "captured_applied", "catchup_passes", "write_pause", "verify_json", "reason", "requested_by",
              "approved_by", "approved_at", "abort_reason", "error", "jobs_table", "audit_link", "created_at",
              "state_changed_at", "cutover_at", "verified_at", "finished_at", "source_cleanup_after",
              "source_cleaned_at", "report_json")
    readonly_fields = ("slot_range", "route")
    pages = [PLAN_PAGE, *CONSOLE.pages()]

    @admin.display(description="slots")
    def slot_range(self, m: RelationSlotMove) -> str:
        return f"{ranges_label(m.slots) or '-'} ({len(m.slots)})"

    @admin.display(description="source \u2192 target", ordering="target_alias")
    def route(self, m: RelationSlotMove) -> str:
        return f"{m.source_alias} \u2192 {m.target_alias}"
