"""Fixtures shared by the relations tests (a module that needs another shape defines its own)."""

from __future__ import annotations

import pytest

from tests.factories import make_staff
from tests.relations.helpers import service_client


@pytest.fixture
def author(make_user):
    return make_user()


@pytest.fixture
def user(make_user):
    return make_user()


@pytest.fixture
def video(make_video, author):
    return make_video("vid-1", author)


@pytest.fixture
def service():
    """An API client holding the video service's token (the internal API)."""
    return service_client()


@pytest.fixture
def staff():
    return make_staff()
