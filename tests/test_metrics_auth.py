"""/metrics wants the metrics token (issue 10 §4): `Authorization: Bearer $METRICS_TOKEN`, unless
METRICS_PUBLIC; with neither configured it is refused outright. Errors are the JSON envelope."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

TOKEN = "metrics-token-for-the-auth-tests"


@pytest.fixture
def configured(settings):
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_PUBLIC = False


def _get(client, authorization: str | None = None):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization is not None else {}
    return client.get("/metrics", **headers)


def test_the_right_token_is_let_in(client, configured):
    resp = _get(client, f"Bearer {TOKEN}")

    assert resp.status_code == 200, resp.content
    assert resp["Content-Type"].startswith("text/plain")
    assert "# TYPE" in resp.content.decode()


def test_the_bearer_scheme_is_case_insensitive(client, configured):
    assert _get(client, f"bearer {TOKEN}").status_code == 200


def test_no_token_is_401_not_authenticated_with_a_bearer_challenge(client, configured):
    for authorization in (None, "", "Bearer", "Bearer ", f"Token {TOKEN}", TOKEN):
        resp = _get(client, authorization)

        assert resp.status_code == 401, authorization
        assert resp["Content-Type"].startswith("application/json")
        assert json.loads(resp.content)["code"] == "not_authenticated"
        assert resp["WWW-Authenticate"].startswith("Bearer")


def test_a_wrong_token_is_401_authentication_failed(client, configured):
    for wrong in ("nope", TOKEN[:-1], TOKEN + "x", TOKEN.upper()):
        resp = _get(client, f"Bearer {wrong}")

        assert resp.status_code == 401, wrong
        body = json.loads(resp.content)
        assert body["code"] == "authentication_failed"
        assert TOKEN not in resp.content.decode()
        assert 'error="invalid_token"' in resp["WWW-Authenticate"]


def test_without_a_configured_token_metrics_are_refused_even_with_an_empty_bearer(client, settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_PUBLIC = False
    for authorization in (None, "Bearer ", "Bearer anything"):
        resp = _get(client, authorization)

        assert resp.status_code == 403, authorization
        body = json.loads(resp.content)
        assert body["code"] == "metrics_disabled" and body["message"]


@pytest.mark.parametrize("token", ["", TOKEN])
def test_metrics_public_opens_it_to_anyone(client, settings, token):
    settings.METRICS_TOKEN = token
    settings.METRICS_PUBLIC = True

    resp = _get(client)

    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/plain")


def test_metrics_only_answers_reads(client, configured):
    resp = client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")

    assert resp.status_code == 405
    assert resp["Content-Type"].startswith("application/json")
