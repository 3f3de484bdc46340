"""Admin for the control-plane models of the relations app.

Writes go through `relations.services.videos` (audit record, version bump, cache write-through or
invalidation happen there); the admin's own LogEntry is kept as well. The sharded models (relations,
commands, outbox) are not registered: they are read through the lookup page of the opsconsole admin.
The shard contract is shown read-only.
"""

from __future__ import annotations

import functools
import io
import tempfile

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import FileResponse
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import path
from django.views.decorators.http import require_http_methods

from likes_project.errors import Conflict, DomainError
from opsconsole.admin import ReadOnlyAdmin, ServiceWriteAdmin
from opsconsole.services import admin_actor
from relations.models import Block, Friendship, RelationShardContract, RelationShardSlot, VideoSnapshot
from relations.services.export import EXPORT_PERMISSION, user_likes_export
from relations.services.videos import block_set, friendship_set, video_snapshot_upsert


def _require_accounts(form: forms.Form, *field_names: str) -> None:
    """Social edges are between existing accounts: a mistyped id is a form error, not a dangling edge."""
    User = get_user_model()
    for name in field_names:
        user_id = form.cleaned_data.get(name)
        if user_id is not None and not User.objects.filter(pk=user_id).exists():
            form.add_error(name, f"No user with id {user_id}.")


def _adopt_stored_row(obj, stored) -> None:
    """Make the admin's unsaved instance stand for the row the service stored, so the LogEntry and
    the redirect after saving point at it."""
    for field in stored._meta.concrete_fields:
        setattr(obj, field.attname, getattr(stored, field.attname))
    obj._state.adding = False
    obj._state.db = stored._state.db


# --- video snapshots ---------------------------------------------------------------------------


class VideoSnapshotForm(forms.ModelForm):
    """`version` is not a field: every save from the admin writes the next version. Shape checks
    (video id, author id, choices) are the service's own, reported back as form errors."""

    class Meta:
        model = VideoSnapshot
        fields = ("video_id", "author_id", "visibility", "status")


@admin.register(VideoSnapshot)
class VideoSnapshotAdmin(ServiceWriteAdmin):
    form = VideoSnapshotForm
    list_display = ("video_id", "author_id", "visibility", "status", "version", "updated_at")
    list_filter = ("visibility", "status")
    search_fields = ("video_id", "=author_id")
    ordering = ("-updated_at",)

    def get_fields(self, request, obj=None):
        return ("video_id", "author_id", "visibility", "status", "version", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        # The primary key is fixed once the snapshot exists; the version only ever moves by a save.
        return ("version", "updated_at") if obj is None else ("video_id", "version", "updated_at")

    def has_delete_permission(self, request, obj=None):
        # A video is taken down or deleted by setting its status; the snapshot row itself stays.
        return False

    def save_via_service(self, request, obj, form, change):
        result = video_snapshot_upsert(
            video_id=obj.video_id, author_id=obj.author_id, visibility=obj.visibility, status=obj.status,
            version=None, actor=admin_actor(request.user),
        )
        if not result.applied:
            # Only a concurrent push of the same or a newer version gets here.
            raise Conflict(f"The snapshot changed meanwhile (now v{result.video.version}); reload and retry.")
        _adopt_stored_row(obj, VideoSnapshot.objects.get(pk=obj.video_id))


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
    """List, add and delete; an edge is never edited in place."""

    def has_change_permission(self, request, obj=None):
        return False

    def set_edge(self, request, obj, *, present: bool) -> None:  # pragma: no cover - abstract
        raise NotImplementedError  # subclasses (friendships, blocks) call their service

    def delete_model(self, request, obj):
        try:
            self.set_edge(request, obj, present=False)
        except DomainError as exc:
            self.message_user(request, f"{obj}: {exc.message}", messages.ERROR)

    def delete_queryset(self, request, queryset):
        # One service call (and audit record) per edge, each in its own transaction.
        for obj in list(queryset):
            self.delete_model(request, obj)


@admin.register(Friendship)
class FriendshipAdmin(SocialEdgeAdmin):
    form = FriendshipAddForm
    list_display = ("user_low", "user_high", "created_at")
    search_fields = ("=user_low", "=user_high")
    ordering = ("-created_at",)

    def get_fields(self, request, obj=None):
        return ("user_a", "user_b") if obj is None else ("user_low", "user_high", "created_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user_low", "user_high", "created_at")

    def save_via_service(self, request, obj, form, change):
        a, b = form.cleaned_data["user_a"], form.cleaned_data["user_b"]
        friendship_set(user_a=a, user_b=b, present=True, actor=admin_actor(request.user))
        low, high = sorted((a, b))
        _adopt_stored_row(obj, Friendship.objects.get(user_low=low, user_high=high))

    def set_edge(self, request, obj, *, present):
        friendship_set(user_a=obj.user_low, user_b=obj.user_high, present=present, actor=admin_actor(request.user))


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
    list_display = ("blocker_id", "blocked_id", "created_at")
    search_fields = ("=blocker_id", "=blocked_id")
    ordering = ("-created_at",)

    def get_fields(self, request, obj=None):
        return ("blocker_id", "blocked_id") if obj is None else ("blocker_id", "blocked_id", "created_at")

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("blocker_id", "blocked_id", "created_at")

    def save_via_service(self, request, obj, form, change):
        blocker, blocked = form.cleaned_data["blocker_id"], form.cleaned_data["blocked_id"]
        block_set(blocker_id=blocker, blocked_id=blocked, present=True, actor=admin_actor(request.user))
        _adopt_stored_row(obj, Block.objects.get(blocker_id=blocker, blocked_id=blocked))

    def set_edge(self, request, obj, *, present):
        block_set(blocker_id=obj.blocker_id, blocked_id=obj.blocked_id, present=present,
                  actor=admin_actor(request.user))


# --- shard contract (read-only) ----------------------------------------------------------------


@admin.register(RelationShardContract)
class RelationShardContractAdmin(ReadOnlyAdmin):
    list_display = ("version", "is_active", "hash_algorithm", "hash_seed", "key_encoding", "logical_slots",
                    "created_at")


@admin.register(RelationShardSlot)
class RelationShardSlotAdmin(ReadOnlyAdmin):
    list_display = ("contract_version", "slot", "alias")
    list_filter = ("contract_version", "alias")
    ordering = ("contract_version", "slot")
    list_per_page = 256


# --- exact export of one user's likes (LIST-5) -------------------------------------------------
# /admin/relations/likes-export/ (URL name `admin:relations_likes_export`): staff holding
# relations.view_likerelation pick a user and download the same file `manage.py export_user_likes`
# writes. The service audits it ("likes.export", channel admin).


class LikesExportForm(forms.Form):
    username = forms.CharField(max_length=150)

    def clean_username(self):
        user = get_user_model().objects.filter(username=self.cleaned_data["username"]).first()
        if user is None:
            raise forms.ValidationError("No user with this username.", code="user_not_found")
        return user


LIKES_EXPORT_TEMPLATE = """{% extends "admin/base_site.html" %}
{% load static %}
{% block extrastyle %}{{ block.super }}<link rel="stylesheet" href="{% static "admin/css/forms.css" %}">{% endblock %}
{% block breadcrumbs %}<div class="breadcrumbs"><a href="{% url 'admin:index' %}">Home</a>
&rsaquo; <a href="{% url 'admin:app_list' app_label='relations' %}">Relations</a> &rsaquo; {{ title }}</div>
{% endblock %}
{% block content %}<div id="content-main">
<p>Downloads every video the user likes, exactly as of one database snapshot (JSON lines; the first line
holds the as-of time). Taken-down, deleted and unknown videos are included with <code>listed: false</code>.
The export is recorded in the audit log.</p>
<form method="post">{% csrf_token %}<fieldset class="module aligned">{{ form.non_field_errors }}
{% for f in form %}<div class="form-row">{{ f.errors }}{{ f.label_tag }} {{ f }}</div>{% endfor %}
</fieldset><div class="submit-row"><input type="submit" value="Export likes" class="default"></div></form>
</div>{% endblock %}
"""


@functools.cache
def _likes_export_template():
    return engines["django"].from_string(LIKES_EXPORT_TEMPLATE)


@require_http_methods(["GET", "POST"])
def likes_export_view(request, *, admin_site):
    """Wrapped by `admin_site.admin_view` (active staff, CSRF); the export permission is checked here."""
    if not request.user.has_perm(EXPORT_PERMISSION):
        raise PermissionDenied
    form = LikesExportForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        user = form.cleaned_data["username"]
        buffer = tempfile.TemporaryFile("w+b")  # noqa: SIM115 - handed to FileResponse, which closes it
        text = io.TextIOWrapper(buffer, encoding="utf-8", newline="\n")
        try:
            result = user_likes_export(user_id=user.pk, out=text, actor=admin_actor(request.user),
                                       destination="admin download")
        except (DomainError, DatabaseError) as exc:
            text.close()
            form.add_error(None, getattr(exc, "message", None) or f"The export failed: {exc.__class__.__name__}.")
        else:
            text.detach()
            buffer.seek(0)
            stamp = result.as_of.strftime("%Y%m%dT%H%M%SZ")
            return FileResponse(buffer, as_attachment=True, content_type="application/x-ndjson",
                                filename=f"likes-{user.username}-{stamp}.jsonl")
    context = {**admin_site.each_context(request), "title": "Export a user's likes", "subtitle": None,
               "form": form}
    request.current_app = admin_site.name
    return TemplateResponse(request, _likes_export_template(), context)


def _with_likes_export_url(get_urls):
    @functools.wraps(get_urls)
    def urls_with_likes_export():
        view = admin.site.admin_view(functools.partial(likes_export_view, admin_site=admin.site))
        return [path("relations/likes-export/", view, name="relations_likes_export"), *get_urls()]

    urls_with_likes_export.adds_likes_export = True
    return urls_with_likes_export


if not getattr(admin.site.get_urls, "adds_likes_export", False):
    admin.site.get_urls = _with_likes_export_url(admin.site.get_urls)


# --- relation cache generations (RCACHE-7): read-only list + the rebuild as an admin action -----------

from relations.models import CacheGeneration  # noqa: E402


@admin.register(CacheGeneration)
class CacheGenerationAdmin(ReadOnlyAdmin):
    list_display = ("generation", "status", "created_at", "activated_at", "finished_at", "failure_reason")
    list_filter = ("status",)
    actions = ["rebuild_relation_cache"]

    @admin.action(description="Rebuild the relation cache into a new generation", permissions=["rebuild"])
    def rebuild_relation_cache(self, request, queryset):
        """Same service as `manage.py rebuild_relation_cache`; audited. Runs in the request (it shows
        progress in the result message); on a large deployment run the command instead."""
        from django.contrib import messages
        from django.db import transaction

        from opsconsole.services import admin_actor, audit_record
        from relations.services.relation_cache import RebuildFailed, relation_cache_rebuild

        try:
            report = relation_cache_rebuild()
        except RebuildFailed as exc:
            self.message_user(request, f"Rebuild refused: {exc}", level=messages.ERROR)
            return
        with transaction.atomic(using="default", durable=True):
            audit_record(actor=admin_actor(request.user), action="relcache.rebuild", target_type="cache_generation",
                         target_id=str(report.generation), outcome=report.status.lower(),
                         params={"scanned": report.scanned, "caught_up": report.caught_up,
                                 "sampled": report.sampled, "mismatches": report.mismatches})
        level = messages.SUCCESS if report.status == "ACTIVE" else messages.ERROR
        self.message_user(request, f"Generation {report.generation}: {report.status} ({report.scanned} relations "
                                   f"scanned, {report.mismatches} sample mismatches)", level=level)

    def has_rebuild_permission(self, request):
        return request.user.has_perm("relations.change_cachegeneration")


# --- account deletion (issue 5 §3) -------------------------------------------------------------------
# /admin/relations/account-delete/ (URL name `admin:relations_account_delete`): staff holding
# relations.change_accountstatus type a username and confirm; the same service as
# `manage.py delete_account` runs in the request and audits it ("account.delete", channel admin). For a
# user with very many likes run the command instead (it prints progress and can be re-run to resume).

from relations.services.accounts import ACCOUNT_DELETE_PERMISSION, account_delete  # noqa: E402


class AccountDeleteForm(LikesExportForm):
    confirm = forms.BooleanField(label="I understand this cannot be undone",
                                 help_text="The account is disabled at once and every like it holds is withdrawn.")


ACCOUNT_DELETE_TEMPLATE = LIKES_EXPORT_TEMPLATE.replace(
    """<p>Downloads every video the user likes, exactly as of one database snapshot (JSON lines; the first line
holds the as-of time). Taken-down, deleted and unknown videos are included with <code>listed: false</code>.
The export is recorded in the audit log.</p>""",
    """<p>Marks the account deleted (hidden from every list, login and API token disabled), then withdraws
every like it holds with a versioned unlike; counts and likers lists follow through the projectors.
Re-running it is harmless. The deletion is recorded in the audit log.</p>""",
).replace('value="Export likes"', 'value="Delete account"')


@functools.cache
def _account_delete_template():
    return engines["django"].from_string(ACCOUNT_DELETE_TEMPLATE)


@require_http_methods(["GET", "POST"])
def account_delete_view(request, *, admin_site):
    """Wrapped by `admin_site.admin_view` (active staff, CSRF); the deletion permission is checked here."""
    if not request.user.has_perm(ACCOUNT_DELETE_PERMISSION):
        raise PermissionDenied
    form = AccountDeleteForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        user = form.cleaned_data["username"]
        try:
            result = account_delete(user_id=user.pk, actor=admin_actor(request.user))
        except (DomainError, DatabaseError) as exc:
            form.add_error(None, getattr(exc, "message", None) or f"The deletion failed: {exc.__class__.__name__}.")
        else:
            messages.success(request, f"Deleted account {user.username}: {result.unliked} of {result.scanned} likes "
                                      f"withdrawn.")
            form = AccountDeleteForm()
    context = {**admin_site.each_context(request), "title": "Delete an account's likes", "subtitle": None,
               "form": form}
    request.current_app = admin_site.name
    return TemplateResponse(request, _account_delete_template(), context)


def _with_account_delete_url(get_urls):
    @functools.wraps(get_urls)
    def urls_with_account_delete():
        view = admin.site.admin_view(functools.partial(account_delete_view, admin_site=admin.site))
        return [path("relations/account-delete/", view, name="relations_account_delete"), *get_urls()]

    urls_with_account_delete.adds_account_delete = True
    return urls_with_account_delete


if not getattr(admin.site.get_urls, "adds_account_delete", False):
    admin.site.get_urls = _with_account_delete_url(admin.site.get_urls)
