"""The audit log in the admin, read-only. `?job_id=<id>` lists the records of one ops job. The "Audit
chain" page (D82) shows the chain's state (the latest verification and checkpoint, the head) and starts a
verification, which runs as an ops job, never in the request."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.views.decorators.http import require_http_methods

from likes_project.admin_kit import AdminPage, ReadOnlyAdmin, render_page, require_permission, start_job_or_message
from likes_project.audit import selectors
from likes_project.audit.jobs import VERIFY_JOB
from likes_project.audit.models import AuditChainCheckpoint, AuditRecord
from likes_project.audit.services import VERIFY_PERMISSION
from likes_project.errors import DomainError
from likes_project.opsjobs.models import OpsJob

VIEW_CHAIN_PERMISSION = "audit.view_auditchainverification"


class ChainVerifyForm(forms.Form):
    since = forms.CharField(required=False, max_length=64, label="Since",
                            help_text="Optional: a seq, or an ISO-8601 time (UTC); empty checks the whole chain.")

    def clean_since(self):
        since = self.cleaned_data["since"].strip() or None
        try:
            selectors.since_resolve(since)
        except DomainError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from None
        return since


@require_http_methods(["GET", "POST"])
def chain_view(request, *, admin_site):
    """The chain's state; a POST (with `audit.verify_auditchain`) starts the verification job and shows its page."""
    require_permission(request, VIEW_CHAIN_PERMISSION)
    can_verify = request.user.has_perm(VERIFY_PERMISSION)
    form = ChainVerifyForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        require_permission(request, VERIFY_PERMISSION)
        if form.is_valid():
            response = start_job_or_message(request, admin_site, kind=VERIFY_JOB,
                                            params={"since": form.cleaned_data["since"]})
            if response is not None:
                return response
    verification = selectors.verification_latest_get()
    head_seq, head_hash = selectors.chain_head_get()
    running = OpsJob.objects.filter(kind=VERIFY_JOB, status__in=["QUEUED", "RUNNING"]).order_by("-id").first()
    return render_page(request, admin_site, "audit/chain.html", title="Audit chain", form=form,
                       can_verify=can_verify, verification=verification, checkpoint=selectors.checkpoint_latest_get(),
                       head_seq=head_seq, head_hash=head_hash, signing_key=bool(selectors.signing_key()),
                       running=running)


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdmin):
    list_display = ("seq", "at", "actor", "channel", "action", "target_type", "target_id", "outcome", "job_id",
                    "redacted_at")
    list_filter = ("action", "channel")
    search_fields = ("actor", "target_id", "=seq")
    date_hierarchy = "at"
    pages = [AdminPage("chain/", chain_view, name="audit_chain", title="Audit chain", permission=VIEW_CHAIN_PERMISSION)]


@admin.register(AuditChainCheckpoint)
class AuditChainCheckpointAdmin(ReadOnlyAdmin):
    list_display = ("id", "at", "seq", "row_hash", "key_id", "signed")
    ordering = ("-id",)

    @admin.display(boolean=True)
    def signed(self, cp: AuditChainCheckpoint) -> bool:
        return cp.signed
