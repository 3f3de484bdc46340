"""Abuse limits on the command path (CMD-18, RISK-1, RISK-2): per user, per IP and per relation.

Token buckets live in Redis. If Redis is down a limit fails open: the command still goes through,
and the failure is logged and counted (`likes_ratelimit_fail_open_total`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import RedisError

from likes_project import metrics
from relations import cache

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LimitVerdict:
    allowed: bool
    scope: str = ""
    retry_after_s: int = 0


ALLOWED = LimitVerdict(allowed=True)


def _bucket(scope: str, key: str, *, rate: float, burst: int, consume: bool) -> LimitVerdict:
    try:
        allowed, retry_ms = cache.token_bucket(key, rate=rate, burst=burst, consume=consume)
    except RedisError as exc:
        metrics.inc("likes_ratelimit_fail_open_total", scope=scope)
        logger.warning("rate limit %s failed open: %s", scope, exc.__class__.__name__)
        return ALLOWED
    if allowed:
        return ALLOWED
    metrics.inc("likes_ratelimit_rejected_total", scope=scope)
    return LimitVerdict(allowed=False, scope=scope, retry_after_s=max(1, math.ceil(retry_ms / 1000)))


def request_limits_check(*, user_id: int, client_ip: str | None) -> LimitVerdict:
    """Consume one token from the caller's user bucket and IP bucket (one Redis round trip)."""
    if not settings.RATE_LIMIT_ENABLED:
        return ALLOWED
    scopes = [("user", cache.ratelimit_user_key(user_id), settings.RATE_LIMIT_USER_RATE,
               settings.RATE_LIMIT_USER_BURST, True)]
    if client_ip:
        scopes.append(("ip", cache.ratelimit_ip_key(client_ip), settings.RATE_LIMIT_IP_RATE,
                       settings.RATE_LIMIT_IP_BURST, True))
    try:
        results = cache.token_buckets([(key, rate, burst, consume) for _, key, rate, burst, consume in scopes])
    except RedisError as exc:
        for scope, *_ in scopes:
            metrics.inc("likes_ratelimit_fail_open_total", scope=scope)
        logger.warning("rate limits failed open: %s", exc.__class__.__name__)
        return ALLOWED
    for (scope, *_), (allowed, retry_ms) in zip(scopes, results, strict=True):
        if not allowed:
            metrics.inc("likes_ratelimit_rejected_total", scope=scope)
            return LimitVerdict(allowed=False, scope=scope, retry_after_s=max(1, math.ceil(retry_ms / 1000)))
    return ALLOWED


def _relation_params() -> tuple[float, int]:
    per_minute = settings.RATE_LIMIT_RELATION_PER_MINUTE
    return per_minute / 60.0, per_minute


def relation_transition_allowed(*, user_id: int, video_id: str) -> LimitVerdict:
    """Peek: may this relation make one more effective transition now? Consumes nothing."""
    if not settings.RATE_LIMIT_ENABLED:
        return ALLOWED
    rate, burst = _relation_params()
    return _bucket("relation", cache.ratelimit_relation_key(user_id, video_id), rate=rate, burst=burst,
                   consume=False)


def relation_transition_record(*, user_id: int, video_id: str) -> None:
    """Charge one effective transition to the relation's bucket (called after commit)."""
    if not settings.RATE_LIMIT_ENABLED:
        return
    rate, burst = _relation_params()
    _bucket("relation", cache.ratelimit_relation_key(user_id, video_id), rate=rate, burst=burst, consume=True)
