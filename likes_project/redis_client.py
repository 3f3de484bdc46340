"""The process's Redis clients, through django-redis (issue 10 §7). Key names are built only in the apps'
`cache.py` modules.

Two roles, two `CACHES` entries built by `redis_caches` from REDIS_URL and REDIS_STREAMS_URL:

- `default`, the cache role (relation/count caches, visibility snapshot, rate-limit buckets): short
  socket timeouts, since every read has a database fallback;
- `streams`, the event log (`noeviction` in production; the Celery broker follows it by default): longer
  socket timeout, since a stream read is never retried from elsewhere.

The code needs hashes, sorted sets, pipelines, streams and Lua, so it works on the raw redis-py client
django-redis keeps for each entry (`get_redis_connection`); the Django cache API on `default` is there for
what fits it. `RoleConnectionFactory` keys connection pools by URL *and* timeouts: django-redis keys them
by URL only, so with both roles on one server (the default, and the tests) the first role to connect would
impose its timeouts on the other.
"""

from __future__ import annotations

import redis
from django.conf import settings
from django_redis import get_redis_connection
from django_redis.pool import ConnectionFactory

CACHE_ALIAS = "default"
STREAMS_ALIAS = "streams"
HEALTH_CHECK_INTERVAL_S = 30


def redis_caches(*, cache_url: str, streams_url: str, timeout_s: float, prefix: str) -> dict:
    """The `CACHES` setting for both roles (used by settings.base; `reset_clients` rebuilds it when a test
    points a role elsewhere)."""

    def entry(url: str, socket_timeout: float) -> dict:
        return {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": prefix,
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_TIMEOUT": socket_timeout,
                "SOCKET_CONNECT_TIMEOUT": timeout_s,
                "CONNECTION_POOL_KWARGS": {"health_check_interval": HEALTH_CHECK_INTERVAL_S},
            },
        }

    return {CACHE_ALIAS: entry(cache_url, timeout_s), STREAMS_ALIAS: entry(streams_url, max(timeout_s, 2.0))}


class RoleConnectionFactory(ConnectionFactory):
    """django-redis's factory with pools keyed by (URL, timeouts), so two roles on one server keep their
    own timeouts (DJANGO_REDIS_CONNECTION_FACTORY)."""

    def get_or_create_connection_pool(self, params):
        key = f"{params['url']}|{params.get('socket_timeout')}|{params.get('socket_connect_timeout')}"
        if key not in self._pools:
            self._pools[key] = self.get_connection_pool(params)
        return self._pools[key]


_synced: tuple[str, str] | None = None


def _sync() -> None:
    """Follow REDIS_URL / REDIS_STREAMS_URL: in a deployment they never change (one comparison per call);
    a test that points a role at another server changes the URL setting, and the CACHES entries (and the
    cache handler built from them) follow."""
    global _synced
    urls = (settings.REDIS_URL, settings.REDIS_STREAMS_URL)
    if urls == _synced:
        return
    from django.core.cache import caches

    if (settings.CACHES[CACHE_ALIAS]["LOCATION"], settings.CACHES[STREAMS_ALIAS]["LOCATION"]) != urls:
        settings.CACHES = redis_caches(cache_url=urls[0], streams_url=urls[1],
                                       timeout_s=settings.REDIS_SOCKET_TIMEOUT_S, prefix=settings.LIKES_REDIS_PREFIX)
    if (caches.settings[CACHE_ALIAS]["LOCATION"], caches.settings[STREAMS_ALIAS]["LOCATION"]) != urls:
        _forget_django_caches()
    _synced = urls


def _forget_django_caches() -> None:
    from asgiref.local import Local
    from django.core.cache import caches, close_caches

    close_caches()
    caches._settings = caches.settings = caches.configure_settings(None)
    caches._connections = Local()


def cache_redis() -> redis.Redis:
    """Cache role: relation/count caches, visibility snapshot, rate-limit buckets."""
    _sync()
    return get_redis_connection(CACHE_ALIAS)


def stream_redis() -> redis.Redis:
    """Stream role (`noeviction` in production): the event log."""
    _sync()
    return get_redis_connection(STREAMS_ALIAS)


def reset_clients() -> None:
    """Forget the clients and their pools (tests that point Redis elsewhere, forked workers): the next
    call connects afresh from the current settings."""
    global _synced
    _synced = None
    for pool in list(ConnectionFactory._pools.values()):
        pool.disconnect()
    ConnectionFactory._pools.clear()
    _forget_django_caches()
