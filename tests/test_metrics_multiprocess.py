"""The acceptance test of issue 10 §1 (D45): a real gunicorn with two workers, started the way the
Procfile does (`-c python:likes_project.gunicorn_conf`), on this run's test databases and a private
PROMETHEUS_MULTIPROC_DIR. Requests land on both workers; scrapes land on both workers too, and every one
of them shows the counter summed over both, exactly: it never goes backwards and equals the number of
requests sent. A worker killed mid-way is replaced; its counts stay in the sum, and `child_exit` drops
its live gauge file.

(The per-process counters this replaced did go backwards: each scrape showed only the answering
worker's own count. That was shown once against the previous release and is reported in D45; a test of
it would be a test of code that no longer exists.)
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from tests import drills
from tests.metrics_helpers import parse

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

TOKEN = "multiprocess-test-token"
HEALTHZ = frozenset({("route", "healthz"), ("method", "GET"), ("status_class", "2xx")})
SCRAPES = frozenset({("route", "metrics"), ("method", "GET"), ("status_class", "2xx")})


class Gunicorn(drills.Gunicorn):
    """The web processes with a multiprocess metrics directory of their own, scraped with the metrics token."""

    def __init__(self, tmp_path: Path, workers: int = 2) -> None:
        self.dir = tmp_path / "prometheus"
        self.dir.mkdir()
        super().__init__(tmp_path, workers, PROMETHEUS_MULTIPROC_DIR=str(self.dir), METRICS_TOKEN=TOKEN,
                         METRICS_PUBLIC="false")

    def scrape(self) -> dict[tuple[str, frozenset], float]:
        return parse(self.get("/metrics", Authorization=f"Bearer {TOKEN}"))

    def per_worker(self, pid: int, labels: frozenset) -> float:
        """One process's own count of requests with `labels`, read from its file in the directory."""
        path = self.dir / f"counter_{pid}.db"
        if not path.exists():
            return 0.0
        for metric in MultiProcessCollector.merge([str(path)]):
            for s in metric.samples:
                if s.name == "likes_http_requests_total" and frozenset(s.labels.items()) == labels:
                    return s.value
        return 0.0


@pytest.fixture
def gunicorn(tmp_path):
    with drills.gunicorn_serving(Gunicorn(tmp_path), workers=2) as server:
        yield server


def _hit(server: Gunicorn, n: int) -> None:
    """`n` GET /healthz, eight at a time (each on a connection of its own), so both workers take some."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        for body in pool.map(lambda _i: server.get("/healthz"), range(n)):
            assert '"ok"' in body


def _requests(samples) -> float:
    return samples.get(("likes_http_requests_total", HEALTHZ), 0.0)


def test_a_counter_summed_over_gunicorn_workers_never_goes_backwards(gunicorn):
    workers = gunicorn.workers()
    sent = _requests(gunicorn.scrape())  # the fixture's readiness polls
    assert sent >= 1
    seen = [sent]

    # Requests on both workers, scrapes on both workers, every scrape the exact total.
    def both_served(labels: frozenset) -> bool:
        return all(gunicorn.per_worker(pid, labels) > 0 for pid in workers)

    for _round in range(6):
        _hit(gunicorn, 40)
        sent += 40
        for _scrape in range(10):
            seen.append(_requests(gunicorn.scrape()))
            assert seen[-1] == sent, seen
        if both_served(HEALTHZ) and both_served(SCRAPES):
            break
    assert both_served(HEALTHZ), "every request landed on one worker"
    assert both_served(SCRAPES), "every scrape landed on one worker"
    assert sum(gunicorn.per_worker(pid, HEALTHZ) for pid in workers) == sent

    # A worker dies: gunicorn replaces it, its counts stay in the sum, its live gauges are dropped.
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    drills.wait_for(lambda: len(gunicorn.workers() - {victim}) == 2, timeout_s=60, what="a replacement worker")
    drills.wait_for(lambda: not (gunicorn.dir / f"gauge_livesum_{victim}.db").exists(), timeout_s=30,
                    what="child_exit to drop the dead worker's live gauges")
    assert (gunicorn.dir / f"counter_{victim}.db").exists()
    for _scrape in range(10):
        seen.append(_requests(gunicorn.scrape()))
        assert seen[-1] == sent, seen

    _hit(gunicorn, 40)
    sent += 40
    for _scrape in range(10):
        samples = gunicorn.scrape()
        seen.append(_requests(samples))
        assert seen[-1] == sent, seen
        # Summed over live processes only: the scrape itself is the one request in flight.
        assert samples[("likes_http_requests_in_flight", frozenset())] == 1
    assert seen == sorted(seen)
