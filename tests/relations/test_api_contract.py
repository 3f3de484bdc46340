"""Black-box contract of the public like API (issue 2, sections 2 and 4; architecture §8): the exact
200 shapes of the command, the relation and operation reads, the endpoints that do not exist, and
authentication. Everything goes through HTTP against real PostgreSQL and Redis. Bad input, the internal
video API and the rules and limits over HTTP have their own modules (test_api_*.py)."""

from __future__ import annotations

import json

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from relations import routing
from relations.models import LikeCommand, LikeRelation, OutboxEvent
from tests.factories import put_like
from tests.relations.helpers import NOTHING, assert_command_shape, assert_error, body_of, service_client, shard_rows

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]

SHARDS = list(django_settings.RELATION_SHARD_ALIASES)


@pytest.fixture
def client(api, user):
    """The `user` fixture's token client (in this module it stands in for pytest-django's `client`)."""
    return api.as_user(user)


# --- 200 shapes --------------------------------------------------------------------------------


@pytest.mark.parametrize("shard", SHARDS)
def test_put_like_answers_exact_contract_shape_and_writes_on_the_users_shard(api, make_user, video, shard):
    user = make_user(shard=shard)
    resp = put_like(api.as_user(user), video.video_id, "LIKED", "op-first")

    assert resp.status_code == 200, resp.content
    data = body_of(resp)
    assert_command_shape(data)
    assert data == {
        "operationId": "op-first", "videoId": "vid-1", "state": "LIKED", "relationVersion": 1,
        "operationResult": {"state": "LIKED", "relationVersion": 1},
        "currentRelation": {"state": "LIKED", "relationVersion": 1},
        "changed": True, "replayed": False, "countConsistency": "EVENTUAL",
    }
    assert routing.alias_for_user(user.pk) == shard
    for alias in SHARDS:
        expected = 1 if alias == shard else 0
        assert LikeRelation.objects.using(alias).filter(user_id=user.pk).count() == expected
        assert LikeCommand.objects.using(alias).filter(user_id=user.pk).count() == expected
        assert OutboxEvent.objects.using(alias).count() == expected


def test_put_same_state_and_replay_answer_the_contract_shape(client, video):
    first = body_of(put_like(client, "vid-1", "LIKED", "op-a"))
    again = put_like(client, "vid-1", "LIKED", "op-b")
    replay = put_like(client, "vid-1", "LIKED", "op-a")

    assert again.status_code == 200 and replay.status_code == 200
    again, replay = body_of(again), body_of(replay)
    assert_command_shape(again)
    assert_command_shape(replay)
    assert again["changed"] is False and again["replayed"] is False
    assert again["currentRelation"] == {"state": "LIKED", "relationVersion": 1}
    assert replay == {**first, "replayed": True}
    assert shard_rows() == {"LikeRelation": 1, "LikeCommand": 2, "OutboxEvent": 1}


def test_put_unlike_answers_changed_with_next_version(client, user, video):
    put_like(client, "vid-1", "LIKED", "op-a")
    data = body_of(put_like(client, "vid-1", "UNLIKED", "op-b", baseVersion=1, deviceId="d1", clientSequence=7))

    assert data["operationResult"] == {"state": "UNLIKED", "relationVersion": 2}
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}
    assert data["changed"] is True
    cmd = LikeCommand.objects.using(routing.alias_for_user(user.pk)).get(user_id=user.pk, operation_id="op-b")
    assert (cmd.base_version, cmd.device_id, cmd.client_sequence) == (1, "d1", 7)


def test_get_relation_for_a_user_who_never_acted_reads_unliked_zero(client, video):
    resp = client.get("/v1/videos/vid-1/like-relation")

    assert resp.status_code == 200
    assert body_of(resp) == {"videoId": "vid-1", "state": "UNLIKED", "relationVersion": 0}
    assert shard_rows() == NOTHING


def test_get_relation_reads_the_relation_fact(client, video):
    put_like(client, "vid-1", "LIKED", "op-a")
    put_like(client, "vid-1", "UNLIKED", "op-b")
    put_like(client, "vid-1", "LIKED", "op-c")

    assert body_of(client.get("/v1/videos/vid-1/like-relation")) == {
        "videoId": "vid-1", "state": "LIKED", "relationVersion": 3,
    }


def test_get_operation_returns_stored_verdict_with_current_relation(client, video):
    put_like(client, "vid-1", "LIKED", "op-a")
    put_like(client, "vid-1", "UNLIKED", "op-b")

    resp = client.get("/v1/like-operations/op-a")

    assert resp.status_code == 200
    assert body_of(resp) == {
        "operationId": "op-a", "videoId": "vid-1", "state": "LIKED", "relationVersion": 1,
        "operationResult": {"state": "LIKED", "relationVersion": 1},
        "currentRelation": {"state": "UNLIKED", "relationVersion": 2},
        "changed": True, "replayed": True, "countConsistency": "EVENTUAL",
    }


def test_get_operation_unknown_and_foreign_keys_are_the_same_404(api, make_user, client, video):
    other = api.as_user(make_user())
    assert put_like(other, "vid-1", "LIKED", "op-theirs").status_code == 200

    unknown = assert_error(client.get("/v1/like-operations/op-never"), 404, "operation_not_found")
    foreign = assert_error(client.get("/v1/like-operations/op-theirs"), 404, "operation_not_found")

    assert unknown == foreign
    assert body_of(other.get("/v1/like-operations/op-theirs"))["replayed"] is True


def test_get_operation_with_malformed_id_is_400(client):
    assert_error(client.get("/v1/like-operations/a%20b"), 400, "invalid_operation_id")
    assert_error(client.get("/v1/like-operations/" + "k" * 129), 400, "invalid_operation_id")


def test_there_is_no_toggle_endpoint(client, video):
    assert_error(client.post("/v1/videos/vid-1/like/toggle"), 404, "not_found")
    assert_error(client.put("/v1/videos/vid-1/like/toggle"), 404, "not_found")
    assert_error(client.post("/v1/videos/vid-1/like-relation/toggle"), 404, "not_found")
    assert shard_rows() == NOTHING


@pytest.mark.parametrize("method", ["post", "delete", "patch"])
def test_other_methods_on_like_relation_are_405_json(client, video, method):
    resp = getattr(client, method)(
        "/v1/videos/vid-1/like-relation", data=json.dumps({"desiredState": "LIKED"}),
        content_type="application/json", HTTP_IDEMPOTENCY_KEY="op-1",
    )

    assert_error(resp, 405, "method_not_allowed")
    assert shard_rows() == NOTHING


def test_unknown_api_path_is_json_404(client):
    assert_error(client.get("/v1/nothing-here"), 404, "not_found")
    assert_error(client.get("/internal/v1/nothing"), 404, "not_found")


# --- auth --------------------------------------------------------------------------------------


def test_no_token_is_401_with_www_authenticate_and_writes_nothing(api, video):
    anon = api.anonymous()
    for resp in (put_like(anon, "vid-1", "LIKED", "op-1"), anon.get("/v1/videos/vid-1/like-relation"),
                 anon.get("/v1/like-operations/op-1")):
        assert_error(resp, 401, "not_authenticated")
        assert resp["WWW-Authenticate"].startswith("Token")
    assert shard_rows() == NOTHING


def test_bad_token_is_401_authentication_failed(video):
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)

    resp = put_like(bad, "vid-1", "LIKED", "op-1")

    assert_error(resp, 401, "authentication_failed")
    assert "WWW-Authenticate" in resp
    assert shard_rows() == NOTHING


def test_service_token_cannot_act_as_a_user(video):
    resp = put_like(service_client(), "vid-1", "LIKED", "op-1")

    # A Bearer credential on the public API is read as a user token: the service's is none (issue 30).
    assert_error(resp, 401, "authentication_failed")
    assert shard_rows() == NOTHING
