"""The role walk (issue 14 §6, OPS-8, OPS-9): every admin URL and action of the console, as each role.

What a role may not do answers 403 or is absent (an action it lacks is not offered); what it may do
answers 200. The expectations are not taken from the admin being tested alone: each role also has rules
of its own (a viewer changes nothing, an operator approves nothing, an approver requests nothing, no one
edits a count or the audit log), so a permission granted by mistake fails here even where the admin
dutifully honours it.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client, RequestFactory
from django.urls import reverse

from tests.reconciliation.helpers import liked_video, roles_ensure

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

ROLES = ("likes-viewer", "likes-operator", "likes-approver", None)  # None: staff without a role
# Permissions whose codename starts with these approve a second person's request (OPS-9: likes-approver).
APPROVE = ("approve_",)
# ... and these ask for something another person must approve, or act (likes-operator).
REQUEST = ("request_", "plan_", "run_check", "create_snapshot", "triage_")


def _user(role: str | None):
    roles_ensure()
    name = f"walk-{role or 'staff'}"
    user = get_user_model().objects.create_user(name, password="pw", is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return get_user_model().objects.get(pk=user.pk)  # fresh: no cached permissions


def _request(user):
    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def _first_object(model_admin, request):
    try:
        return model_admin.get_queryset(request).order_by().first()
    except Exception:  # an admin whose queryset needs a filter (a sharded model): the list covers it
        return None


def _expect(client: Client, url: str, allowed: bool, what: str, failures: list[str]) -> None:
    status = client.get(url).status_code
    if allowed and status != 200:
        failures.append(f"{what}: {url} answered {status}, expected 200")
    if not allowed and status not in (403, 302, 404):
        failures.append(f"{what}: {url} answered {status}, expected 403 (or absent)")


@pytest.fixture
def some_data(make_user, make_video):
    liked_video(make_user, make_video, "walk-v", 2)


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r or "staff-only")
def test_every_model_url_answers_as_the_role_permits(role, some_data):
    user = _user(role)
    client = Client()
    client.force_login(user)
    request = _request(user)
    failures: list[str] = []
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        base = f"admin:{opts.app_label}_{opts.model_name}"
        _expect(client, reverse(f"{base}_changelist"), model_admin.has_view_or_change_permission(request),
                f"{opts.label} list", failures)
        _expect(client, reverse(f"{base}_add"), model_admin.has_add_permission(request), f"{opts.label} add",
                failures)
        obj = _first_object(model_admin, request) if model_admin.has_view_or_change_permission(request) else None
        if obj is not None:
            _expect(client, reverse(f"{base}_change", args=[obj.pk]),
                    model_admin.has_view_or_change_permission(request, obj), f"{opts.label} change", failures)
            _expect(client, reverse(f"{base}_delete", args=[obj.pk]), model_admin.has_delete_permission(request, obj),
                    f"{opts.label} delete", failures)
    assert failures == [], "\n".join(failures)


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r or "staff-only")
def test_every_console_page_answers_as_the_role_permits(role):
    user = _user(role)
    client = Client()
    client.force_login(user)
    failures: list[str] = []
    site = admin.site
    walked = 0
    for _app, _model, page in site.pages:
        if "<" in page.route or not page.listed:  # a page of one object (its id in the path or the query):
            continue  # reached from that object's page
        walked += 1
        _expect(client, reverse(f"admin:{page.name}"), user.has_perm(page.permission), page.name, failures)
    assert walked >= 10 and failures == [], "\n".join(failures)
    front = client.get("/admin/")
    assert front.status_code == 200
    assert ('id="panel-switches"' in front.content.decode()) == (role is not None)  # a role sees the health


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r or "staff-only")
def test_each_role_holds_only_what_it_is_for(role):
    """The roles' own rules, independent of any admin: viewers change nothing, operators approve nothing,
    approvers request nothing; admin actions a role may not take are not offered."""
    user = _user(role)
    request = _request(user)
    perms = user.get_all_permissions()
    codenames = {p.split(".", 1)[1] for p in perms}
    if role in ("likes-viewer", None):
        assert all(c.startswith("view_") for c in codenames), sorted(c for c in codenames if not c.startswith("view_"))
    if role == "likes-operator":
        assert not any(c.startswith(APPROVE) for c in codenames), sorted(c for c in codenames if c.startswith(APPROVE))
    if role == "likes-approver":
        assert not any(c.startswith(REQUEST) for c in codenames), sorted(c for c in codenames if c.startswith(REQUEST))
    offered, undeclared = [], []
    for model, model_admin in admin.site._registry.items():
        if not model_admin.has_view_or_change_permission(request):
            continue
        for name, (func, _n, _d) in model_admin.get_actions(request).items():
            offered.append(f"{model._meta.label}:{name}")
            # Django offers an action without `allowed_permissions` to everyone who sees the list; every
            # action here must name what it needs, so that offering it is itself the permission check.
            if name != "delete_selected" and not getattr(func, "allowed_permissions", None):
                undeclared.append(f"{model._meta.label}:{name}")
    assert undeclared == [], undeclared
    if role in ("likes-viewer", None):
        assert offered == [], offered  # a viewer is offered no action at all


def test_no_form_anywhere_sets_a_count_or_edits_the_audit_log(admin_user):
    """OPS-8, for the most powerful user there is: no add or change form of the console has a field that
    sets a count, and the audit log cannot be added to, changed or deleted from the admin."""
    request = _request(admin_user)
    offenders = []
    for model, model_admin in admin.site._registry.items():
        editable = set()
        if model_admin.has_add_permission(request):
            editable |= set(model_admin.get_form(request, None).base_fields)
        obj = _first_object(model_admin, request)
        if obj is not None and model_admin.has_change_permission(request, obj):
            readonly = set(model_admin.get_readonly_fields(request, obj))
            editable |= set(model_admin.get_form(request, obj).base_fields) - readonly
        offenders += [f"{model._meta.label}.{f}" for f in editable if f.endswith("_count") or f in ("count", "total")]
    assert offenders == []
    from likes_project.audit.models import AuditRecord

    audit_admin = admin.site._registry[AuditRecord]
    assert not audit_admin.has_add_permission(request)
    assert not audit_admin.has_change_permission(request) and not audit_admin.has_delete_permission(request)


def test_every_migration_that_grants_a_role_is_replayed_by_the_tests():
    """`roles_ensure` puts the roles back after a flush; a migration it does not know would leave a role
    poorer in every later test, and this walk blind to what that migration grants."""
    from pathlib import Path

    from tests.reconciliation.helpers import ROLE_MIGRATIONS

    root = Path(__file__).resolve().parents[2]
    granting = {str(p.relative_to(root).with_suffix("")).replace("/", ".")
                for p in root.glob("**/migrations/*.py")
                if ".venv" not in p.parts and any(grant in p.read_text() for grant in
                                                   ("group_permissions_grant(", "console_roles("))}
    assert granting == {module for module, _function in ROLE_MIGRATIONS}
