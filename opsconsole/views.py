"""The operations console's read-only pages inside the Django admin (OPS-1, OPS-2, OBS-1): the lookup
(relation by user and video, commands by operation id, outbox rows by event id or status), the trace of
one like through the pipeline (`opsconsole.trace`) and a projector's receipt. They answer GET only and
call selectors only, so a lookup or a trace is not an action and is not audited."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.views.decorators.http import require_safe

from counting.selectors import trace as selectors_trace
from likes_project.errors import DomainError
from opsconsole import trace as tracing
from opsconsole.forms import CommandLookupForm, OutboxLookupForm, RelationLookupForm, TraceForm
from relations.selectors import lookup as selectors

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


@require_safe
def trace(request, *, admin_site):
    """The trace page: one like's relation, commands, outbox row and each consumer's checkpoint, receipt
    (or the evidence it keeps) and dead letter. Same permission as the lookup; not audited."""
    if not request.user.has_perm(LOOKUP_PERMISSION):
        raise PermissionDenied
    form = TraceForm(request.GET or None)
    found = None
    if form.is_valid():
        try:
            found = tracing.trace_get(query=form.cleaned_data["query"])
        except DomainError as exc:
            form.add_error(None, exc.message)
    context = {
        **admin_site.each_context(request),
        "title": "Trace a like",
        "subtitle": None,
        "form": form,
        "trace": found,
    }
    request.current_app = admin_site.name
    return TemplateResponse(request, "opsconsole/trace.html", context)


@require_safe
def trace_receipt(request, *, admin_site):
    """One receipt of the count or reverse projector (`?consumer=count&store=cnt_00&id=N`), reached from a trace."""
    if not request.user.has_perm(LOOKUP_PERMISSION):
        raise PermissionDenied
    receipt, error = None, None
    try:
        receipt_id = int(request.GET.get("id", ""))
    except ValueError:
        error = "The receipt id must be a number."
    else:
        try:
            receipt = selectors_trace.receipt_get(consumer=request.GET.get("consumer", ""),
                                                  store=request.GET.get("store", ""), receipt_id=receipt_id)
        except DomainError as exc:
            error = exc.message
    context = {
        **admin_site.each_context(request),
        "title": f"Receipt of the {receipt.consumer} consumer" if receipt else "Receipt",
        "subtitle": None,
        "receipt": receipt,
        "error": error,
    }
    request.current_app = admin_site.name
    return TemplateResponse(request, "opsconsole/trace_receipt.html", context, status=200 if receipt else 404)
