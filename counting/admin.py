"""Admin for the count projection.

Control plane (`default`): bucket spaces, generations, route manifests and their items, the
materialised routes and the durable display snapshots are read-only; the per-video refresh switch
is editable and every change of it is audited.

Count partition data lives on every count partition and is never listed by a ModelAdmin (it needs an
explicit alias): the read-only "Vbuckets per video" page, /admin/counting/videodisplaycount/vbuckets/
(URL name `admin:counting_vbuckets`, permission `counting.view_videolikecountvbucket`), reads one
video's buckets from every partition and compares them with the active manifest and the snapshot.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, transaction
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_safe

from counting import routing
from counting.models import (
    CountBucketRoute,
    CountBucketSpace,
    CountCacheGeneration,
    CountProjectionGeneration,
    CountRefreshSwitch,
    CountRouteManifest,
    CountRouteManifestItem,
    DirtyVideo,
    VideoDisplayCount,
    VideoLikeCountVbucket,
)
from counting.services.count_cache import count_cache_rebuild
from likes_project.errors import DomainError
from opsconsole.admin import ReadOnlyAdmin
from opsconsole.services import admin_actor, audit_record
from relations import validation

VBUCKETS_PERMISSION = "counting.view_videolikecountvbucket"
REBUILD_COUNT_CACHE_PERMISSION = "counting.rebuild_count_cache"

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
    selection: it always builds the generation after the newest one, pinned to the active manifest,
    and runs to completion in the request (use `manage.py rebuild_count_cache` for very large stores).
    Needs `counting.rebuild_count_cache`; the service audits its start, activation or failure."""

    list_display = ("generation", "status", "projection_generation", "route_manifest_id", "previous_generation",
                    "rows_written", "started_by", "started_at", "activated_at", "finished_at", "failure_reason")
    list_filter = ("status",)
    ordering = ("-generation",)
    actions = ["rebuild_count_cache"]

    def has_rebuild_permission(self, request) -> bool:
        return request.user.has_perm(REBUILD_COUNT_CACHE_PERMISSION)

    @admin.action(description="Rebuild the count cache into a new generation", permissions=["rebuild"])
    def rebuild_count_cache(self, request, queryset):
        if not self.has_rebuild_permission(request):
            raise PermissionDenied
        try:
            report = count_cache_rebuild(actor=admin_actor(request.user))
        except DomainError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
            return
        if report.status == "ACTIVE":
            self.message_user(request, f"Count cache generation {report.generation} is ACTIVE "
                                       f"({report.rows_written} bucket rows, {report.views_written} views, "
                                       f"{report.sampled} videos verified); generation {report.previous} retired.",
                              level=messages.SUCCESS)
        else:
            self.message_user(request, f"Count cache rebuild of generation {report.generation} FAILED: "
                                       f"{report.failure}. Reads stay on generation {report.previous}.",
                              level=messages.ERROR)


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


@admin.register(CountRouteManifestItem)
class CountRouteManifestItemAdmin(ReadOnlyAdmin):
    list_display = ("manifest_id", "virtual_bucket", "physical_partition", "route_epoch")
    list_filter = ("manifest_id", "physical_partition")
    search_fields = ("=virtual_bucket",)
    ordering = ("manifest_id", "virtual_bucket")
    list_per_page = 256


@admin.register(CountBucketRoute)
class CountBucketRouteAdmin(ReadOnlyAdmin):
    list_display = ("bucket_space_version", "virtual_bucket", "physical_partition", "route_epoch")
    list_filter = ("bucket_space_version", "physical_partition")
    search_fields = ("=virtual_bucket",)
    ordering = ("bucket_space_version", "virtual_bucket")
    list_per_page = 256


# --- vbuckets per video (read-only page) -------------------------------------------------------


@dataclass(frozen=True)
class VbucketRow:
    alias: str
    virtual_bucket: int
    bucket_space_version: int
    active_count: int
    bucket_version: int
    frozen: bool
    updated_at: object
    routed_partition: str
    routed: bool  # this partition is the one the active manifest routes the bucket to


@dataclass
class VideoVbuckets:
    video_id: str
    generation: int
    manifest_id: int
    rows: list[VbucketRow] = field(default_factory=list)
    routed_sum: int = 0  # what a display snapshot sums: routed buckets only (ROUTE-6)
    unrouted_rows: int = 0
    unrouted_sum: int = 0
    dirty_marks: int = 0
    unreadable: list[str] = field(default_factory=list)  # partitions that did not answer
    snapshot: VideoDisplayCount | None = None

    @property
    def snapshot_matches(self) -> bool | None:
        if self.snapshot is None or self.unreadable:
            return None
        return self.snapshot.raw_active_count == self.routed_sum


def video_vbuckets_get(*, video_id: str) -> VideoVbuckets:
    """Every vbucket row of `video_id` in the active generation, from every count partition, with
    the route the active manifest gives its bucket. Reads only."""
    gen = routing.active()
    out = VideoVbuckets(video_id, gen.generation, gen.manifest_id)
    for alias in settings.COUNT_PARTITION_ALIASES:
        try:
            rows = list(VideoLikeCountVbucket.objects.using(alias)
                        .filter(generation=gen.generation, video_id=video_id).order_by("virtual_bucket"))
            out.dirty_marks += DirtyVideo.objects.using(alias).filter(generation=gen.generation,
                                                                      video_id=video_id).count()
        except DatabaseError:
            out.unreadable.append(alias)
            continue
        for r in rows:
            routed_to = gen.routes[r.virtual_bucket].partition if r.virtual_bucket < len(gen.routes) else "?"
            out.rows.append(VbucketRow(alias, r.virtual_bucket, r.bucket_space_version, r.active_count,
                                       r.bucket_version, r.frozen, r.updated_at, routed_to, routed_to == alias))
    out.rows.sort(key=lambda r: (r.virtual_bucket, r.alias))
    for r in out.rows:
        if r.routed:
            out.routed_sum += r.active_count
        else:
            out.unrouted_rows += 1
            out.unrouted_sum += r.active_count
    out.snapshot = VideoDisplayCount.objects.filter(video_id=video_id).first()
    return out


class VbucketLookupForm(forms.Form):
    video_id = forms.CharField(label="Video id", max_length=64)

    def clean_video_id(self):
        try:
            return validation.video_id(self.cleaned_data["video_id"])
        except DomainError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from exc


# An app has no template directory of its own here; the page's template is kept next to its view.
VBUCKETS_TEMPLATE = """{% extends "admin/base_site.html" %}
{% load static %}
{% block extrastyle %}{{ block.super }}<link rel="stylesheet" href="{% static "admin/css/forms.css" %}">
<style>.vbuckets table { width: 100%; margin-bottom: 1.5em; } .vbuckets .unrouted { color: #ba2121; }</style>
{% endblock %}
{% block bodyclass %}{{ block.super }} app-counting counting-vbuckets{% endblock %}
{% block breadcrumbs %}<div class="breadcrumbs"><a href="{% url 'admin:index' %}">Home</a>
&rsaquo; <a href="{% url 'admin:app_list' app_label='counting' %}">Counting</a> &rsaquo; {{ title }}</div>
{% endblock %}
{% block content %}<div id="content-main">
<p>Read-only. Rows are read from every count partition; only the partition the active manifest routes a
bucket to counts towards the sum, as in a display snapshot.</p>
<form method="get"><fieldset class="module aligned">{{ form.non_field_errors }}
{% for f in form %}<div class="form-row">{{ f.errors }}{{ f.label_tag }} {{ f }}</div>{% endfor %}
</fieldset><div class="submit-row"><input type="submit" value="Show buckets" class="default"></div></form>
{% if result %}<div class="vbuckets" id="vbuckets-result">
<h2>Video {{ result.video_id }}: generation {{ result.generation }}, manifest {{ result.manifest_id }}</h2>
{% if result.unreadable %}<p class="errornote">Not answering: {{ result.unreadable|join:", " }}. The sum below
misses their buckets.</p>{% endif %}
{% if result.rows %}<table><thead><tr><th scope="col">Partition</th><th scope="col">Virtual bucket</th>
<th scope="col">Bucket space</th><th scope="col">Active count</th><th scope="col">Bucket version</th>
<th scope="col">Frozen</th><th scope="col">Updated at</th><th scope="col">Manifest route</th>
<th scope="col">Partition matches route</th></tr></thead><tbody>
{% for r in result.rows %}<tr class="vbucket-row{% if not r.routed %} unrouted{% endif %}">
<td class="partition-alias">{{ r.alias }}</td><td>{{ r.virtual_bucket }}</td><td>v{{ r.bucket_space_version }}</td>
<td>{{ r.active_count }}</td><td>{{ r.bucket_version }}</td><td>{{ r.frozen|yesno:"FROZEN,no" }}</td>
<td>{{ r.updated_at|date:"c" }}</td><td>{{ r.routed_partition }}</td><td>{{ r.routed|yesno:"yes,NO" }}</td></tr>
{% endfor %}</tbody><tfoot><tr><th scope="row" colspan="3">Sum of routed buckets</th>
<td id="vbuckets-sum">{{ result.routed_sum }}</td><td colspan="5"></td></tr></tfoot></table>
{% if result.unrouted_rows %}<p class="unrouted">{{ result.unrouted_rows }} row(s) on a partition the active
manifest does not route their bucket to (total {{ result.unrouted_sum }}), not counted.</p>{% endif %}
{% else %}<p>No bucket rows for this video in generation {{ result.generation }}.</p>{% endif %}
<h2>Durable display snapshot</h2>
{% if result.snapshot %}<table><tbody>
<tr><th scope="row">Raw active count</th><td id="snapshot-raw">{{ result.snapshot.raw_active_count }}</td></tr>
<tr><th scope="row">Display count</th><td>{{ result.snapshot.display_count }}</td></tr>
<tr><th scope="row">Hidden (risk / policy)</th><td>{{ result.snapshot.risk_hidden_count }} /
{{ result.snapshot.policy_hidden_count }}</td></tr>
<tr><th scope="row">Generation / manifest</th><td>{{ result.snapshot.generation }} /
{{ result.snapshot.manifest_id }}</td></tr>
<tr><th scope="row">Snapshot id</th><td>{{ result.snapshot.snapshot_id }}</td></tr>
<tr><th scope="row">Generated at</th><td>{{ result.snapshot.generated_at|date:"c" }}</td></tr>
<tr><th scope="row">Matches the routed sum</th><td>{{ result.snapshot_matches|yesno:"yes,NO,unknown" }}</td></tr>
</tbody></table>{% else %}<p>No display snapshot yet.</p>{% endif %}
<p>Pending dirty marks (changes not yet in the snapshot): {{ result.dirty_marks }}</p>
</div>{% endif %}
</div>{% endblock %}
"""


@functools.cache
def _vbuckets_template():
    return engines["django"].from_string(VBUCKETS_TEMPLATE)


@require_safe
def vbuckets_view(request, *, admin_site):
    """Wrapped by `admin_site.admin_view` (active staff only); the vbucket permission is checked here."""
    if not request.user.has_perm(VBUCKETS_PERMISSION):
        raise PermissionDenied
    form = VbucketLookupForm(request.GET if "video_id" in request.GET else None)
    result = None
    if form.is_valid():
        try:
            result = video_vbuckets_get(video_id=form.cleaned_data["video_id"])
        except routing.NoActiveGeneration as exc:
            form.add_error(None, str(exc))
    context = {**admin_site.each_context(request), "title": "Vbuckets per video", "subtitle": None,
               "form": form, "result": result}
    request.current_app = admin_site.name
    return TemplateResponse(request, _vbuckets_template(), context)


@admin.register(VideoDisplayCount)
class VideoDisplayCountAdmin(ReadOnlyAdmin):
    list_display = ("video_id", "display_count", "raw_active_count", "risk_hidden_count", "policy_hidden_count",
                    "generation", "manifest_id", "snapshot_id", "generated_at")
    search_fields = ("=video_id",)
    ordering = ("-generated_at",)

    def get_list_display(self, request):
        shown = super().get_list_display(request)
        return (*shown, "vbuckets_link") if request.user.has_perm(VBUCKETS_PERMISSION) else shown

    @admin.display(description="buckets")
    def vbuckets_link(self, obj) -> str:
        url = reverse("admin:counting_vbuckets", current_app=self.admin_site.name)
        return format_html('<a href="{}?video_id={}">vbuckets</a>', url, obj.video_id)

    def get_urls(self):
        view = self.admin_site.admin_view(functools.partial(vbuckets_view, admin_site=self.admin_site))
        return [path("vbuckets/", view, name="counting_vbuckets"), *super().get_urls()]


def _with_vbuckets_entry(get_app_list):
    """Adds "Vbuckets per video" to the Counting section of the admin index, app index and sidebar
    for users who may use it (a page, not a model, so the admin cannot list it by itself)."""

    @functools.wraps(get_app_list)
    def app_list_with_vbuckets(request, app_label=None):
        app_list = get_app_list(request, app_label)
        if app_label not in (None, "counting") or not request.user.has_perm(VBUCKETS_PERMISSION):
            return app_list
        entry = {
            "model": None, "name": "Vbuckets per video", "object_name": "VbucketsPerVideo",
            "perms": {"add": False, "change": False, "delete": False, "view": True},
            "admin_url": reverse("admin:counting_vbuckets", current_app=admin.site.name),
            "add_url": None, "view_only": True,
        }
        app = next((a for a in app_list if a["app_label"] == "counting"), None)
        if app is None:
            app = {
                "name": VideoDisplayCount._meta.app_config.verbose_name, "app_label": "counting",
                "app_url": reverse("admin:app_list", kwargs={"app_label": "counting"}, current_app=admin.site.name),
                "has_module_perms": True, "models": [],
            }
            app_list = sorted([*app_list, app], key=lambda a: a["name"].lower())
        app["models"] = sorted([*app["models"], entry], key=lambda m: m["name"])
        return app_list

    app_list_with_vbuckets.adds_vbuckets_page = True
    return app_list_with_vbuckets


if not getattr(admin.site.get_app_list, "adds_vbuckets_page", False):
    admin.site.get_app_list = _with_vbuckets_entry(admin.site.get_app_list)


# --- refresh switch (editable, audited) --------------------------------------------------------


class CountRefreshSwitchForm(forms.ModelForm):
    class Meta:
        model = CountRefreshSwitch
        fields = ("video_id", "paused", "reason")
        help_texts = {"reason": "Required when pausing; recorded in the audit log."}

    def clean_video_id(self):
        try:
            return validation.video_id(self.cleaned_data["video_id"])
        except DomainError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from exc

    def clean(self):
        cleaned = super().clean()
        cleaned["reason"] = (cleaned.get("reason") or "").strip()
        if cleaned.get("paused") and not cleaned["reason"]:
            self.add_error("reason", "Give a reason for pausing this video's display refreshes.")
        return cleaned


@admin.register(CountRefreshSwitch)
class CountRefreshSwitchAdmin(admin.ModelAdmin):
    """Pause or resume one video's display refreshes. Kept a plain ModelAdmin: the switch is one row
    on `default`, saved together with its audit record. Never deleted: resume it instead."""

    form = CountRefreshSwitchForm
    list_display = ("video_id", "paused", "reason", "updated_by", "updated_at")
    list_filter = ("paused",)
    search_fields = ("=video_id",)
    ordering = ("-updated_at",)

    def get_fields(self, request, obj=None):
        return ("video_id", "paused", "reason") if obj is None else (
            "video_id", "paused", "reason", "updated_by", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("video_id", "updated_by", "updated_at")

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        actor = admin_actor(request.user)
        obj.reason = form.cleaned_data["reason"]
        obj.updated_by = actor.name
        with transaction.atomic(using="default"):
            obj.save()
            audit_record(actor=actor, action="count.refresh_pause" if obj.paused else "count.refresh_resume",
                         target_type="video", target_id=obj.video_id, params={"reason": obj.reason})
