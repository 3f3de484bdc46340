"""Structured logs (issue 10, likes_project.logs): every line is one JSON object carrying its request's
`request_id` (echoed as X-Request-ID), the command's `operation_id` / `event_id`, a consumer's entry; no
credential ever reaches a line (SEC-6); user input cannot break a line; nothing leaks between requests."""

from __future__ import annotations

import json
import logging
import re
import uuid

import pytest
import structlog
from celery import shared_task
from django.conf import settings
from django.db import connections
from django.test import Client, RequestFactory
from django.utils.log import log_response

from counting.services.projection import CountProjector
from likes_project import logs
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_partition
from likes_project.eventlog.models import DeadLetter
from likes_project.middleware import JsonErrorMiddleware, error_response
from relations.models import OutboxEvent
from tests.factories import put_like, redis_unreachable
from tests.relations.helpers import SERVICE_TOKEN, push_video, service_client

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

HEX32 = re.compile(r"[0-9a-f]{32}")


class Capture(logging.Handler):
    """A root handler with the formatter the configured root handler has: each record as the line it
    becomes on stderr."""

    def __init__(self, formatter: logging.Formatter):
        super().__init__(logging.DEBUG)
        self.setFormatter(formatter)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))

    def records(self) -> list[dict]:
        """Every line parsed; fails on any line that is not exactly one JSON object."""
        out = []
        for line in self.lines:
            assert "\n" not in line, line
            obj = json.loads(line)
            assert isinstance(obj, dict), line
            out.append(obj)
        return out


def _configured_formatter() -> logging.Formatter:
    structured = structlog.stdlib.ProcessorFormatter
    (handler,) = [h for h in logging.getLogger().handlers if isinstance(h.formatter, structured)]
    return handler.formatter


@pytest.fixture
def capture():
    """Capture what the root handler writes, at DEBUG (Django's loggers included)."""
    root = logging.getLogger()
    handler = Capture(_configured_formatter())
    saved = {name: logging.getLogger(name).level for name in ("", "django", "django.request", "django.db.backends")}
    root.addHandler(handler)
    for name in saved:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        structlog.contextvars.clear_contextvars()


@pytest.fixture
def console_capture():
    root = logging.getLogger()
    handler = Capture(logs.build_formatter("console"))
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def _token_client(user) -> tuple[Client, str]:
    from rest_framework.authtoken.models import Token

    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}"), token.key


def _lines_of(records: list[dict], request_id: str) -> list[dict]:
    return [r for r in records if r.get("request_id") == request_id]


# --- (a) every line is JSON and names its request -------------------------------------------------------


def test_every_line_of_a_request_is_json_and_carries_the_request_id_of_the_response(capture, make_user,
                                                                                    make_video, settings):
    user = make_user()
    make_video("vid-log", make_user())
    client, _ = _token_client(user)

    with redis_unreachable(settings):  # the rules fail open and say so: lines from inside the request
        resp = put_like(client, "vid-log", "LIKED", "op-log-a")
    assert resp.status_code == 200, resp.content

    request_id = resp["X-Request-ID"]
    assert HEX32.fullmatch(request_id)
    records = capture.records()
    assert len(records) >= 3  # the limits' warnings and the access line at least
    assert {r.get("request_id") for r in records} == {request_id}
    for r in records:
        assert {"timestamp", "level", "logger", "event"} <= set(r)
        assert r["timestamp"].endswith("Z")
    access = [r for r in records if r["logger"] == "likes_project.access"]
    assert len(access) == 1
    assert access[0] | {"duration_ms": 0} == access[0] | {
        "event": "request", "method": "PUT", "path": "/v1/videos/vid-log/like-relation", "status": 200,
        "user_id": user.pk, "duration_ms": 0,
    }


def test_a_sane_incoming_request_id_is_kept_and_an_insane_one_replaced(capture, make_user):
    client, _ = _token_client(make_user())
    sane = "edge-7f3a.b_c:42-Z"
    assert client.get("/v1/videos/nope/like-count", HTTP_X_REQUEST_ID=sane)["X-Request-ID"] == sane
    assert client.get("/v1/videos/nope/like-count", HTTP_X_REQUEST_ID="a" * 128)["X-Request-ID"] == "a" * 128

    for insane in ("a" * 129, "abc\ndef", "abc def", "réq-1", "", "a;b"):
        got = client.get("/v1/videos/nope/like-count", HTTP_X_REQUEST_ID=insane)["X-Request-ID"]
        assert HEX32.fullmatch(got), (insane, got)
    assert {r["request_id"] for r in capture.records() if r["logger"] == "likes_project.access"} >= {sane, "a" * 128}


def test_error_envelopes_carry_the_request_id_too(capture):
    anonymous = Client()
    unknown = anonymous.get("/v1/nothing-here", HTTP_ACCEPT="text/html")  # JsonErrorMiddleware's envelope
    unauthenticated = anonymous.get("/v1/me/likes")
    too_big = anonymous.put("/v1/videos/v/like-relation", data=b"x", content_type="application/json",
                            CONTENT_LENGTH=str(settings.API_MAX_BODY_BYTES + 1))

    for resp, status in ((unknown, 404), (unauthenticated, 401), (too_big, 413)):
        assert resp.status_code == status
        assert resp["Content-Type"].startswith("application/json")
        assert HEX32.fullmatch(resp["X-Request-ID"])
        lines = {r["logger"]: r for r in _lines_of(capture.records(), resp["X-Request-ID"])}
        assert lines["likes_project.access"]["status"] == status
        # Django logs a failed request after the middleware chain has returned: still in its context.
        assert lines["django.request"]["status_code"] == status


# --- (b) the command's operation and event, a consumer's entry ------------------------------------------


def test_the_like_command_binds_its_operation_and_then_its_event(capture, make_user, make_video, settings):
    user = make_user()
    make_video("vid-op", make_user())
    client, _ = _token_client(user)

    with redis_unreachable(settings):
        resp = put_like(client, "vid-op", "LIKED", "op-log-b")
    assert resp.status_code == 200, resp.content

    event_id = _event_id_of(user.pk, "vid-op")
    mine = [r for r in capture.records() if r["logger"] == "relations.services.limits"
            and r["event"].startswith("rate limit relation")]
    # The peek before the transaction, and the charge after it: both inside the command.
    assert len(mine) == 2, mine
    assert all(r["operation_id"] == "op-log-b" and r["user_id"] == user.pk for r in mine)
    assert "event_id" not in mine[0] and mine[1]["event_id"] == event_id
    # The command's fields end with the command: the access line after the view has neither.
    (access,) = [r for r in capture.records() if r["logger"] == "likes_project.access"]
    assert "operation_id" not in access and "event_id" not in access
    assert logs.context() == {}


def _event_id_of(user_id: int, video_id: str) -> str:
    from relations import routing

    row = OutboxEvent.objects.using(routing.alias_for_user(user_id)).get(aggregate_key=f"{user_id}:{video_id}")
    return str(row.event_id)


def test_a_consumer_binds_the_entry_and_event_it_works_on(capture):
    poison = {"eventId": "evt-poison-" + uuid.uuid4().hex[:8], "aggregateKey": "1:vid-poison", "eventType": "BOGUS"}
    ((stream_key, entry_id),) = streams.publish_pipeline([poison])
    partition = streams.partition_of(stream_key)

    report = consume_partition(CountProjector(), partition=partition)

    assert report.dead_lettered == 1 and DeadLetter.objects.filter(entry_id=entry_id).exists()
    (line,) = [r for r in capture.records() if r["event"].startswith("dead-lettered count")]
    assert line["event_id"] == poison["eventId"]
    assert (line["entry_id"], line["consumer"], line["partition"]) == (entry_id, "count", partition)
    assert logs.context() == {}  # the pass leaves no context behind


# --- Celery: task context, and the request id carried in the message ------------------------------------


@shared_task(name="tests.logging_probe", ignore_result=True)
def _probe() -> dict:
    """A task that logs one line and returns the log context it ran with."""
    logging.getLogger("tests.logging_probe").info("probe ran")
    return logs.context()


@pytest.fixture
def probe_task():
    return _probe


def test_a_task_binds_its_id_name_and_the_enqueuing_request_id(capture, probe_task):
    structlog.contextvars.bind_contextvars(leftover="from before")

    result = probe_task.apply(task_id="task-log-1", headers={"request_id": "rid-from-web"})

    assert result.get() == {"task_id": "task-log-1", "task_name": "tests.logging_probe",
                            "request_id": "rid-from-web"}
    (line,) = [r for r in capture.records() if r["event"] == "probe ran"]
    assert (line["task_id"], line["task_name"], line["request_id"]) == ("task-log-1", "tests.logging_probe",
                                                                        "rid-from-web")
    assert "leftover" not in line
    assert logs.context() == {}  # cleared after the task
    assert probe_task.apply(task_id="task-log-2", headers={"request_id": "bad\nid"}).get() == {
        "task_id": "task-log-2", "task_name": "tests.logging_probe"}


def test_a_task_published_inside_a_request_context_carries_its_request_id(capture, probe_task):
    """Through the real broker: the header travels in the message, and the worker's request (built
    from the message as the worker builds it) gives the task its context."""
    from celery.worker.request import Request

    from likes_project.celery import app
    from likes_project.redis_client import stream_redis

    queue = f"{settings.LIKES_REDIS_PREFIX}:logging-probe"
    try:
        with logs.bound(request_id="rid-published"):
            probe_task.apply_async(queue=queue, task_id="task-log-3", retry=False)
        probe_task.apply_async(queue=queue, task_id="task-log-4", retry=False)  # outside a request
        with app.connection_for_read() as conn:
            simple = conn.SimpleQueue(queue)
            try:
                for _ in range(2):
                    Request(simple.get(timeout=5), app=app, task=probe_task).execute()
            finally:
                simple.close()
    finally:
        stream_redis().delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    ran = {r["task_id"]: r for r in capture.records() if r["event"] == "probe ran"}
    assert ran["task-log-3"]["request_id"] == "rid-published"
    assert "request_id" not in ran["task-log-4"]
    assert ran["task-log-3"]["task_name"] == "tests.logging_probe"


# --- (c) SEC-6: no credential in any line ----------------------------------------------------------------


def test_credentials_logged_as_fields_or_text_are_masked(capture):
    key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
    session_key = "s3ss10nk3yabcdefghijklmnop1234"
    csrf = "Csrf0123456789abcdefABCDEF0123456789abcdefABCDEF012345678901"
    logging.getLogger("tests.sec6").error(
        "dump Authorization: Token %s and cookie header", key,
        extra={
            "headers": {"Authorization": f"Token {key}", "Cookie": f"sessionid={session_key}; csrftoken={csrf}",
                        "X-Video-Service-Token": SERVICE_TOKEN, "Accept": "application/json"},
            "meta": {"HTTP_AUTHORIZATION": f"Bearer {SERVICE_TOKEN}", "QUERY_STRING": f"token={key}&limit=5"},
            "password": "hunter2hunter2", "api_key": key, "csrf_token": csrf,
            "nested": [{"deep": {"sessionid": session_key}}],
            "note": f"called with Bearer {SERVICE_TOKEN} and url /x?access_token={key}&y=1",
            "upstream": "sent Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig and Basic dXNlcjpwYXNzd29yZA==",
        },
    )
    structlog.get_logger("tests.sec6").warning("native", authorization=f"Token {key}", secret="x" * 12,
                                               text=f"sessionid={session_key}; path=/")
    records = capture.records()
    text = "\n".join(capture.lines)
    for secret in (key, session_key, csrf, SERVICE_TOKEN, "hunter2hunter2"):
        assert secret not in text, secret
    first, second = records
    assert first["headers"] == {"Authorization": "[REDACTED]", "Cookie": "[REDACTED]",
                                "X-Video-Service-Token": "[REDACTED]", "Accept": "application/json"}
    assert first["meta"]["QUERY_STRING"] == "token=[REDACTED]&limit=5"
    assert first["password"] == first["api_key"] == first["csrf_token"] == "[REDACTED]"
    assert first["event"] == "dump Authorization: [REDACTED]"
    assert first["upstream"] == "sent Bearer [REDACTED] and Basic [REDACTED]"
    assert (second["authorization"], second["secret"]) == ("[REDACTED]", "[REDACTED]")
    assert second["text"] == "sessionid=[REDACTED]; path=/"
    # Prose that merely mentions tokens or services is left alone.
    logging.getLogger("tests.sec6").warning("token bucket refilled; video service unavailable")
    assert capture.records()[-1]["event"] == "token bucket refilled; video service unavailable"


def test_real_requests_at_debug_level_never_log_a_credential(capture, make_user, make_video, settings):
    """Token, session cookie and the video service's Bearer token on real requests, with SQL logged
    (its parameters hold the token and session keys), Redis down (warnings) and failing requests."""
    author, user = make_user(), make_user()
    make_video("vid-sec", author)
    token_client, key = _token_client(user)
    session_client = Client()
    session_client.force_login(user)
    session_key = session_client.cookies[settings.SESSION_COOKIE_NAME].value
    csrf = "Csrf0123456789abcdefABCDEF0123456789abcdefABCDEF012345678901"
    session_client.cookies[settings.CSRF_COOKIE_NAME] = csrf
    service = service_client()
    wrong_service = service_client(token="wrong-service-token-0123456789")
    for alias in connections:
        connections[alias].force_debug_cursor = True
    try:
        assert put_like(token_client, "vid-sec", "LIKED", "op-sec-1").status_code == 200
        assert token_client.get("/v1/videos/vid-sec/like-count").status_code == 200
        assert session_client.get("/v1/me/likes").status_code == 200
        assert session_client.get("/admin/").status_code in (200, 302)
        assert push_video(service, "vid-sec-2", authorId=author.pk, visibility="public", version=1).status_code == 200
        assert push_video(wrong_service, "vid-sec-3", authorId=author.pk, version=1).status_code in (401, 403)
        assert Client(HTTP_AUTHORIZATION=f"Token {key[::-1]}").get("/v1/me/likes").status_code == 401
        with redis_unreachable(settings):
            assert put_like(token_client, "vid-sec", "UNLIKED", "op-sec-2").status_code == 200
            assert session_client.get("/v1/me/likes?cursor=broken").status_code == 400
    finally:
        for alias in connections:
            connections[alias].force_debug_cursor = False

    # The 500 path of the middleware and Django's own error line, with the credentials on the request.
    request = RequestFactory().get("/v1/videos/x/like-count", HTTP_AUTHORIZATION=f"Token {key}",
                                   HTTP_COOKIE=f"sessionid={session_key}", HTTP_X_SERVICE_TOKEN=SERVICE_TOKEN)
    try:
        raise RuntimeError(f"boom for Token {key}")
    except RuntimeError as exc:
        response = JsonErrorMiddleware(lambda r: None).process_exception(request, exc)
    assert response.status_code == 500
    log_response("Internal Server Error: %s", request.path, response=error_response(500), request=request)

    records = capture.records()
    assert any(r["logger"] == "django.db.backends" and "authtoken_token" in r["event"] for r in records), \
        "the SQL lines (which carry the token key as a parameter) were not logged: the test proves nothing"
    assert any(r["logger"] == "django.request" and r.get("status_code") == 500 for r in records)
    assert any(r["logger"] == "likes_project.middleware" and "boom for Token [REDACTED]" in r["exception"]
               for r in records)
    text = "\n".join(capture.lines)
    for secret in (key, key[::-1], session_key, csrf, SERVICE_TOKEN, "wrong-service-token-0123456789"):
        assert secret not in text, secret


# --- (d) user input cannot break a line --------------------------------------------------------------------


def test_a_path_with_a_newline_is_logged_on_one_line(capture, console_capture):
    resp = Client().get("/v1/videos/a%0Ab%0D%1B[31m/like-count")
    assert resp.status_code in (401, 404)

    (json_line,) = [r for r in capture.records() if r["logger"] == "likes_project.access"]
    assert json_line["path"] == "/v1/videos/a\nb\r\x1b[31m/like-count"  # JSON escapes it losslessly
    lines = [line for line in console_capture.lines if "/like-count" in line]
    assert len(lines) >= 2  # the access line and Django's 4xx warning (the capture runs at DEBUG)
    for line in lines:
        assert "\n" not in line and "\r" not in line and "\x1b" not in line, line
        assert "/v1/videos/a\\nb\\r\\x1b[31m/like-count" in line
    # Any `%s` of client input in a plain message of ours (Django escapes its own since 5.2.2).
    logging.getLogger("tests.injection").warning("video %s refused", "v-1\n2026-01-01 [info] fake line")
    assert console_capture.lines[-1].count("\n") == 0
    assert "video v-1\\n2026-01-01 [info] fake line refused" in console_capture.lines[-1]
    assert capture.records()[-1]["event"] == "video v-1\n2026-01-01 [info] fake line refused"


def test_the_error_middleware_escapes_the_path_in_its_plain_message(caplog):
    request = RequestFactory().get("/v1/videos/a%0Afake%20line/like-count")
    assert "\n" in request.path
    with caplog.at_level(logging.ERROR, logger="likes_project.middleware"):
        try:
            raise RuntimeError("boom")
        except RuntimeError as exc:
            JsonErrorMiddleware(lambda r: None).process_exception(request, exc)
    (record,) = caplog.records
    assert record.getMessage() == "unhandled error on /v1/videos/a\\nfake line/like-count"


# --- (e) nothing leaks between requests -----------------------------------------------------------------------


def test_no_context_leaks_from_one_request_to_the_next(capture, make_user):
    client, _ = _token_client(make_user())
    first = client.get("/v1/me/likes", HTTP_X_REQUEST_ID="first-request")
    assert first.status_code == 200
    assert logs.context() == {}  # the request's context ends with it

    logs.bind(user_id=999, operation_id="stale-op", request_id="stale")  # as if left over on this thread
    second = Client().get("/v1/me/likes", HTTP_X_REQUEST_ID="second-request")
    assert second.status_code == 401

    records = capture.records()
    (one,) = _lines_of(records, "first-request")
    two = _lines_of(records, "second-request")
    assert "user_id" in one
    assert len(two) == 2  # the access line and Django's 401 warning
    assert all("user_id" not in r and "operation_id" not in r for r in two)
    assert not _lines_of(records, "stale")
    assert logs.context() == {}
