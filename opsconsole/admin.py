"""Admin for the operations console: the read-only audit log, the read-only lookup page, and the
plumbing the relations admin uses to write through services.

Lookup page: /admin/opsconsole/auditrecord/lookup/ (URL name `admin:opsconsole_lookup`), listed on
the admin index under Opsconsole as "Relation lookup" for users holding
`opsconsole.view_relation_lookup`.
"""

from __future__ import annotations

import functools

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IS_POPUP_VAR, TO_FIELD_VAR, csrf_protect_m
from django.contrib.admin.utils import unquote
from django.urls import path, reverse

from likes_project.errors import DomainError
from opsconsole import views
from opsconsole.models import AuditRecord


class ServiceRejected(Exception):
    """A service refused a save the form had accepted; carries the form, now holding the error."""

    def __init__(self, form):
        super().__init__("service rejected the save")
        self.form = form


class ServiceWriteAdmin(admin.ModelAdmin):
    """A ModelAdmin whose writes go through a service (`save_model` / `delete_model` /
    `delete_queryset` call it). Each service opens its own durable transaction on `default`, so the
    admin's own outer transaction around add/change/delete is dropped (house style: admin code never
    wraps a service). A DomainError from the service becomes a form error on the re-rendered form,
    and nothing (not even the admin LogEntry) is written for that save."""

    def save_via_service(self, request, obj, form, change) -> None:  # pragma: no cover - abstract
        raise NotImplementedError  # each admin names the service that saves its model

    def save_model(self, request, obj, form, change):
        try:
            self.save_via_service(request, obj, form, change)
        except DomainError as exc:
            form.add_error(None, exc.message)
            raise ServiceRejected(form) from exc

    @csrf_protect_m
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return self._changeform_view(request, object_id, form_url, extra_context)
        except ServiceRejected as rejected:
            return self._render_rejected(request, object_id, form_url, extra_context, rejected.form)

    @csrf_protect_m
    def delete_view(self, request, object_id, extra_context=None):
        return self._delete_view(request, object_id, extra_context)

    def _render_rejected(self, request, object_id, form_url, extra_context, form):
        """The change form again, bound to what the operator sent, with the service's message."""
        add = object_id is None
        to_field = request.POST.get(TO_FIELD_VAR, request.GET.get(TO_FIELD_VAR))
        obj = None if add else self.get_object(request, unquote(object_id), to_field)
        fieldsets = self.get_fieldsets(request, obj)
        admin_form = helpers.AdminForm(
            form, list(fieldsets), self.get_prepopulated_fields(request, obj),
            self.get_readonly_fields(request, obj), model_admin=self,
        )
        title = "Add %s" if add else "Change %s"
        context = {
            **self.admin_site.each_context(request),
            "title": title % self.opts.verbose_name,
            "subtitle": str(obj) if obj else None,
            "adminform": admin_form,
            "object_id": object_id,
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


class ReadOnlyAdmin(admin.ModelAdmin):
    """List and view only: nothing can be added, changed or deleted here."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "channel", "action", "target_type", "target_id", "outcome")
    list_filter = ("action", "channel")
    search_fields = ("actor", "target_id")
    date_hierarchy = "at"

    def get_urls(self):
        lookup = self.admin_site.admin_view(functools.partial(views.lookup, admin_site=self.admin_site))
        return [path("lookup/", lookup, name="opsconsole_lookup"), *super().get_urls()]


def _with_lookup_entry(get_app_list):
    """Adds "Relation lookup" to the Opsconsole section of the admin index, app index and sidebar
    for users who may use it (the lookup is a page, not a model, so the admin cannot list it)."""

    @functools.wraps(get_app_list)
    def app_list_with_lookup(request, app_label=None):
        app_list = get_app_list(request, app_label)
        if app_label not in (None, "opsconsole") or not request.user.has_perm(views.LOOKUP_PERMISSION):
            return app_list
        entry = {
            "model": None, "name": "Relation lookup", "object_name": "RelationLookup",
            "perms": {"add": False, "change": False, "delete": False, "view": True},
            "admin_url": reverse("admin:opsconsole_lookup", current_app=admin.site.name),
            "add_url": None, "view_only": True,
        }
        app = next((a for a in app_list if a["app_label"] == "opsconsole"), None)
        if app is None:
            app = {
                "name": AuditRecord._meta.app_config.verbose_name, "app_label": "opsconsole",
                "app_url": reverse("admin:app_list", kwargs={"app_label": "opsconsole"},
                                   current_app=admin.site.name),
                "has_module_perms": True, "models": [],
            }
            app_list = sorted([*app_list, app], key=lambda a: a["name"].lower())
        app["models"] = sorted([*app["models"], entry], key=lambda m: m["name"])
        return app_list

    app_list_with_lookup.adds_relation_lookup = True
    return app_list_with_lookup


if not getattr(admin.site.get_app_list, "adds_relation_lookup", False):
    admin.site.get_app_list = _with_lookup_entry(admin.site.get_app_list)
