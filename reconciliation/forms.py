"""The console's forms for reconciliation (issues 11, 12): start a check, request a repair (from the facts
or from a sealed recovery snapshot), take a snapshot. They only validate what the operator typed; the
scope rules are `checks.scope_normalize`'s, the workflow rules the services', shown as form errors."""

from __future__ import annotations

from django import forms

from likes_project.admin_kit import JobForm, ReasonForm
from likes_project.errors import DomainError
from reconciliation.jobs import SNAPSHOT_JOB, SNAPSHOT_PERMISSION, job_for_mode
from reconciliation.models import RecoverySnapshot, RunMode, SnapshotStatus
from reconciliation.services import checks
from reconciliation.services.repair import SNAPSHOT_SOURCE
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


class CheckStartForm(JobForm):
    """A check of some videos or of all of them, started as an ops job (the job's page follows);
    `cleaned_data["scope"]` is the normalized scope."""

    title, submit, permission = "Start a check", "Start the check", checks.RUN_PERMISSION
    intro = ("Proves the counts of the videos named (or of all videos) at recorded watermarks, as an ops job on the "
             "workers; its page shows the progress and the run's verdict. Disagreements become diffs to triage. "
             "An exact check holds a short write barrier on its videos; if the barrier cannot be held it is "
             "REFUSED, never PASSED.")

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
        cleaned["scope"] = _scope_or_error(videos=videos, all_videos=all_videos, known_only=True)
        return cleaned

    def start(self):
        mode = self.cleaned_data["mode"]
        return job_for_mode(mode), {"mode": mode, "scope": self.cleaned_data["scope"]}, f"{mode} check"


FACTS = "facts"
SNAPSHOTS_OFFERED = 50  # the newest SEALED snapshots (retention keeps SNAPSHOT_KEEP of them anyway)


def snapshot_source(snapshot_id: int) -> str:
    """The repair source that restores snapshot `snapshot_id` (`repair.repair_request`'s spelling)."""
    return f"{SNAPSHOT_SOURCE}{snapshot_id}"


def _source_choices() -> list[tuple[str, str]]:
    sealed = RecoverySnapshot.objects.filter(status=SnapshotStatus.SEALED).order_by("-id")[:SNAPSHOTS_OFFERED]
    return [(FACTS, "The relation facts, for the videos below")] + [
        (snapshot_source(s.pk), f"Sealed snapshot {s.pk} of generation {s.generation}, taken "
                                f"{s.created_at:%Y-%m-%d %H:%M} UTC: restore the whole projection") for s in sealed]


class RepairRequestForm(ReasonForm):
    """A repair of some videos from the facts, or of the whole projection from a SEALED snapshot; it
    waits for another operator's approval. `cleaned_data["source"]` is `facts` or `snapshot:<id>`;
    `cleaned_data["videos"]` is empty for a snapshot. No source sent means the facts (as before
    snapshots existed)."""

    source = forms.ChoiceField(required=False, widget=forms.RadioSelect, label="Repair from", help_text=(
        "The facts rebuild the videos named; a snapshot replaces every count with the snapshot's, then replays "
        "the event log from its offsets."))
    videos = VideoLinesField(required=False, label="Videos", help_text="One video id a line; the facts only.")

    field_order = ("source", "videos", "reason")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["source"].choices = _source_choices()
        if not self.initial.get("source"):
            self.initial["source"] = FACTS

    def offers(self, source: str) -> bool:
        return source in {value for value, _label in self.fields["source"].choices}

    def clean_source(self):
        return self.cleaned_data["source"] or FACTS

    def clean(self):
        cleaned = super().clean()
        if "source" not in cleaned or "videos" not in cleaned:  # already the field's error
            return cleaned
        videos = cleaned["videos"]
        if cleaned["source"] == FACTS:
            if not videos:
                self.add_error("videos", forms.ValidationError(self.fields["videos"].error_messages["required"],
                                                               code="required"))
            else:
                try:
                    cleaned["videos"] = _scope_or_error(videos=videos)["videos"]
                except forms.ValidationError as exc:
                    self.add_error("videos", exc)
        elif videos:
            # A restore replaces the whole projection: a video list would only narrow the check afterwards.
            self.add_error("videos", forms.ValidationError(
                "A restore from a snapshot replaces every video's count; leave Videos empty.",
                code="invalid_scope"))
        return cleaned


class SnapshotTakeForm(ReasonForm, JobForm):
    """Why a recovery snapshot is taken now (its audit record and its row keep it); the snapshot job starts."""

    title, submit, permission = "Take a snapshot", "Take the snapshot", SNAPSHOT_PERMISSION
    intro = ("Takes a recovery snapshot of the whole count projection, as an ops job on the workers: dispatch on "
             "every count partition stops for a moment while the exact cut of the event log is read (its length "
             "is recorded), then both tables of every partition are dumped from that cut, read back and checked. "
             "It is SEALED only if every check holds; otherwise FAILED, with the reason.")

    def start(self):
        return SNAPSHOT_JOB, {"reason": self.cleaned_data["reason"]}, ""
