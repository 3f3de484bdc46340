"""The admin kit every app's `admin.py` uses: read-only admins, admins whose writes go through a
service, extra pages declared by a ModelAdmin, and admin actions that start ops jobs.

Only Django's public admin API is used. The console's `AdminSite` (`opsconsole.sites`) mounts the
declared pages and lists them on the index; an app never patches the site.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IS_POPUP_VAR, TO_FIELD_VAR
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.decorators import method_decorator
from django.utils.http import urlencode
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods

from likes_project.errors import DomainError

csrf_protect_m = method_decorator(csrf_protect)


class ReadOnlyAdmin(admin.ModelAdmin):
    """List and view only: nothing can be added, changed or deleted here."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ServiceWriteAdmin(admin.ModelAdmin):
    """A ModelAdmin whose writes go through a service: `save_via_service` for add and change,
    `delete_via_service` for delete. Each service opens its own durable transaction, so these POSTs
    are handled here, outside the transaction Django's own change and delete views open around a save
    (house style: admin code never wraps a service). A DomainError from the service becomes an error on
    the re-rendered form, and nothing (not even the admin LogEntry) is written for that save. GETs are
    Django's own views."""

    def save_via_service(self, request, obj, form, change) -> None:  # pragma: no cover - abstract
        raise NotImplementedError  # each admin names the service that saves its model

    def delete_via_service(self, request, obj) -> None:  # pragma: no cover - abstract
        raise PermissionDenied  # an admin that allows deleting names the service that deletes

    def delete_model(self, request, obj):
        self.delete_via_service(request, obj)

    def delete_queryset(self, request, queryset):
        # One service call (and audit record) per row, each in its own transaction.
        for obj in list(queryset):
            try:
                self.delete_via_service(request, obj)
            except DomainError as exc:
                self.message_user(request, f"{obj}: {exc.message}", messages.ERROR)

    @csrf_protect_m
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method != "POST":
            return super().changeform_view(request, object_id, form_url, extra_context)
        to_field = request.POST.get(TO_FIELD_VAR, request.GET.get(TO_FIELD_VAR))
        add = object_id is None
        obj = None
        if add:
            if not self.has_add_permission(request):
                raise PermissionDenied
        else:
            obj = self.get_object(request, unquote(object_id), to_field)
            if obj is None:
                self.message_user(request, "That object no longer exists.", messages.WARNING)
                return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
                                                    current_app=self.admin_site.name))
            if not self.has_change_permission(request, obj):
                raise PermissionDenied
        fieldsets = self.get_fieldsets(request, obj)
        form_class = self.get_form(request, obj, change=not add, fields=flatten_fieldsets(fieldsets))
        form = form_class(request.POST, request.FILES, instance=obj)
        if form.is_valid():
            new_object = self.save_form(request, form, change=not add)
            try:
                self.save_via_service(request, new_object, form, not add)
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                message = self.construct_change_message(request, form, [], add)
                if add:
                    self.log_addition(request, new_object, message)
                    return self.response_add(request, new_object)
                self.log_change(request, new_object, message)
                return self.response_change(request, new_object)
        return self._render_form_again(request, obj, form, fieldsets, to_field, form_url, extra_context)

    def _render_form_again(self, request, obj, form, fieldsets, to_field, form_url, extra_context):
        """The change form again, bound to what the operator sent, with the errors."""
        add = obj is None
        admin_form = helpers.AdminForm(form, list(fieldsets), self.get_prepopulated_fields(request, obj),
                                       self.get_readonly_fields(request, obj), model_admin=self)
        context = {
            **self.admin_site.each_context(request),
            "title": ("Add %s" if add else "Change %s") % self.opts.verbose_name,
            "subtitle": str(obj) if obj else None,
            "adminform": admin_form,
            "object_id": None if add else obj.pk,
            "original": obj,
            "is_popup": IS_POPUP_VAR in request.POST or IS_POPUP_VAR in request.GET,
            "to_field": to_field,
            "media": self.media + admin_form.media,
            "inline_admin_formsets": [],
            "errors": helpers.AdminErrorList(form, []),
            "preserved_filters": self.get_preserved_filters(request),
            **(extra_context or {}),
        }
        return self.render_change_form(request, context, add=add, change=not add, obj=obj, form_url=form_url)

    @csrf_protect_m
    def delete_view(self, request, object_id, extra_context=None):
        if request.method != "POST":
            return super().delete_view(request, object_id, extra_context)
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_delete_permission(request, obj):
            raise PermissionDenied
        obj_display, obj_id = str(obj), obj.pk
        try:
            self.delete_via_service(request, obj)
        except DomainError as exc:
            self.message_user(request, f"{obj_display}: {exc.message}", messages.ERROR)
            return HttpResponseRedirect(request.path)
        self.log_deletions(request, [obj])
        return self.response_delete(request, obj_display, obj_id)


class PauseReasonForm(forms.ModelForm):
    """A pause switch's form: a reason is required to pause (it goes into the audit record)."""

    pause_subject = "this"

    class Meta:  # subclasses: `class Meta(PauseReasonForm.Meta): model = ...; fields = (<key>, "paused", "reason")`
        help_texts = {"reason": "Required when pausing; recorded in the audit log."}

    def clean(self):
        cleaned = super().clean()
        cleaned["reason"] = (cleaned.get("reason") or "").strip()
        if cleaned.get("paused") and not cleaned["reason"]:
            self.add_error("reason", f"Give a reason for pausing {self.pause_subject}.")
        return cleaned


class PauseSwitchAdmin(ServiceWriteAdmin):
    """A runtime pause switch keyed by `key_field` (a consumer, a video): added or changed through its
    service (`set_switch`), never deleted (resume it instead)."""

    key_field: str

    def get_list_display(self, request):
        return (self.key_field, "paused", "reason", "updated_by", "updated_at")

    def get_fields(self, request, obj=None):
        fields = (self.key_field, "paused", "reason")
        return fields if obj is None else (*fields, "updated_by", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else (self.key_field, "updated_by", "updated_at")

    def has_delete_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        # Pausing a key never paused before creates its row: the same act as changing an existing one.
        return self.has_change_permission(request)

    def set_switch(self, *, key: str, paused: bool, reason: str, actor):  # pragma: no cover - abstract
        raise NotImplementedError  # each switch names its service

    def save_via_service(self, request, obj, form, change):
        from likes_project.audit.services import admin_actor

        stored = self.set_switch(key=getattr(obj, self.key_field), paused=form.cleaned_data["paused"],
                                 reason=form.cleaned_data["reason"], actor=admin_actor(request.user))
        adopt_stored_row(obj, stored)


def adopt_stored_row(obj, stored) -> None:
    """Make the admin's unsaved instance stand for the row the service stored, so the LogEntry and
    the redirect after saving point at it."""
    for field in stored._meta.concrete_fields:
        setattr(obj, field.attname, getattr(stored, field.attname))
    obj._state.adding = False
    obj._state.db = stored._state.db


def preset_action(method: Callable, description: str, *, permissions: list[str], **arguments):
    """An admin action that is a ModelAdmin's `method(self, request, queryset, **arguments)` with its arguments
    fixed, for a family of actions that are one step with different settings (set / clear a switch, take / ignore
    / reopen a diff): `take = preset_action(_set_status, "Take the selected diffs", permissions=["triage"],
    to=DiffStatus.FIXING)` in the class body, after `_set_status`, and listed by that name in `actions`."""

    @admin.action(description=description, permissions=permissions)
    def action(modeladmin, request, queryset):
        return method(modeladmin, request, queryset, **arguments)

    return action


class RuntimeSwitchAdmin(PauseSwitchAdmin):
    """A runtime switch of `likes_project.switches` (issue 14 §3): the key is picked from the keys its
    kind accepts, and setting or clearing goes through `switch_set` (checked, audited), from the form or
    from the changelist's actions, each of which asks for a reason. Permission: the model's change
    permission (adding one is the same action on a key that has no row yet, and needs the add one too)."""

    actions = ["switches_set", "switches_clear"]
    list_filter = ("paused",)

    @property
    def key_field(self) -> str:
        return self.model._meta.pk.name

    def get_form(self, request, obj=None, change=False, **kwargs):
        key_field, switch_model = self.key_field, self.model

        class Form(PauseReasonForm):
            pause_subject = f"the {switch_model.switch_kind} switch"

            class Meta(PauseReasonForm.Meta):
                model, fields = switch_model, (key_field, "paused", "reason")

            def __init__(self, *args, **kw):
                super().__init__(*args, **kw)
                choices = switch_model.switch_key_choices()
                if key_field in self.fields and choices is not None:
                    self.fields[key_field] = forms.ChoiceField(choices=[(c, c) for c in choices],
                                                               help_text=f"{switch_model.switch_key_help}.")

        kwargs["form"] = Form
        return super().get_form(request, obj, change=change, **kwargs)

    def set_switch(self, *, key, paused, reason, actor):
        from likes_project.switches import switch_set

        return switch_set(kind=self.model.switch_kind, key=key, paused=paused, reason=reason, actor=actor)

    def _set_selected(self, request, queryset, *, paused: bool):
        from likes_project.audit.services import admin_actor

        verb = "Set" if paused else "Clear"

        def apply(keys, reason):
            for key in keys:
                self.set_switch(key=key, paused=paused, reason=reason, actor=admin_actor(request.user))
            n = len(keys)
            return f"{'Set' if paused else 'Cleared'} {n} {self.model.switch_kind} switch{'es' if n != 1 else ''}."

        return reason_action(self, request, queryset, title=f"{verb} {self.model.switch_kind} switches",
                             submit=verb, apply=apply,
                             intro="The change takes effect on every process within SWITCH_CACHE_S seconds and is "
                                   "recorded in the audit log with the reason.")

    switches_set = preset_action(_set_selected, "Set the selected switches (with a reason)", permissions=["change"],
                                 paused=True)
    switches_clear = preset_action(_set_selected, "Clear the selected switches (with a reason)",
                                   permissions=["change"], paused=False)


# --- extra pages -------------------------------------------------------------------------------


def millis_field(attr: str, description: str):
    """A ModelAdmin's column showing a duration in milliseconds, rounded to a tenth ("-" while not recorded), sorted
    by the stored value."""

    @admin.display(description=description, ordering=attr)
    def field(self, obj) -> str:
        value = getattr(obj, attr)
        return "-" if value is None else f"{value:,.1f} ms"

    return field


def admin_url(name: str, *args, query: dict | str | None = None) -> str | None:
    """The console's `admin:<name>` URL with `args`, then `query` (a dict or an encoded string); None when the
    console has no such page (its model is not registered here)."""
    try:
        url = reverse(f"admin:{name}", args=args)
    except NoReverseMatch:
        return None
    if not query:
        return url
    return f"{url}?{query if isinstance(query, str) else urlencode(query)}"


@dataclass(frozen=True)
class AdminPage:
    """A page that is not a model's changelist (a lookup, a form that starts a job).

    `view(request, *, admin_site)` renders it; `route` is relative to the owning ModelAdmin's URLs,
    or, with `app_level=True`, to the app's (`/admin/<app_label>/<route>`). `name` is the URL name
    inside the admin namespace. The console site mounts it behind `admin_view` (active staff) and lists
    it on the index for users holding `permission`; the view checks the permission again."""

    route: str
    view: Callable
    name: str
    title: str
    permission: str
    app_level: bool = False
    listed: bool = True  # False: reached from another page (a download), not from the index


def page_context(request, admin_site, *, title: str, **extra) -> dict:
    request.current_app = admin_site.name
    return {**admin_site.each_context(request), "title": title, "subtitle": None, **extra}


def render_page(request, admin_site, template: str, *, title: str, **extra) -> TemplateResponse:
    return TemplateResponse(request, template, page_context(request, admin_site, title=title, **extra))


def require_permission(request, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied


# --- admin actions that start ops jobs ---------------------------------------------------------


def job_page_redirect(request, admin_site, job) -> HttpResponseRedirect:
    """After an action started a job: say so and show the job's page (its progress refreshes there)."""
    messages.success(request, f"Started job {job.pk} ({job.kind}); its progress is on this page.")
    return HttpResponseRedirect(reverse("admin:opsjobs_opsjob_change", args=[job.pk], current_app=admin_site.name))


def start_job_or_message(request, admin_site, *, kind: str, params: dict, target: str = ""):
    """Start an ops job as the logged-in operator: the redirect to its page, or None after showing why it
    was refused (a rebuild already running, a user that does not exist...)."""
    from likes_project.audit.services import admin_actor
    from likes_project.opsjobs.services import job_start

    try:
        job = job_start(kind=kind, actor=admin_actor(request.user), params=params, target=target)
    except DomainError as exc:
        messages.error(request, exc.message)
        return None
    return job_page_redirect(request, admin_site, job)


def query_initial(request, form_class) -> dict:
    """A GET's query parameters that name fields of `form_class`, as its initial values (a link that opens
    a form filled in, as Django's add views do; it is only shown: nothing is submitted)."""
    if request.method != "GET":
        return {}
    return {name: request.GET[name] for name in form_class.base_fields if name in request.GET}


class JobForm(forms.Form):
    """A console form whose valid POST starts an ops job. The class is its whole page: `title`, the `submit`
    button, the `intro` above the fields, the `permission` the page checks, and `start()`, which names the
    job's kind, params and target from `cleaned_data`. `Form.page(route, name)` is the page to list in a
    ModelAdmin's `pages`: GET shows the form, a valid POST starts the job and shows the job's page; nothing
    long runs in the request."""

    title = submit = intro = permission = ""

    def start(self) -> tuple[str, dict, str]:
        raise NotImplementedError  # every job form names the job its valid POST starts

    @classmethod
    def page(cls, route: str, name: str, **options) -> AdminPage:
        @require_http_methods(["GET", "POST"])
        def view(request, *, admin_site):
            require_permission(request, cls.permission)
            form = cls(request.POST if request.method == "POST" else None, initial=query_initial(request, cls))
            if form.is_valid():
                kind, params, target = form.start()
                response = start_job_or_message(request, admin_site, kind=kind, params=params, target=target)
                if response is not None:
                    return response
            return render_page(request, admin_site, "admin_kit/form_page.html", title=cls.title, form=form,
                               intro=cls.intro, submit=cls.submit)

        view.__name__ = view.__qualname__ = f"{cls.__name__}_page"
        return AdminPage(route, view, name=name, title=cls.title, permission=cls.permission, **options)


def service_form_page(request, admin_site, *, form_class, permission: str, title: str, intro: str, submit: str,
                      apply: Callable[[dict], str]):
    """A console page whose form calls a short service (bounded work, audited by the service): GET
    shows the form; a valid POST calls `apply(cleaned_data)`, shows the message it returns and the form
    again; a DomainError becomes an error on the form and nothing is written."""
    require_permission(request, permission)
    form = form_class(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            messages.success(request, apply(form.cleaned_data))
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            return HttpResponseRedirect(request.path)
    return render_page(request, admin_site, "admin_kit/form_page.html", title=title, form=form, intro=intro,
                       submit=submit)


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=512, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
                             help_text="Required; recorded in the audit log.")

    def clean_reason(self):
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("Give a reason.", code="reason_required")
        return reason


def reason_action(modeladmin, request, queryset, *, title: str, intro: str, submit: str,
                  apply: Callable[[list, str], str]):
    """An admin action that needs a reason first: the first POST (from the changelist) shows the
    selected rows and a reason form; the confirming POST calls `apply(pks, reason)` and returns to the
    changelist with its message. A DomainError is shown and nothing is written."""
    form = ReasonForm(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        try:
            modeladmin.message_user(request, apply([o.pk for o in queryset], form.cleaned_data["reason"]))
        except DomainError as exc:
            modeladmin.message_user(request, exc.message, messages.ERROR)
        return None
    return render_page(request, modeladmin.admin_site, "admin_kit/reason_action.html", title=title, intro=intro,
                       submit=submit, form=form, objects=list(queryset[:200]), count=queryset.count(),
                       action=request.POST.get("action", ""),
                       selected=request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                       select_across=request.POST.get("select_across", "0"), opts=modeladmin.model._meta)
