"""What a client developer trips on at the HTTP level (issue 30 §3): a chunked body, a wrong token, what OPTIONS
and the schema advertise, HEAD, and a video push naming an author that does not exist. The chunked bodies and
HEAD go through a real gunicorn started as the Procfile starts it (the Django test client always sends a length
and strips HEAD bodies itself); the rest through the test client. Each answer is the JSON envelope with its
code, and nothing is written."""

from __future__ import annotations

import json

import httpx
import pytest
from django.test import RequestFactory
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from likes_project.audit.models import AuditRecord
from likes_project.middleware import HttpProtocolMiddleware
from relations.models import VideoSnapshot
from tests import drills
from tests.relations.helpers import assert_error, body_of

pytestmark = [pytest.mark.topology_independent]
LIVE = pytest.mark.django_db(databases="__all__", transaction=True)
DB = pytest.mark.django_db(databases="__all__")
BODY_BYTES = 2 * 1024 * 1024  # a 2 MB body, far past API_MAX_BODY_BYTES


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """One gunicorn for the module (1 worker), on this run's databases."""
    with drills.gunicorn_serving(drills.Gunicorn(tmp_path_factory.mktemp("web"), 1), workers=1) as server:
        yield server


@pytest.fixture
def liker(make_user, make_video):
    """A user with a token, and a public video they may like."""
    user = make_user()
    make_video("proto-v", make_user())
    return user, Token.objects.get_or_create(user=user)[0].key


def _chunks(data: bytes, size: int = 1000):
    """A generator body: httpx sends it with Transfer-Encoding: chunked and no Content-Length."""
    for i in range(0, len(data), size):
        yield data[i:i + size]


@LIVE
def test_a_chunked_body_is_read_and_one_past_the_limit_is_413_with_nothing_written(web, liker):
    _user, key = liker
    headers = {"Authorization": f"Token {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=web.url(""), headers=headers, timeout=30) as http:
        liked = http.put("/v1/videos/proto-v/like-relation", headers={"Idempotency-Key": "proto-1"},
                         content=_chunks(json.dumps({"desiredState": "LIKED"}).encode(), 5))
        assert liked.request.headers.get("Transfer-Encoding") == "chunked"
        assert "Content-Length" not in liked.request.headers
        assert liked.status_code == 200, liked.text
        assert (liked.json()["state"], liked.json()["relationVersion"]) == ("LIKED", 1)
        batch = http.post("/v1/like-relations/batch-query", content=_chunks(b'{"videoIds": ["proto-v"]}', 4))
        assert batch.status_code == 200 and batch.json()["items"][0]["myState"] == "LIKED", batch.text

        padded = json.dumps({"desiredState": "UNLIKED", "pad": "x" * BODY_BYTES}).encode()
        big = http.put("/v1/videos/proto-v/like-relation", headers={"Idempotency-Key": "proto-2"},
                       content=_chunks(padded, 64 * 1024))
        assert big.status_code == 413 and big.json()["code"] == "payload_too_large", big.text
        # The same body with a length is refused the same way, before it is read.
        sized = http.put("/v1/videos/proto-v/like-relation", headers={"Idempotency-Key": "proto-3"}, content=padded)
        assert sized.status_code == 413 and sized.json()["code"] == "payload_too_large", sized.text
        after = http.get("/v1/videos/proto-v/like-relation").json()
    assert (after["state"], after["relationVersion"]) == ("LIKED", 1)  # neither refused command wrote anything


@LIVE
def test_head_answers_the_get_headers_without_a_body_and_gunicorn_logs_nothing_about_it(web, liker):
    _user, key = liker
    auth = {"Authorization": f"Token {key}"}
    with httpx.Client(base_url=web.url(""), timeout=30) as http:
        for path, headers in (("/healthz", {}), ("/v1/videos/proto-v/like-count", auth), ("/v1/nowhere", {})):
            got, head = http.get(path, headers=headers), http.head(path, headers=headers)
            assert head.status_code == got.status_code, path
            assert head.content == b"" and got.content, path
            assert head.headers["Content-Length"] == str(len(got.content)), path
    assert "body bytes on a no-body response" not in web.log_path.read_text()


@LIVE
def test_the_api_paths_take_their_own_chain_and_keep_every_contract_of_the_full_one(web, liker, make_user):
    """Through gunicorn the API paths go through API_MIDDLEWARE (D136): no X-Frame-Options or CSRF cookie on a JSON
    answer, while the console's pages keep them. What the API needs is still there: the request id, the JSON error
    envelope of an unknown path, an anonymous 401 with its challenge, and a console session's access to /v1/ with
    DRF's own CSRF check on a write."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    _user, key = liker
    with httpx.Client(base_url=web.url(""), timeout=30) as http:
        api = http.get("/v1/videos/proto-v/like-count", headers={"Authorization": f"Token {key}"})
        assert api.status_code == 200 and api.headers["X-Request-ID"]
        assert "X-Frame-Options" not in api.headers and "csrftoken" not in api.headers.get("Set-Cookie", "")
        console = http.get("/admin/login/")
        assert console.headers["X-Frame-Options"] == "DENY" and "csrftoken" in console.headers["Set-Cookie"]
        nowhere = http.get("/v1/nowhere")
        assert (nowhere.status_code, nowhere.json()["code"]) == (404, "not_found")
        anonymous = http.get("/v1/me/likes")
        assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"]

        staff = make_user()
        session = SessionStore()
        session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(staff.pk), settings.AUTHENTICATION_BACKENDS[0]
        session[HASH_SESSION_KEY] = staff.get_session_auth_hash()
        session.create()
        cookies = {settings.SESSION_COOKIE_NAME: session.session_key}
        mine = http.get("/v1/me/likes", cookies=cookies)
        assert mine.status_code == 200, mine.text
        write = http.put("/v1/videos/proto-v/like-relation", cookies=cookies, json={"desiredState": "LIKED"},
                         headers={"Idempotency-Key": "session-1"})
        assert write.status_code == 403 and "CSRF" in write.json()["message"], write.text


def test_a_chunked_body_where_the_server_does_not_end_the_stream_is_411_not_a_hang():
    """Django's development server hands over the raw socket: reading a chunked body there would block."""
    request = RequestFactory().put("/v1/videos/v/like-relation", data=b"", content_type="application/json",
                                   HTTP_TRANSFER_ENCODING="chunked")
    request.META.pop("CONTENT_LENGTH", None)
    answer = HttpProtocolMiddleware(lambda r: pytest.fail("the view must not run"))(request)
    assert (answer.status_code, json.loads(answer.content)["code"]) == (411, "length_required")


@DB
@pytest.mark.parametrize("header", ["Token wrong-key", "Bearer wrong-key", "token wrong-key", "Token", "wrong-key",
                                    "Token two words"])
def test_a_wrong_token_is_invalid_token_whatever_its_shape(header):
    resp = APIClient().put("/v1/videos/proto-v/like-relation", data=b'{"desiredState": "LIKED"}',
                           content_type="application/json", HTTP_AUTHORIZATION=header, HTTP_IDEMPOTENCY_KEY="k-1")
    data = assert_error(resp, 401, "authentication_failed")
    assert data["message"] == "Invalid token."


@DB
def test_no_token_is_not_authenticated_and_a_bearer_token_is_a_token(liker):
    _user, key = liker
    client = APIClient()
    assert_error(client.get("/v1/videos/proto-v/like-relation"), 401, "not_authenticated")
    # A proxy's own Basic credentials are not a wrong token of ours.
    assert_error(client.get("/v1/videos/proto-v/like-relation", HTTP_AUTHORIZATION="Basic Zm9vOmJhcg=="),
                 401, "not_authenticated")
    for scheme in ("Token", "Bearer"):
        ok = client.get("/v1/videos/proto-v/like-relation", HTTP_AUTHORIZATION=f"{scheme} {key}")
        assert ok.status_code == 200 and body_of(ok)["state"] == "UNLIKED"


@DB
def test_options_advertises_json_only(liker):
    _user, key = liker
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    for path in ("/v1/videos/proto-v/like-relation", "/v1/like-relations/batch-query", "/v1/me/privacy"):
        meta = body_of(client.options(path))
        assert meta["parses"] == ["application/json"], (path, meta["parses"])


@DB
def test_the_schema_names_its_request_bodies_once():
    schema = APIClient().get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    names = set(json.loads(schema.content)["components"]["schemas"])
    assert {"LikeRelationPutRequest", "BatchQueryRequest"} <= names
    assert not [n for n in names if n.endswith("RequestRequest")], names


@DB
def test_a_video_push_naming_an_author_who_does_not_exist_is_refused_and_writes_nothing(service, make_user):
    author = make_user()
    audits = AuditRecord.objects.count()
    for body, code in (({"authorId": author.pk + 10_000}, "unknown_author"),
                       ({"authorUsername": "nobody-at-all"}, "unknown_author")):
        resp = service.put("/internal/v1/videos/proto-ghost", data=json.dumps({**body, "version": 1}),
                           content_type="application/json")
        assert_error(resp, 400, code)
    assert not VideoSnapshot.objects.filter(video_id="proto-ghost").exists()
    assert AuditRecord.objects.count() == audits
    # The same push with the real author is taken.
    ok = service.put("/internal/v1/videos/proto-ghost", data=json.dumps({"authorId": author.pk, "version": 1}),
                     content_type="application/json")
    assert ok.status_code == 200 and body_of(ok)["authorId"] == author.pk
