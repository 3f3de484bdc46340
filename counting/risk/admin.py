"""The risk ledger in the console (issue 14 §4, OPS-6): decisions listed and shown with their users and
counts, read-only; "Request a risk hide" (operators), Approve (approvers, never their own: the service
refuses it) and "Request a restore" on a decision's page. Every write goes through `counting.risk.services`
(permission-checked there and here, audited); nothing here takes a count."""

from __future__ import annotations

from collections.abc import Callable

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_http_methods, require_POST

from counting import routing
from counting.risk import services
from counting.risk.models import RiskDecision, RiskKind, RiskRelationState, RiskStatus
from counting.risk.selectors import risk_hidden_counts
from likes_project.admin_kit import AdminPage, ReadOnlyAdmin, ReasonForm, render_page, require_permission
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError

USERS_SHOWN = 200


def _decision_url(pk: int) -> str:
    return reverse("admin:risk_riskdecision_change", args=[pk])


class RiskHideForm(forms.Form):
    video = forms.CharField(max_length=64, label="Video id")
    users = forms.CharField(widget=forms.Textarea(attrs={"rows": 8, "cols": 40}), label="Usernames",
                            help_text="One a line: every like of these accounts on the video is hidden.")
    reason = forms.CharField(max_length=512, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             help_text="Required; recorded in the ledger and the audit log.")
    evidence = forms.CharField(required=False, max_length=services.EVIDENCE_MAX,
                               widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                               help_text="Free text kept with the decision (what shows it is a ring).")


# The service's refusals, shown on the field they are about (the rest above the form).
_ERROR_FIELDS = {"video_not_found": "video", "users_required": "users", "unknown_user": "users",
                 "too_many_users": "users", "reason_required": "reason", "evidence_too_long": "evidence"}


@require_http_methods(["GET", "POST"])
def risk_hide_view(request, *, admin_site):
    """Request a hide (AWAITING_APPROVAL) through `risk_hide_request`; the decision's page follows. A
    refusal is a form error and writes nothing."""
    require_permission(request, services.REQUEST_PERMISSION)
    form = RiskHideForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            d = services.risk_hide_request(actor=admin_actor(request.user), video_id=form.cleaned_data["video"],
                                           usernames=form.cleaned_data["users"].split(),
                                           reason=form.cleaned_data["reason"],
                                           evidence=form.cleaned_data["evidence"])
        except DomainError as exc:
            form.add_error(_ERROR_FIELDS.get(exc.code), f"{exc.message} ({exc.code})")
        else:
            messages.success(request, f"Requested risk decision {d.pk}: hide {len(d.user_ids)} users on "
                                      f"{d.video_id}. It waits for another operator's approval.")
            return HttpResponseRedirect(_decision_url(d.pk))
    return render_page(request, admin_site, "admin_kit/form_page.html", title="Request a risk hide", form=form,
                       submit="Request the hide", body_class="risk-hide-request",
                       intro="Hides the likes of these accounts on one video from its displayed count and its "
                             "likers list. The likes themselves are kept unchanged. Nothing is hidden until "
                             "another operator approves; then the system applies it as an ops job.")


class RiskAccountForm(forms.Form):
    username = forms.CharField(max_length=150, label="Account (username)")
    level = forms.ChoiceField(choices=[("downweight", "down-weight: its likes leave the public counts"),
                                       ("freeze", "freeze: that, and its commands are refused"),
                                       ("clear", "clear: back to none, its likes count again")])
    reason = forms.CharField(max_length=512, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             help_text="Required; recorded in the ledger and the audit log.")
    evidence = forms.CharField(required=False, max_length=services.EVIDENCE_MAX,
                               widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                               help_text="Free text kept with the decision.")


@require_http_methods(["GET", "POST"])
def risk_account_view(request, *, admin_site):
    """Request an account's risk level (issue 32 §1; `manage.py risk_account`) through `risk_account_request`;
    approved on the decision's page like a hide. A refusal is a form error and writes nothing."""
    from counting.risk import accounts

    require_permission(request, services.REQUEST_PERMISSION)
    form = RiskAccountForm(request.POST if request.method == "POST" else None,
                           initial={k: v for k, v in request.GET.items() if k in ("username", "level")})
    if form.is_valid():
        try:
            d = accounts.risk_account_request(actor=admin_actor(request.user), **form.cleaned_data)
        except DomainError as exc:
            form.add_error({"unknown_user": "username", "reason_required": "reason"}.get(exc.code),
                           f"{exc.message} ({exc.code})")
        else:
            messages.success(request, f"Requested risk decision {d.pk}: account {form.cleaned_data['username']} "
                                      f"{d.params['level']}. It waits for another operator's approval.")
            return HttpResponseRedirect(_decision_url(d.pk))
    return render_page(request, admin_site, "admin_kit/form_page.html", title="Request an account's risk level",
                       form=form, submit="Request the level", body_class="risk-account-request",
                       intro="Down-weight keeps the account's likes and takes them out of every public count; freeze "
                             "also refuses its commands (403 account_frozen); clear brings the likes back. Nothing "
                             "changes until another operator approves; then the system applies it as an ops job.")


def _refused(request, risk_id: int, message: str) -> HttpResponseRedirect:
    """A step the service refused: the message, and back to the decision's page (the list when there is none)."""
    messages.error(request, message)
    known = RiskDecision.objects.filter(pk=risk_id).exists()
    return HttpResponseRedirect(_decision_url(risk_id) if known else reverse("admin:risk_riskdecision_changelist"))


def _reason_step(request, admin_site, risk_id: int, *, permission: str, step: Callable[[str], RiskDecision],
                 refused: str, done: Callable[[RiskDecision], str], **page):
    """A step on a decision that needs a reason first: GET (or a POST without one) shows the form (`page` is its
    title, submit, body_class and intro); then `step(reason)` through its service, and the decision it returns
    is shown with `done(d)`. A refusal is `refused` with the service's code and message."""
    require_permission(request, permission)
    form = ReasonForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            d = step(form.cleaned_data["reason"])
        except DomainError as exc:
            return _refused(request, risk_id, f"{refused} ({exc.code}): {exc.message}")
        messages.success(request, done(d))
        return HttpResponseRedirect(_decision_url(d.pk))
    return render_page(request, admin_site, "admin_kit/form_page.html", form=form, **page)


@require_POST
def risk_approve_view(request, risk_id: int, *, admin_site):
    """The Approve button (POST only): APPROVED and the system's job started (nothing runs here)."""
    require_permission(request, services.APPROVE_PERMISSION)
    try:
        d = services.risk_approve(decision_id=risk_id, actor=admin_actor(request.user))
    except DomainError as exc:
        return _refused(request, risk_id, f"Risk decision {risk_id} was not approved ({exc.code}): {exc.message}")
    job_url = reverse("admin:opsjobs_opsjob_change", args=[d.job_id])
    messages.success(request, format_html('Approved risk decision {}; the system applies it as '
                                          '<a href="{}">job {}</a>.', d.pk, job_url, d.job_id))
    return HttpResponseRedirect(_decision_url(d.pk))


@require_http_methods(["GET", "POST"])
def risk_restore_view(request, risk_id: int, *, admin_site):
    """Request the restore of an applied hide: a reason first, then `risk_restore_request` (a new decision,
    approved the same way)."""
    return _reason_step(
        request, admin_site, risk_id, permission=services.REQUEST_PERMISSION,
        step=lambda reason: services.risk_restore_request(actor=admin_actor(request.user), decision_id=risk_id,
                                                          reason=reason),
        refused=f"No restore of risk decision {risk_id}",
        done=lambda d: (f"Requested restore {d.pk} of risk decision {risk_id}. It waits for another "
                        "operator's approval."),
        title=f"Restore risk decision {risk_id}", submit="Request the restore", body_class="risk-restore-request",
        intro="A restore shows the hidden likes again once another operator approves it.")


@require_http_methods(["GET", "POST"])
def risk_reject_view(request, risk_id: int, *, admin_site):
    """Reject a decision that awaits approval: a reason first, then `risk_reject` (nothing is applied)."""
    return _reason_step(
        request, admin_site, risk_id, permission=services.APPROVE_PERMISSION,
        step=lambda reason: services.risk_reject(decision_id=risk_id, actor=admin_actor(request.user), reason=reason),
        refused=f"Risk decision {risk_id} was not rejected", done=lambda d: f"Rejected risk decision {d.pk}.",
        title=f"Reject risk decision {risk_id}", submit="Reject", body_class="risk-reject",
        intro="A rejected decision is kept in the ledger with its reason; nothing is applied.")


@admin.register(RiskDecision)
class RiskDecisionAdmin(ReadOnlyAdmin):
    """The risk ledger, read-only: every decision with its users, reason, evidence, requester and approver,
    and what it hides now."""

    list_display = ("id", "kind", "video_id", "status_code", "user_count", "hidden_now", "requested_by",
                    "approved_by", "created_at", "finished_at")
    list_filter = ("kind", "status")
    search_fields = ("=id", "=video_id", "=requested_by", "=approved_by", "reason")
    ordering = ("-id",)
    fields = ("kind", "video_id", "status_code", "restores_link", "reason", "evidence", "user_count", "hidden_now",
              "display_counts", "users_table", "requested_by", "requested_channel", "approved_by", "approved_at",
              "risk_version", "params_hash", "job_link", "applied_users", "error", "created_at", "finished_at")
    readonly_fields = ("status_code", "restores_link", "user_count", "hidden_now", "display_counts", "users_table",
                       "job_link")
    change_form_template = "risk/admin/riskdecision_change_form.html"
    change_list_template = "risk/admin/riskdecision_change_list.html"
    pages = [
        AdminPage("request/", risk_hide_view, name="risk_hide_request", title="Request a risk hide",
                  permission=services.REQUEST_PERMISSION),
        AdminPage("account/", risk_account_view, name="risk_account_request", title="Request an account's risk level",
                  permission=services.REQUEST_PERMISSION),
        AdminPage("<int:risk_id>/approve/", risk_approve_view, name="risk_approve", title="Approve a risk decision",
                  permission=services.APPROVE_PERMISSION, listed=False),
        AdminPage("<int:risk_id>/reject/", risk_reject_view, name="risk_reject", title="Reject a risk decision",
                  permission=services.APPROVE_PERMISSION, listed=False),
        AdminPage("<int:risk_id>/restore/", risk_restore_view, name="risk_restore", title="Restore a risk hide",
                  permission=services.REQUEST_PERMISSION, listed=False),
    ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        d = self.get_object(request, unquote(object_id))
        extra = {}
        if d is not None:
            user = request.user
            extra = {"offers": {
                "approve": user.has_perm(services.APPROVE_PERMISSION) and d.status == RiskStatus.AWAITING_APPROVAL,
                "reject": user.has_perm(services.APPROVE_PERMISSION) and d.status == RiskStatus.AWAITING_APPROVAL,
                "restore": (user.has_perm(services.REQUEST_PERMISSION) and d.kind == RiskKind.HIDE
                            and d.status in (RiskStatus.APPLIED, RiskStatus.FAILED)),
                "own": d.requested_by == user.get_username()},
                "running": d.status in (RiskStatus.APPROVED, RiskStatus.APPLYING)}
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    @admin.display(description="status", ordering="status")
    def status_code(self, d: RiskDecision) -> str:
        return format_html('<span class="risk-status">{}</span>', d.status)

    @admin.display(description="users")
    def user_count(self, d: RiskDecision) -> int:
        return len(d.user_ids)

    @admin.display(description="hidden now")
    def hidden_now(self, d: RiskDecision) -> int:
        return services.risk_hidden_count(d)

    @admin.display(description="restores")
    def restores_link(self, d: RiskDecision) -> str:
        return "-" if d.restores is None else format_html('<a href="{}">risk {}</a>', _decision_url(d.restores),
                                                          d.restores)

    @admin.display(description="job")
    def job_link(self, d: RiskDecision) -> str:
        return "-" if d.job_id is None else format_html(
            '<a href="{}">job {}</a>', reverse("admin:opsjobs_opsjob_change", args=[d.job_id]), d.job_id)

    @admin.display(description="video's display (raw - risk hidden - policy hidden = displayed)")
    def display_counts(self, d: RiskDecision) -> str:
        from counting.models import VideoDisplayCount

        row = VideoDisplayCount.objects.filter(video_id=d.video_id).first()
        if row is None:
            return "no display snapshot yet"
        try:
            liked_hidden = risk_hidden_counts(routing.active(), [d.video_id]).get(d.video_id, 0)
        except routing.NoActiveGeneration:
            liked_hidden = "?"
        return format_html('<span class="risk-display">{} - {} - {} = {}</span> (hidden likes now in the '
                           'projection: {})', row.raw_active_count, row.risk_hidden_count, row.policy_hidden_count,
                           row.display_count, liked_hidden)

    @admin.display(description=f"users (first {USERS_SHOWN})")
    def users_table(self, d: RiskDecision) -> str:
        ids = d.user_ids[:USERS_SHOWN]
        names = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
        hidden = set(RiskRelationState.objects.filter(video_id=d.video_id, user_id__in=ids, hidden=True)
                     .values_list("user_id", flat=True))
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                                ((u, names.get(u, "?"), "hidden" if u in hidden else "shown") for u in ids))
        return format_html('<table class="risk-users"><tr><th>user id</th><th>username</th><th>now</th></tr>{}'
                           "</table>", rows)
