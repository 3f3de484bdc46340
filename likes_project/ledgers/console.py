"""The approved ledgers in the console: the Plan page (a form; a refusal is a form error and writes nothing), the
Approve and Resume buttons (POST only), Abort (a reason first), the offers a ledger's page shows, and the plain
text the lists show. Every step goes through the ledger's service,
which checks the workflow and the second person and audits; approve and resume only start the system's job,
nothing long runs in a request. A ledger's admin module makes one `LedgerConsole`, mounts its `pages()` and
registers a `LedgerAdmin` (the read-only ledger, with the columns every ledger shows)."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_http_methods, require_POST

from likes_project.admin_kit import (
    AdminPage,
    ReadOnlyAdmin,
    ReasonForm,
    millis_field,
    query_initial,
    render_page,
    require_permission,
)
from likes_project.audit.services import Actor, admin_actor
from likes_project.errors import DomainError
from likes_project.ledgers.model import ApprovedLedgerModel, LedgerState
from likes_project.ledgers.service import ApprovedLedger


class LedgerPlanForm(forms.Form):
    """A plan's form: a ledger's adds what moves where; the reason is required and stripped."""

    reason = forms.CharField(max_length=4000, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                             help_text="Required; recorded in the ledger and the audit log.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["reason"] = self.fields.pop("reason")  # after what the ledger's form adds

    def clean_reason(self):
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("Give a reason.", code="reason_required")
        return reason


class LedgerConsole:
    """`url_prefix` names the pages ("counting_migration" -> "admin:counting_migration_approve"); `title` is the
    ledger's noun in titles and messages ("Migration"); `abort_page` and `aborted_message` are the hooks."""

    def __init__(self, ledger: ApprovedLedger, *, url_prefix: str, title: str):
        self.ledger, self.url_prefix, self.title = ledger, url_prefix, title
        self.approve_view = require_POST(self._approve)
        self.resume_view = require_POST(self._resume)
        self.abort_view = require_http_methods(["GET", "POST"])(self._abort)

    # --- hooks ----------------------------------------------------------------------------------------------

    def abort_page(self, request, admin_site, m: ApprovedLedgerModel, form):
        """The abort form's page (GET, or a POST without a reason)."""
        noun = self.ledger.noun
        return render_page(request, admin_site, "admin_kit/form_page.html", title=f"Abort {noun} {m.pk}", form=form,
                           submit=f"Abort the {noun}", intro=f"{self.title} {m.pk} is {m.state}.")

    def aborted_message(self, before: ApprovedLedgerModel, aborted: ApprovedLedgerModel) -> str:
        return f"Aborted {self.ledger.noun} {aborted.pk} (it was {before.state})."

    # --- the pages ------------------------------------------------------------------------------------------

    def change_url(self, ledger_id) -> str:
        meta = self.ledger.model._meta
        return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[ledger_id])

    def changelist_url(self) -> str:
        meta = self.ledger.model._meta
        return reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")

    def plan_page(self, *, form: Callable[[dict | None], forms.Form],
                  plan: Callable[[dict, Actor], ApprovedLedgerModel], error_fields: dict[str, str],
                  planned: Callable[[ApprovedLedgerModel], str], title: str, body_class: str,
                  intro: Callable[[], str]) -> AdminPage:
        """The Plan page (`plan_permission`): `form(data)` is the form, `plan(cleaned_data, actor)` the ledger's plan
        service; a refusal is an error on the field `error_fields` names for its code (else above the form) and
        writes nothing. A plan goes to the ledger's page with `planned(m)`; nothing runs until another operator
        approves it. A GET's query parameters that name the form's fields fill it in (the hot-spot panel's suggested
        move links here); nothing is planned until the operator submits it."""
        noun = self.ledger.noun

        @require_http_methods(["GET", "POST"])
        def view(request, *, admin_site):
            require_permission(request, self.ledger.plan_permission)
            bound = form(request.POST if request.method == "POST" else None)
            bound.initial.update(query_initial(request, type(bound)))  # a link that opens the plan filled in
            if bound.is_valid():
                try:
                    m = plan(bound.cleaned_data, admin_actor(request.user))
                except DomainError as exc:
                    bound.add_error(error_fields.get(exc.code), f"{exc.message} ({exc.code})")
                else:
                    messages.success(request, f"{planned(m)} It waits for another operator's approval.")
                    return HttpResponseRedirect(self.change_url(m.pk))
            return render_page(request, admin_site, "admin_kit/form_page.html", title=title, form=bound,
                               submit=f"Plan the {noun}", body_class=body_class, intro=intro())

        return AdminPage("plan/", view, name=f"{self.url_prefix}_plan", title=title,
                         permission=self.ledger.plan_permission)

    def pages(self) -> list[AdminPage]:
        """Approve, Resume and Abort, reached from a ledger's page (not listed on the index)."""
        noun = self.ledger.noun
        return [AdminPage(f"<int:ledger_id>/{step}/", view, name=f"{self.url_prefix}_{step}", title=f"{title} a {noun}",
                          permission=self.ledger.approve_permission, listed=False)
                for step, view, title in [("approve", self.approve_view, "Approve"),
                                          ("resume", self.resume_view, "Resume"), ("abort", self.abort_view, "Abort")]]

    def offers(self, user, m: ApprovedLedgerModel) -> dict[str, bool]:
        """Which buttons a ledger's page offers `user` (the service decides again on the POST)."""
        approver = user.has_perm(self.ledger.approve_permission)
        return {"approve": approver and m.state == LedgerState.AWAITING_APPROVAL,
                "resume": approver and m.resumable,
                "abort": approver and self.ledger.abort_refusal(m) is None,
                "own": m.requested_by == user.get_username()}

    def change_context(self, request, m: ApprovedLedgerModel | None) -> dict:
        """The ledger page's extra context: its offers, and whether its job still runs."""
        from likes_project.opsjobs.models import OpsJob

        if m is None:
            return {}
        job = OpsJob.objects.filter(pk=m.job_id).only("status", "finished_at").first() if m.job_id else None
        return {"offers": self.offers(request.user, m), "running": job is not None and not job.finished,
                "ledger_urls": {step: f"admin:{self.url_prefix}_{step}" for step in ("approve", "resume", "abort")}}

    def _refused(self, request, ledger_id, what: str, exc: DomainError) -> HttpResponseRedirect:
        messages.error(request, f"{self.title} {ledger_id} was not {what} ({exc.code}): {exc.message}")
        known = self.ledger.model.objects.filter(pk=ledger_id).exists()
        return HttpResponseRedirect(self.change_url(ledger_id) if known else self.changelist_url())

    def _started(self, request, m: ApprovedLedgerModel, what: str) -> HttpResponseRedirect:
        messages.success(request, format_html('{} {} {}: it is {}; the system runs it as <a href="{}">job {}</a>.',
                                              what, self.ledger.noun, m.pk, m.state,
                                              reverse("admin:opsjobs_opsjob_change", args=[m.job_id]), m.job_id))
        return HttpResponseRedirect(self.change_url(m.pk))

    def _start(self, request, ledger_id: int, step: Callable[..., ApprovedLedgerModel], *, done: str, started: str):
        """A button that starts the system's job through the ledger's `step` (approve, resume): the ledger's page
        with a link to the job, or the refusal as a message."""
        require_permission(request, self.ledger.approve_permission)
        try:
            m = step(ledger_id, actor=admin_actor(request.user))
        except DomainError as exc:
            return self._refused(request, ledger_id, done, exc)
        return self._started(request, m, started)

    def _approve(self, request, ledger_id: int, *, admin_site):
        """The Approve button: PREPARE, and the system's job is started. The service refuses the requester
        (superusers included)."""
        return self._start(request, ledger_id, self.ledger.approve, done="approved", started="Approved")

    def _resume(self, request, ledger_id: int, *, admin_site):
        """The Resume button: a new job goes on from the ledger."""
        return self._start(request, ledger_id, self.ledger.resume, done="resumed", started="Resumed")

    def _abort(self, request, ledger_id: int, *, admin_site):
        """A reason first (GET shows the form), then the service's abort; refused after the switch: a message."""
        require_permission(request, self.ledger.approve_permission)
        try:
            m = self.ledger.get(ledger_id)
        except DomainError as exc:
            return self._refused(request, ledger_id, "aborted", exc)
        form = ReasonForm(request.POST if request.method == "POST" else None)
        if not form.is_valid():
            return self.abort_page(request, admin_site, m, form)
        try:
            aborted = self.ledger.abort(m.pk, actor=admin_actor(request.user), reason=form.cleaned_data["reason"])
        except DomainError as exc:
            return self._refused(request, m.pk, "aborted", exc)
        messages.success(request, self.aborted_message(m, aborted))
        return HttpResponseRedirect(self.change_url(aborted.pk))


def json_block(value, css: str) -> str:
    return format_html('<pre class="{}">{}</pre>', css, json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False,
                                                                    default=str))


def json_field(attr: str, css: str, description: str, *, empty: str | None = None):
    """A ModelAdmin's read-only field showing the object's `attr` as a `json_block` of class `css`; with `empty`,
    that text instead while the value is empty (not yet recorded)."""

    @admin.display(description=description)
    def field(self, obj) -> str:
        value = getattr(obj, attr)
        return empty if empty is not None and not value else json_block(value, css)

    return field


class LedgerAdmin(ReadOnlyAdmin):
    """A ledger, read-only, with its console's buttons on its page. `console` is the ledger's LedgerConsole;
    `css` prefixes the classes of what it renders ("migration" -> "migration-error"). Its `readonly_fields` are
    its own: the columns below are added. Its templates are `<app>/admin/<model>_change_list.html` (the Plan
    link) and `..._change_form.html` (the buttons)."""

    console: LedgerConsole
    css: str
    ordering = ("-id",)
    ledger_fields = ("state_code", "copy_progress", "write_pause", "verify_json", "jobs_table", "audit_link",
                     "report_json")

    @property
    def change_list_template(self) -> str:
        return f"{self.opts.app_label}/admin/{self.opts.model_name}_change_list.html"

    @property
    def change_form_template(self) -> str:
        return f"{self.opts.app_label}/admin/{self.opts.model_name}_change_form.html"

    def get_readonly_fields(self, request, obj=None):
        return (*self.ledger_fields, *super().get_readonly_fields(request, obj))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = {"ledger_css": self.css,
                 **self.console.change_context(request, self.get_object(request, unquote(object_id)))}
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    @admin.display(description="state", ordering="state")
    def state_code(self, m: ApprovedLedgerModel) -> str:
        # As the commands and the ledger spell it (CATCHING_UP), not its label.
        return format_html('<span class="state-code">{}</span>', m.state)

    @admin.display(description="copied / rows to copy", ordering="copied_rows")
    def copy_progress(self, m: ApprovedLedgerModel) -> str:
        return f"{m.copied_rows} / {m.rows_to_copy}"

    write_pause = millis_field("write_pause_ms", "write pause")

    @admin.display(description="error")
    def error_text(self, m: ApprovedLedgerModel) -> str:
        return format_html('<span class="{}-error">{}</span>', self.css, m.error[:200]) if m.error else "-"

    @admin.display(description="verify result")
    def verify_json(self, m: ApprovedLedgerModel) -> str:
        return json_block(m.verify_result, f"{self.css}-verify") if m.verify_result else "not verified yet"

    @admin.display(description="ops jobs")
    def jobs_table(self, m: ApprovedLedgerModel) -> str:
        """Every job that ran this ledger (approve, resumes, the sweeper's restarts)."""
        from likes_project.opsjobs.models import OpsJob

        led = self.console.ledger
        jobs = OpsJob.objects.filter(pk=m.job_id) | OpsJob.objects.filter(kind=led.job_kind,
                                                                           **{f"params__{led.id_param}": m.pk})
        shown = list(jobs.order_by("id")[:20])
        if not shown:
            return "-"
        rows = format_html_join("", '<tr class="{}-job"><td><a href="{}">{}</a></td><td>{}</td><td>{}</td>'
                                    "<td>{}</td></tr>",
                                ((self.css, reverse("admin:opsjobs_opsjob_change", args=[j.pk]), j.pk, j.status,
                                  j.actor, j.message) for j in shown))
        return format_html('<table class="{}-jobs"><thead><tr><th>job</th><th>status</th><th>by</th>'
                           "<th>message</th></tr></thead><tbody>{}</tbody></table>", self.css, rows)

    @admin.display(description="audit")
    def audit_link(self, m: ApprovedLedgerModel) -> str:
        led = self.console.ledger
        url = reverse("admin:audit_auditrecord_changelist") + "?" + urlencode({"target_type": led.target_type,
                                                                                "target_id": m.pk})
        return format_html('<a href="{}">the audit records of {} {}</a>', url, led.job_target, m.pk)

    @admin.display(description="report (the show command's --json)")
    def report_json(self, m: ApprovedLedgerModel) -> str:
        return json_block(self.console.ledger.report(m), f"{self.css}-report")
