"""The console's video panel (issue 14 §2, OPS-3): a read-only page; its actions link to the audited
forms that act (start a check, request a repair, pause or resume the video's refresh)."""

from __future__ import annotations

from django import forms
from django.views.decorators.http import require_safe

from likes_project.admin_kit import admin_url, render_page, require_permission
from likes_project.errors import DomainError
from opsconsole import dashboard
from opsconsole.video_panel import video_panel_get
from relations import validation

VIDEO_PANEL_PERMISSION = dashboard.DASHBOARD_PERMISSION


class VideoPanelForm(forms.Form):
    video_id = forms.CharField(label="Video id", max_length=64)

    def clean_video_id(self):
        try:
            return validation.video_id(self.cleaned_data["video_id"].strip())
        except DomainError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from None


def _actions(request, panel) -> list[tuple[str, str]]:
    """(label, url) of what this user may do to the video from here (OPS-4, OPS-5)."""
    user, v = request.user, panel.video_id
    if not panel.known and not panel.unreadable:
        return []  # a typo: nothing to reconcile, repair or pause
    out = []
    if user.has_perm("reconciliation.run_check"):
        out.append(("Request a reconcile",
                    admin_url("reconciliation_check_start", query={"videos": v, "mode": "identity"})))
    if user.has_perm("reconciliation.request_repair"):
        out.append(("Request a repair", admin_url("reconciliation_repair_request", query={"videos": v})))
    if user.has_perm("counting.change_countrefreshswitch"):
        label = "Resume its refresh" if panel.refresh_paused else "Pause its refresh"
        url = (admin_url("counting_countrefreshswitch_change", v) if panel.refresh_switch is not None
               else admin_url("counting_countrefreshswitch_add", query={"video_id": v}))
        out.append((label, url))
    return [(label, url) for label, url in out if url]


@require_safe
def video_panel(request, *, admin_site):
    """Wrapped by `admin_site.admin_view` (active staff only); the panel's permission is checked here."""
    require_permission(request, VIDEO_PANEL_PERMISSION)
    form = VideoPanelForm(request.GET if "video_id" in request.GET else None)
    panel = video_panel_get(video_id=form.cleaned_data["video_id"]) if form.is_valid() else None
    vbuckets = admin_url("counting_vbuckets", query={"video_id": panel.video_id}) if panel else None
    return render_page(request, admin_site, "opsconsole/video.html", title="Video panel", form=form, panel=panel,
                       actions=_actions(request, panel) if panel else [],
                       links={"vbuckets": vbuckets, "migration": admin_url("counting_bucketmigration_changelist")})
