"""Bad input to the public like API (issue 2 §4, architecture §8): every defect answers its own 400 or
413 code in the JSON error envelope, whatever the Accept header, and writes nothing; the limits of valid
fields are accepted. Everything goes through HTTP against real PostgreSQL and Redis."""

from __future__ import annotations

import json

import pytest
from django.conf import settings as django_settings

from relations import routing
from relations.models import LikeCommand, VideoSnapshot
from tests.factories import put_like
from tests.relations.helpers import NOTHING, assert_error, body_of, raw_put, shard_rows

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


@pytest.fixture
def client(api, user):
    """The `user` fixture's token client (in this module it stands in for pytest-django's `client`)."""
    return api.as_user(user)


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
    resp = raw_put(client, "vid-1", VALID, CONTENT_LENGTH="abc")

    assert_error(resp, 400, "invalid_content_length")
    assert shard_rows() == NOTHING


def test_declared_oversized_content_length_is_413_before_reading(client, video):
    resp = raw_put(client, "vid-1", VALID, CONTENT_LENGTH=str(django_settings.API_MAX_BODY_BYTES + 1))

    assert_error(resp, 413, "payload_too_large")
    assert shard_rows() == NOTHING


@pytest.mark.parametrize("accept", ["text/html", "text/html,application/xhtml+xml,*/*;q=0.8", "*/*"])
def test_errors_stay_specific_json_whatever_the_accept_header(api, client, video, accept):
    bad = raw_put(client, "vid-1", _json(desiredState="TOGGLE"), HTTP_ACCEPT=accept)
    assert_error(bad, 400, "invalid_desired_state")

    anon = raw_put(api.anonymous(), "vid-1", VALID, HTTP_ACCEPT=accept)
    assert_error(anon, 401, "not_authenticated")
    assert anon["WWW-Authenticate"].startswith("Token")

    missing = raw_put(client, "nope", VALID, key="op-2", HTTP_ACCEPT=accept)
    assert_error(missing, 404, "video_not_found")

    wrong_method = client.post("/v1/videos/vid-1/like-relation", HTTP_ACCEPT=accept)
    assert_error(wrong_method, 405, "method_not_allowed")
    assert "PUT" in wrong_method["Allow"]
    assert shard_rows() == NOTHING


def test_rate_limit_with_html_accept_keeps_retry_after(settings, client, video):
    settings.RATE_LIMIT_USER_BURST = 1
    settings.RATE_LIMIT_USER_RATE = 0.001
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200

    resp = raw_put(client, "vid-1", VALID, key="op-2", HTTP_ACCEPT="text/html")

    data = assert_error(resp, 429, "rate_limited")
    assert int(resp["Retry-After"]) >= 1
    assert data["currentRelation"] == {"state": "LIKED", "relationVersion": 1}


def test_unacceptable_accept_header_is_406_json_and_writes_nothing(client, video):
    resp = raw_put(client, "vid-1", VALID, HTTP_ACCEPT="application/xml")

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
