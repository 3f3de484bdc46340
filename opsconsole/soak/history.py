"""The soak's history (issue 33 §1): one JSON object per line for every HTTP exchange a soak client made (commands
and reads, every attempt, answered or not) and every fault started or ended. The checker reads it back; a failing
seed's history is its bug report."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

COMMAND_PATH_END = "/like-relation"
BATCH_PATH = "/v1/like-relations/batch-query"


class History:
    """Appends lines to `path` (thread-safe, flushed per line so a killed soak keeps what it saw)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - open for the soak's lifetime, closed in close()

    def write(self, **line) -> None:
        text = json.dumps({"t": round(time.time(), 4), **line}, sort_keys=True, default=str)
        with self._lock:
            self._file.write(text + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def lines(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _json(content: bytes):
    try:
        return json.loads(content)
    except ValueError:
        return None


class RecordingTransport(httpx.BaseTransport):
    """An httpx transport that sends through `inner` and writes each exchange to the history as `client` made
    it: a command's key, desired state and answer (status, code, version, state, replayed); a batch query's
    `minRelationVersions` and items; a page read's status. Adds `headers` (the client's device) to each request."""

    def __init__(self, history: History, client: str, user_id: int, *, headers: dict | None = None,
                 inner: httpx.BaseTransport | None = None) -> None:
        self.history, self.client, self.user_id = history, client, user_id
        self.headers = headers or {}
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers.update(self.headers)
        path = urlsplit(str(request.url)).path
        line = {"client": self.client, "user": self.user_id, "method": request.method, "path": path}
        body = _json(request.content) if request.content else None
        if request.method == "PUT" and path.endswith(COMMAND_PATH_END):
            line.update(kind="command", video=unquote(path.split("/")[3]), key=request.headers.get("Idempotency-Key"),
                        desired=(body or {}).get("desiredState"))
        elif path == BATCH_PATH:
            line.update(kind="batch", min=(body or {}).get("minRelationVersions") or {})
        else:
            line.update(kind="read")
        try:
            response = self.inner.handle_request(request)
            response.read()
        except httpx.HTTPError as exc:
            self.history.write(**line, status=None, error=exc.__class__.__name__)
            raise
        answer = _json(response.content) if response.content else None
        answer = answer if isinstance(answer, dict) else {}
        line.update(status=response.status_code, code=answer.get("code"))
        if line["kind"] == "command" and response.status_code == 200:
            line.update(version=answer.get("relationVersion"), state=answer.get("state"),
                        replayed=answer.get("replayed"))
        elif line["kind"] == "batch" and response.status_code == 200:
            line.update(items={i.get("videoId"): [i.get("myState"), i.get("relationVersion")]
                               for i in answer.get("items", []) if isinstance(i, dict)})
        self.history.write(**line)
        return response

    def close(self) -> None:
        self.inner.close()
