"""Liveness, readiness and the metrics endpoint (issue 10 §4, §5).

`/readyz` asks every database alias and both Redis roles at once and answers within about
READYZ_DEADLINE_S: each database is probed on a short-lived connection of its own (not Django's
connection of the request thread, whose connect timeout is 5 s), each Redis role with its client's
short timeouts, all in a thread pool; a probe still running at the deadline counts as failed. Anyone
gets `{"status": "ok" | "degraded" | "failed"}`; with the metrics token the per-check detail too.

`/metrics` wants `Authorization: Bearer $METRICS_TOKEN` unless METRICS_PUBLIC is set.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

import psycopg
from django.conf import settings
from django.db import connections
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from likes_project import metrics, observability
from likes_project.middleware import error_response
from likes_project.redis_client import cache_redis, role_nodes, stream_redis

logger = logging.getLogger(__name__)

READYZ_DEADLINE_S = 1.0
# libpq and psycopg raise any connect_timeout below 2 s to 2 s: the deadline above is what bounds the
# answer; this only bounds how long a probe thread of an unreachable server lives on after it.
DB_PROBE_CONNECT_TIMEOUT_S = 1
DB_PROBE_STATEMENT_TIMEOUT_MS = 500
PROBE_THREADS = 16
# Django-only keys of a database's OPTIONS, never passed to libpq.
_DJANGO_ONLY_OPTIONS = {"isolation_level", "pool", "server_side_binding", "assume_role", "cursor_factory",
                        "context", "options", "connect_timeout"}


def healthz(request):
    return JsonResponse({"status": "ok"})


# --- the metrics token ---------------------------------------------------------------------------


def metrics_token_ok(request) -> bool:
    """True when the request carries `Authorization: Bearer <METRICS_TOKEN>` (compared in constant
    time); never true while no token is configured."""
    expected = settings.METRICS_TOKEN
    scheme, _, supplied = request.headers.get("Authorization", "").partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(supplied.strip().encode(), expected.encode())


def _metrics_refusal(request) -> JsonResponse | None:
    if settings.METRICS_PUBLIC:
        return None
    if not settings.METRICS_TOKEN:
        return error_response(403, "metrics_disabled", "Set METRICS_TOKEN (or METRICS_PUBLIC=true) to expose /metrics.")
    if metrics_token_ok(request):
        return None
    scheme, _, supplied = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and supplied.strip():
        resp = error_response(401, "authentication_failed", "Invalid metrics token.")
        resp["WWW-Authenticate"] = 'Bearer realm="metrics", error="invalid_token"'
    else:
        resp = error_response(401, "not_authenticated", "Send Authorization: Bearer <METRICS_TOKEN>.")
        resp["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return resp


@require_safe
def metrics_view(request):
    """Every process's counters and histograms of this host (summed), then the stored store gauges
    and their age. One read of one row; never raises because a store is down."""
    refusal = _metrics_refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(metrics.render(observability.scrape_families()), content_type=metrics.CONTENT_TYPE)


# --- readiness -----------------------------------------------------------------------------------

_pool: ThreadPoolExecutor | None = None
_pool_pid: int | None = None
_pool_lock = threading.Lock()


def _probe_pool() -> ThreadPoolExecutor:
    """One pool per process (a forked worker must not inherit the parent's, whose threads it lacks)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=PROBE_THREADS, thread_name_prefix="readyz")
            _pool_pid = os.getpid()
        return _pool


def probe_conninfo(alias: str) -> dict:
    """Connection parameters of the readiness probe of `alias`: the alias's server and credentials
    with short timeouts of its own."""
    cfg = connections[alias].settings_dict
    info = {k: v for k, v in (cfg.get("OPTIONS") or {}).items() if k not in _DJANGO_ONLY_OPTIONS}
    info.update(dbname=cfg["NAME"], user=cfg.get("USER") or None, password=cfg.get("PASSWORD") or None,
                host=cfg.get("HOST") or None, port=cfg.get("PORT") or None,
                connect_timeout=DB_PROBE_CONNECT_TIMEOUT_S,
                options=f"-c statement_timeout={DB_PROBE_STATEMENT_TIMEOUT_MS}",
                application_name="likes-readyz")
    return {k: v for k, v in info.items() if v is not None}


def _probe_database(conninfo: dict) -> None:
    with psycopg.connect(autocommit=True, **conninfo) as conn:
        conn.execute("SELECT 1")


class RedisNodeDown(Exception):
    """A server of a Redis role did not answer (its address is the message: no secret is in it)."""


def _probe_redis(client) -> None:
    """PING every server of the role: the one server, or each primary of a Cluster (a Cluster with a dead
    node still answers for the other nodes' slots, so one PING through the client proves little)."""
    for node in role_nodes(client):
        try:
            node.ping()
        except Exception as exc:
            kwargs = node.connection_pool.connection_kwargs
            raise RedisNodeDown(f"{exc.__class__.__name__} at {kwargs.get('host')}:{kwargs.get('port')}") from exc


def readiness_checks() -> dict[str, str]:
    """{"db:<alias>" | "redis:cache" | "redis:streams": "ok" | "fail: <exception class>" | "fail: timeout"},
    every probe running at once; returns by READYZ_DEADLINE_S."""
    pool = _probe_pool()
    futures = {f"db:{alias}": pool.submit(_probe_database, probe_conninfo(alias)) for alias in connections}
    futures["redis:cache"] = pool.submit(_probe_redis, cache_redis())
    futures["redis:streams"] = pool.submit(_probe_redis, stream_redis())
    wait(futures.values(), timeout=READYZ_DEADLINE_S)
    checks = {}
    for name, future in futures.items():
        if not future.done():
            future.cancel()  # a queued probe does not run; a running one ends at its own timeout
            checks[name] = "fail: timeout"
        elif future.exception() is not None:
            exc = future.exception()
            # the class only, never a message (it may hold a URL), but a Redis node's address
            checks[name] = f"fail: {exc}" if isinstance(exc, RedisNodeDown) else f"fail: {exc.__class__.__name__}"
        else:
            checks[name] = "ok"
    return checks


# Details an app adds to /readyz for the token holder (registered in its AppConfig.ready, so this module
# imports no app): name -> a function returning a JSON value, never raising.
_DETAILS: dict[str, Callable[[], object]] = {}


def readiness_detail_register(name: str, fn: Callable[[], object]) -> None:
    _DETAILS[name] = fn


def _details() -> dict[str, object]:
    out = {}
    for name, fn in _DETAILS.items():
        try:
            out[name] = fn()
        except Exception:  # a detail never fails the probe; the checks above say what is down
            logger.warning("readyz detail %s could not be computed", name, exc_info=True)
    return out


def readyz(request):
    """200 `ok` when every database alias and Redis answer; 200 `degraded` when only Redis is down
    (reads fall back to the databases, commands still commit; DEG-1); 503 `failed` when a database
    alias does not answer. With the metrics token: also `checks` and `failing`."""
    checks = readiness_checks()
    failing = sorted(name for name, result in checks.items() if result != "ok")
    if any(name.startswith("db:") for name in failing):
        status, http_status = "failed", 503
        logger.warning("readyz failed: %s", ", ".join(f"{n} {checks[n]}" for n in failing))
    elif failing:
        status, http_status = "degraded", 200
        metrics.inc("likes_readyz_degraded_total")
    else:
        status, http_status = "ok", 200
    body: dict = {"status": status}
    if metrics_token_ok(request):
        body.update(checks=checks, failing=failing, **_details())
    return JsonResponse(body, status=http_status)
