"""The process-wide Redis clients. Key names are built only in the apps' `cache.py` modules."""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.cache
def cache_redis() -> redis.Redis:
    """Cache role: relation/count caches, visibility snapshot, rate-limit buckets."""
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=settings.REDIS_SOCKET_TIMEOUT_S,
        socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT_S,
        health_check_interval=30,
    )


@functools.cache
def stream_redis() -> redis.Redis:
    """Stream role (`noeviction` in production): the event log."""
    return redis.Redis.from_url(
        settings.REDIS_STREAMS_URL,
        socket_timeout=max(settings.REDIS_SOCKET_TIMEOUT_S, 2.0),
        socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT_S,
        health_check_interval=30,
    )


def reset_clients() -> None:
    """Forget cached clients (tests that point Redis elsewhere, forked workers)."""
    cache_redis.cache_clear()
    stream_redis.cache_clear()
