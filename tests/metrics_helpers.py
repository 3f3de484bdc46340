"""Reading /metrics in tests (issue 10): the store gauges come from the stored snapshot, so a test that
wants today's values refreshes it first, as the beat job does; the scrape carries the metrics token."""

from __future__ import annotations

import re

from django.test import override_settings

from likes_project.observability import gauges_refresh

METRICS_TOKEN = "test-metrics-token"
SAMPLE_RE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def scrape_text(client, *, refresh: bool = True) -> str:
    """GET /metrics with the bearer token (after computing the store gauges unless `refresh` is false)."""
    if refresh:
        gauges_refresh()
    with override_settings(METRICS_TOKEN=METRICS_TOKEN, METRICS_PUBLIC=False):
        resp = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}")
    assert resp.status_code == 200, resp.content
    assert resp["Content-Type"].startswith("text/plain")
    return resp.content.decode()


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a Prometheus text page as {(name, labels): value}; fails on a malformed line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m["labels"] or ""))
        samples[(m["name"], labels)] = float(m["value"])
    return samples
