"""Errors: the service's `{"code", "message", ...}` answers, and transport failures after the last attempt."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from likes_client._models import Relation


class LikesError(Exception):
    """An error answer of the service (`status`, `code`, `message` as sent), or, with `status` None, a
    timeout or connection error that outlasted every attempt (`code` "timeout" or "connection_error").

    `current_relation` is the caller's relation the server sent with the error (`currentRelation` of 409
    `stale_base_version` and 429 `rate_limited`), else None. `retry_after` is the `Retry-After` the server
    sent, in seconds, else None. `body` is the whole JSON error body."""

    def __init__(self, status: int | None, code: str, message: str, *, current_relation: Relation | None = None,
                 retry_after: float | None = None, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status if status is not None else 'no answer'} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.current_relation = current_relation
        self.retry_after = retry_after
        self.body: Mapping[str, Any] = body if body is not None else {}


class RateLimited(LikesError):
    """429 `rate_limited`: `retry_after` is the server's `Retry-After` in seconds (None if it sent none)."""
