"""Text PostgreSQL cannot hold (issue 10 §2): a NUL character fails in the driver (`DataError`), which
the API would turn into a 503 and the admin into a 500. Every path, query and body parameter that
reaches SQL answers a clean 4xx JSON envelope with a stable code instead (or the admin's own "not
found" handling). Real PostgreSQL and Redis; nothing is mocked."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.relations.helpers import assert_error

pytestmark = [pytest.mark.topology_independent, pytest.mark.schema, pytest.mark.django_db(databases="__all__")]

NUL = "%00"


@pytest.fixture
def client(api, user):
    return api.as_user(user)


def test_a_nul_in_the_username_of_a_liked_list_is_404_user_not_found(client):
    """The reported case: this was 503 `service_unavailable` (PostgreSQL refused the NUL)."""
    assert_error(client.get(f"/v1/users/a{NUL}b/likes"), 404, "user_not_found")
    assert_error(client.get(f"/v1/users/{NUL}/likes?limit=1"), 404, "user_not_found")


def test_a_liked_list_of_a_real_user_with_a_nul_cursor_or_limit_is_400(client, user, make_user):
    other = make_user()
    for owner in (user, other):
        assert_error(client.get(f"/v1/users/{owner.username}/likes?cursor=a{NUL}b"), 400, "invalid_cursor")
        assert_error(client.get(f"/v1/users/{owner.username}/likes?limit=1{NUL}"), 400, "invalid_limit")
    assert_error(client.get(f"/v1/me/likes?cursor={NUL}"), 400, "invalid_cursor")
    assert_error(client.get(f"/v1/me/likes?limit={NUL}"), 400, "invalid_limit")


@pytest.mark.parametrize("path", [
    "/v1/videos/a{nul}b/like-relation",
    "/v1/videos/a{nul}b/like-count",
    "/v1/videos/a{nul}b/likers",
    "/v1/videos/a{nul}b/likers/recent",
])
def test_a_nul_in_a_video_id_is_400_invalid_video_id(client, path):
    assert_error(client.get(path.format(nul=NUL)), 400, "invalid_video_id")


def test_a_nul_in_a_write_path_or_body_is_400(client, make_video, author):
    make_video("vid-n", author)
    body = json.dumps({"desiredState": "LIKED"})
    assert_error(client.put(f"/v1/videos/a{NUL}b/like-relation", data=body, content_type="application/json",
                            HTTP_IDEMPOTENCY_KEY="op-1"), 400, "invalid_video_id")
    assert_error(client.put(f"/v1/videos/a{NUL}b/likers-visibility", data=json.dumps({"likersPublic": True}),
                            content_type="application/json"), 400, "invalid_video_id")
    assert_error(client.put("/v1/videos/vid-n/like-relation", content_type="application/json",
                            data=json.dumps({"desiredState": "LIKED", "deviceId": "d\x00"}),
                            HTTP_IDEMPOTENCY_KEY="op-2"), 400, "invalid_device_id")
    assert_error(client.get(f"/v1/like-operations/op{NUL}1"), 400, "invalid_operation_id")
    for payload in ({"videoIds": ["a\x00b"]}, {"videoIds": ["vid-n"], "minRelationVersions": {"a\x00b": 1}}):
        assert_error(client.post("/v1/like-relations/batch-query", data=json.dumps(payload),
                                 content_type="application/json"), 400, "invalid_video_id")


def test_a_nul_in_a_likers_cursor_is_400(api, author, make_video):
    make_video("vid-n", author)
    assert_error(api.as_user(author).get(f"/v1/videos/vid-n/likers?cursor=a{NUL}"), 400, "invalid_cursor")


def test_a_nul_in_the_internal_video_api_is_400(service, author):
    assert_error(service.get(f"/internal/v1/videos/a{NUL}b"), 400, "invalid_video_id")
    assert_error(service.put(f"/internal/v1/videos/a{NUL}b", data=json.dumps({"authorId": author.pk, "version": 1}),
                             content_type="application/json"), 400, "invalid_video_id")
    put = service.put("/internal/v1/videos/vid-n", content_type="application/json",
                      data=json.dumps({"authorUsername": "a\x00b", "version": 1}))
    assert_error(put, 400, "unknown_author")
    for field in ("visibility", "status"):
        put = service.put("/internal/v1/videos/vid-n", content_type="application/json",
                          data=json.dumps({"authorId": author.pk, "version": 1, field: "public\x00"}))
        assert_error(put, 400, f"invalid_{field}")


def test_a_nul_in_the_video_admin_is_not_a_server_error(admin_client, make_video, author):
    make_video("vid-n", author)
    changelist = reverse("admin:relations_videosnapshot_changelist")
    # A change / history page of an id no row can have: the admin's "does not exist" redirect (the
    # delete page refuses first: snapshots are never deleted).
    for page, status in (("change", 302), ("history", 302), ("delete", 403)):
        resp = admin_client.get(reverse(f"admin:relations_videosnapshot_{page}", args=["a\x00b"]))
        assert resp.status_code == status, (page, resp.status_code)
    resp = admin_client.post(reverse("admin:relations_videosnapshot_change", args=["a\x00b"]),
                             {"author_id": author.pk, "visibility": "public", "status": "active"})
    assert resp.status_code == 302
    # A list filter or search with a NUL: Django's "invalid lookup" answer (?e=1), or a plain page.
    for query in ({"video_id": "a\x00b"}, {"visibility": "pub\x00"}, {"q": "a\x00b"}):
        resp = admin_client.get(changelist, query)
        assert resp.status_code in (200, 302), (query, resp.status_code)


def test_a_nul_in_the_lookup_forms_is_a_form_error(admin_client):
    url = "/admin/opsconsole/auditrecord/lookup/"
    for params in ({"lookup": "relation", "relation-user": "a\x00b", "relation-video_id": "vid-n"},
                   {"lookup": "relation", "relation-user": "1", "relation-video_id": "v\x00"},
                   {"lookup": "command", "command-operation_id": "op\x00", "command-user": "a\x00b"}):
        resp = admin_client.get(url, params)
        assert resp.status_code == 200, params
        assert "Null characters are not allowed" in resp.content.decode(), params


def test_the_lookup_selector_itself_refuses_a_nul_username():
    from relations.errors import UserNotFound
    from relations.selectors.lookup import lookup_user_get

    with pytest.raises(UserNotFound):
        lookup_user_get(query="a\x00b")
