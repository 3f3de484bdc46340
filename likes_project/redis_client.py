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

import functools
import hashlib
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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


# --- one round trip for several reads (issue 15 §1, §4) ------------------------------------------------

T = TypeVar("T")
MAX_ROUNDS = 8  # a flow asks once per dependency level (two today); more is a bug, not a workload


@dataclass(frozen=True)
class Read(Generic[T]):
    """The commands one read needs (`queue` adds exactly `size` of them to a pipeline) and what their
    replies mean (`parse`). Built by the apps' `cache.py` modules, which own the keys."""

    size: int
    queue: Callable[[Any], None]
    parse: Callable[[list], T]


# A flow is a generator that yields the Read it needs next, receives that read's value (or has the
# round's RedisError thrown into it, which it handles as it would for a call of its own) and returns
# its result. Flows let a request make its independent reads in one pipelined round trip.
Flow = Generator[Read, Any, T]


def read_now(read: Read[T]) -> T:
    """One read in its own round trip (none when it has no commands)."""
    return run_flows(_one(read))[0]


def _one(read: Read[T]) -> Flow[T]:
    return (yield read)


def run_flows(*flows: Flow) -> list:
    """Run flows side by side: each round is ONE pipelined round trip on the cache role carrying the
    reads of every flow still running (a round whose reads have no commands costs none). A RedisError
    of a round is thrown into the flows that had commands in it. Returns each flow's result, in order."""
    results: list = [None] * len(flows)
    asks: dict[int, Read] = {}

    def advance(i: int, step: Callable[[], Read]) -> None:
        try:
            asks[i] = step()
        except StopIteration as done:
            results[i] = done.value

    for i, flow in enumerate(flows):
        advance(i, flow.__next__)
    for _round in range(MAX_ROUNDS):
        if not asks:
            return results
        current, asks = asks, {}
        replies: list = []
        error: redis.RedisError | None = None
        if any(read.size for read in current.values()):
            pipe = cache_redis().pipeline(transaction=False)
            for read in current.values():
                read.queue(pipe)
            try:
                replies = pipe.execute()
            except redis.RedisError as exc:
                error = exc
        offset = 0
        for i, read in current.items():
            part, offset = replies[offset:offset + read.size], offset + read.size
            flow = flows[i]
            if error is not None and read.size:
                advance(i, lambda flow=flow, error=error: flow.throw(error))
            else:
                advance(i, lambda flow=flow, read=read, part=part: flow.send(read.parse(part)))
    raise RuntimeError(f"a flow asked for more than {MAX_ROUNDS} rounds")


# --- Lua calls in one round trip -----------------------------------------------------------------------


@functools.cache
def _sha1(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()  # Redis names a script by its SHA-1


def scripts_run(calls: list[tuple[str, list, list]]) -> list:
    """Lua calls (source, keys, args) on the cache role in ONE pipelined round trip, by EVALSHA (issue 15).
    redis-py's pipeline asks the server SCRIPT EXISTS before every execute that carries a registered
    script, a second round trip on every write of the caches; here a script the server does not hold
    (after a restart or SCRIPT FLUSH) answers NOSCRIPT without running, is loaded, and only those calls
    are sent again. Raises the first error a call answered."""
    if not calls:
        return []
    client = cache_redis()

    def send(indices: list[int]) -> list:
        pipe = client.pipeline(transaction=False)
        for i in indices:
            source, keys, args = calls[i]
            pipe.evalsha(_sha1(source), len(keys), *keys, *args)
        return pipe.execute(raise_on_error=False)

    results = send(list(range(len(calls))))
    lost = [i for i, r in enumerate(results) if isinstance(r, redis.exceptions.NoScriptError)]
    if lost:
        for source in {calls[i][0] for i in lost}:
            client.script_load(source)
        for i, r in zip(lost, send(lost), strict=True):
            results[i] = r
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results
