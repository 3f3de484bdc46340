"""Admin for the counting app.

Control plane (`default`): bucket spaces, generations, route manifests and their items, the
materialised routes, the display snapshots, the count-cache and reverse-index generations are
read-only; rebuilds start ops jobs (an action, a page). The per-video refresh switch is editable
through its service, which audits every change.

Count-partition rows need an explicit alias and are never listed by a ModelAdmin: the read-only page
"Vbuckets per video" (/admin/counting/videodisplaycount/vbuckets/, URL name `admin:counting_vbuckets`,
permission `counting.view_videolikecountvbucket`) reads one video's buckets from every partition and
compares them with the active manifest and the snapshot.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_http_methods, require_safe

from counting import routing, selectors
from counting.models import (
    CountBucketRoute,
    CountBucketSpace,
    CountCacheGeneration,
    CountProjectionGeneration,
    CountRefreshSwitch,
    CountRouteManifest,
    CountRouteManifestItem,
    ReverseIndexGeneration,
    VideoDisplayCount,
    VideoRetirement,
    VideoRetirementScan,
)
from counting.services.count_cache.layers import REBUILD_JOB as COUNT_CACHE_REBUILD_JOB
from counting.services.count_cache.rebuild import REBUILD_PERMISSION as REBUILD_COUNT_CACHE_PERMISSION
from counting.services.reverse.rebuild import REBUILD_JOB as REVERSE_REBUILD_JOB
from counting.services.reverse.rebuild import REBUILD_PERMISSION as REBUILD_REVERSE_PERMISSION
from counting.services.snapshots import count_refresh_switch_set
from likes_project.admin_kit import (
    AdminPage,
    PauseReasonForm,
    PauseSwitchAdmin,
    ReadOnlyAdmin,
    job_form_page,
    render_page,
    require_permission,
    start_job_or_message,
)
from likes_project.errors import DomainError
from relations import validation

VBUCKETS_PERMISSION = "counting.view_videolikecountvbucket"


def _video_id_field(value: str) -> str:
    try:
        return validation.video_id(value)
    except DomainError as exc:
        raise forms.ValidationError(exc.message, code=exc.code) from exc


# --- control plane, read-only ------------------------------------------------------------------


@admin.register(CountBucketSpace)
class CountBucketSpaceAdmin(ReadOnlyAdmin):
    list_display = ("version", "hash_algorithm", "hash_seed", "key_encoding", "virtual_buckets", "created_at")


@admin.register(CountProjectionGeneration)
class CountProjectionGenerationAdmin(ReadOnlyAdmin):
    list_display = ("generation", "status", "bucket_space_version", "active_manifest_id", "created_at")
    list_filter = ("status",)


@admin.register(CountCacheGeneration)
class CountCacheGenerationAdmin(ReadOnlyAdmin):
    """Count-cache generations (read-only) and the rebuild action (CCACHE-3). The action ignores the
    selection: it starts the job that builds the generation after the newest one, pinned to the active
    manifest, and shows the job's page. Needs `counting.rebuild_count_cache`."""

    list_display = ("generation", "status", "projection_generation", "route_manifest_id", "previous_generation",
                    "rows_written", "job_id", "started_by", "started_at", "activated_at", "finished_at",
                    "failure_reason")
    list_filter = ("status",)
    ordering = ("-generation",)
    actions = ["rebuild_count_cache"]

    def has_rebuild_permission(self, request) -> bool:
        return request.user.has_perm(REBUILD_COUNT_CACHE_PERMISSION)

    @admin.action(description="Rebuild the count cache into a new generation", permissions=["rebuild"])
    def rebuild_count_cache(self, request, queryset):
        return start_job_or_message(request, self.admin_site, kind=COUNT_CACHE_REBUILD_JOB, params={})


class ReverseRebuildForm(forms.Form):
    shards = forms.IntegerField(label="Reverse shards (R)", min_value=1, max_value=1024,
                                help_text="R of the new generation; the hash contract stays the ACTIVE one's.")


@require_http_methods(["GET", "POST"])
def reverse_rebuild_view(request, *, admin_site):
    return job_form_page(
        request, admin_site, form_class=ReverseRebuildForm, permission=REBUILD_REVERSE_PERMISSION,
        title="Rebuild the reverse index", submit="Start the rebuild",
        intro="Builds the who-liked index into a new generation with R reverse shards (the projector writes it "
              "from its creation on), verifies it against the relation facts and switches to it; the old "
              "generation's cursors then answer 410. A failure leaves the current generation ACTIVE.",
        start=lambda data: (REVERSE_REBUILD_JOB, {"shards": data["shards"]}, ""),
    )


@admin.register(ReverseIndexGeneration)
class ReverseIndexGenerationAdmin(ReadOnlyAdmin):
    list_display = ("generation", "status", "shards", "hash_algorithm", "hash_seed", "previous_generation", "job_id",
                    "created_at", "activated_at", "finished_at", "failure_reason")
    list_filter = ("status",)
    ordering = ("-generation",)
    pages = [AdminPage("rebuild/", reverse_rebuild_view, name="counting_reverse_rebuild",
                       title="Rebuild the reverse index", permission=REBUILD_REVERSE_PERMISSION)]


@admin.register(VideoRetirement)
class VideoRetirementAdmin(ReadOnlyAdmin):
    """Deleted videos' retirement (issue 9 §4): PENDING until their rows are gone for good."""

    list_display = ("video_id", "version", "status", "deleted_at", "retired_at", "reverse_generation", "updated_at")
    list_filter = ("status",)
    search_fields = ("video_id",)
    ordering = ("-deleted_at", "video_id")


@admin.register(VideoRetirementScan)
class VideoRetirementScanAdmin(ReadOnlyAdmin):
    list_display = ("id", "after_at", "after_video_id", "scanned_at")


@admin.register(CountRouteManifest)
class CountRouteManifestAdmin(ReadOnlyAdmin):
    list_display = ("id", "status", "bucket_space_version", "row_count", "item_count", "checksum", "created_at",
                    "sealed_at")
    list_filter = ("status", "bucket_space_version")

    def get_queryset(self, request):
        items = (CountRouteManifestItem.objects.filter(manifest_id=OuterRef("pk")).order_by()
                 .values("manifest_id").annotate(n=Count("id")).values("n"))
        return super().get_queryset(request).annotate(
            items_stored=Coalesce(Subquery(items, output_field=IntegerField()), 0))

    @admin.display(description="items stored", ordering="items_stored")
    def item_count(self, obj) -> int:
        # Stored items, next to the sealed row_count: a difference means the manifest is damaged.
        return obj.items_stored


class RoutingTableAdmin(ReadOnlyAdmin):
    search_fields = ("=virtual_bucket",)
    list_per_page = 256


@admin.register(CountRouteManifestItem)
class CountRouteManifestItemAdmin(RoutingTableAdmin):
    list_display = ("manifest_id", "virtual_bucket", "physical_partition", "route_epoch")
    list_filter = ("manifest_id", "physical_partition")
    ordering = ("manifest_id", "virtual_bucket")


@admin.register(CountBucketRoute)
class CountBucketRouteAdmin(RoutingTableAdmin):
    list_display = ("bucket_space_version", "virtual_bucket", "physical_partition", "route_epoch")
    list_filter = ("bucket_space_version", "physical_partition")
    ordering = ("bucket_space_version", "virtual_bucket")


# --- vbuckets per video (read-only page) -------------------------------------------------------


class VbucketLookupForm(forms.Form):
    video_id = forms.CharField(label="Video id", max_length=64)

    def clean_video_id(self):
        return _video_id_field(self.cleaned_data["video_id"])


@require_safe
def vbuckets_view(request, *, admin_site):
    """Wrapped by `admin_site.admin_view` (active staff only); the vbucket permission is checked here."""
    require_permission(request, VBUCKETS_PERMISSION)
    form = VbucketLookupForm(request.GET if "video_id" in request.GET else None)
    result = None
    if form.is_valid():
        try:
            result = selectors.video_vbuckets_get(video_id=form.cleaned_data["video_id"])
        except routing.NoActiveGeneration as exc:
            form.add_error(None, str(exc))
    return render_page(request, admin_site, "counting/admin/vbuckets.html", title="Vbuckets per video", form=form,
                       result=result)


@admin.register(VideoDisplayCount)
class VideoDisplayCountAdmin(ReadOnlyAdmin):
    list_display = ("video_id", "display_count", "raw_active_count", "risk_hidden_count", "policy_hidden_count",
                    "generation", "manifest_id", "snapshot_id", "generated_at")
    search_fields = ("=video_id",)
    ordering = ("-generated_at",)
    pages = [AdminPage("vbuckets/", vbuckets_view, name="counting_vbuckets", title="Vbuckets per video",
                       permission=VBUCKETS_PERMISSION)]

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return (*shown, "vbuckets_link") if request.user.has_perm(VBUCKETS_PERMISSION) else shown

    @admin.display(description="buckets")
    def vbuckets_link(self, obj) -> str:
        url = reverse("admin:counting_vbuckets", current_app=self.admin_site.name)
        return format_html('<a href="{}?video_id={}">vbuckets</a>', url, obj.video_id)


# --- refresh switch (editable through its service, audited) ----------------------------------------


class CountRefreshSwitchForm(PauseReasonForm):
    pause_subject = "this video's display refreshes"

    class Meta(PauseReasonForm.Meta):
        model, fields = CountRefreshSwitch, ("video_id", "paused", "reason")

    def clean_video_id(self):
        return _video_id_field(self.cleaned_data["video_id"])


@admin.register(CountRefreshSwitch)
class CountRefreshSwitchAdmin(PauseSwitchAdmin):
    """Pause or resume one video's display refreshes."""

    form = CountRefreshSwitchForm
    key_field = "video_id"
    list_filter = ("paused",)
    search_fields = ("=video_id",)
    ordering = ("-updated_at",)

    def set_switch(self, *, key, paused, reason, actor):
        return count_refresh_switch_set(video_id=key, paused=paused, reason=reason, actor=actor)
