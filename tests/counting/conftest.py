"""Fixtures shared by the counting tests (a module that needs another shape defines its own)."""

from __future__ import annotations

import pytest

from likes_project.redis_client import cache_redis
from tests.counting.helpers import RoundTrips
from tests.factories import make_staff, redis_unreachable


@pytest.fixture
def author(make_user):
    return make_user()


@pytest.fixture
def staff():
    return make_staff()


@pytest.fixture
def unreachable_redis(settings):
    """Both Redis roles point at a closed port for the test."""
    with redis_unreachable(settings):
        yield


@pytest.fixture
def round_trips(monkeypatch):
    """Counts the round trips to Redis from here on (see RoundTrips)."""
    cache_redis().ping()  # a just-used connection sends no health-check PING inside the measured call
    return RoundTrips(monkeypatch)


@pytest.fixture
def window(settings):
    """Creator notifications coalesce over 600 s windows (`tests.counting.notify_kit.W`)."""
    settings.NOTIFY_WINDOW_S = 600


@pytest.fixture
def one_window(settings):
    """Every like a test makes falls in one notification window (its edges are in 2001 and 2033)."""
    settings.NOTIFY_WINDOW_S = 10**9
