"""Fixtures shared by the counting tests (a module that needs another shape defines its own)."""

from __future__ import annotations

import pytest

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
