"""Request latency by route (issue 10 §2): one middleware, placed right after the body-size guard.

Every request is timed into `likes_http_request_duration_seconds{route, method, status_class}` and
counted in `likes_http_requests_total` with the same labels. `route` is the resolved URL name
(`view_name`, e.g. `like-relation`, `admin:index`), else the route pattern, else `unmatched` (unknown
paths, static files): never the raw path, so the label set is bounded by the URL configuration.
The four endpoints the spec watches also get a histogram of their own (M2, QRY, LIST), so alerts and
dashboards need no route filter. In-flight requests are a per-process gauge summed over live
processes.
"""

from __future__ import annotations

import time

from likes_project import metrics

REQUEST_SECONDS = "likes_http_request_duration_seconds"
REQUESTS_TOTAL = "likes_http_requests_total"
IN_FLIGHT = "likes_http_requests_in_flight"

# (URL name, method) -> the endpoint's own histogram.
ENDPOINT_HISTOGRAMS = {
    ("like-relation", "PUT"): "likes_command_duration_seconds",  # the like / unlike command
    ("like-relations-batch-query", "POST"): "likes_batch_query_duration_seconds",
    ("my-likes", "GET"): "likes_my_likes_duration_seconds",
    ("video-likers", "GET"): "likes_likers_duration_seconds",
}
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_of(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "unmatched"
    return match.view_name or match.route or "unmatched"


class HttpMetricsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        metrics.gauge_inc(IN_FLIGHT)
        try:
            response = self.get_response(request)
        finally:
            metrics.gauge_inc(IN_FLIGHT, -1)
        elapsed = time.perf_counter() - started
        route = route_of(request)
        method = request.method if request.method in _METHODS else "other"
        status_class = f"{response.status_code // 100}xx"
        metrics.observe(REQUEST_SECONDS, elapsed, route=route, method=method, status_class=status_class)
        metrics.inc(REQUESTS_TOTAL, route=route, method=method, status_class=status_class)
        named = ENDPOINT_HISTOGRAMS.get((route, method))
        if named is not None:
            metrics.observe(named, elapsed, status_class=status_class)
        return response
