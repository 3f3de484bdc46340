"""Spec §7's drill 2 (`publisher-paused`) and drill 3 (`eventlog-partition-down`) on a real Celery worker and beat,
as tests/test_drills.py runs the others: commands succeed while one shard's publisher is paused or one event-log
partition is unavailable, the backlog shows (the outbox panel; publish retries), and every projection converges
exactly. Once (the `single` pass), on the drills' worker after them (`tests/passes.py` JOINS); the partition drill on
a private event-log Redis (it sets a stream key aside)."""

from __future__ import annotations

import pytest

from tests.test_drills import private_eventlog, run  # noqa: F401 - a fixture

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]


# spec §7 drill 2: the outbox publisher paused.
def test_publisher_paused(settings):
    settings.LIKES_DRILLS_ENABLED = True
    verdict = run("publisher-paused")
    assert "paused" in verdict.injected[0] and "outbox panel showed" in verdict.recovered[0], verdict.recovered
    assert set(verdict.phases["fault"]["commands"]) == {"200"}
    assert verdict.backlog_max["fault_outbox"] > 0, verdict.backlog_max


# spec §7 drill 3: one event-log partition unavailable.
def test_eventlog_partition_down(settings, private_eventlog):  # noqa: F811
    settings.LIKES_DRILLS_ENABLED = True
    verdict = run("eventlog-partition-down")
    assert set(verdict.phases["fault"]["commands"]) == {"200"}
    assert verdict.retries["outbox_failed_attempts"] > 0, verdict.retries  # its rows were retried
