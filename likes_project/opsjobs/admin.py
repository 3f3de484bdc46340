"""The ops jobs in the admin: read-only, with their progress, rate, ETA, last error and a link to the
audit records they wrote. A running job's page refreshes itself."""

from __future__ import annotations

from django.contrib import admin
from django.http import FileResponse, Http404
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_safe

from likes_project.admin_kit import AdminPage, ReadOnlyAdmin, require_permission
from likes_project.audit.services import admin_actor
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_file_download_record, job_file_path, job_kind_get, job_kinds


@require_safe
def job_file_download(request, job_id: int, *, admin_site):
    """The file a finished job produced (an export), for users holding the job kind's permission; every
    download is audited (`job.file_download`)."""
    job = OpsJob.objects.filter(pk=job_id).first()
    if job is None:
        raise Http404("No such job.")
    require_permission(request, job_kind_get(job.kind).permission)
    path = job_file_path(job)
    if path is None:
        raise Http404("This job has no file to download.")
    job_file_download_record(job, actor=admin_actor(request.user), size=path.stat().st_size)
    return FileResponse(open(path, "rb"), as_attachment=True, filename=path.name,
                        content_type="application/x-ndjson")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s"


@admin.register(OpsJob)
class OpsJobAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "status", "progress_text", "rate_text", "eta_text", "target", "actor", "channel",
                    "created_at", "finished_at")
    list_filter = ("status", "kind", "channel")
    search_fields = ("=id", "kind", "target", "actor")
    ordering = ("-id",)
    fields = ("kind", "status", "target", "progress_text", "rate_text", "eta_text", "message", "last_error",
              "audit_link", "file_link", "params", "result", "state", "actor", "channel", "holder", "slices",
              "created_at", "started_at", "updated_at", "finished_at")
    readonly_fields = ("progress_text", "rate_text", "eta_text", "audit_link", "file_link")
    change_form_template = "opsjobs/opsjob_change_form.html"
    pages = [AdminPage("<int:job_id>/download/", job_file_download, name="opsjobs_opsjob_download",
                       title="Download a job's file", permission="opsjobs.view_opsjob", listed=False)]

    # Who may start a kind of job may follow the jobs of that kind; `opsjobs.view_opsjob` sees them all.
    def _kinds_visible(self, request) -> list[str] | None:
        if request.user.has_perm("opsjobs.view_opsjob"):
            return None
        return [k.kind for k in job_kinds() if request.user.has_perm(k.permission)]

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        kinds = self._kinds_visible(request)
        return qs if kinds is None else qs.filter(kind__in=kinds)

    def has_view_permission(self, request, obj=None):
        kinds = self._kinds_visible(request)
        return kinds is None or (bool(kinds) if obj is None else obj.kind in kinds)

    def has_module_permission(self, request):
        return self.has_view_permission(request)

    @admin.display(description="progress")
    def progress_text(self, job: OpsJob) -> str:
        pct = job.percent
        total = "?" if job.total is None else f"{job.total:,}"
        return f"{job.done:,} / {total} {job.unit}" + ("" if pct is None else f" ({pct:.0f}%)")

    @admin.display(description="rate")
    def rate_text(self, job: OpsJob) -> str:
        return "-" if job.rate is None else f"{job.rate:,.1f} {job.unit}/s"

    @admin.display(description="ETA")
    def eta_text(self, job: OpsJob) -> str:
        return _duration(job.eta_seconds)

    @admin.display(description="audit records")
    def audit_link(self, job: OpsJob) -> str:
        url = reverse("admin:audit_auditrecord_changelist", current_app=self.admin_site.name)
        return format_html('<a href="{}?job_id={}">the audit records of job {}</a>', url, job.pk, job.pk)

    @admin.display(description="file")
    def file_link(self, job: OpsJob) -> str:
        if job_file_path(job) is None:
            return "-"
        url = reverse("admin:opsjobs_opsjob_download", args=[job.pk], current_app=self.admin_site.name)
        return format_html('<a href="{}" class="job-file">download {}</a>', url, job.result["file"])
