"""Operator overrides of a video are kept apart from the video service's snapshot (issue 10 §4, D50).

The finding: an admin save or `upsert_video` wrote "the next version", consuming the service's
version numbers, so the service's own next push (that same number) was ignored as not newer. Now the
operator sets an override on top; the service's pushes keep applying to the service's fields; the
override holds where it applies, is audited, and clearing it shows the service's values again. Over
the real admin, internal API, public API and management command, against PostgreSQL and Redis."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.urls import reverse

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import Actor
from likes_project.errors import InvalidInput
from relations import cache, selectors
from relations.errors import VideoNotFound
from relations.models import VideoSnapshot
from relations.selectors.my_likes import listed_video_ids
from relations.services.videos import video_override_clear, video_override_set
from tests.factories import put_like
from tests.relations.helpers import assert_error, body_of, push_video

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

OPERATOR = Actor(name="ops-alice", channel="admin")


def effective(video_id: str) -> tuple[str, str]:
    video = selectors.video_snapshot_get(video_id=video_id)  # through the visibility cache, as the rules read
    return video.visibility, video.status


def service_view(service, video_id: str) -> dict:
    return body_of(service.get(f"/internal/v1/videos/{video_id}"))


def override_form(**fields) -> dict:
    return {"override_visibility": "", "override_status": "", "reason": "", "_save": "Save", **fields}


# --- the finding, end to end -------------------------------------------------------------------


def test_a_service_push_after_an_admin_edit_is_applied_and_the_override_still_holds(
        admin_client, admin_user, service, author, user, api):
    assert body_of(push_video(service, "vid-o", authorId=author.pk, visibility="public", version=1))["applied"]
    assert effective("vid-o") == ("public", "active")  # now cached

    url = reverse("admin:relations_videosnapshot_change", args=["vid-o"])
    resp = admin_client.post(url, override_form(override_visibility="private", reason="legal hold"))
    assert resp.status_code == 302, resp.content[:500]
    row = VideoSnapshot.objects.get(pk="vid-o")
    assert row.version == 1  # the operator did not take the service's next version
    assert effective("vid-o") == ("private", "active")  # written through the cache at once
    assert_error(put_like(api.as_user(user), "vid-o", "LIKED", "op-1"), 404, "video_not_found")

    # The service's next version takes the video down: applied, not ignored as "not newer".
    pushed = push_video(service, "vid-o", authorId=author.pk, visibility="public", status="taken_down", version=2)
    assert body_of(pushed) == {"videoId": "vid-o", "authorId": author.pk, "visibility": "public",
                               "status": "taken_down", "version": 2, "applied": True}
    assert effective("vid-o") == ("private", "taken_down")  # the service's status, the operator's visibility
    assert service_view(service, "vid-o")["visibility"] == "public"  # the service reads back its own snapshot

    # Clearing the override (both fields back to "follow the video service") shows the service's values.
    resp = admin_client.post(url, override_form())
    assert resp.status_code == 302
    assert effective("vid-o") == ("public", "taken_down")
    assert_error(put_like(api.as_user(user), "vid-o", "LIKED", "op-2"), 403, "video_taken_down")
    pushed = push_video(service, "vid-o", authorId=author.pk, visibility="public", status="active", version=3)
    assert body_of(pushed)["applied"] and effective("vid-o") == ("public", "active")
    assert put_like(api.as_user(user), "vid-o", "LIKED", "op-3").status_code == 200

    audits = list(AuditRecord.objects.filter(target_id="vid-o").order_by("id")
                  .values_list("action", "actor", "outcome"))
    assert audits == [("video.upsert", "video-service", "applied"), ("video.override", admin_user.username, "applied"),
                      ("video.upsert", "video-service", "applied"),
                      ("video.override_clear", admin_user.username, "applied"),
                      ("video.upsert", "video-service", "applied")]
    override = AuditRecord.objects.get(target_id="vid-o", action="video.override")
    assert override.params["reason"] == "legal hold" and override.params["serviceVersion"] == 1
    assert override.params["previous"] == {"visibility": None, "status": None}


def test_the_same_through_upsert_video(service, author):
    out = io.StringIO()
    call_command("upsert_video", "vid-c", "--author", author.username, "--service-version", "4",
                 "--published-at", "2026-12-06T18:00:00Z", stdout=out)
    assert "service push v4 applied" in out.getvalue()
    assert VideoSnapshot.objects.get(pk="vid-c").published_at.isoformat() == "2026-12-06T18:00:00+00:00"
    call_command("upsert_video", "vid-c", "--override", "--status", "taken_down", "--reason", "abuse report",
                 stdout=out)
    assert "override set" in out.getvalue()
    assert VideoSnapshot.objects.get(pk="vid-c").version == 4
    assert body_of(push_video(service, "vid-c", authorId=author.pk, visibility="friends", version=5))["applied"]
    assert effective("vid-c") == ("friends", "taken_down")
    call_command("upsert_video", "vid-c", "--clear-override", stdout=out)
    assert "override cleared" in out.getvalue()
    assert effective("vid-c") == ("friends", "active")
    call_command("upsert_video", "vid-c", "--clear-override", stdout=out)
    assert "no override to clear" in out.getvalue()
    assert list(AuditRecord.objects.filter(target_id="vid-c").values_list("action", "outcome").order_by("id")) == [
        ("video.upsert", "applied"), ("video.override", "applied"), ("video.upsert", "applied"),
        ("video.override_clear", "applied"), ("video.override_clear", "unchanged")]


# --- the override's rules ------------------------------------------------------------------------


def test_an_override_is_what_every_reader_sees_and_the_rows_stay_consistent(author, make_video, make_user):
    make_video("vid-r", author)
    assert listed_video_ids(["vid-r"]) == {"vid-r"}
    result = video_override_set(video_id="vid-r", visibility=None, status="deleted", reason="gdpr", actor=OPERATOR)
    assert result.changed and result.record.has_override
    assert (result.record.service_status, result.record.status) == ("active", "deleted")
    # Readers that query the snapshot table directly (liked lists, export, retirement) see it too.
    assert listed_video_ids(["vid-r"]) == set()
    assert selectors.deleted_video_ids() == ["vid-r"]
    assert not selectors.video_visible_to(user_id=make_user().pk, video_id="vid-r")
    # Effective columns that disagree with override-over-service are refused by the database.
    with pytest.raises(IntegrityError), transaction.atomic():
        VideoSnapshot.objects.filter(pk="vid-r").update(status="active")


def test_setting_the_same_override_twice_changes_nothing(author, make_video):
    make_video("vid-i", author)
    first = video_override_set(video_id="vid-i", visibility="friends", status=None, reason="r", actor=OPERATOR)
    again = video_override_set(video_id="vid-i", visibility="friends", status=None, reason="r", actor=OPERATOR)
    assert first.changed and not again.changed
    assert again.record.revision == first.record.revision
    assert list(AuditRecord.objects.filter(action="video.override").values_list("outcome", flat=True)
                .order_by("id")) == ["applied", "unchanged"]


def test_an_override_needs_a_reason_and_a_known_video(author, make_video):
    with pytest.raises(VideoNotFound):
        video_override_set(video_id="vid-none", visibility="private", status=None, reason="r", actor=OPERATOR)
    make_video("vid-x", author)
    for reason, code in (("", "reason_required"), ("  ", "reason_required"), ("a\x00", "invalid_reason"),
                         ("x" * 513, "invalid_reason")):
        with pytest.raises(InvalidInput) as exc:
            video_override_set(video_id="vid-x", visibility="private", status=None, reason=reason, actor=OPERATOR)
        assert exc.value.code == code
    with pytest.raises(InvalidInput):
        video_override_set(video_id="vid-x", visibility="secret", status=None, reason="r", actor=OPERATOR)
    assert not VideoSnapshot.objects.get(pk="vid-x").has_override
    assert video_override_clear(video_id="vid-x", actor=OPERATOR).changed is False  # clearing needs no reason
    assert not AuditRecord.objects.filter(action="video.override").exists()


def test_a_slow_reader_cannot_put_back_the_pre_override_entry(author, make_video):
    video = make_video("vid-s", author)  # revision 1, what a slow reader loaded
    video_override_set(video_id="vid-s", visibility="private", status=None, reason="r", actor=OPERATOR)
    cache.visibility_cache_put("vid-s", video.revision, selectors.video_cache_entry(video))
    assert effective("vid-s") == ("private", "active")


def test_a_push_not_above_the_service_version_is_still_ignored_with_an_override(service, author):
    push_video(service, "vid-n", authorId=author.pk, version=3)
    video_override_set(video_id="vid-n", visibility="private", status=None, reason="r", actor=OPERATOR)
    resp = push_video(service, "vid-n", authorId=author.pk, status="taken_down", version=3)
    assert body_of(resp) == {"videoId": "vid-n", "authorId": author.pk, "visibility": "public", "status": "active",
                             "version": 3, "applied": False}
    assert effective("vid-n") == ("private", "active")


# --- the admin -----------------------------------------------------------------------------------


def test_the_admin_change_page_shows_both_and_edits_only_the_override(admin_client, author, make_video):
    make_video("vid-a", author, visibility="friends")
    url = reverse("admin:relations_videosnapshot_change", args=["vid-a"])
    page = admin_client.get(url)
    assert page.status_code == 200
    form = page.context["adminform"].form
    assert set(form.fields) == {"override_visibility", "override_status", "reason"}
    # Posting service fields changes nothing: they are not the operator's.
    resp = admin_client.post(url, override_form(override_status="taken_down", reason="spam", author_id="999",
                                                service_visibility="private", version="99"))
    assert resp.status_code == 302
    row = VideoSnapshot.objects.get(pk="vid-a")
    assert (row.author_id, row.service_visibility, row.version) == (author.pk, "friends", 1)
    assert (row.visibility, row.status, row.override_status, row.override_reason) == (
        "friends", "taken_down", "taken_down", "spam")
    assert row.override_by == "admin"  # pytest-django's admin_user


def test_the_admin_refuses_an_override_without_a_reason_and_has_no_add(admin_client, author, make_video):
    make_video("vid-b", author)
    url = reverse("admin:relations_videosnapshot_change", args=["vid-b"])
    resp = admin_client.post(url, override_form(override_visibility="private"))
    assert resp.status_code == 200
    assert "An operator override needs a reason" in resp.content.decode()
    assert not VideoSnapshot.objects.get(pk="vid-b").has_override
    assert not AuditRecord.objects.filter(action__startswith="video.override").exists()
    # Videos come from the video service: the admin adds none.
    assert admin_client.get(reverse("admin:relations_videosnapshot_add")).status_code == 403
    changelist = admin_client.get(reverse("admin:relations_videosnapshot_changelist"), {"overridden": "no"})
    assert [v.pk for v in changelist.context["cl"].result_list] == ["vid-b"]


def test_upsert_video_refuses_mixed_or_missing_modes(author, make_video):
    make_video("vid-m", author)
    for argv, match in (
        ([], "one of the arguments --service-version --override --clear-override is required"),
        (["--service-version", "2", "--override"], "not allowed with argument"),
        (["--service-version", "2"], "invalid_author"),
        (["--override", "--reason", "r"], "invalid_override"),
        (["--override", "--visibility", "private"], "reason_required"),
        (["--override", "--author", author.username, "--status", "deleted", "--reason", "r"], "invalid_author"),
        (["--clear-override", "--status", "active"], "invalid_override"),
        (["--override", "--status", "deleted", "--reason", "r", "--published-at", "2026-12-06T18:00:00Z"],
         "invalid_published_at"),
        (["--service-version", "9", "--author", author.username, "--published-at", "2026-12-06 18:00"],
         "invalid_published_at"),
    ):
        with pytest.raises(CommandError, match=match):
            call_command("upsert_video", "vid-m", *argv, stdout=io.StringIO(), stderr=io.StringIO())
    row = VideoSnapshot.objects.get(pk="vid-m")
    assert (row.version, row.has_override) == (1, False)


def test_a_raw_insert_of_the_old_columns_stores_a_consistent_row(author):
    """The new columns have database defaults: SQL written before them (bench/harness/seed.py inserts the
    old columns only) stores the service's public/active with no override at revision 1."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {VideoSnapshot._meta.db_table} (video_id, author_id, visibility, status, "
                       "version, updated_at) VALUES ('vid-raw', %s, 'public', 'active', 1, now())", [author.pk])
    row = VideoSnapshot.objects.get(pk="vid-raw")
    assert (row.service_visibility, row.service_status, row.revision, row.has_override) == (
        "public", "active", 1, False)
    assert effective("vid-raw") == ("public", "active")
