"""The console's forms for reconciliation (issue 11): start a check, request a repair. They only
validate what the operator typed; the scope rules are `checks.scope_normalize`'s, shown as form errors."""

from __future__ import annotations

from django import forms

from likes_project.admin_kit import ReasonForm
from likes_project.errors import DomainError
from reconciliation.models import RunMode
from reconciliation.services import checks
from relations import validation


def video_lines(text: str) -> list[str]:
    """One video id a line (blank lines skipped), each a valid video id, or a ValidationError naming
    the first bad line."""
    videos = []
    for n, line in enumerate((text or "").splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            videos.append(validation.video_id(line))
        except DomainError as exc:
            raise forms.ValidationError(f"Line {n}: {exc.message}", code=exc.code) from exc
    return videos


def _scope_or_error(**given) -> dict:
    try:
        return checks.scope_normalize(**given)
    except DomainError as exc:
        raise forms.ValidationError(exc.message, code=exc.code) from exc


class VideoLinesField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 6, "cols": 40})

    def to_python(self, value):
        return video_lines(super().to_python(value))


class CheckStartForm(forms.Form):
    """A check of some videos or of all of them; `cleaned_data["scope"]` is the normalized scope."""

    mode = forms.ChoiceField(choices=RunMode.choices, help_text=(
        "identity: projection rows = buckets = display; coverage: every relation fact is in the projection, "
        "online; exact: equality under a short write barrier on the scope."))
    videos = VideoLinesField(required=False, label="Videos", help_text="One video id a line.")
    all_videos = forms.BooleanField(required=False, label="All videos",
                                    help_text="Instead of a list: every video (a long run, resumable).")

    def clean(self):
        cleaned = super().clean()
        if "videos" not in cleaned:  # a bad line is already the field's error
            return cleaned
        videos, all_videos = cleaned["videos"], cleaned.get("all_videos", False)
        if bool(videos) == bool(all_videos):  # the console's words for scope_normalize's "exactly one scope"
            raise forms.ValidationError("Give either some videos (one a line) or All videos." if not videos else
                                        "Give either some videos or All videos, not both.", code="invalid_scope")
        cleaned["scope"] = _scope_or_error(videos=videos, all_videos=all_videos)
        return cleaned


class RepairRequestForm(ReasonForm):
    """A repair of some videos from the facts; it waits for another operator's approval."""

    videos = VideoLinesField(label="Videos", help_text="One video id a line.")

    field_order = ("videos", "reason")

    def clean_videos(self):
        videos = self.cleaned_data["videos"]
        if not videos:
            raise forms.ValidationError("Name at least one video.", code="invalid_scope")
        return _scope_or_error(videos=videos)["videos"]
