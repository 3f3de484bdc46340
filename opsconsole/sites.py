"""The operations console: the Django admin site of this service (set as the default site by
`opsconsole.apps.ConsoleAdminConfig`).

Besides the model admins, apps declare pages on their ModelAdmins (`pages = [AdminPage(...)]`, see
`likes_project.admin_kit`); this site mounts them (before the model URLs, which would otherwise take a
page's path for an object id) and lists each on the index and sidebar, under its app, for the users
holding its permission. The console's own pages are the relation lookup and the trace (OPS-1, OPS-2).
"""

from __future__ import annotations

import functools

from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import path, re_path, reverse

from likes_project.admin_kit import AdminPage
from likes_project.retention_console import RETENTION_PAGE
from opsconsole import dashboard, views, views_video


class OpsConsoleSite(admin.AdminSite):
    site_header = "Like service operations console"
    site_title = "Like service console"
    index_title = "Operations"

    def __init__(self, name: str = "admin"):
        super().__init__(name)
        self.model_apps: set[str] = set()
        self.pages: list[tuple[str, str | None, AdminPage]] = [
            # The lookup keeps the address it had when it hung off the audit log's admin (a public URL).
            ("opsconsole", None, AdminPage("auditrecord/lookup/", views.lookup, name="opsconsole_lookup",
                                           title="Relation lookup", permission=views.LOOKUP_PERMISSION,
                                           app_level=True)),
            ("opsconsole", None, AdminPage("trace/", views.trace, name="opsconsole_trace", title="Trace a like",
                                           permission=views.LOOKUP_PERMISSION, app_level=True)),
            ("opsconsole", None, AdminPage("trace/receipt/", views.trace_receipt, name="opsconsole_trace_receipt",
                                           title="Consumer receipt", permission=views.LOOKUP_PERMISSION,
                                           app_level=True, listed=False)),
            ("opsconsole", None, AdminPage("video/", views_video.video_panel, name="opsconsole_video",
                                           title="Video panel", permission=views_video.VIDEO_PANEL_PERMISSION,
                                           app_level=True)),
            ("opsconsole", None, RETENTION_PAGE),  # the retention rules (issue 31 §4)
        ]

    def register(self, model_or_iterable, admin_class=None, **options):
        super().register(model_or_iterable, admin_class, **options)
        models = [model_or_iterable] if isinstance(model_or_iterable, type) else list(model_or_iterable)
        for model in models:
            self.model_apps.add(model._meta.app_label)
            for page in getattr(self.get_model_admin(model), "pages", ()):
                model_name = None if page.app_level else model._meta.model_name
                self.pages.append((model._meta.app_label, model_name, page))

    def page_route(self, app_label: str, model_name: str | None, page: AdminPage) -> str:
        return f"{app_label}/{page.route}" if model_name is None else f"{app_label}/{model_name}/{page.route}"

    def index(self, request, extra_context=None):
        """The front page: the pipeline's health at a glance (opsconsole.dashboard, issue 14 §0). Django's
        list of models is one click away, at `models/` (`models_index`)."""
        can_see = request.user.has_perm(dashboard.DASHBOARD_PERMISSION)
        context = {**self.each_context(request), "title": self.index_title, "subtitle": None,
                   "can_see": can_see, **(dashboard.front_page() if can_see else {}), **(extra_context or {})}
        request.current_app = self.name
        return TemplateResponse(request, "opsconsole/dashboard.html", context)

    def models_index(self, request, extra_context=None):
        """Django's own index: every model and page the user may see, by app."""
        return super().index(request, {"title": "All models and pages", **(extra_context or {})})

    def get_urls(self):
        own = [path(self.page_route(app, model, page),
                    self.admin_view(functools.partial(page.view, admin_site=self)), name=page.name)
               for app, model, page in self.pages]
        own.append(path("models/", self.admin_view(self.models_index), name="models"))
        # An app that has pages but no registered model (the console itself) still gets its app index.
        page_only = sorted({app for app, _m, _p in self.pages} - self.model_apps)
        if page_only:
            own.append(re_path(rf"^(?P<app_label>{'|'.join(page_only)})/$", self.admin_view(self.app_index),
                               name="app_list"))
        return [*own, *super().get_urls()]

    def get_app_list(self, request, app_label=None):
        app_list = super().get_app_list(request, app_label)
        for app, _model, page in self.pages:
            if not page.listed or app_label not in (None, app) or not request.user.has_perm(page.permission):
                continue
            section = next((a for a in app_list if a["app_label"] == app), None)
            if section is None:
                section = {"name": app.capitalize(), "app_label": app,
                           "app_url": reverse("admin:app_list", kwargs={"app_label": app}, current_app=self.name),
                           "has_module_perms": True, "models": []}
                app_list = sorted([*app_list, section], key=lambda a: a["name"].lower())
            section["models"] = sorted([*section["models"], {
                "model": None, "name": page.title, "object_name": page.name,
                "perms": {"add": False, "change": False, "delete": False, "view": True},
                "admin_url": reverse(f"admin:{page.name}", current_app=self.name), "add_url": None, "view_only": True,
            }], key=lambda m: m["name"])
        return app_list
