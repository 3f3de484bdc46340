"""Fixtures of the client tests: the package on `sys.path`, a fault-injecting httpx transport in front of the
live server, clients on it, and the server's own view of a relation."""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

CLIENT_SRC = str(Path(__file__).resolve().parents[2] / "clients" / "python")
if CLIENT_SRC in sys.path:
    sys.path.remove(CLIENT_SRC)
sys.path.insert(0, CLIENT_SRC)

# How long a test waits for an event of another thread: generous (a loaded 2-core machine); a wait that
# runs out fails the test, nothing is decided by time.
WAIT = 60.0
BATCH_PATH = "/v1/like-relations/batch-query"
WRITE_BARRIER = {"code": "write_barrier", "message": "writes on the video are held", "retryAfterSeconds": 0}


@dataclass
class Call:
    """One attempt the client made, as the transport saw it: `forwarded` when it reached the server, `status`
    and `answer` (the server's JSON, before any rewrite) once there is an answer."""

    method: str
    path: str
    key: str | None
    body: Any
    forwarded: bool = False
    status: int | None = None
    answer: Any = None

    @property
    def video(self) -> str | None:
        """The video of a like command (`PUT /v1/videos/<id>/like-relation`), else None."""
        parts = self.path.split("/")
        if self.method == "PUT" and len(parts) == 5 and parts[4] == "like-relation":
            return unquote(parts[3])
        return None


@dataclass
class Fault:
    """What the transport does to the next `times` requests `match` accepts:

    - "timeout_before": raise ConnectTimeout, the request never reaches the server;
    - "drop_after": forward (the server commits), run `then`, wait for `release` if given, raise ReadTimeout;
    - "respond": answer `status`/`body`/`headers` itself, the request never reaches the server;
    - "hold_request": wait for `release`, then forward;
    - "hold_response": forward, then wait for `release` before handing the answer over;
    - "rewrite": forward, hand over `rewrite(answer JSON)` instead.

    `reached` is set when the fault fires (for the holds: once the request is held)."""

    match: Callable[[Call], bool]
    action: str
    times: int = 1
    status: int = 503
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    release: threading.Event | None = None
    then: Callable[[], None] | None = None
    rewrite: Callable[[Any], Any] | None = None
    reached: threading.Event = field(default_factory=threading.Event)

    def wait_release(self) -> None:
        assert self.release is not None
        if not self.release.wait(WAIT):
            raise AssertionError(f"{self.action} was never released")


HOP_HEADERS = {"content-length", "content-encoding", "transfer-encoding", "connection"}


class FaultTransport(httpx.BaseTransport):
    """`httpx.HTTPTransport()` with faults (`add`), a log of every attempt (`calls`) and, per video, how many
    like commands were in flight at once at most (`max_in_flight`)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight: Counter[str] = Counter()
        self._cond = threading.Condition()

    def add(self, match: Callable[[Call], bool], action: str, *, hold: bool = False, **kw: Any) -> Fault:
        if action in ("hold_request", "hold_response") or hold:
            kw.setdefault("release", threading.Event())
        fault = Fault(match, action, **kw)
        with self._cond:
            self.faults.append(fault)
        return fault

    def release_all(self) -> None:
        for fault in self.faults:
            if fault.release is not None:
                fault.release.set()

    def puts(self, video_id: str, desired: str | None = None) -> list[Call]:
        """The like commands of `video_id` (of `desired` only, if given), in the order they were sent."""
        match = is_put(video_id, desired)
        with self._cond:
            return [c for c in self.calls if match(c)]

    def batches(self) -> list[Call]:
        with self._cond:
            return [c for c in self.calls if c.method == "POST" and c.path == BATCH_PATH]

    def gets(self, path: str) -> list[Call]:
        with self._cond:
            return [c for c in self.calls if c.method == "GET" and c.path == path]

    def wait_until(self, predicate: Callable[[], bool]) -> None:
        with self._cond:
            assert self._cond.wait_for(predicate, WAIT), "the transport never saw what the test waits for"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        call = Call(request.method, request.url.path, request.headers.get("Idempotency-Key"),
                    json.loads(request.content) if request.content else None)
        with self._cond:
            self.calls.append(call)
            fault = next((f for f in self.faults if f.times > 0 and f.match(call)), None)
            if fault is not None:
                fault.times -= 1
            if call.video is not None:
                self.in_flight[call.video] += 1
                self.max_in_flight[call.video] = max(self.max_in_flight[call.video], self.in_flight[call.video])
            self._cond.notify_all()
        try:
            return self._handle(request, call, fault)
        finally:
            with self._cond:
                if call.video is not None:
                    self.in_flight[call.video] -= 1
                self._cond.notify_all()

    def _handle(self, request: httpx.Request, call: Call, fault: Fault | None) -> httpx.Response:
        action = fault.action if fault else None
        if fault is not None and action in ("timeout_before", "respond"):
            fault.reached.set()
            if action == "timeout_before":
                raise httpx.ConnectTimeout("injected: timed out before sending", request=request)
            self._answered(call, fault.status, fault.body)
            return httpx.Response(fault.status, json=fault.body, headers=fault.headers)
        if fault is not None and action == "hold_request":
            fault.reached.set()
            fault.wait_release()
        status, headers, content = self._forward(request, call)
        if fault is not None and action == "drop_after":
            if fault.then is not None:
                fault.then()
            fault.reached.set()
            if fault.release is not None:
                fault.wait_release()
            raise httpx.ReadTimeout("injected: the answer was lost after the server committed", request=request)
        if fault is not None and action == "hold_response":
            fault.reached.set()
            fault.wait_release()
        if fault is not None and action == "rewrite":
            assert fault.rewrite is not None
            fault.reached.set()
            content = json.dumps(fault.rewrite(json.loads(content))).encode()
        return httpx.Response(status, headers=headers, content=content)

    def _forward(self, request: httpx.Request, call: Call) -> tuple[int, list[tuple[str, str]], bytes]:
        with self._cond:
            call.forwarded = True
        response = self.inner.handle_request(request)
        try:
            content = response.read()
        finally:
            response.close()
        try:
            answer = json.loads(content) if content else None
        except ValueError:
            answer = None
        self._answered(call, response.status_code, answer)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in HOP_HEADERS]
        return response.status_code, headers, content

    def _answered(self, call: Call, status: int, answer: Any) -> None:
        with self._cond:
            call.status, call.answer = status, answer
            self._cond.notify_all()

    def close(self) -> None:
        self.inner.close()


def is_put(video_id: str, desired: str | None = None) -> Callable[[Call], bool]:
    return lambda c: c.video == video_id and (desired is None or c.body.get("desiredState") == desired)


def is_batch(call: Call) -> bool:
    return call.method == "POST" and call.path == BATCH_PATH


@pytest.fixture
def transport():
    t = FaultTransport()
    yield t
    t.release_all()
    t.close()


@pytest.fixture
def token_of():
    from rest_framework.authtoken.models import Token

    def key(user) -> str:
        token, _ = Token.objects.get_or_create(user=user)
        return token.key

    return key


@pytest.fixture
def client_for(live_server, token_of, transport):
    """`client_for(user, **kw)` -> a LikesClient of `user` on the live server through `transport`, with a short
    backoff; every client is closed at the end (after anything still held is released)."""
    from likes_client import LikesClient

    clients: list[LikesClient] = []

    def make(user, **kw: Any) -> LikesClient:
        kw.setdefault("backoff_base", 0.01)
        kw.setdefault("backoff_cap", 0.05)
        kw.setdefault("timeout", WAIT)
        client = LikesClient(live_server.url, token_of(user), transport=transport, **kw)
        clients.append(client)
        return client

    yield make
    transport.release_all()
    for client in clients:
        client.close()


@pytest.fixture
def truth(live_server, token_of):
    """`truth(user, video_id)` -> (state, relationVersion) as the server holds it (the public GET, not through
    the faulty transport)."""

    def read(user, video_id: str) -> tuple[str, int]:
        response = httpx.get(f"{live_server.url}/v1/videos/{video_id}/like-relation", timeout=WAIT,
                             headers={"Authorization": f"Token {token_of(user)}"})
        assert response.status_code == 200, response.text
        body = response.json()
        return body["state"], body["relationVersion"]

    return read


@pytest.fixture
def author(make_user):
    return make_user()
