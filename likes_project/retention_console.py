"""The retention page of the console (issue 31 §4, PRIV-3): each rule's window and the oldest thing it keeps, as
measured after its last sweep, and a form that runs one bounded sweep of one rule now (audited by the runner as
`retention.sweep`, the operator as actor). The hourly beat job `retention.sweep` does the rest.

`RETENTION_PAGE` is the console page to mount (an `AdminPage`, app-level: `/admin/<app>/retention/`)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpResponseRedirect
from django.views.decorators.http import require_http_methods

from likes_project.admin_kit import AdminPage, render_page, require_permission
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError
from likes_project.retention import RETENTION_RUN_PERMISSION, retention_rules, retention_status, retention_sweep

ADMIN_MAX_BATCHES = 5  # bounded work in the request: 5 x RETENTION_BATCH rows of one rule


class RetentionSweepForm(forms.Form):
    rule = forms.ChoiceField(help_text="Deletes what this rule keeps past its window; nothing inside it.")
    confirm = forms.BooleanField(label="Delete now", help_text=f"At most {ADMIN_MAX_BATCHES} batches; audited.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["rule"].choices = [(r.name, f"{r.name}: {r.what} (past {r.window_text()})")
                                       for r in retention_rules()]


def sweep_message(run) -> tuple[int, str]:
    """The message level and text of one rule's bounded sweep."""
    if run.status == "busy":
        return messages.WARNING, f"{run.rule}: another sweep of this rule is running; nothing deleted here."
    text = f"{run.rule}: deleted {run.deleted} past {run.window}"
    if run.status == "failed":
        return messages.ERROR, f"{text}, then its store failed ({run.error}); the hourly job tries again."
    more = "; more is due, the hourly job goes on" if not run.finished else "; nothing more is due"
    return messages.SUCCESS, f"{text} in {run.batches} batch(es){more}."


@require_http_methods(["GET", "POST"])
def retention_view(request, *, admin_site):
    """GET: the rules; a valid POST: one bounded sweep of the chosen rule, then the page again with its outcome."""
    require_permission(request, RETENTION_RUN_PERMISSION)
    form = RetentionSweepForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            report = retention_sweep(actor=admin_actor(request.user), rules=[form.cleaned_data["rule"]],
                                     max_batches=ADMIN_MAX_BATCHES)
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.add_message(request, *sweep_message(report.rules[0]))
            return HttpResponseRedirect(request.path)
    return render_page(request, admin_site, "retention/console.html", title="Retention", form=form,
                       intro="Each rule deletes, in batches, what it keeps past its window; the beat job "
                             "retention.sweep runs every rule hourly. Here: one bounded sweep of one rule now.",
                       submit="Sweep", rows=retention_status())


RETENTION_PAGE = AdminPage("retention/", retention_view, name="retention_sweep", title="Retention",
                           permission=RETENTION_RUN_PERMISSION, app_level=True)
