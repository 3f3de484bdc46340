"""`LikesClient`: the service's public /v1 API with the client rules of the spec (CLI-1 … CLI-4).

Thread-safe: one `httpx.Client` (itself thread-safe) and one lock guard everything the client remembers.
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from likes_client._errors import LikesError, RateLimited
from likes_client._models import LIKED, UNLIKED, LikedVideo, Liker, Relation, VideoState, state_of

T = TypeVar("T")

# What a retry may cure: the request may or may not have reached the server (a PUT is safe to resend
# because every attempt carries the same Idempotency-Key).
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (httpx.TimeoutException, httpx.NetworkError,
                                                 httpx.RemoteProtocolError)
BATCH_MAX_IDS = 100  # the server's BATCH_QUERY_MAX_IDS: longer lists are split into several queries


def _value(state: str) -> int:
    return 1 if state == LIKED else 0


def _new_key() -> str:
    """A fresh Idempotency-Key (32 hex digits: within the server's 1-128 of [A-Za-z0-9._:-])."""
    return uuid.uuid4().hex


def _segment(video_id: str) -> str:
    return quote(video_id, safe="")


def _retry_after(response: httpx.Response) -> float | None:
    """`Retry-After` in seconds (delta-seconds or an HTTP date), else the body's `retryAfterSeconds`."""
    raw = response.headers.get("Retry-After")
    if raw is not None:
        try:
            return max(0.0, float(raw))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=timezone.utc)
                return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
    try:
        seconds = response.json().get("retryAfterSeconds")
    except (ValueError, AttributeError):
        return None
    return max(0.0, float(seconds)) if isinstance(seconds, (int, float)) else None


@dataclass
class _Intent:
    """The local queue of one video (CLI-1): the final target, and how many commands are in flight
    (0 or 1 while commands are serialized)."""

    target: str
    busy: int = 0
    error: BaseException | None = None


class LikesClient:
    """A client of the likes service for one user (the owner of `token`).

    `set_like` is one set-state command (retried with one Idempotency-Key); `intend`/`settle` queue click
    intents per video (at most one command in flight per video); `batch` reads a feed page with the session's
    own confirmed writes overlaid; `my_likes`/`likers` iterate over pages.

    Keywords beyond the public ones: `backoff_base`/`backoff_cap` (seconds) shape the jittered exponential
    backoff, `max_retry_after` bounds how long a server's `Retry-After` is honoured, `sleep` is the function
    the backoff waits with (tests pass one that does not sleep), `max_workers` sizes the pool that runs intents.
    """

    # The protections of the client rules, on by default. Tests turn one off to show what it protects against;
    # they are not a public interface.
    _reuse_key_on_retry: bool = True  # CLI-1: every attempt of a command carries the command's Idempotency-Key
    _serialize_intents: bool = True  # CLI-1: at most one command in flight per video; later intents set a target
    _guard_versions: bool = True  # CLI-2: a lower (or equal) version never replaces the confirmed relation
    _send_min_versions: bool = True  # CLI-3: batch queries carry minRelationVersions
    _overlay_confirmed: bool = True  # CLI-3: a batch answer older than the confirmed relation shows the latter
    _optimistic_delta: bool = True  # CLI-4: optimistic_count adds the session's change the count lacks ...
    _rebase_counts: bool = True  # CLI-4: ... until the server's count moves (then the count is taken to show it)

    def __init__(self, base_url: str, token: str, *, timeout: float = 5.0, max_attempts: int = 5,
                 transport: httpx.BaseTransport | None = None, backoff_base: float = 0.2, backoff_cap: float = 5.0,
                 max_retry_after: float = 60.0, sleep: Callable[[float], None] | None = None,
                 max_workers: int = 8) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._http = httpx.Client(
            base_url=base_url, timeout=timeout, transport=transport,
            headers={"Authorization": f"Token {token}", "Accept": "application/json",
                     "User-Agent": "likes-client-python/0.1"},
        )
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._max_retry_after = max_retry_after
        self._sleep: Callable[[float], None] = sleep if sleep is not None else time.sleep
        self._max_workers = max_workers
        self._cond = threading.Condition()
        self._confirmed: dict[str, Relation] = {}  # CLI-2: the highest confirmed version per video
        self._intents: dict[str, _Intent] = {}  # CLI-1
        self._count_base: dict[str, tuple[int, str]] = {}  # CLI-4: (server count, my state that count shows)
        self._state_before_session: dict[str, str] = {}  # CLI-4: my state before this session's first change
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    # --- lifecycle -------------------------------------------------------------------------------------------

    def __enter__(self) -> LikesClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the commands in flight (call `settle()` first to see their errors), then close the
        connections. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._http.close()

    # --- the command (CMD-1, CMD-13) -------------------------------------------------------------------------

    def set_like(self, video_id: str, liked: bool, *, base_version: int | None = None) -> Relation:
        """Set the relation to LIKED or UNLIKED (an absolute state, never a toggle), as one operation.

        Returns the operation's verdict (`replayed` True when the server answered a retry from its stored
        verdict). Timeouts, connection errors and 5xx answers are retried with the same Idempotency-Key, up to
        `max_attempts` attempts in all; a 4xx raises `LikesError` (429: `RateLimited`) at once."""
        desired = state_of(liked)
        body: dict[str, Any] = {"desiredState": desired}
        if base_version is not None:
            body["baseVersion"] = base_version
        try:
            data = self._call("PUT", f"/v1/videos/{_segment(video_id)}/like-relation", json_body=body,
                              idempotency_key=_new_key(), video_id=video_id)
        except LikesError as exc:
            if exc.current_relation is not None:
                self._confirm(exc.current_relation)
            raise
        verdict = Relation(video_id=video_id, state=str(data["state"]), version=int(data["relationVersion"]),
                           replayed=bool(data.get("replayed", False)), operation_id=data.get("operationId"))
        with self._cond:
            if data.get("changed") and video_id not in self._count_base:
                self._state_before_session.setdefault(video_id, UNLIKED if verdict.liked else LIKED)
            self._confirm_locked(verdict)
            current = data.get("currentRelation")
            if isinstance(current, dict):
                seen = Relation.from_wire(video_id, current)
                if seen.version != verdict.version:
                    self._confirm_locked(seen)
        return verdict

    def confirmed(self, video_id: str) -> Relation | None:
        """The relation with the highest version the server confirmed to this client (CLI-2), if any."""
        with self._cond:
            return self._confirmed.get(video_id)

    def _confirm(self, relation: Relation) -> Relation:
        with self._cond:
            return self._confirm_locked(relation)

    def _confirm_locked(self, relation: Relation) -> Relation:
        held = self._confirmed.get(relation.video_id)
        if held is None or relation.version > held.version or not self._guard_versions:
            self._confirmed[relation.video_id] = relation
        self._cond.notify_all()
        return self._confirmed[relation.video_id]

    # --- intents (CLI-1) -------------------------------------------------------------------------------------

    def intend(self, video_id: str, liked: bool) -> None:
        """Record the user's latest wish for `video_id` and return at once.

        With no command in flight for the video one is started; otherwise the wish only replaces the final
        target, and when the command in flight is confirmed the client sends the final target (a new operation)
        if the server does not already hold it, and nothing otherwise. An error a command of this video hit and
        `settle()` has not raised yet is dropped: the new intent supersedes it."""
        target = state_of(liked)
        with self._cond:
            if self._closed:
                raise RuntimeError("the client is closed")
            intent = self._intents.get(video_id)
            if intent is None:
                intent = self._intents[video_id] = _Intent(target)
            intent.target = target
            intent.error = None
            if not self._serialize_intents:
                intent.busy += 1
                self._executor().submit(self._send_each, video_id, target)
                return
            if intent.busy:
                return
            intent.busy = 1
            self._executor().submit(self._drive, video_id)

    def settle(self, timeout: float | None = None) -> dict[str, Relation]:
        """Wait until every video's confirmed relation is its final target; return the confirmed relations of
        every video intended so far. Re-raises an error a background command hit (once); `TimeoutError` when
        `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                for intent in self._intents.values():
                    if intent.error is not None:
                        error, intent.error = intent.error, None
                        raise error
                busy = [video_id for video_id, intent in self._intents.items() if intent.busy]
                if not busy:
                    return {v: self._confirmed[v] for v in self._intents if v in self._confirmed}
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"intents still in flight after {timeout} s: {', '.join(sorted(busy))}")
                self._cond.wait(remaining)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="likes-client")
        return self._pool

    def _drive(self, video_id: str) -> None:
        """The one command in flight of `video_id`, then the follow-ups until the server holds the target."""
        first = True
        while True:
            with self._cond:
                intent = self._intents[video_id]
                target = intent.target
                held = self._confirmed.get(video_id)
                if not first and held is not None and held.state == target:
                    intent.busy = 0
                    self._cond.notify_all()
                    return
            first = False
            try:
                self.set_like(video_id, target == LIKED)
            except Exception as exc:  # noqa: BLE001 - kept for settle() to raise
                with self._cond:
                    intent.error = exc
                    intent.busy = 0
                    self._cond.notify_all()
                return

    def _send_each(self, video_id: str, target: str) -> None:
        """Without serialization (`_serialize_intents` False): every intent is a command of its own."""
        try:
            self.set_like(video_id, target == LIKED)
        except Exception as exc:  # noqa: BLE001 - kept for settle() to raise
            with self._cond:
                self._intents[video_id].error = exc
        finally:
            with self._cond:
                self._intents[video_id].busy -= 1
                self._cond.notify_all()

    # --- feed reads (CLI-3, CLI-4) ---------------------------------------------------------------------------

    def batch(self, video_ids: Iterable[str]) -> dict[str, VideoState]:
        """`my_state` and the counts of each video (deduplicated, in first-occurrence order), in as few
        queries as the server's 100-id limit allows. Carries `minRelationVersions` for every video whose
        confirmed version the client holds, and shows its own confirmed relation where the answer is older."""
        ids = list(dict.fromkeys(video_ids))
        out: dict[str, VideoState] = {}
        for start in range(0, len(ids), BATCH_MAX_IDS):
            chunk = ids[start:start + BATCH_MAX_IDS]
            body: dict[str, Any] = {"videoIds": chunk}
            if self._send_min_versions:
                with self._cond:
                    mins = {v: self._confirmed[v].version for v in chunk if v in self._confirmed}
                if mins:
                    body["minRelationVersions"] = mins
            data = self._call("POST", "/v1/like-relations/batch-query", json_body=body)
            for item in data.get("items", []):
                state = self._video_state(item)
                out[state.video_id] = state
        return out

    def _video_state(self, item: dict[str, Any]) -> VideoState:
        video_id = str(item["videoId"])
        answered = Relation.from_wire(video_id, {"state": item["myState"], "relationVersion": item["relationVersion"]})
        display = item.get("displayCount")
        available = bool(item.get("available", False))
        with self._cond:
            held = self._confirmed.get(video_id)
            if held is not None and held.version > answered.version and self._overlay_confirmed:
                shown = held  # the server's answer is older than what this client was confirmed (CLI-3)
            else:
                shown = answered
                self._confirm_locked(answered)
            optimistic = (self._optimistic_count(video_id, int(display), shown.state)
                          if available and display is not None else None)
        return VideoState(video_id=video_id, available=available, my_state=shown.state,
                          relation_version=shown.version, display_count=None if display is None else int(display),
                          count_snapshot_at=item.get("countSnapshotAt"), optimistic_count=optimistic)

    def _optimistic_count(self, video_id: str, display: int, my_state: str) -> int:
        """CLI-4. The client remembers, per video, the first count the server showed it and which state of
        mine that count reflects: my state before this session's first confirmed change (if the session changed
        the relation before it saw a count), else my state at that time. While the server shows that same
        number, optimistic = count + (my state now - the state it reflects), i.e. ±1 for my change it lacks.
        When the number moves, the server is taken to have caught up: the count now reflects my current state
        and the server's number wins (optimistic = count). Session-only; nothing is written back."""
        base = self._count_base.get(video_id)
        if base is None:
            base = (display, self._state_before_session.pop(video_id, my_state))
        elif display != base[0] and self._rebase_counts:
            base = (display, my_state)
        self._count_base[video_id] = base
        if not self._optimistic_delta:
            return display
        return max(0, display + _value(my_state) - _value(base[1]))

    # --- lists -----------------------------------------------------------------------------------------------

    def my_likes(self, limit: int = 50) -> Iterator[LikedVideo]:
        """The caller's liked videos, newest first, following `nextCursor` page after page."""
        return self._pages("/v1/me/likes", limit, lambda i: LikedVideo(
            video_id=str(i["videoId"]), liked_at=str(i["likedAt"]), relation_version=int(i["relationVersion"])))

    def likers(self, video_id: str, limit: int = 50) -> Iterator[Liker]:
        """Who liked `video_id`, newest first (the author, or anyone when the likers are public)."""
        return self._pages(f"/v1/videos/{_segment(video_id)}/likers", limit, lambda i: Liker(
            user_id=int(i["userId"]), username=str(i["username"]), liked_at=str(i["likedAt"])))

    def _pages(self, path: str, limit: int, parse: Callable[[dict[str, Any]], T]) -> Iterator[T]:
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": limit}
            if cursor:
                params["cursor"] = cursor
            data = self._call("GET", path, params=params)
            for item in data.get("items", []):
                yield parse(item)
            cursor = data.get("nextCursor")
            if not cursor:
                return

    # --- HTTP with retries -----------------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, json_body: Any = None, params: dict[str, Any] | None = None,
              idempotency_key: str | None = None, video_id: str = "") -> dict[str, Any]:
        """One request, retried on timeouts, connection errors and 5xx up to `max_attempts` attempts, all
        with the same Idempotency-Key (when one is given); a 4xx raises at once."""
        key = idempotency_key
        attempt = 0
        while True:
            attempt += 1
            headers: dict[str, str] = {}
            if key is not None:
                headers["Idempotency-Key"] = key
                headers["X-Request-ID"] = f"{key}.{attempt}"
            try:
                response = self._http.request(method, path, json=json_body, params=params, headers=headers)
            except RETRYABLE_ERRORS as exc:
                if attempt >= self._max_attempts:
                    code = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection_error"
                    raise LikesError(None, code, f"{method} {path}: {exc!r} after {attempt} attempts") from exc
                self._sleep(self._delay(attempt, None))
            else:
                if response.status_code < 400:
                    return self._body(response)
                error = self._error(response, video_id)
                if response.status_code < 500 or attempt >= self._max_attempts:
                    raise error
                self._sleep(self._delay(attempt, error.retry_after))
            if key is not None and not self._reuse_key_on_retry:
                key = _new_key()

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Jittered exponential backoff (between half and all of base·2^(n-1), capped), never shorter than
        the server's `Retry-After` (itself bounded by `max_retry_after`)."""
        ceiling = min(self._backoff_cap, self._backoff_base * 2 ** (attempt - 1))
        delay = random.uniform(ceiling / 2, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self._max_retry_after))
        return delay

    @staticmethod
    def _body(response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError as exc:
            raise LikesError(response.status_code, "invalid_response", "the answer is not JSON") from exc
        if not isinstance(data, dict):
            raise LikesError(response.status_code, "invalid_response", "the answer is not a JSON object")
        return data

    @staticmethod
    def _error(response: httpx.Response, video_id: str) -> LikesError:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {}
        status = response.status_code
        code = str(body.get("code") or f"http_{status}")
        message = str(body.get("message") or response.reason_phrase or "")
        current = body.get("currentRelation")
        relation = Relation.from_wire(video_id, current) if isinstance(current, dict) and video_id else None
        cls = RateLimited if status == 429 else LikesError
        return cls(status, code, message, current_relation=relation, retry_after=_retry_after(response), body=body)
