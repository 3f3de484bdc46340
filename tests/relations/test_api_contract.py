"""Black-box contract of the public like API and the internal video-push API (issue 2, sections 2, 4
and 5; architecture §8). Everything goes through HTTP against real PostgreSQL and Redis."""

from __future__ import annotations

import contextlib
import json

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from likes_project.redis_client import cache_redis, reset_clients
from relations import cache, routing
from relations.models import LikeCommand, LikeRelation, OutboxEvent, VideoSnapshot
from relations.services.social import block_set, friendship_set
from tests.factories import TEST_ACTOR, put_like

pytestmark = pytest.mark.django_db(databases="__all__")

SERVICE_TOKEN = "test-video-service-token"
COMMAND_KEYS = {
    "operationId", "videoId", "state", "relationVersion", "operationResult", "currentRelation",
    "changed", "replayed", "countConsistency",
}
SHARDS = list(django_settings.RELATION_SHARD_ALIASES)


# --- helpers -----------------------------------------------------------------------------------


def body_of(resp) -> dict:
    """The JSON body; fails on anything that is not a JSON response (an HTML error page, say)."""
    assert resp["Content-Type"].startswith("application/json"), (resp.status_code, resp["Content-Type"])
    data = json.loads(resp.content)
    assert isinstance(data, dict)
    return data


def assert_error(resp, status: int, code: str) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.content[:300])
    data = body_of(resp)
    assert data["code"] == code, data
    assert isinstance(data["message"], str) and data["message"]
    return data


def shard_rows() -> dict[str, int]:
    """Rows of every relation-shard table, summed over all shards."""
    return {
        model.__name__: sum(model.objects.using(alias).count() for alias in SHARDS)
        for model in (LikeRelation, LikeCommand, OutboxEvent)
    }


NOTHING = {"LikeRelation": 0, "LikeCommand": 0, "OutboxEvent": 0}


def raw_put(client, video_id: str, body: bytes | str, key: str | None = "op-1",
            content_type: str = "application/json"):
    extra = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.put(f"/v1/videos/{video_id}/like-relation", data=body, content_type=content_type, **extra)


def service_client(token: str = SERVICE_TOKEN) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def push_video(client, video_id: str, **body):
    return client.put(f"/internal/v1/videos/{video_id}", data=json.dumps(body), content_type="application/json")


def assert_command_shape(data: dict) -> None:
    assert set(data) == COMMAND_KEYS
    assert data["countConsistency"] == "EVENTUAL"
    assert set(data["operationResult"]) == {"state", "relationVersion"}
    assert set(data["currentRelation"]) == {"state", "relationVersion"}
    assert data["state"] == data["operationResult"]["state"]
    assert data["relationVersion"] == data["operationResult"]["relationVersion"]
    assert isinstance(data["changed"], bool) and isinstance(data["replayed"], bool)


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
def author(make_user):
    return make_user()


@pytest.fixture
def user(make_user):
    return make_user()


@pytest.fixture
def video(make_video, author):
    return make_video("vid-1", author)


@pytest.fixture
def client(api, user):
    return api.as_user(user)


@pytest.fixture
def service():
    return service_client()


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


# --- bad input: 400 / 413, JSON envelope, nothing written ----------------------------------------

VALID = json.dumps({"desiredState": "LIKED"})


def _json(**body) -> str:
    return json.dumps(body)


BAD_INPUT = [
    # (id, video id, idempotency key, raw body, content type, status, code)
    ("key-missing", "vid-1", None, VALID, "application/json", 400, "missing_idempotency_key"),
    ("key-empty", "vid-1", "", VALID, "application/json", 400, "invalid_idempotency_key"),
    ("key-129", "vid-1", "k" * 129, VALID, "application/json", 400, "invalid_idempotency_key"),
    ("key-space", "vid-1", "op 1", VALID, "application/json", 400, "invalid_idempotency_key"),
    ("key-slash", "vid-1", "op/1", VALID, "application/json", 400, "invalid_idempotency_key"),
    ("key-non-ascii", "vid-1", "op-\xe9", VALID, "application/json", 400, "invalid_idempotency_key"),
    ("key-newline", "vid-1", "op-1\n", VALID, "application/json", 400, "invalid_idempotency_key"),
    ("state-unknown", "vid-1", "op-1", _json(desiredState="TOGGLE"), "application/json", 400,
     "invalid_desired_state"),
    ("state-missing", "vid-1", "op-1", _json(baseVersion=0), "application/json", 400, "invalid_desired_state"),
    ("state-lowercase", "vid-1", "op-1", _json(desiredState="liked"), "application/json", 400,
     "invalid_desired_state"),
    ("state-null", "vid-1", "op-1", _json(desiredState=None), "application/json", 400, "invalid_desired_state"),
    ("state-number", "vid-1", "op-1", _json(desiredState=1), "application/json", 400, "invalid_desired_state"),
    ("state-true", "vid-1", "op-1", _json(desiredState=True), "application/json", 400, "invalid_desired_state"),
    ("state-list", "vid-1", "op-1", _json(desiredState=["LIKED"]), "application/json", 400,
     "invalid_desired_state"),
    ("state-object", "vid-1", "op-1", _json(desiredState={"LIKED": 1}), "application/json", 400,
     "invalid_desired_state"),
    ("json-broken", "vid-1", "op-1", '{"desiredState": "LIKED"', "application/json", 400, "invalid_json"),
    ("json-empty", "vid-1", "op-1", "", "application/json", 400, "invalid_json"),
    ("json-whitespace", "vid-1", "op-1", "  \n ", "application/json", 400, "invalid_json"),
    ("json-bad-utf8", "vid-1", "op-1", b'{"desiredState": "LIKED\xff"}', "application/json", 400, "invalid_json"),
    ("json-nan", "vid-1", "op-1", '{"desiredState": "LIKED", "baseVersion": NaN}', "application/json", 400,
     "invalid_json"),
    ("json-infinity", "vid-1", "op-1", '{"desiredState": "LIKED", "clientSequence": -Infinity}',
     "application/json", 400, "invalid_json"),
    ("json-huge-int", "vid-1", "op-1", '{"desiredState": "LIKED", "baseVersion": ' + "9" * 5000 + "}",
     "application/json", 400, "invalid_json"),
    ("json-deep", "vid-1", "op-1", "[" * 5000 + "]" * 5000, "application/json", 400, "invalid_json"),
    ("json-form", "vid-1", "op-1", "desiredState=LIKED", "application/x-www-form-urlencoded", 400, "invalid_json"),
    ("body-array", "vid-1", "op-1", '["LIKED"]', "application/json", 400, "invalid_body"),
    ("body-string", "vid-1", "op-1", '"LIKED"', "application/json", 400, "invalid_body"),
    ("body-number", "vid-1", "op-1", "1", "application/json", 400, "invalid_body"),
    ("body-null", "vid-1", "op-1", "null", "application/json", 400, "invalid_body"),
    ("base-negative", "vid-1", "op-1", _json(desiredState="LIKED", baseVersion=-1), "application/json", 400,
     "invalid_base_version"),
    ("base-float", "vid-1", "op-1", _json(desiredState="LIKED", baseVersion=1.5), "application/json", 400,
     "invalid_base_version"),
    ("base-float-whole", "vid-1", "op-1", '{"desiredState": "LIKED", "baseVersion": 1.0}', "application/json",
     400, "invalid_base_version"),
    ("base-exponent", "vid-1", "op-1", '{"desiredState": "LIKED", "baseVersion": 1e0}', "application/json",
     400, "invalid_base_version"),
    ("base-string", "vid-1", "op-1", _json(desiredState="LIKED", baseVersion="1"), "application/json", 400,
     "invalid_base_version"),
    ("base-true", "vid-1", "op-1", _json(desiredState="LIKED", baseVersion=True), "application/json", 400,
     "invalid_base_version"),
    ("base-int64-overflow", "vid-1", "op-1", _json(desiredState="LIKED", baseVersion=2**63), "application/json",
     400, "invalid_base_version"),
    ("seq-string", "vid-1", "op-1", _json(desiredState="LIKED", clientSequence="3"), "application/json", 400,
     "invalid_client_sequence"),
    ("seq-true", "vid-1", "op-1", _json(desiredState="LIKED", clientSequence=False), "application/json", 400,
     "invalid_client_sequence"),
    ("seq-float", "vid-1", "op-1", _json(desiredState="LIKED", clientSequence=2.5), "application/json", 400,
     "invalid_client_sequence"),
    ("seq-int64-overflow", "vid-1", "op-1", _json(desiredState="LIKED", clientSequence=-(2**64)),
     "application/json", 400, "invalid_client_sequence"),
    ("device-129", "vid-1", "op-1", _json(desiredState="LIKED", deviceId="d" * 129), "application/json", 400,
     "invalid_device_id"),
    ("device-number", "vid-1", "op-1", _json(desiredState="LIKED", deviceId=5), "application/json", 400,
     "invalid_device_id"),
    ("device-list", "vid-1", "op-1", _json(desiredState="LIKED", deviceId=["d"]), "application/json", 400,
     "invalid_device_id"),
    ("device-nul", "vid-1", "op-1", _json(desiredState="LIKED", deviceId="d\x00"), "application/json", 400,
     "invalid_device_id"),
    ("device-lone-surrogate", "vid-1", "op-1", '{"desiredState": "LIKED", "deviceId": "d\\ud800"}',
     "application/json", 400, "invalid_device_id"),
    ("user-id", "vid-1", "op-1", _json(desiredState="LIKED", userId=1), "application/json", 400,
     "user_id_not_allowed"),
    ("user_id", "vid-1", "op-1", _json(desiredState="LIKED", user_id=1), "application/json", 400,
     "user_id_not_allowed"),
    ("user-id-null", "vid-1", "op-1", _json(desiredState="UNLIKED", userId=None), "application/json", 400,
     "user_id_not_allowed"),
    ("video-65", "v" * 65, "op-1", VALID, "application/json", 400, "invalid_video_id"),
    ("video-space", "vid%201", "op-1", VALID, "application/json", 400, "invalid_video_id"),
    ("video-hash", "vid%231", "op-1", VALID, "application/json", 400, "invalid_video_id"),
    ("video-question", "vid%3F1", "op-1", VALID, "application/json", 400, "invalid_video_id"),
    ("video-non-ascii", "caf%C3%A9", "op-1", VALID, "application/json", 400, "invalid_video_id"),
    ("video-bad-utf8", "vid%FF", "op-1", VALID, "application/json", 400, "invalid_video_id"),
]


@pytest.mark.parametrize(
    ("video_id", "key", "body", "content_type", "status", "code"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_is_a_json_error_and_writes_nothing(client, video, video_id, key, body, content_type, status,
                                                      code):
    resp = raw_put(client, video_id, body, key=key, content_type=content_type)

    assert_error(resp, status, code)
    assert shard_rows() == NOTHING
    # The same relation is still untouched when read back.
    assert body_of(client.get("/v1/videos/vid-1/like-relation"))["relationVersion"] == 0


def test_bad_input_error_names_the_offending_user_fields(client, video):
    data = assert_error(raw_put(client, "vid-1", _json(desiredState="LIKED", userId=2, user_id=2)), 400,
                        "user_id_not_allowed")
    assert set(data["fields"]) == {"userId", "user_id"}


@pytest.mark.parametrize("video_id", ["vid%2F1", "%2F", "vid%2F"])
def test_slash_in_video_id_never_reaches_a_write(client, video, video_id):
    # An encoded '/' is decoded before routing, so the path no longer names the like-relation resource.
    # Either answer is a JSON client error; neither writes anything.
    resp = raw_put(client, video_id, VALID)

    assert resp.status_code in (400, 404), resp.content
    assert body_of(resp)["code"] == {400: "invalid_video_id", 404: "not_found"}[resp.status_code]
    assert shard_rows() == NOTHING


def test_oversized_body_is_413_and_writes_nothing(client, video):
    limit = django_settings.API_MAX_BODY_BYTES
    assert limit == 16 * 1024
    body = json.dumps({"desiredState": "LIKED", "pad": "x" * limit})

    assert_error(raw_put(client, "vid-1", body), 413, "payload_too_large")
    assert shard_rows() == NOTHING


def test_body_of_exactly_the_limit_is_accepted(client, video):
    limit = django_settings.API_MAX_BODY_BYTES
    head = json.dumps({"desiredState": "LIKED", "pad": ""})
    body = head[:-2] + "x" * (limit - len(head)) + head[-2:]
    assert len(body.encode()) == limit

    assert raw_put(client, "vid-1", body).status_code == 200
    assert raw_put(client, "vid-1", body + " ", key="op-2").status_code == 413


def test_oversized_body_on_the_internal_api_is_413(service):
    body = json.dumps({"authorId": 1, "version": 1, "pad": "x" * django_settings.API_MAX_BODY_BYTES})
    resp = service.put("/internal/v1/videos/vid-9", data=body, content_type="application/json")

    assert_error(resp, 413, "payload_too_large")
    assert not VideoSnapshot.objects.filter(video_id="vid-9").exists()


def test_non_numeric_content_length_is_400(client, video):
    resp = client.put("/v1/videos/vid-1/like-relation", data=VALID, content_type="application/json",
                      HTTP_IDEMPOTENCY_KEY="op-1", CONTENT_LENGTH="abc")

    assert_error(resp, 400, "invalid_content_length")
    assert shard_rows() == NOTHING


def test_declared_oversized_content_length_is_413_before_reading(client, video):
    resp = client.put("/v1/videos/vid-1/like-relation", data=VALID, content_type="application/json",
                      HTTP_IDEMPOTENCY_KEY="op-1", CONTENT_LENGTH=str(django_settings.API_MAX_BODY_BYTES + 1))

    assert_error(resp, 413, "payload_too_large")
    assert shard_rows() == NOTHING


@pytest.mark.parametrize("accept", ["text/html", "text/html,application/xhtml+xml,*/*;q=0.8", "*/*"])
def test_errors_stay_specific_json_whatever_the_accept_header(api, client, video, accept):
    bad = client.put("/v1/videos/vid-1/like-relation", data=_json(desiredState="TOGGLE"),
                     content_type="application/json", HTTP_IDEMPOTENCY_KEY="op-1", HTTP_ACCEPT=accept)
    assert_error(bad, 400, "invalid_desired_state")

    anon = api.anonymous().put("/v1/videos/vid-1/like-relation", data=VALID, content_type="application/json",
                               HTTP_IDEMPOTENCY_KEY="op-1", HTTP_ACCEPT=accept)
    assert_error(anon, 401, "not_authenticated")
    assert anon["WWW-Authenticate"].startswith("Token")

    missing = client.put("/v1/videos/nope/like-relation", data=VALID, content_type="application/json",
                         HTTP_IDEMPOTENCY_KEY="op-2", HTTP_ACCEPT=accept)
    assert_error(missing, 404, "video_not_found")

    wrong_method = client.post("/v1/videos/vid-1/like-relation", HTTP_ACCEPT=accept)
    assert_error(wrong_method, 405, "method_not_allowed")
    assert "PUT" in wrong_method["Allow"]
    assert shard_rows() == NOTHING


def test_rate_limit_with_html_accept_keeps_retry_after(settings, client, video):
    settings.RATE_LIMIT_USER_BURST = 1
    settings.RATE_LIMIT_USER_RATE = 0.001
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200

    resp = client.put("/v1/videos/vid-1/like-relation", data=VALID, content_type="application/json",
                      HTTP_IDEMPOTENCY_KEY="op-2", HTTP_ACCEPT="text/html")

    data = assert_error(resp, 429, "rate_limited")
    assert int(resp["Retry-After"]) >= 1
    assert data["currentRelation"] == {"state": "LIKED", "relationVersion": 1}


def test_unacceptable_accept_header_is_406_json_and_writes_nothing(client, video):
    resp = client.put("/v1/videos/vid-1/like-relation", data=VALID, content_type="application/json",
                      HTTP_IDEMPOTENCY_KEY="op-1", HTTP_ACCEPT="application/xml")

    assert_error(resp, 406, "not_acceptable")
    assert shard_rows() == NOTHING


def test_text_plain_with_valid_json_is_accepted(client, video):
    resp = raw_put(client, "vid-1", VALID, content_type="text/plain")

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["currentRelation"] == {"state": "LIKED", "relationVersion": 1}


def test_limits_of_valid_fields_are_accepted(client, video):
    resp = raw_put(client, "vid-1", _json(desiredState="LIKED", baseVersion=0, deviceId="d" * 128,
                                          clientSequence=-5, unknownField={"x": [1]}), key="k" * 128)

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["operationId"] == "k" * 128


def test_client_sequence_takes_the_whole_int64_range(client, user, video):
    for key, sequence in (("op-1", -(2**63)), ("op-2", 2**63 - 1)):
        resp = raw_put(client, "vid-1", _json(desiredState="LIKED", clientSequence=sequence), key=key)
        assert resp.status_code == 200, resp.content
    stored = LikeCommand.objects.using(routing.alias_for_user(user.pk)).filter(user_id=user.pk)
    assert sorted(stored.values_list("client_sequence", flat=True)) == [-(2**63), 2**63 - 1]


def test_null_optional_fields_mean_absent(client, video):
    resp = raw_put(client, "vid-1", _json(desiredState="LIKED", baseVersion=None, deviceId=None,
                                          clientSequence=None))

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["changed"] is True


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

    assert_error(resp, 401, "not_authenticated")
    assert shard_rows() == NOTHING


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


# --- visibility and block rules (INV-7) through HTTP ---------------------------------------------


def test_invisible_videos_are_indistinguishable_404s(client, make_video, author):
    make_video("vid-deleted", author, status="deleted")
    make_video("vid-private", author, visibility="private")

    bodies = [
        assert_error(put_like(client, vid, "LIKED", f"op-{vid}"), 404, "video_not_found")
        for vid in ("vid-missing", "vid-deleted", "vid-private")
    ]

    assert bodies[0] == bodies[1] == bodies[2]
    assert shard_rows() == NOTHING


def test_author_may_like_their_own_private_video(api, make_video, author):
    make_video("vid-private", author, visibility="private")

    resp = put_like(api.as_user(author), "vid-private", "LIKED", "op-1")

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["changed"] is True


def test_taken_down_video_refuses_a_like_with_403(client, make_video, author):
    make_video("vid-down", author, status="taken_down")

    assert_error(put_like(client, "vid-down", "LIKED", "op-1"), 403, "video_taken_down")
    assert shard_rows() == NOTHING


def test_private_and_taken_down_video_is_still_a_404_for_others(client, make_video, author):
    make_video("vid-x", author, visibility="private", status="taken_down")

    assert_error(put_like(client, "vid-x", "LIKED", "op-1"), 404, "video_not_found")


def test_friends_only_video(api, make_user, make_video, author, client):
    friend = make_user()
    friendship_set(user_a=friend.pk, user_b=author.pk, present=True, actor=TEST_ACTOR)
    make_video("vid-friends", author, visibility="friends")

    assert_error(put_like(client, "vid-friends", "LIKED", "op-1"), 403, "video_friends_only")
    assert shard_rows() == NOTHING
    assert put_like(api.as_user(author), "vid-friends", "LIKED", "op-1").status_code == 200
    assert put_like(api.as_user(friend), "vid-friends", "LIKED", "op-1").status_code == 200
    assert shard_rows()["LikeRelation"] == 2


def test_blocked_user_cannot_like_the_authors_videos(api, make_video, make_user, author, user, client):
    make_video("vid-1", author)
    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    assert_error(put_like(client, "vid-1", "LIKED", "op-1"), 403, "blocked_by_author")
    assert shard_rows() == NOTHING
    # The block is directed: the author may still like the user's videos.
    make_video("vid-user", user)
    assert put_like(api.as_user(author), "vid-user", "LIKED", "op-1").status_code == 200


def test_block_beats_friendship(make_video, author, user, client):
    make_video("vid-f", author, visibility="friends")
    friendship_set(user_a=author.pk, user_b=user.pk, present=True, actor=TEST_ACTOR)
    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    assert_error(put_like(client, "vid-f", "LIKED", "op-1"), 403, "blocked_by_author")


def test_unlike_is_allowed_after_the_video_is_taken_down(client, service, video, author):
    assert body_of(put_like(client, "vid-1", "LIKED", "op-1"))["changed"] is True
    assert body_of(push_video(service, "vid-1", authorId=author.pk, status="taken_down", version=2))["applied"]

    assert_error(put_like(client, "vid-1", "LIKED", "op-2"), 403, "video_taken_down")
    resp = put_like(client, "vid-1", "UNLIKED", "op-3")

    assert resp.status_code == 200, resp.content
    data = body_of(resp)
    assert data["changed"] is True
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}


def test_unlike_is_allowed_after_the_video_is_deleted_or_blocked(client, service, video, author, user):
    put_like(client, "vid-1", "LIKED", "op-1")
    push_video(service, "vid-1", authorId=author.pk, status="deleted", version=2)
    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    data = body_of(put_like(client, "vid-1", "UNLIKED", "op-2"))

    assert data["changed"] is True
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}


def test_takedown_push_takes_effect_at_once_with_a_warm_cache(api, make_user, client, service, video, author):
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200
    # The first like filled the visibility cache; without active invalidation it would serve
    # "active" for the whole TTL.
    assert cache_redis().exists(cache.visibility_key("vid-1"))

    assert body_of(push_video(service, "vid-1", authorId=author.pk, status="taken_down", version=2))["applied"]

    other = api.as_user(make_user())
    assert_error(put_like(other, "vid-1", "LIKED", "op-1"), 403, "video_taken_down")


def test_push_that_creates_or_opens_a_video_takes_effect_at_once(client, service, make_video, author):
    # Negative cache: the miss is cached, the creating push must replace it.
    assert_error(put_like(client, "vid-new", "LIKED", "op-1"), 404, "video_not_found")
    assert cache_redis().exists(cache.visibility_key("vid-new"))
    push_video(service, "vid-new", authorId=author.pk, version=1)
    assert put_like(client, "vid-new", "LIKED", "op-2").status_code == 200

    make_video("vid-priv", author, visibility="private")
    assert_error(put_like(client, "vid-priv", "LIKED", "op-3"), 404, "video_not_found")
    push_video(service, "vid-priv", authorId=author.pk, visibility="public", version=2)
    assert put_like(client, "vid-priv", "LIKED", "op-4").status_code == 200


def test_block_takes_effect_at_once_with_a_warm_edge_cache(client, make_video, author, user):
    make_video("vid-a", author)
    make_video("vid-b", author)
    assert put_like(client, "vid-a", "LIKED", "op-1").status_code == 200
    assert cache_redis().exists(cache.edge_key(author.pk, user.pk))

    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    assert_error(put_like(client, "vid-b", "LIKED", "op-2"), 403, "blocked_by_author")


# --- abuse limits (CMD-18) ---------------------------------------------------------------------


def test_user_rate_limit_answers_429_with_retry_after_and_current_relation(settings, client, video):
    settings.RATE_LIMIT_USER_BURST = 2
    settings.RATE_LIMIT_USER_RATE = 0.001
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200
    assert put_like(client, "vid-1", "UNLIKED", "op-2").status_code == 200

    resp = put_like(client, "vid-1", "LIKED", "op-3")

    data = assert_error(resp, 429, "rate_limited")
    assert int(resp["Retry-After"]) >= 1
    assert data["scope"] == "user"
    assert data["retryAfterSeconds"] == int(resp["Retry-After"])
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}
    assert shard_rows() == {"LikeRelation": 1, "LikeCommand": 2, "OutboxEvent": 2}
    assert_error(client.get("/v1/like-operations/op-3"), 404, "operation_not_found")


def test_rate_limit_is_per_user(settings, api, make_user, client, video):
    settings.RATE_LIMIT_USER_BURST = 1
    settings.RATE_LIMIT_USER_RATE = 0.001
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200
    assert put_like(client, "vid-1", "LIKED", "op-2").status_code == 429

    assert put_like(api.as_user(make_user()), "vid-1", "LIKED", "op-1").status_code == 200


def test_ip_rate_limit_spans_users(settings, api, make_user, video):
    settings.RATE_LIMIT_IP_BURST = 1
    settings.RATE_LIMIT_IP_RATE = 0.001
    assert put_like(api.as_user(make_user()), "vid-1", "LIKED", "op-1").status_code == 200

    resp = put_like(api.as_user(make_user()), "vid-1", "LIKED", "op-1")

    assert assert_error(resp, 429, "rate_limited")["scope"] == "ip"
    assert shard_rows()["LikeCommand"] == 1


def test_relation_limit_counts_only_effective_transitions(settings, client, video):
    settings.RATE_LIMIT_RELATION_PER_MINUTE = 2
    assert body_of(put_like(client, "vid-1", "LIKED", "op-1"))["changed"] is True
    assert body_of(put_like(client, "vid-1", "UNLIKED", "op-2"))["changed"] is True

    resp = put_like(client, "vid-1", "LIKED", "op-3")
    data = assert_error(resp, 429, "rate_limited")
    assert data["scope"] == "relation"
    assert int(resp["Retry-After"]) >= 1
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}

    # A command that changes nothing is not a transition and is not refused.
    same = put_like(client, "vid-1", "UNLIKED", "op-4")
    assert same.status_code == 200
    assert body_of(same)["changed"] is False
    assert shard_rows() == {"LikeRelation": 1, "LikeCommand": 3, "OutboxEvent": 2}


@contextlib.contextmanager
def redis_unreachable(settings):
    """Point both Redis roles at a closed port for the duration of the block."""
    saved = settings.REDIS_URL, settings.REDIS_STREAMS_URL
    settings.REDIS_URL = settings.REDIS_STREAMS_URL = "redis://127.0.0.1:1/0"
    reset_clients()
    try:
        yield
    finally:
        settings.REDIS_URL, settings.REDIS_STREAMS_URL = saved
        reset_clients()


def test_limits_and_caches_fail_open_when_redis_is_down(settings, client, video, author, make_video):
    make_video("vid-down", author, status="taken_down")

    with redis_unreachable(settings):
        resp = put_like(client, "vid-1", "LIKED", "op-1")
        refused = put_like(client, "vid-down", "LIKED", "op-2")
        read = client.get("/v1/videos/vid-1/like-relation")

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["changed"] is True
    # Without the cache the rules still come from the database.
    assert_error(refused, 403, "video_taken_down")
    assert body_of(read)["state"] == "LIKED"
    assert shard_rows() == {"LikeRelation": 1, "LikeCommand": 1, "OutboxEvent": 1}
