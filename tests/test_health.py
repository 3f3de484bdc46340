"""Liveness, readiness (issue 2 §1, issue 10 §5: anyone sees the status, the metrics token also the
per-check detail; probes on short-lived connections of their own, all at once) and the published API
description. /metrics is in test_metrics_auth.py."""

from __future__ import annotations

import json
import re
import threading

import psycopg
import pytest
import yaml
from django.db import connections

from likes_project import health
from likes_project.redis_client import reset_clients
from tests.metrics_helpers import METRICS_TOKEN

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]

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


def _ready(client, *, token: str | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    resp = client.get("/readyz", **headers)
    return resp, json.loads(resp.content)


@pytest.fixture
def metrics_token(settings):
    settings.METRICS_TOKEN = METRICS_TOKEN
    return METRICS_TOKEN


def test_readyz_without_the_token_shows_only_the_status(client, metrics_token):
    resp, body = _ready(client)

    assert resp.status_code == 200, resp.content
    assert body == {"status": "ok"}
    assert _ready(client, token="not-the-token")[1] == {"status": "ok"}


def test_readyz_with_the_token_lists_every_database_alias_and_redis_as_ok(client, metrics_token):
    resp, body = _ready(client, token=metrics_token)

    assert resp.status_code == 200, resp.content
    assert body["status"] == "ok"
    assert set(body["checks"]) >= EXPECTED_CHECKS
    assert all(value == "ok" for value in body["checks"].values()), body
    assert body["failing"] == []


def test_readyz_is_degraded_naming_redis_when_redis_is_unreachable(client, unreachable_redis, metrics_token):
    unreachable_redis()

    resp, body = _ready(client, token=metrics_token)

    assert resp.status_code == 200, resp.content  # reads fall back to the databases (issue 4 §5)
    assert body["status"] == "degraded"
    assert body["failing"] == ["redis:cache", "redis:streams"]
    # The exception's class, never its message (which may name hosts or credentials).
    assert re.fullmatch(r"fail: \w+( at [\w.]+:\d+)?", body["checks"]["redis:cache"]), body
    assert re.fullmatch(r"fail: \w+( at [\w.]+:\d+)?", body["checks"]["redis:streams"]), body
    assert all(body["checks"][name] == "ok" for name in EXPECTED_CHECKS if name.startswith("db:"))
    assert _ready(client)[1] == {"status": "degraded"}


@pytest.mark.parametrize(("cache", "streams", "failing"), [
    (True, False, ["redis:cache"]),
    (False, True, ["redis:streams"]),
])
def test_readyz_names_only_the_failing_redis_role(client, unreachable_redis, metrics_token, cache, streams, failing):
    unreachable_redis(cache=cache, streams=streams)

    resp, body = _ready(client, token=metrics_token)

    assert resp.status_code == 200
    assert body["status"] == "degraded" and body["failing"] == failing


def test_readyz_recovers_when_redis_answers_again(client, settings, unreachable_redis):
    saved = settings.REDIS_URL, settings.REDIS_STREAMS_URL
    unreachable_redis()
    assert _ready(client)[1]["status"] == "degraded"

    settings.REDIS_URL, settings.REDIS_STREAMS_URL = saved
    reset_clients()

    assert _ready(client)[1]["status"] == "ok"


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_readyz_is_503_failed_naming_a_database_alias_that_does_not_answer(client, metrics_token):
    conn = connections["cnt_01"]
    saved = conn.settings_dict["PORT"]
    conn.close()
    conn.settings_dict["PORT"] = "1"  # a closed port
    try:
        anonymous = _ready(client)
        detailed = _ready(client, token=metrics_token)
    finally:
        conn.close()
        conn.settings_dict["PORT"] = saved
    assert anonymous[0].status_code == 503
    assert anonymous[1] == {"status": "failed"}
    resp, body = detailed
    assert resp.status_code == 503
    assert body["status"] == "failed" and body["failing"] == ["db:cnt_01"]
    assert body["checks"]["db:cnt_01"] == "fail: OperationalError"  # no message: it names host and port


def test_the_database_probe_opens_its_own_connection_with_short_timeouts():
    info = health.probe_conninfo("default")
    assert info["connect_timeout"] == 1
    assert info["dbname"] == connections["default"].settings_dict["NAME"]

    # A real probe connection: its statement timeout is the probe's, not the 5 s of Django's connections.
    with psycopg.connect(autocommit=True, **info) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "500ms"
        assert conn.execute("SHOW application_name").fetchone()[0] == "likes-readyz"


def test_readyz_probes_every_alias_at_once(client, monkeypatch, metrics_token):
    """Every database probe waits for all the others before it connects: run one after another, the
    first would still be waiting at the readiness deadline and readyz would say `failed`."""
    real_probe = health._probe_database
    barrier = threading.Barrier(len(list(connections)), timeout=10)  # the timeout only ends a broken run's threads
    threads = set()

    def probe_after_the_others(conninfo):
        threads.add(threading.current_thread().name)
        barrier.wait()
        real_probe(conninfo)

    monkeypatch.setattr(health, "_probe_database", probe_after_the_others)

    resp, body = _ready(client, token=metrics_token)

    assert body["status"] == "ok", body
    assert len(threads) == len(list(connections))
    assert resp.status_code == 200


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
    # The public document leaves the video service's endpoints out (likes_project.schema, issue 10).
    assert not any(p.startswith("/internal/") for p in paths)
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
