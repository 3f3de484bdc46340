"""Retry or poison: the one classification every consumer and the outbox publisher use (issue 9 §1).

An infrastructure failure (the store did not answer, answered "not now", or a fence moved) says nothing
about the event: the event is kept at the head, retried after a capped, jittered backoff, for as long as
it takes. Only poison, an event that can never be applied as it is (it fails schema validation, or
applying it would break an invariant such as a bucket going negative), is set aside in the dead-letter
table with its reason, so the partition can move past it.

| failure                                                     | class  | reason          |
|-------------------------------------------------------------|--------|-----------------|
| NonRetryable (schema validation, negative or frozen bucket) | poison | its own class   |
| connection refused or dropped (OperationalError, Interface) | retry  | db_unavailable  |
| statement timeout (QueryCanceled)                           | retry  | db_timeout      |
| lock timeout (LockNotAvailable), deadlock                   | retry  | db_lock         |
| serialization failure                                       | retry  | db_serialization|
| Redis unavailable (ConnectionError, TimeoutError, BUSY...)  | retry  | redis           |
| RouteEpochMismatch                                          | retry  | route_epoch     |
| lost lease or fence (LeaseLost, FenceLost)                  | retry  | fence           |
| any other Retryable                                         | retry  | retryable       |
| anything unclassified (a bug, an IntegrityError)            | retry  | unclassified    |

An unclassified error retries too (and alerts like every other retry past the threshold): holding the
partition loses nothing, while dead-lettering an event for a bug in our own code would drop a fact
from the projections. `docs/decisions.md` D38 keeps this table for operators.
"""

from __future__ import annotations

import random
from enum import StrEnum

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from redis.exceptions import RedisError


class NonRetryable(Exception):
    """Poison: the event can never be applied as it is (bad payload, broken invariant): dead-letter it."""


class Retryable(Exception):
    """A transient failure (a store unavailable, a timeout, a moved fence): back off and retry."""


class Verdict(StrEnum):
    RETRY = "retry"
    POISON = "poison"


def _sqlstate(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    return str(getattr(cause, "sqlstate", "") or getattr(cause, "pgcode", "") or "")


# PostgreSQL SQLSTATEs of the failures that are about the moment, not the event.
_SQLSTATE_REASONS = {
    "57014": "db_timeout",        # query_canceled (statement_timeout)
    "55P03": "db_lock",           # lock_not_available (lock_timeout)
    "40P01": "db_lock",           # deadlock_detected
    "40001": "db_serialization",  # serialization_failure
    "57P01": "db_unavailable",    # admin_shutdown (pg_terminate_backend)
    "57P02": "db_unavailable",    # crash_shutdown
    "57P03": "db_unavailable",    # cannot_connect_now
    "08000": "db_unavailable", "08003": "db_unavailable", "08006": "db_unavailable",
    "08001": "db_unavailable", "08004": "db_unavailable",
}


def classify(exc: BaseException) -> tuple[Verdict, str]:
    """(retry or poison, a short reason label for metrics and the checkpoint)."""
    if isinstance(exc, NonRetryable):
        return Verdict.POISON, exc.__class__.__name__
    reason = getattr(exc, "retry_reason", "")
    if reason:
        return Verdict.RETRY, reason
    if isinstance(exc, DatabaseError):
        state = _sqlstate(exc)
        if state in _SQLSTATE_REASONS:
            return Verdict.RETRY, _SQLSTATE_REASONS[state]
        if isinstance(exc, OperationalError | InterfaceError):
            return Verdict.RETRY, "db_unavailable"
        return Verdict.RETRY, "unclassified"
    if isinstance(exc, RedisError):
        return Verdict.RETRY, "redis"
    if exc.__class__.__name__ == "LeaseLost":
        return Verdict.RETRY, "fence"
    if isinstance(exc, Retryable):
        return Verdict.RETRY, "retryable"
    return Verdict.RETRY, "unclassified"


def retryable_from(exc: BaseException) -> Retryable:
    """A Retryable standing for an infrastructure error, keeping its class and reason."""
    if isinstance(exc, Retryable):
        return exc
    _verdict, reason = classify(exc)
    wrapped = Retryable(f"{exc.__class__.__name__}: {exc}"[:1000])
    wrapped.retry_reason = reason
    return wrapped


def backoff_s(attempt: int) -> float:
    """The wait before retry number `attempt` (1-based): doubling from LIKES_RETRY_BASE_S, capped at
    LIKES_RETRY_MAX_BACKOFF_S, with "equal jitter" (half fixed, half random), so a fleet of consumers
    stuck on the same outage does not retry in lockstep."""
    ceiling = min(settings.LIKES_RETRY_MAX_BACKOFF_S, settings.LIKES_RETRY_BASE_S * 2 ** (max(attempt, 1) - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


def should_alert(attempt: int) -> bool:
    """Alert when a head has been retried LIKES_RETRY_ALERT_AFTER times, and every 10 tries after."""
    threshold = settings.LIKES_RETRY_ALERT_AFTER
    return attempt >= threshold and (attempt - threshold) % 10 == 0
