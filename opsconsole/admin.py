"""The console's admin for two third-party model families (issue 10, D48), replacing the ModelAdmins
their packages register (this module is autodiscovered after theirs: opsconsole is the last app).

* django-celery-beat: beat's own admin let anyone who may *view* a periodic task enable, disable or run
  it, and edited schedules that beat overwrites from `CELERY_BEAT_SCHEDULE` on its next start. Here
  every table is read-only; the only writes are the actions enable / disable / run now, which ask for a
  reason, need `django_celery_beat.change_periodictask` and are audited (`opsconsole.services_beat`).
* DRF tokens: DRF's admin listed every key in clear and minted a token for any user, unaudited. Here a
  token shows its user, creation time and fingerprint, never its key; creating one
  (`authtoken.add_token`, with a reason) shows the key once, in the response to that POST, and nowhere
  after; revoking one (`authtoken.delete_token`, with a reason) replaces Django's delete page. Both
  audited (`likes_project.api_tokens`).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponseRedirect
from django.urls import reverse
from django_celery_beat.models import ClockedSchedule, CrontabSchedule, IntervalSchedule, PeriodicTask, SolarSchedule
from rest_framework.authtoken.admin import TokenChangeList
from rest_framework.authtoken.models import TokenProxy

from likes_project.admin_kit import ReadOnlyAdmin, ReasonForm, csrf_protect_m, preset_action, reason_action, render_page
from likes_project.api_tokens import (
    TOKEN_ADD_PERMISSION,
    TOKEN_REVOKE_PERMISSION,
    TOKEN_VIEW_PERMISSION,
    token_create,
    token_fingerprint,
    token_revoke,
)
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError
from likes_project.ledgers.console import json_field
from opsconsole.models import DrillRecord
from opsconsole.services_beat import BEAT_OPERATE_PERMISSION, periodic_tasks_run_now, periodic_tasks_set_enabled

for _model in (PeriodicTask, IntervalSchedule, CrontabSchedule, SolarSchedule, ClockedSchedule, TokenProxy):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


# --- Celery beat -------------------------------------------------------------------------------


@admin.register(PeriodicTask)
class PeriodicTaskAdmin(ReadOnlyAdmin):
    """The beat schedule as beat runs it. Enable / disable / run now are the only writes."""

    list_display = ("name", "enabled", "task", "schedule_text", "last_run_at", "total_run_count", "queue")
    list_filter = ("enabled",)
    search_fields = ("name", "task")
    ordering = ("name",)
    list_select_related = ("interval", "crontab", "solar", "clocked")
    actions = ["enable_tasks", "disable_tasks", "run_tasks_now"]

    @admin.display(description="schedule")
    def schedule_text(self, task: PeriodicTask) -> str:
        return str(task.interval or task.crontab or task.solar or task.clocked or "")

    def has_operate_permission(self, request) -> bool:
        return request.user.has_perm(BEAT_OPERATE_PERMISSION)

    def _set_enabled(self, request, queryset, *, enabled: bool):
        verb = "Enable" if enabled else "Disable"

        def apply(ids, reason):
            out = periodic_tasks_set_enabled(ids=ids, enabled=enabled, actor=admin_actor(request.user), reason=reason)
            done = f"{verb}d {len(out.changed)} periodic task(s)"
            return done + (f"; already {verb.lower()}d: {', '.join(out.unchanged)}." if out.unchanged else ".")

        intro = ("Beat starts sending these tasks again within seconds." if enabled else
                 "Beat stops sending these tasks until they are enabled again (a beat restart does not undo this). "
                 "Most of them are sweepers that guarantee progress: the work they do stops with them.")
        return reason_action(self, request, queryset, title=f"{verb} periodic tasks", intro=intro, submit=verb,
                             apply=apply)

    enable_tasks = preset_action(_set_enabled, "Enable the selected periodic tasks", permissions=["operate"],
                                 enabled=True)
    disable_tasks = preset_action(_set_enabled, "Disable the selected periodic tasks", permissions=["operate"],
                                  enabled=False)

    @admin.action(description="Run the selected periodic tasks now (once)", permissions=["operate"])
    def run_tasks_now(self, request, queryset):
        def apply(ids, reason):
            sent = periodic_tasks_run_now(ids=ids, actor=admin_actor(request.user), reason=reason)
            return f"Sent {len(sent)} task(s) to the workers: {', '.join(sent)}."

        return reason_action(self, request, queryset, title="Run periodic tasks now", submit="Run now",
                             intro="Each selected task is sent to the workers once, now, as beat would send it; "
                                   "its schedule is unchanged.", apply=apply)


@admin.register(IntervalSchedule)
class IntervalScheduleAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "every", "period")


@admin.register(CrontabSchedule)
class CrontabScheduleAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "human_readable", "timezone")


@admin.register(SolarSchedule)
class SolarScheduleAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "event", "latitude", "longitude")


@admin.register(ClockedSchedule)
class ClockedScheduleAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "clocked_time")


# --- API tokens ----------------------------------------------------------------------------------


class TokenCreateForm(ReasonForm):
    username = forms.CharField(max_length=150, help_text="The active user the token will act as on the API.")

    field_order = ("username", "reason")

    def clean_username(self):
        user = get_user_model().objects.filter(username=self.cleaned_data["username"].strip()).first()
        if user is None:
            raise ValidationError("No user by this name.", code="user_not_found")
        return user


@admin.register(TokenProxy)
class ApiTokenAdmin(admin.ModelAdmin):
    """A token's row is addressed by its user's id (DRF's proxy), so no URL carries a key either."""

    list_display = ("user", "created", "fingerprint")
    list_filter = ("created",)
    search_fields = ("user__username",)
    search_help_text = "Username"
    ordering = ("user__username",)
    list_select_related = ("user",)
    fields = readonly_fields = ("user", "created", "fingerprint")
    actions = None  # a changelist action would select rows by key (the proxy maps pk to the user id)

    @admin.display(description="key fingerprint")
    def fingerprint(self, token: TokenProxy) -> str:
        return token_fingerprint(token.key)

    def get_changelist(self, request, **kwargs):
        return TokenChangeList  # rows link to /<user id>/change/

    def get_object(self, request, object_id, from_field=None):
        try:
            return self.get_queryset(request).get(user_id=int(object_id))
        except (ValueError, TokenProxy.DoesNotExist):
            return None

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm(TOKEN_VIEW_PERMISSION)

    def has_add_permission(self, request):
        return request.user.has_perm(TOKEN_ADD_PERMISSION)

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return request.user.has_perm(TOKEN_REVOKE_PERMISSION)

    def _changelist_url(self) -> str:
        return reverse("admin:authtoken_tokenproxy_changelist", current_app=self.admin_site.name)

    @csrf_protect_m
    def add_view(self, request, form_url="", extra_context=None):
        """GET: the form. A valid POST issues the token and answers with its key, once: the page is not
        cached (`admin_view`'s never_cache) and nothing else (message, LogEntry, audit) holds the key."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = TokenCreateForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            try:
                created = token_create(user_id=form.cleaned_data["username"].pk, actor=admin_actor(request.user),
                                       reason=form.cleaned_data["reason"])
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                self.log_addition(request, TokenProxy.objects.get(user_id=created.user_id),
                                  f"Issued through the console ({created.fingerprint}).")
                return render_page(request, self.admin_site, "opsconsole/token_created.html",
                                   title="API token issued", created=created, opts=self.opts,
                                   changelist_url=self._changelist_url())
        return render_page(request, self.admin_site, "admin_kit/form_page.html", title="Issue an API token",
                           form=form, submit="Issue token",
                           intro="The token lets whoever holds it act as this user on the API. Its key is shown "
                                 "once, on the next page; the issue is audited with your reason.")

    @csrf_protect_m
    def delete_view(self, request, object_id, extra_context=None):
        """Revoke, with a reason (instead of Django's delete confirmation)."""
        token = self.get_object(request, unquote(object_id))
        if token is None:
            self.message_user(request, "That user has no API token.", messages.WARNING)
            return HttpResponseRedirect(self._changelist_url())
        if not self.has_delete_permission(request, token):
            raise PermissionDenied
        form = ReasonForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            try:
                revoked = token_revoke(user_id=token.user_id, actor=admin_actor(request.user),
                                       reason=form.cleaned_data["reason"])
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                self.log_deletions(request, [token])
                self.message_user(request, f"Revoked the API token {revoked.fingerprint} of {revoked.username}.")
                return HttpResponseRedirect(self._changelist_url())
        return render_page(request, self.admin_site, "admin_kit/form_page.html",
                           title=f"Revoke the API token of {token.user.get_username()}", form=form,
                           submit="Revoke token",
                           intro=f"Token {token_fingerprint(token.key)}, issued {token.created:%Y-%m-%d %H:%M} UTC. "
                                 "Clients using it are refused from their next request on; the revoke is audited "
                                 "with your reason.")


# --- drill records (spec TEST-5, issue 33 §2) ----------------------------------------------------


@admin.register(DrillRecord)
class DrillRecordAdmin(ReadOnlyAdmin):
    """Every fault drill run, as the runner kept it: nothing here is edited (`manage.py drill_records` lists
    the same)."""

    list_display = ("started_at", "drill", "spec_numbers", "verdict", "stage", "topology", "code_version")
    list_filter = ("verdict", "drill", "topology")
    search_fields = ("drill", "run_id", "code_version")
    fields = ("drill", "spec_numbers", "run_id", "seed", "stage", "topology", "code_version", "requested_by",
              "started_at", "finished_at", "verdict", "expected", "open_issues", "history_file", "actual_view")
    readonly_fields = fields
    actual_view = json_field("actual", "drill-verdict", "what it saw (the verdict)")
