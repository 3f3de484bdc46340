"""Admin for the counting app.

Control plane (`default`): bucket spaces, generations, route manifests and their items, the
materialised routes, the display snapshots, the count-cache and reverse-index generations are
read-only; rebuilds start ops jobs (an action, a page). The per-video refresh switch is editable
through its service, which audits every change.

Count-partition rows need an explicit alias and are never listed by a ModelAdmin: the read-only page
"Vbuckets per video" (/admin/counting/videodisplaycount/vbuckets/, URL name `admin:counting_vbuckets`,
permission `counting.view_videolikecountvbucket`) reads one video's buckets from every partition and
compares them with the active manifest and the snapshot, with each bucket's route (partition, epoch) and
the unfinished bucket migrations moving any of its buckets.

Virtual-bucket migrations (issue 13): the ledger is read-only; every step goes through
`counting.services.migration.ledger`, which checks the workflow and audits it. "Plan a migration"
(`counting.plan_bucketmigration`) is a page; Approve, Resume (POST-only buttons) and Abort (a reason first)
on a migration's page need `counting.approve_bucketmigration`. Approve and resume only start the system's
ops job; nothing of the protocol runs in the request. A refusal is an error message or a form error.
"""

from __future__ import annotations

from functools import partial

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_safe

from counting import routing, selectors
from counting.models import (
    BucketMigration,
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
from counting.services.migration import ledger
from counting.services.reverse.rebuild import REBUILD_JOB as REVERSE_REBUILD_JOB
from counting.services.reverse.rebuild import REBUILD_PERMISSION as REBUILD_REVERSE_PERMISSION
from counting.services.snapshots import count_refresh_switch_set
from likes_project.admin_kit import (
    AdminPage,
    JobForm,
    PauseReasonForm,
    PauseSwitchAdmin,
    ReadOnlyAdmin,
    render_page,
    require_permission,
    start_job_or_message,
)
from likes_project.errors import DomainError
from likes_project.ledgers.console import LedgerAdmin, LedgerConsole, LedgerPlanForm, json_field
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


class ReverseRebuildForm(JobForm):
    title, submit, permission = "Rebuild the reverse index", "Start the rebuild", REBUILD_REVERSE_PERMISSION
    intro = ("Builds the who-liked index into a new generation with R reverse shards (the projector writes it "
             "from its creation on), verifies it against the relation facts and switches to it; the old "
             "generation's cursors then answer 410. A failure leaves the current generation ACTIVE.")
    shards = forms.IntegerField(label="Reverse shards (R)", min_value=1, max_value=1024,
                                help_text="R of the new generation; the hash contract stays the ACTIVE one's.")

    def start(self):
        return REVERSE_REBUILD_JOB, {"shards": self.cleaned_data["shards"]}, ""


@admin.register(ReverseIndexGeneration)
class ReverseIndexGenerationAdmin(ReadOnlyAdmin):
    list_display = ("generation", "status", "shards", "hash_algorithm", "hash_seed", "previous_generation", "job_id",
                    "created_at", "activated_at", "finished_at", "failure_reason")
    list_filter = ("status",)
    ordering = ("-generation",)
    pages = [ReverseRebuildForm.page("rebuild/", "counting_reverse_rebuild")]


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
    list_display = fields = ("manifest_id", "virtual_bucket", "physical_partition", "route_epoch")
    list_filter = ("manifest_id", "physical_partition")
    ordering = ("manifest_id", "virtual_bucket")


@admin.register(CountBucketRoute)
class CountBucketRouteAdmin(RoutingTableAdmin):
    list_display = fields = ("bucket_space_version", "virtual_bucket", "physical_partition", "route_epoch")
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
    result, bucket_rows, migrations = None, [], []
    if form.is_valid():
        try:
            result = selectors.video_vbuckets_get(video_id=form.cleaned_data["video_id"])
            bucket_rows, migrations = _vbuckets_routes(result)
        except routing.NoActiveGeneration as exc:
            form.add_error(None, str(exc))
            result = None
    return render_page(request, admin_site, "counting/admin/vbuckets.html", title="Vbuckets per video", form=form,
                       result=result, bucket_rows=bucket_rows, migrations=migrations)


def _vbuckets_routes(result: selectors.VideoVbuckets) -> tuple[list[dict], list[dict]]:
    """Each of the video's bucket rows with its bucket's route in the active routes (partition, epoch) and
    the unfinished migration moving it, if any; and the unfinished migrations moving any of its buckets."""
    gen = routing.active()
    buckets = {r.virtual_bucket for r in result.rows}
    moving_bucket: dict[int, BucketMigration] = {}
    migrations = []
    for m, common in selectors.migrations_moving(buckets):
        migrations.append({"migration": m, "url": _migration_url(m.pk), "buckets": ledger.buckets_label(common),
                           "sources": _sources_text(m)})
        for vb in common:
            moving_bucket.setdefault(vb, m)
    rows = [{"row": r, "route": gen.routes[r.virtual_bucket] if r.virtual_bucket < len(gen.routes) else None,
             "migration": moving_bucket.get(r.virtual_bucket)} for r in result.rows]
    return rows, migrations


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


# --- virtual-bucket migrations (issue 13): the ledger, read-only; its steps through the ledger service ----


def _migration_url(migration_id) -> str:
    return CONSOLE.change_url(migration_id)


_json_field = partial(json_field, empty="-")  # a step's record: "-" until the step wrote it


class MigrationPlanForm(LedgerPlanForm):
    target = forms.ChoiceField(label="Target partition", help_text="The count partition the buckets move onto.")
    buckets = forms.CharField(label="Virtual buckets", max_length=4000,
                              help_text="Ranges of the active bucket space: 0-255, or 0-9,100-109.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        gen = _active_routes()
        self.fields["target"].choices = [
            (alias, alias if gen is None else f"{alias} ({len(gen.buckets_on(alias))} buckets now)")
            for alias in settings.COUNT_PARTITION_ALIASES]


def _active_routes() -> routing.GenerationRoutes | None:
    try:
        return routing.active()
    except routing.NoActiveGeneration:
        return None


def _plan_intro() -> str:
    gen = _active_routes()
    space = ("" if gen is None else
             f" The active bucket space (v{gen.space.version}) has buckets 0-{gen.space.virtual_buckets - 1}.")
    return ("Moves virtual buckets of the active generation onto a count partition (scale out onto a new partition, "
            "or in off an old one). Planning writes only the ledger row: the migration waits for another operator's "
            "approval, then the system copies the buckets, replays the changes, pauses their writes for the cutover "
            "and verifies the copy, as an ops job." + space)


class MigrationConsole(LedgerConsole):
    def abort_page(self, request, admin_site, m: BucketMigration, form):
        return render_page(
            request, admin_site, "counting/admin/bucketmigration_abort.html", title=f"Abort migration {m.pk}",
            form=form, migration=m, bucket_range=ledger.buckets_label(m.buckets),
            before_cas=m.state in ledger.BEFORE_CAS, opts=BucketMigration._meta)

    def aborted_message(self, before: BucketMigration, aborted: BucketMigration) -> str:
        return (f"Aborted migration {aborted.pk} (it was {before.state}): buckets "
                f"{ledger.buckets_label(aborted.buckets)} stay where they were.")


CONSOLE = MigrationConsole(ledger.LEDGER, url_prefix="counting_migration", title="Migration")
PLAN_PAGE = CONSOLE.plan_page(
    form=MigrationPlanForm, title="Plan a migration", body_class="bucket-migration-plan", intro=_plan_intro,
    plan=lambda data, actor: ledger.migration_plan(target=data["target"], buckets=data["buckets"],
                                                   reason=data["reason"], actor=actor),
    # The service's refusals of a plan, shown on the field they are about (the rest above the form).
    error_fields={"invalid_buckets": "buckets", "already_on_target": "buckets", "migration_overlap": "buckets",
                  "unknown_partition": "target", "reason_required": "reason"},
    planned=lambda m: (f"Planned migration {m.pk}: buckets {ledger.buckets_label(m.buckets)} ({len(m.buckets)}) -> "
                       f"{m.target_partition}, {m.rows_to_copy} rows to copy."))


def _sources_text(m: BucketMigration) -> str:
    return ", ".join(sorted(set(m.source_partitions.values()))) or "-"


def _epochs_text(m: BucketMigration) -> str:
    source = sorted(set(m.source_epochs.values()))
    if not source:
        return "-"
    target = sorted({e + 1 for e in source})
    return f"{', '.join(map(str, source))} \u2192 {', '.join(map(str, target))}"


@admin.register(BucketMigration)
class BucketMigrationAdmin(LedgerAdmin):
    """The migration ledger (issue 13; MIG-2, MIG-4), read-only: what moves where, at which epochs and
    manifests, how far the copy and the catch-up are, the measured write pause, who asked and who approved.
    A migration's page has the Approve, Resume and Abort buttons; "Plan a migration" is a page."""

    list_display = ("id", "state_code", "bucket_range", "sources_to_target", "source_manifest_id",
                    "target_manifest_id", "epochs", "copy_progress", "replayed_events", "write_pause", "requested_by",
                    "approved_by", "created_at", "cutover_at", "error_text")
    list_filter = ("state", "target_partition")
    search_fields = ("=id", "=requested_by", "=approved_by", "=target_partition", "reason")
    console, css = CONSOLE, "migration"
    fields = ("state_code", "bucket_range", "bucket_count", "sources_to_target", "bucket_space_version", "generation",
              "source_manifest_id", "target_manifest_id", "epochs", "copy_progress", "replayed_events",
              "catchup_passes", "write_pause", "copy_cursor_json", "baseline_json", "replay_next_json",
              "final_watermark_json", "cutover_checkpoint_json", "cutover_stream_offsets_json", "target_watermark",
              "verify_json", "reason", "requested_by", "requested_channel", "approved_by", "approved_at",
              "abort_reason", "error", "jobs_table", "audit_link", "created_at", "state_changed_at", "cutover_at",
              "verified_at", "finished_at", "source_cleanup_after", "source_cleaned_at", "report_json")
    readonly_fields = ("bucket_range", "bucket_count", "sources_to_target", "epochs", "copy_cursor_json",
                       "baseline_json", "replay_next_json", "final_watermark_json", "cutover_checkpoint_json",
                       "cutover_stream_offsets_json")
    pages = [PLAN_PAGE, *CONSOLE.pages()]

    @admin.display(description="buckets")
    def bucket_range(self, m: BucketMigration) -> str:
        return ledger.buckets_label(m.buckets) or "-"

    @admin.display(description="bucket count")
    def bucket_count(self, m: BucketMigration) -> int:
        return len(m.buckets)

    @admin.display(description="sources \u2192 target", ordering="target_partition")
    def sources_to_target(self, m: BucketMigration) -> str:
        return f"{_sources_text(m)} \u2192 {m.target_partition}"

    @admin.display(description="route epochs (source \u2192 target)")
    def epochs(self, m: BucketMigration) -> str:
        return _epochs_text(m)

    copy_cursor_json = _json_field("copy_cursor", "migration-copy-cursor", "copy cursor (per source and table)")
    baseline_json = _json_field("baseline", "migration-baseline", "baseline C (change seq per source)")
    replay_next_json = _json_field("replay_next_position", "migration-replay-next", "replay next position")
    final_watermark_json = _json_field("final_watermark", "migration-final-watermark", "final watermark H")
    cutover_checkpoint_json = _json_field("cutover_checkpoint_ref", "migration-cutover-checkpoint",
                                          "cutover checkpoint (change-log watermark)")
    cutover_stream_offsets_json = _json_field("cutover_stream_offsets", "migration-cutover-offsets",
                                              "stream offsets at the cutover")
