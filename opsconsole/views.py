"""The operations console's lookup page inside the Django admin (OPS-1, OPS-2): relation by user and
video, commands by operation id, outbox rows by event id or status. Read-only: it answers GET only
and calls selectors only, so a lookup is not an action and is not audited."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.views.decorators.http import require_safe

from likes_project.errors import DomainError
from opsconsole.forms import CommandLookupForm, OutboxLookupForm, RelationLookupForm
from relations import selectors_lookup as selectors

LOOKUP_PERMISSION = "opsconsole.view_relation_lookup"

# Query parameter `lookup` names the submitted form; each form's fields carry it as their prefix.
LOOKUP_FORMS = {
    "relation": RelationLookupForm,
    "command": CommandLookupForm,
    "outbox": OutboxLookupForm,
}


def _run(kind: str, data: dict):
    if kind == "relation":
        return selectors.relation_detail_get(user=data["user"], video_id=data["video_id"])
    if kind == "command":
        return selectors.command_list(operation_id=data["operation_id"], user=data["user"])
    if data["event_id"]:
        return selectors.outbox_list_by_event_id(event_id=data["event_id"])
    return selectors.outbox_list_by_status(status=data["status"])


@require_safe
def lookup(request, *, admin_site):
    """Wrapped by `admin_site.admin_view` (active staff only); the lookup permission is checked here."""
    if not request.user.has_perm(LOOKUP_PERMISSION):
        raise PermissionDenied
    kind = request.GET.get("lookup")
    forms = {
        name: form_class(request.GET if name == kind else None, prefix=name)
        for name, form_class in LOOKUP_FORMS.items()
    }
    result = None
    if kind in forms and forms[kind].is_valid():
        try:
            result = _run(kind, forms[kind].cleaned_data)
        except DomainError as exc:
            forms[kind].add_error(None, exc.message)
    context = {
        **admin_site.each_context(request),
        "title": "Relation lookup",
        "subtitle": None,
        "forms": forms,
        "kind": kind if result is not None else None,
        "result": result,
        "per_shard_limit": selectors.PER_SHARD_LIMIT,
    }
    request.current_app = admin_site.name
    return TemplateResponse(request, "opsconsole/lookup.html", context)
