"""Liveness and readiness. Readiness asks every database alias and Redis."""

from __future__ import annotations

from django.db import connections
from django.http import HttpResponse, JsonResponse

from likes_project import metrics, observability
from likes_project.redis_client import cache_redis, stream_redis


def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_database(alias: str) -> str | None:
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")
        return None
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure as "not ready"
        return exc.__class__.__name__


def _check_redis(client) -> str | None:
    try:
        client.ping()
        return None
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure as "not ready"
        return exc.__class__.__name__


def readyz(request):
    """200 `ready` when every database alias and Redis answer; 200 `degraded` when only Redis is down
    (reads fall back to the databases, commands still commit; DEG-1); 503 `not_ready` naming the
    failing part when a database alias does not answer."""
    checks: dict[str, str] = {}
    for alias in connections:
        err = _check_database(alias)
        checks[f"db:{alias}"] = "ok" if err is None else f"fail: {err}"
    for name, client in (("redis:cache", cache_redis()), ("redis:streams", stream_redis())):
        err = _check_redis(client)
        checks[name] = "ok" if err is None else f"fail: {err}"
    failing = sorted(k for k, v in checks.items() if v != "ok")
    down = [k for k in failing if k.startswith("db:")]
    if down:
        return JsonResponse(
            {"code": "not_ready", "message": "Some databases are not answering.", "failing": failing,
             "checks": checks},
            status=503,
        )
    if failing:
        metrics.inc("likes_readyz_degraded_total")
        return JsonResponse({"status": "degraded", "degraded": failing, "checks": checks})
    return JsonResponse({"status": "ready", "checks": checks})


def metrics_view(request):
    # In-process counters, then the gauges read from the stores at scrape time (never raises).
    return HttpResponse(metrics.render() + observability.render(), content_type="text/plain; version=0.0.4")
