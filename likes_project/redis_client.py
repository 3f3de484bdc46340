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

A role can live on a Redis Cluster (issue 16, the `scaled` topology): its URL is then
`redis+cluster://host:port[,host:port...]/0`, the startup nodes, and the role's client is redis-py's
`RedisCluster` (django-redis 7 has no Cluster client; D93). Every key the code builds carries a hash tag,
no script or transaction touches two slots, and a pipeline on a Cluster is split by node and sent to the
nodes side by side, so the same code runs on both. The Celery broker never lives on a Cluster (Celery's
Redis transport does not speak it).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import redis
import redis.cluster
from django.conf import settings
from django_redis import get_redis_connection
from django_redis.pool import ConnectionFactory

CACHE_ALIAS = "default"
STREAMS_ALIAS = "streams"
HEALTH_CHECK_INTERVAL_S = 30
CLUSTER_SCHEME = "redis+cluster"


def is_cluster_url(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEME + "://")


def cluster_startup_nodes(url: str) -> list[tuple[str, int]]:
    """The (host, port) startup nodes a `redis+cluster://` URL names."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    nodes = []
    for part in netloc.split(","):
        host, _, port = part.strip().rpartition(":")
        nodes.append((host or "127.0.0.1", int(port or 6379)))
    return nodes


def redis_caches(*, cache_url: str, streams_url: str, timeout_s: float, prefix: str) -> dict:
    """The `CACHES` setting for both roles (used by settings.base; `reset_clients` rebuilds it when a test
    points a role elsewhere)."""

    def entry(url: str, socket_timeout: float) -> dict:
        if is_cluster_url(url):
            # No django-redis client speaks Cluster, and no code uses the Django cache API on these
            # entries (the raw clients below do the work): a dummy keeps `caches[...]` defined.
            return {"BACKEND": "django.core.cache.backends.dummy.DummyCache", "LOCATION": url}
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

    if (settings.CACHES[CACHE_ALIAS].get("LOCATION"), settings.CACHES[STREAMS_ALIAS].get("LOCATION")) != urls:
        settings.CACHES = redis_caches(cache_url=urls[0], streams_url=urls[1],
                                       timeout_s=settings.REDIS_SOCKET_TIMEOUT_S, prefix=settings.LIKES_REDIS_PREFIX)
    if (caches.settings[CACHE_ALIAS].get("LOCATION"), caches.settings[STREAMS_ALIAS].get("LOCATION")) != urls:
        _forget_django_caches()
    _synced = urls


def _forget_django_caches() -> None:
    from asgiref.local import Local
    from django.core.cache import caches, close_caches

    close_caches()
    caches._settings = caches.settings = caches.configure_settings(None)
    caches._connections = Local()


_clusters: dict[tuple[int, str, float], redis.cluster.RedisCluster] = {}


def _cluster_client(url: str, socket_timeout: float) -> redis.cluster.RedisCluster:
    """One RedisCluster client per process, URL and timeout (it keeps a pool per node)."""
    key = (os.getpid(), url, socket_timeout)
    client = _clusters.get(key)
    if client is None:
        client = _clusters[key] = redis.cluster.RedisCluster(
            startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in cluster_startup_nodes(url)],
            socket_timeout=socket_timeout, socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT_S,
            health_check_interval=HEALTH_CHECK_INTERVAL_S,
            # A node that is down fails only the calls on its slots (their callers fall back to the
            # database); a node that came back answers again once the client re-reads the slot map.
            require_full_coverage=False)
    return client


def _role_client(alias: str, url: str):
    _sync()
    if is_cluster_url(url):
        timeout = settings.REDIS_SOCKET_TIMEOUT_S
        return _cluster_client(url, timeout if alias == CACHE_ALIAS else max(timeout, 2.0))
    return get_redis_connection(alias)


def cache_redis() -> redis.Redis:
    """Cache role: relation/count caches, visibility snapshot, rate-limit buckets."""
    return _role_client(CACHE_ALIAS, settings.REDIS_URL)


def stream_redis() -> redis.Redis:
    """Stream role (`noeviction` in production): the event log."""
    return _role_client(STREAMS_ALIAS, settings.REDIS_STREAMS_URL)


def role_nodes(client) -> list[redis.Redis]:
    """A plain client per server of a role: the one server, or every primary of a Cluster (for what is
    per server: INFO, SCAN, a flush, a fault)."""
    if isinstance(client, redis.cluster.RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def node_tags(client=None) -> list[str]:
    """One hash tag per server of the cache role, for keys that must exist on every server (the loss
    sentinels): `[""]` (no tag) on a single Redis; on a Cluster, for each primary the first of `n0`,
    `n1`, ... whose slot it serves. A node restarted empty loses its own sentinel, which a single key
    elsewhere would never show. Deterministic for one slot map; after a reshard a sentinel may sit on
    another node than its tag now points to, which reads as a loss once (a rebuild, never a wrong read)."""
    client = client or cache_redis()
    if not isinstance(client, redis.cluster.RedisCluster):
        return [""]
    primaries = {node.name for node in client.get_primaries()}
    tags: dict[str, str] = {}
    for i in range(1 << 16):
        if len(tags) == len(primaries):
            break
        tag = f"n{i}"
        tags.setdefault(client.nodes_manager.get_node_from_slot(client.keyslot(tag)).name, tag)
    return sorted(tags.values(), key=lambda t: int(t[1:]))


def tagged(key: str, tag: str) -> str:
    """`key` as it is on the server of `tag` (see node_tags): unchanged for the empty tag."""
    return f"{key}:{{{tag}}}" if tag else key


# KEYS[1] a hash. ARGV: ttl ms (0: none), then field, value pairs. Replaces the hash in one step (a
# reader never sees it half written): the generation registries, whose one key lives on one slot.
_HASH_REPLACE = """
redis.call('DEL', KEYS[1])
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
  if tonumber(ARGV[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
end
return 1
"""


def hash_replace(key: str, mapping: dict[str, str], *, ttl_ms: int = 0) -> None:
    """Replace the hash `key` with `mapping` atomically (one single-slot script on the cache role)."""
    scripts_run([(_HASH_REPLACE, [key], [ttl_ms, *(x for pair in mapping.items() for x in pair)])])


def reset_clients() -> None:
    """Forget the clients and their pools (tests that point Redis elsewhere, forked workers): the next
    call connects afresh from the current settings."""
    global _synced
    _synced = None
    for pool in list(ConnectionFactory._pools.values()):
        pool.disconnect()
    ConnectionFactory._pools.clear()
    for client in _clusters.values():
        client.close()
    _clusters.clear()
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
    cluster = isinstance(client, redis.cluster.RedisCluster)

    def send(indices: list[int]) -> list:
        pipe = client.pipeline(transaction=False)
        for i in indices:
            source, keys, args = calls[i]
            # On a Cluster the node is named here: without it redis-py asks the server COMMAND GETKEYS for
            # every EVALSHA in the pipeline (its keys are "movable"), one more round trip per call.
            where = {"target_nodes": client.get_node_from_key(keys[0])} if cluster and keys else {}
            # (execute_command: a Cluster pipeline blocks its evalsha method, not the command itself)
            pipe.execute_command("EVALSHA", _sha1(source), len(keys), *keys, *args, **where)
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
