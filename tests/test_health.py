"""Liveness, readiness and the published API description (issue 2 §1)."""

from __future__ import annotations

import json

import pytest
import yaml

from likes_project.redis_client import reset_clients

pytestmark = pytest.mark.django_db(databases="__all__")

EXPECTED_CHECKS = {"db:default", "db:rel_00", "db:rel_01", "db:cnt_00", "db:cnt_01", "redis:cache", "redis:streams"}
UNREACHABLE = "redis://127.0.0.1:1/0"


@pytest.fixture
def unreachable_redis(settings):
    """Point one or both Redis roles at a closed port; the process-wide clients are rebuilt around it."""

    def point(*, cache: bool = True, streams: bool = True):
        if cache:
            settings.REDIS_URL = UNREACHABLE
        if streams:
            settings.REDIS_STREAMS_URL = UNREACHABLE
        reset_clients()

    reset_clients()
    try:
        yield point
    finally:
        reset_clients()  # the settings fixture restores the URLs; the next client is built from them


def test_healthz_is_ok(client):
    resp = client.get("/healthz")

    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("application/json")
    assert json.loads(resp.content) == {"status": "ok"}


def test_readyz_lists_every_database_alias_and_redis_as_ok(client):
    resp = client.get("/readyz")

    assert resp.status_code == 200, resp.content
    body = json.loads(resp.content)
    assert body["status"] == "ready"
    assert set(body["checks"]) >= EXPECTED_CHECKS
    assert all(value == "ok" for value in body["checks"].values()), body


def test_readyz_is_degraded_naming_redis_when_redis_is_unreachable(client, unreachable_redis):
    unreachable_redis()

    resp = client.get("/readyz")

    assert resp.status_code == 200, resp.content  # reads fall back to the databases (issue 4 §5)
    body = json.loads(resp.content)
    assert body["status"] == "degraded"
    assert body["degraded"] == ["redis:cache", "redis:streams"]
    assert body["checks"]["redis:cache"].startswith("fail")
    assert body["checks"]["redis:streams"].startswith("fail")
    assert all(body["checks"][name] == "ok" for name in EXPECTED_CHECKS if name.startswith("db:"))


@pytest.mark.parametrize(("cache", "streams", "failing"), [
    (True, False, ["redis:cache"]),
    (False, True, ["redis:streams"]),
])
def test_readyz_names_only_the_failing_redis_role(client, unreachable_redis, cache, streams, failing):
    unreachable_redis(cache=cache, streams=streams)

    resp = client.get("/readyz")

    assert resp.status_code == 200
    assert json.loads(resp.content)["degraded"] == failing


def test_readyz_recovers_when_redis_answers_again(client, settings, unreachable_redis):
    saved = settings.REDIS_URL, settings.REDIS_STREAMS_URL
    unreachable_redis()
    assert json.loads(client.get("/readyz").content)["status"] == "degraded"

    settings.REDIS_URL, settings.REDIS_STREAMS_URL = saved
    reset_clients()

    assert json.loads(client.get("/readyz").content)["status"] == "ready"


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_readyz_is_503_naming_a_database_alias_that_does_not_answer(client):
    from django.db import connections

    conn = connections["cnt_01"]
    saved = conn.settings_dict["PORT"]
    conn.close()
    conn.settings_dict["PORT"] = "1"
    try:
        resp = client.get("/readyz")
    finally:
        conn.close()
        conn.settings_dict["PORT"] = saved
    assert resp.status_code == 503
    body = json.loads(resp.content)
    assert body["code"] == "not_ready" and body["failing"] == ["db:cnt_01"]


def test_metrics_is_plain_text(client):
    resp = client.get("/metrics")

    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/plain")


def _schema_paths(document: dict) -> dict:
    assert str(document["openapi"]).startswith("3.")
    return document["paths"]


def test_schema_is_an_openapi_document_with_the_like_relation_path(client):
    resp = client.get("/v1/schema")

    assert resp.status_code == 200
    assert "openapi" in resp["Content-Type"]
    paths = _schema_paths(yaml.safe_load(resp.content))
    like = next(p for p in paths if p.startswith("/v1/videos/") and p.endswith("/like-relation"))
    assert {"get", "put"} <= set(paths[like])
    assert not {"post", "delete", "patch"} & set(paths[like])
    headers = [p["name"] for p in paths[like]["put"].get("parameters", []) if p["in"] == "header"]
    assert "Idempotency-Key" in headers
    assert any(p.startswith("/v1/like-operations/") for p in paths)
    assert any(p.startswith("/internal/v1/videos/") for p in paths)
    assert not any("toggle" in p for p in paths)


def test_schema_is_also_served_as_json(client):
    resp = client.get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert resp.status_code == 200
    paths = _schema_paths(json.loads(resp.content))
    assert any(p.endswith("/like-relation") for p in paths)


def test_docs_are_an_html_page_pointing_at_the_schema(client):
    resp = client.get("/v1/docs")

    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/html")
    page = resp.content.decode()
    assert "swagger" in page.lower()
    assert "/v1/schema" in page
