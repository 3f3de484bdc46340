"""Search forms of the read-only lookup page. They only name what to find: no field of any of them
can change a relation, a command or an outbox row (the page answers GET only)."""

from __future__ import annotations

from django import forms

from likes_project.errors import DomainError
from opsconsole.trace import trace_query_parse
from relations import validation
from relations.models import OutboxStatus
from relations.selectors import lookup as selectors


def _domain_checked(fn, *args, **kwargs):
    """Run a validator or selector; its DomainError becomes this field's form error."""
    try:
        return fn(*args, **kwargs)
    except DomainError as exc:
        raise forms.ValidationError(exc.message, code=exc.code) from exc


class RelationLookupForm(forms.Form):
    user = forms.CharField(max_length=150, help_text="Username, or a numeric user id.")
    video_id = forms.CharField(label="Video id", max_length=64)

    def clean_user(self):
        return _domain_checked(selectors.lookup_user_get, query=self.cleaned_data["user"])

    def clean_video_id(self):
        return _domain_checked(validation.video_id, self.cleaned_data["video_id"])


class CommandLookupForm(forms.Form):
    operation_id = forms.CharField(label="Operation id", max_length=128)
    user = forms.CharField(max_length=150, required=False,
                           help_text="Optional username or numeric user id; without it every shard is searched.")

    def clean_operation_id(self):
        return _domain_checked(validation.operation_id, self.cleaned_data["operation_id"], field="Operation id")

    def clean_user(self):
        query = self.cleaned_data["user"].strip()
        return _domain_checked(selectors.lookup_user_get, query=query) if query else None


class OutboxLookupForm(forms.Form):
    event_id = forms.UUIDField(label="Event id", required=False)
    status = forms.ChoiceField(choices=[("", "---------"), *OutboxStatus.choices], required=False,
                               help_text=f"Newest first, at most {selectors.PER_SHARD_LIMIT} rows per shard.")

    def clean(self):
        cleaned = super().clean()
        if not self.errors and bool(cleaned.get("event_id")) == bool(cleaned.get("status")):
            raise forms.ValidationError("Give either an event id or a status.", code="one_of")
        return cleaned


class TraceForm(forms.Form):
    """The trace page's search: an operation id (a user may narrow it), an event id, or a user and a
    video. `cleaned_data["query"]` is the parsed `opsconsole.trace.TraceQuery`."""

    operation = forms.CharField(label="Operation id", max_length=128, required=False)
    event = forms.CharField(label="Event id", max_length=64, required=False)
    user = forms.CharField(max_length=150, required=False,
                           help_text="Username or numeric user id: with a video, or to narrow an operation id.")
    video = forms.CharField(label="Video id", max_length=64, required=False)

    def clean(self):
        cleaned = super().clean()
        if not self.errors:
            cleaned["query"] = _domain_checked(trace_query_parse, operation=cleaned.get("operation"),
                                               event=cleaned.get("event"), user=cleaned.get("user"),
                                               video=cleaned.get("video"))
        return cleaned
