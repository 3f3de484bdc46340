"""The internal video-push API (issue 2 §5, architecture §8): the service token, version-ordered
snapshot upserts and their bad input. Everything goes through HTTP against real PostgreSQL and Redis."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from relations.models import VideoSnapshot
from tests.relations.helpers import SERVICE_TOKEN, assert_error, body_of, push_video

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


# --- internal video API ------------------------------------------------------------------------


def test_internal_push_creates_and_reads_back_a_snapshot(service, author):
    resp = push_video(service, "vid-7", authorId=author.pk, visibility="friends", status="active", version=3)

    assert resp.status_code == 200, resp.content
    assert body_of(resp) == {"videoId": "vid-7", "authorId": author.pk, "visibility": "friends",
                             "status": "active", "version": 3, "applied": True}
    row = VideoSnapshot.objects.get(video_id="vid-7")
    assert (row.author_id, row.visibility, row.status, row.version) == (author.pk, "friends", "active", 3)
    assert body_of(service.get("/internal/v1/videos/vid-7")) == {
        "videoId": "vid-7", "authorId": author.pk, "visibility": "friends", "status": "active", "version": 3,
    }


def test_the_publication_time_is_kept_and_a_bad_one_refused_without_a_write(service, author):
    """`publishedAt` (the risk scorer's fresh_upload signal): stored by a newer push, kept by a later push that
    leaves it out; a time without its offset, or not a time, is 400 invalid_published_at and writes nothing."""
    push_video(service, "vid-p", authorId=author.pk, version=1, publishedAt="2026-12-06T18:00:00+01:00")
    assert VideoSnapshot.objects.get(video_id="vid-p").published_at.isoformat() == "2026-12-06T17:00:00+00:00"
    push_video(service, "vid-p", authorId=author.pk, version=2, visibility="friends")
    row = VideoSnapshot.objects.get(video_id="vid-p")
    assert (row.version, row.published_at.hour) == (2, 17)
    for bad in ("2026-12-06T18:00:00", "yesterday", 1733500000, "2026-12-06T25:00:00Z"):
        assert_error(push_video(service, "vid-p", authorId=author.pk, version=3, publishedAt=bad), 400,
                     "invalid_published_at")
    assert VideoSnapshot.objects.get(video_id="vid-p").version == 2


def test_internal_get_of_unknown_video_is_404(service):
    assert_error(service.get("/internal/v1/videos/nope"), 404, "video_not_found")


def test_internal_push_applies_higher_and_ignores_lower_or_equal_versions(service, author, make_user):
    other = make_user()
    assert body_of(push_video(service, "vid-7", authorId=author.pk, visibility="public", version=5))["applied"]

    for version in (5, 4, 1):
        resp = push_video(service, "vid-7", authorId=other.pk, visibility="private", status="taken_down",
                          version=version)
        assert resp.status_code == 200
        assert body_of(resp) == {"videoId": "vid-7", "authorId": author.pk, "visibility": "public",
                                 "status": "active", "version": 5, "applied": False}
        row = VideoSnapshot.objects.get(video_id="vid-7")
        assert (row.author_id, row.visibility, row.status, row.version) == (author.pk, "public", "active", 5)

    resp = push_video(service, "vid-7", authorId=author.pk, visibility="private", status="active", version=6)
    assert body_of(resp) == {"videoId": "vid-7", "authorId": author.pk, "visibility": "private",
                             "status": "active", "version": 6, "applied": True}
    assert VideoSnapshot.objects.get(video_id="vid-7").visibility == "private"


def test_internal_push_by_author_username(service, author):
    resp = push_video(service, "vid-7", authorUsername=author.username, version=1)

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["authorId"] == author.pk
    assert VideoSnapshot.objects.get(video_id="vid-7").author_id == author.pk


@pytest.mark.parametrize("username", ["nobody-here", 17, ["x"], "nul\x00name", "\ud800"])
def test_internal_push_unknown_author_username_is_400(service, username):
    resp = service.put("/internal/v1/videos/vid-7",
                       data=json.dumps({"authorUsername": username, "version": 1}), content_type="application/json")

    assert_error(resp, 400, "unknown_author")
    assert not VideoSnapshot.objects.exists()


def test_internal_push_with_x_service_token_header(author):
    client = APIClient()
    resp = client.put("/internal/v1/videos/vid-7", data=json.dumps({"authorId": author.pk, "version": 1}),
                      content_type="application/json", HTTP_X_SERVICE_TOKEN=SERVICE_TOKEN)

    assert resp.status_code == 200, resp.content
    assert VideoSnapshot.objects.filter(video_id="vid-7").exists()


def test_internal_push_with_user_token_is_403(api, user, author):
    resp = push_video(api.as_user(user), "vid-7", authorId=author.pk, version=1)

    assert_error(resp, 403, "service_token_required")
    assert_error(api.as_user(user).get("/internal/v1/videos/vid-7"), 403, "service_token_required")
    assert not VideoSnapshot.objects.exists()


@pytest.mark.parametrize("auth", [None, "Bearer wrong-token", "Bearer ", "Service test-video-service", "Basic abc"])
def test_internal_push_without_valid_service_token_is_401(author, auth):
    client = APIClient()
    if auth is not None:
        client.credentials(HTTP_AUTHORIZATION=auth)

    resp = push_video(client, "vid-7", authorId=author.pk, version=1)

    assert resp.status_code == 401, resp.content
    assert body_of(resp)["code"] in ("not_authenticated", "authentication_failed")
    assert not VideoSnapshot.objects.exists()


def test_internal_push_with_wrong_token_scheme_token_is_401(author):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token wrong-token")

    assert_error(push_video(client, "vid-7", authorId=author.pk, version=1), 401, "authentication_failed")


ABSENT = object()
INTERNAL_BAD = [
    ("visibility-unknown", {"visibility": "secret"}, "invalid_visibility"),
    ("visibility-upper", {"visibility": "PUBLIC"}, "invalid_visibility"),
    ("visibility-number", {"visibility": 1}, "invalid_visibility"),
    ("visibility-list", {"visibility": ["public"]}, "invalid_visibility"),
    ("status-unknown", {"status": "gone"}, "invalid_status"),
    ("status-null", {"status": None}, "invalid_status"),
    ("status-object", {"status": {"a": 1}}, "invalid_status"),
    ("version-zero", {"version": 0}, "invalid_version"),
    ("version-negative", {"version": -3}, "invalid_version"),
    ("version-string", {"version": "2"}, "invalid_version"),
    ("version-float", {"version": 1.5}, "invalid_version"),
    ("version-true", {"version": True}, "invalid_version"),
    ("version-missing", {"version": ABSENT}, "invalid_version"),
    ("version-null", {"version": None}, "invalid_version"),
    ("version-int64-overflow", {"version": 2**63}, "invalid_version"),
    ("author-missing", {"authorId": ABSENT}, "invalid_author"),
    ("author-null", {"authorId": None}, "invalid_author"),
    ("author-string", {"authorId": "1"}, "invalid_author"),
    ("author-zero", {"authorId": 0}, "invalid_author"),
    ("author-true", {"authorId": True}, "invalid_author"),
    ("author-float", {"authorId": 1.0}, "invalid_author"),
    ("author-int64-overflow", {"authorId": 2**63}, "invalid_author"),
]


@pytest.mark.parametrize(("override", "code"), [c[1:] for c in INTERNAL_BAD], ids=[c[0] for c in INTERNAL_BAD])
def test_internal_push_bad_input_is_400_and_stores_nothing(service, author, override, code):
    body = {"authorId": author.pk, "visibility": "public", "status": "active", "version": 1}
    body.update(override)
    body = {k: v for k, v in body.items() if v is not ABSENT}

    assert_error(push_video(service, "vid-7", **body), 400, code)
    assert not VideoSnapshot.objects.exists()


@pytest.mark.parametrize(("raw", "code"), [("[]", "invalid_body"), ("{", "invalid_json"), ("", "invalid_json")])
def test_internal_push_malformed_body_is_400(service, raw, code):
    resp = service.put("/internal/v1/videos/vid-7", data=raw, content_type="application/json")

    assert_error(resp, 400, code)
    assert not VideoSnapshot.objects.exists()


def test_internal_push_malformed_video_id_is_400(service, author):
    assert_error(push_video(service, "v" * 65, authorId=author.pk, version=1), 400, "invalid_video_id")
    assert_error(push_video(service, "a%20b", authorId=author.pk, version=1), 400, "invalid_video_id")
    assert not VideoSnapshot.objects.exists()
