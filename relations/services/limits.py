"""Abuse limits on the command path (CMD-18, RISK-1, RISK-2).

Layer 1, the gateway: token buckets per account, per device (`deviceId`, or the `X-Device-Id` header) and per IP,
each with its own limits, checked in one round trip (`request_limits_check`). Per relation: effective transitions
per minute (`relation_transition_allowed`).
Layer 2, behaviour windows (`behaviour_check`, issue 32 §1), one more round trip on the user's slot: the relation's
effective toggles in BEHAVIOUR_TOGGLE_WINDOW_S, the distinct videos the user acted on this minute, the distinct
devices this hour. Past a threshold the command is refused before its transaction (429 `behaviour_limited`, with
the signal, its limit and the current relation).
Everything lives in Redis. If Redis is down a limit fails open: the command still goes through, and the failure is
logged and counted (`likes_ratelimit_fail_open_total{scope}`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import RedisError

from likes_project import metrics
from likes_project.redis_client import scripts_run
from relations import cache

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LimitVerdict:
    allowed: bool
    scope: str = ""
    retry_after_s: int = 0


ALLOWED = LimitVerdict(allowed=True)


def _now() -> float:
    """The clock of the behaviour windows (a test pins it)."""
    return time.time()


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


def request_limits_check(*, user_id: int, client_ip: str | None, device_id: str = "") -> LimitVerdict:
    """Consume one token from the caller's user bucket, device bucket (when the command names a device) and IP
    bucket (one Redis round trip)."""
    if not settings.RATE_LIMIT_ENABLED:
        return ALLOWED
    scopes = [("user", cache.ratelimit_user_key(user_id), settings.RATE_LIMIT_USER_RATE,
               settings.RATE_LIMIT_USER_BURST, True)]
    if device_id:
        scopes.append(("device", cache.ratelimit_device_key(device_id), settings.RATE_LIMIT_DEVICE_RATE,
                       settings.RATE_LIMIT_DEVICE_BURST, True))
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
    """Charge one effective transition to the relation's bucket and its toggle window (called after commit; one
    round trip)."""
    if not settings.RATE_LIMIT_ENABLED:
        return
    rate, burst = _relation_params()
    try:
        scripts_run([(cache.TOKEN_BUCKET, [cache.ratelimit_relation_key(user_id, video_id)], [rate, burst, 1, 1]),
                     (cache.TOGGLE_RECORD, cache.behaviour_keys(user_id, video_id, now_s=_now())[2:],
                      [settings.BEHAVIOUR_TOGGLE_WINDOW_S])])
    except RedisError as exc:
        metrics.inc("likes_ratelimit_fail_open_total", scope="relation")
        logger.warning("rate limit relation failed open: %s", exc.__class__.__name__)


@dataclass(frozen=True)
class BehaviourVerdict:
    allowed: bool
    signal: str = ""  # toggles | videos_per_minute | devices_per_hour
    value: int = 0
    limit: int = 0
    retry_after_s: int = 0


BEHAVIOUR_ALLOWED = BehaviourVerdict(allowed=True)


def behaviour_check(*, user_id: int, video_id: str, device_id: str = "") -> BehaviourVerdict:
    """RISK-1 layer 2: add this command to the user's behaviour windows and judge them (one round trip). A refused
    command still counts in its windows: a burst that keeps hammering stays refused."""
    if not (settings.RATE_LIMIT_ENABLED and settings.BEHAVIOUR_LIMITS_ENABLED):  # limits off: these too
        return BEHAVIOUR_ALLOWED
    now = _now()
    try:
        videos, devices, toggles = cache.behaviour_check(user_id, video_id, device_id, now_s=now)
    except RedisError as exc:
        metrics.inc("likes_ratelimit_fail_open_total", scope="behaviour")
        logger.warning("behaviour windows failed open: %s", exc.__class__.__name__)
        return BEHAVIOUR_ALLOWED
    for signal, value, limit, retry in (  # the toggles counted so far, and this command's
            ("toggles", toggles + 1, settings.BEHAVIOUR_TOGGLES_MAX, settings.BEHAVIOUR_TOGGLE_WINDOW_S),
            ("videos_per_minute", videos, settings.BEHAVIOUR_VIDEOS_PER_MINUTE_MAX, 60 - int(now % 60)),
            ("devices_per_hour", devices, settings.BEHAVIOUR_DEVICES_PER_HOUR_MAX, 3600 - int(now % 3600))):
        if value > limit:
            metrics.inc("likes_behaviour_refused_total", signal=signal)
            return BehaviourVerdict(False, signal, value, limit, max(1, retry))
    return BEHAVIOUR_ALLOWED
