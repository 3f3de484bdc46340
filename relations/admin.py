"""Admin for the relations app's control-plane models, and the pages that start its long actions.

Writes go through `relations.services` (audit record, version bump, cache write-through or
invalidation happen there). The sharded models (relations, commands, outbox) are not registered: the
console's relation lookup reads them. Long actions (the relation cache rebuild, account deletion, the
exact export) start ops jobs and show the job's page; none runs in the request.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.main import ERROR_FLAG
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import HttpResponseRedirect
from django.views.decorators.http import require_http_methods

from likes_project.admin_kit import (
    AdminPage,
    JobForm,
    ReadOnlyAdmin,
    RuntimeSwitchAdmin,
    ServiceWriteAdmin,
    adopt_stored_row,
    service_form_page,
    start_job_or_message,
)
from likes_project.audit.services import admin_actor
from likes_project.errors import DomainError
from relations import validation
from relations.jobs import ACCOUNT_DELETE, LIKERS_EXPORT, LIKES_EXPORT
from relations.models import (
    AccountStatus,
    Block,
    Friendship,
    LikesReadOnlySwitch,
    OutboxEvent,
    OutboxPublisherSwitch,
    OutboxStatus,
    RelationCacheGeneration,
    RelationShardContract,
    RelationShardSlot,
    VideoSnapshot,
    VideoStatus,
    VideoVisibility,
)
from relations.services.accounts import ACCOUNT_DELETE_PERMISSION
from relations.services.export import EXPORT_PERMISSION, LIKERS_EXPORT_PERMISSION
from relations.services.outbox import OUTBOX_REQUEUE_PERMISSION, outbox_dead_requeue
from relations.services.relation_cache import REBUILD_JOB
from relations.services.relation_cache_rebuild import REBUILD_PERMISSION
from relations.services.retention import RETENTION_PERMISSION, command_retention_run
from relations.services.social import block_set, friendship_set
from relations.services.videos import video_override_set
from relations.slot_move_admin import RelationSlotMoveAdmin  # noqa: F401 - registers the slot move ledger


def _require_accounts(form: forms.Form, *field_names: str) -> None:
    """Social edges are between existing accounts: a mistyped id is a form error, not a dangling edge."""
    User = get_user_model()
    for name in field_names:
        user_id = form.cleaned_data.get(name)
        if user_id is not None and not User.objects.filter(pk=user_id).exists():
            form.add_error(name, f"No user with id {user_id}.")


# --- video snapshots: the service's snapshot, read-only, and the operator override (D50) -------------

FOLLOW_SERVICE = [("", "— follow the video service —")]


class VideoOverrideForm(forms.ModelForm):
    """The operator override only: the service's fields and version are read-only here, so an edit
    never consumes a service version. Both fields on "follow the video service" clears the override.
    Shape checks are the service's own, reported back as form errors."""

    override_visibility = forms.ChoiceField(label="Visibility override", required=False,
                                            choices=FOLLOW_SERVICE + VideoVisibility.choices)
    override_status = forms.ChoiceField(label="Status override", required=False,
                                        choices=FOLLOW_SERVICE + VideoStatus.choices)
    reason = forms.CharField(max_length=512, required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             help_text="Required to set an override; recorded in the audit log.")

    class Meta:
        model = VideoSnapshot
        fields = ("override_visibility", "override_status")

    def clean_override_visibility(self):
        return self.cleaned_data["override_visibility"] or None

    def clean_override_status(self):
        return self.cleaned_data["override_status"] or None


class OverrideFilter(admin.SimpleListFilter):
    title = "operator override"
    parameter_name = "overridden"

    def lookups(self, request, model_admin):
        return [("yes", "Overridden"), ("no", "Service snapshot only")]

    def queryset(self, request, queryset):
        overridden = Q(override_visibility__isnull=False) | Q(override_status__isnull=False)
        if self.value() == "yes":
            return queryset.filter(overridden)
        if self.value() == "no":
            return queryset.exclude(overridden)
        return queryset


@admin.register(VideoSnapshot)
class VideoSnapshotAdmin(ServiceWriteAdmin):
    form = VideoOverrideForm
    list_display = ("video_id", "author_id", "visibility", "status", "overridden", "version", "updated_at")
    list_filter = ("visibility", "status", OverrideFilter)
    search_fields = ("video_id", "=author_id")
    ordering = ("-updated_at",)
    actions = None  # no bulk action: an override is set or cleared on the video's page, with its reason
    fieldsets = [
        ("Effective (what every rule reads)", {"fields": ("video_id", "visibility", "status", "revision",
                                                           "updated_at")}),
        ("Video service snapshot (only its pushes change it)", {
            "fields": ("author_id", "service_visibility", "service_status", "version")}),
        ("Operator override", {"fields": ("override_visibility", "override_status", "reason", "override_reason",
                                          "override_by", "override_at")}),
    ]
    readonly_fields = ("video_id", "visibility", "status", "revision", "updated_at", "author_id",
                       "service_visibility", "service_status", "version", "override_reason", "override_by",
                       "override_at")

    @admin.display(boolean=True, description="override")
    def overridden(self, obj):
        return obj.has_override

    def has_add_permission(self, request):
        # Videos come from the video service (PUT /internal/v1/videos/<id>, or `upsert_video
        # --service-version N` standing in for it); an operator only overrides what it pushed.
        return False

    def has_delete_permission(self, request, obj=None):
        # A video is taken down or deleted by setting its status; the snapshot row itself stays.
        return False

    def get_object(self, request, object_id, from_field=None):
        # An id no row can have (a NUL, a lone surrogate) would fail in the driver, a 500: not found.
        if not validation.storable_text(object_id):
            return None
        return super().get_object(request, object_id, from_field)

    def changelist_view(self, request, extra_context=None):
        # The same for a list filter or search value: Django's own "invalid lookup" answer.
        if not all(validation.storable_text(v) for _k, values in request.GET.lists() for v in values):
            return HttpResponseRedirect(f"{request.path}?{ERROR_FLAG}=1")
        return super().changelist_view(request, extra_context)

    def save_via_service(self, request, obj, form, change):
        data = form.cleaned_data
        video_override_set(video_id=obj.video_id, visibility=data["override_visibility"],
                           status=data["override_status"], reason=data["reason"], actor=admin_actor(request.user))
        adopt_stored_row(obj, VideoSnapshot.objects.get(pk=obj.video_id))


# --- social edges ------------------------------------------------------------------------------


class FriendshipAddForm(forms.ModelForm):
    user_a = forms.IntegerField(label="User id", min_value=1)
    user_b = forms.IntegerField(label="Other user id", min_value=1,
                                help_text="In any order: a friendship is stored once, lower id first.")

    class Meta:
        model = Friendship
        fields = ()

    def clean(self):
        cleaned = super().clean()
        _require_accounts(self, "user_a", "user_b")
        a, b = cleaned.get("user_a"), cleaned.get("user_b")
        if a is not None and b is not None and not self.errors:
            low, high = sorted((a, b))
            if Friendship.objects.filter(user_low=low, user_high=high).exists():
                raise forms.ValidationError("These users are already friends.", code="exists")
        return cleaned


class SocialEdgeAdmin(ServiceWriteAdmin):
    """List, add and delete; an edge is never edited in place. `add_fields` are the add form's fields,
    `edge_fields` the stored columns; `set_edge(request, a, b, present)` calls the edge's service with
    the two user ids in the form's order and returns the stored row's lookup."""

    add_fields: tuple[str, str]
    edge_fields: tuple[str, str]
    search_fields = ()
    ordering = ("-created_at",)

    def get_list_display(self, request):
        return (*self.edge_fields, "created_at")

    def get_search_fields(self, request):
        return tuple(f"={f}" for f in self.edge_fields)

    def get_fields(self, request, obj=None):
        return self.add_fields if obj is None else (*self.edge_fields, "created_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else (*self.edge_fields, "created_at")

    def has_change_permission(self, request, obj=None):
        return False

    def set_edge(self, request, a: int, b: int, *, present: bool) -> dict:  # pragma: no cover - abstract
        # A ModelAdmin cannot also be an ABC (metaclass conflict): each edge admin names its service.
        raise NotImplementedError

    def save_via_service(self, request, obj, form, change):
        a, b = (form.cleaned_data[f] for f in self.add_fields)
        adopt_stored_row(obj, self.model.objects.get(**self.set_edge(request, a, b, present=True)))

    def delete_via_service(self, request, obj):
        self.set_edge(request, *(getattr(obj, f) for f in self.edge_fields), present=False)


@admin.register(Friendship)
class FriendshipAdmin(SocialEdgeAdmin):
    form = FriendshipAddForm
    add_fields, edge_fields = ("user_a", "user_b"), ("user_low", "user_high")

    def set_edge(self, request, a, b, *, present):
        friendship_set(user_a=a, user_b=b, present=present, actor=admin_actor(request.user))
        low, high = sorted((a, b))
        return {"user_low": low, "user_high": high}


class BlockAddForm(forms.ModelForm):
    class Meta:
        model = Block
        fields = ("blocker_id", "blocked_id")
        labels = {"blocker_id": "Blocker user id", "blocked_id": "Blocked user id"}
        help_texts = {"blocked_id": "This user may no longer like the blocker's videos."}

    def clean(self):
        cleaned = super().clean()
        _require_accounts(self, "blocker_id", "blocked_id")
        return cleaned


@admin.register(Block)
class BlockAdmin(SocialEdgeAdmin):
    form = BlockAddForm
    add_fields = edge_fields = ("blocker_id", "blocked_id")

    def set_edge(self, request, a, b, *, present):
        block_set(blocker_id=a, blocked_id=b, present=present, actor=admin_actor(request.user))
        return {"blocker_id": a, "blocked_id": b}


# --- shard contract (read-only) ----------------------------------------------------------------


class OutboxRequeueForm(forms.Form):
    shard = forms.ChoiceField(choices=[])
    ids = forms.CharField(required=False, help_text="Comma-separated outbox row ids; empty: every DEAD row of the "
                                                    "shard (up to 1000 per submit).")
    reason = forms.CharField(max_length=512, required=False, help_text="Recorded in the audit log.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["shard"].choices = [(a, a) for a in settings.RELATION_SHARD_ALIASES]

    def clean_ids(self):
        text = self.cleaned_data["ids"].strip()
        try:
            return [int(part) for part in text.split(",") if part.strip()] or None
        except ValueError:
            raise forms.ValidationError("Comma-separated whole numbers.", code="invalid_ids") from None


@require_http_methods(["GET", "POST"])
def outbox_requeue_view(request, *, admin_site):
    """/admin/relations/outbox-requeue/: DEAD outbox rows back to RETRY (issue 9 §2)."""
    dead = {a: OutboxEvent.objects.using(a).filter(status=OutboxStatus.DEAD).count()
            for a in settings.RELATION_SHARD_ALIASES}

    def apply(data: dict) -> str:
        picked = outbox_dead_requeue(alias=data["shard"], actor=admin_actor(request.user), ids=data["ids"],
                                     reason=data["reason"])
        return f"Requeued {len(picked)} DEAD outbox rows on {data['shard']}."

    return service_form_page(
        request, admin_site, form_class=OutboxRequeueForm, permission=OUTBOX_REQUEUE_PERMISSION,
        title="Requeue DEAD outbox rows", submit="Requeue",
        intro="A DEAD outbox row holds a payload the publisher could not publish. Requeued, it is RETRY and due now; "
              "the publisher sends it again, and consumers absorb a duplicate by version. DEAD rows now: "
              + ", ".join(f"{a}: {n}" for a, n in dead.items()) + ".",
        apply=apply,
    )


ADMIN_RETENTION_BATCHES = 5  # bounded work in the request: 5 x 1000 rows per shard


class RetentionForm(forms.Form):
    confirm = forms.BooleanField(label="Delete expired no-op command rows now",
                                 help_text="Rows that changed nothing and are older than the retention window.")


@require_http_methods(["GET", "POST"])
def command_retention_view(request, *, admin_site):
    """/admin/relations/command-retention/: one bounded run of the no-op command retention (CMD-15); the
    hourly beat job and `manage.py prune_noop_commands` do the rest."""

    def apply(_data: dict) -> str:
        report = command_retention_run(actor=admin_actor(request.user), max_batches=ADMIN_RETENTION_BATCHES)
        return (f"Deleted {sum(report.deleted.values())} no-op command rows older than {report.retention_hours} h "
                f"({', '.join(f'{a}: {n}' for a, n in report.deleted.items())}); at most "
                f"{ADMIN_RETENTION_BATCHES} batches per shard per run.")

    return service_form_page(
        request, admin_site, form_class=RetentionForm, permission=RETENTION_PERMISSION,
        title="Prune no-op command rows", submit="Prune",
        intro="Commands that changed nothing leave a command row kept for retries; past the retention window it "
              "has no use. One bounded run here (audited); the hourly job keeps up by itself.",
        apply=apply,
    )


@admin.register(RelationShardContract)
class RelationShardContractAdmin(ReadOnlyAdmin):
    list_display = ("version", "is_active", "hash_algorithm", "hash_seed", "key_encoding", "logical_slots",
                    "created_at")
    pages = [
        AdminPage("outbox-requeue/", outbox_requeue_view, name="relations_outbox_requeue",
                  title="Requeue DEAD outbox rows", permission=OUTBOX_REQUEUE_PERMISSION, app_level=True),
        AdminPage("command-retention/", command_retention_view, name="relations_command_retention",
                  title="Prune no-op command rows", permission=RETENTION_PERMISSION, app_level=True),
    ]


@admin.register(RelationShardSlot)
class RelationShardSlotAdmin(ReadOnlyAdmin):
    list_display = ("contract_version", "slot", "alias")
    list_filter = ("contract_version", "alias")
    ordering = ("contract_version", "slot")
    list_per_page = 256


# --- relation cache generations (RCACHE-7): read-only, and the rebuild as an admin action ------------


@admin.register(RelationCacheGeneration)
class RelationCacheGenerationAdmin(ReadOnlyAdmin):
    list_display = ("generation", "status", "previous_generation", "job_id", "created_at", "activated_at",
                    "finished_at", "failure_reason")
    list_filter = ("status",)
    actions = ["rebuild_relation_cache"]

    @admin.action(description="Rebuild the relation cache into a new generation", permissions=["rebuild"])
    def rebuild_relation_cache(self, request, queryset):
        """Starts the rebuild job (the selection is ignored: it always builds the generation after the
        newest one) and shows the job's page."""
        return start_job_or_message(request, self.admin_site, kind=REBUILD_JOB, params={})

    def has_rebuild_permission(self, request):
        return request.user.has_perm(REBUILD_PERMISSION)


# --- accounts: deletion and the exact export of one user's likes (LIST-5) ------------------------------


class UsernameForm(forms.Form):
    username = forms.CharField(max_length=150)

    def clean_username(self):
        user = get_user_model().objects.filter(username=self.cleaned_data["username"]).first()
        if user is None:
            raise forms.ValidationError("No user with this username.", code="user_not_found")
        return user


class LikesExportForm(UsernameForm, JobForm):
    """/admin/relations/likes-export/: starts the export job; the file is downloaded from its page."""

    title, submit, permission = "Export a user's likes", "Export likes", EXPORT_PERMISSION
    intro = ("Exports every video the user likes, exactly as of one database snapshot (JSON lines; the first line "
             "holds the as-of time), as a job; download the file from the job's page when it is done. Taken-down, "
             "deleted and unknown videos are included with listed: false. The export is recorded in the audit log.")

    def start(self):
        user = self.cleaned_data["username"]
        return LIKES_EXPORT, {"user_id": user.pk, "username": user.username, "destination": "admin download"}, \
            f"user:{user.pk}"


class AccountDeleteForm(UsernameForm, JobForm):
    """/admin/relations/account-delete/: marks the account deleted at once and starts the job that withdraws
    its likes."""

    title, submit, permission = "Delete an account's likes", "Delete account", ACCOUNT_DELETE_PERMISSION
    intro = ("Marks the account deleted at once (hidden from every list, login and API token disabled), then a job "
             "withdraws every like it holds with a versioned unlike; counts and likers lists follow through the "
             "projectors. Re-running it is harmless. The deletion is recorded in the audit log.")
    confirm = forms.BooleanField(label="I understand this cannot be undone",
                                 help_text="The account is disabled at once and every like it holds is withdrawn.")

    def start(self):
        user = self.cleaned_data["username"]
        return ACCOUNT_DELETE, {"user_id": user.pk, "username": user.username}, f"user:{user.pk}"


class LikersExportForm(JobForm):
    """/admin/relations/likers-export/: starts the export of a video's likers (a purpose is required); the
    file is downloaded from the job's page, and every download is audited."""

    title, submit, permission = "Export a video's likers", "Export likers", LIKERS_EXPORT_PERMISSION
    intro = ("Exports every account that likes the video (JSON lines), each relation shard exact as of its own "
             "snapshot, as a job. Liker identities are not public because the count is: state why you need the "
             "list. The export, its purpose and every download of the file are recorded in the audit log.")
    video_id = forms.CharField(label="Video id", max_length=64)
    purpose = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 2}),
                              help_text="Why the list is exported: recorded in the audit log with the export.")

    def clean_video_id(self):
        try:
            return validation.video_id(self.cleaned_data["video_id"].strip())
        except DomainError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from None

    def start(self):
        video_id = self.cleaned_data["video_id"]
        return LIKERS_EXPORT, {"video_id": video_id, "purpose": self.cleaned_data["purpose"].strip(),
                               "destination": "admin download"}, f"video:{video_id}"


@admin.register(AccountStatus)
class AccountStatusAdmin(ReadOnlyAdmin):
    """Accounts that are not plain active (banned, deleted), read-only; the deletion is a page."""

    list_display = ("user_id", "status", "updated_at")
    list_filter = ("status",)
    search_fields = ("=user_id",)
    pages = [
        LikesExportForm.page("likes-export/", "relations_likes_export", app_level=True),
        LikersExportForm.page("likers-export/", "relations_likers_export", app_level=True),
        AccountDeleteForm.page("account-delete/", "relations_account_delete", app_level=True),
    ]


# --- runtime switches (issue 14 §3): set and cleared through likes_project.switches, audited ----------


@admin.register(LikesReadOnlySwitch)
class LikesReadOnlySwitchAdmin(RuntimeSwitchAdmin):
    """Read-only likes: while set, every like command answers 503 likes_read_only and writes nothing."""


@admin.register(OutboxPublisherSwitch)
class OutboxPublisherSwitchAdmin(RuntimeSwitchAdmin):
    """The outbox publisher's pause, per relation shard: its rows wait and are published once cleared."""
