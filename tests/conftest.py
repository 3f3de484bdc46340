"""Shared fixtures. Tests run against real PostgreSQL (default + 2 relation shards + 2 count
partitions) and real Redis; nothing here mocks a store."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connections

from likes_project.redis_client import cache_redis
from relations import routing
from relations.services.contracts import relation_shard_contract_ensure
from tests import factories


def _flush_test_redis() -> None:
    client = cache_redis()
    prefix = settings.LIKES_REDIS_PREFIX
    assert prefix.startswith("likes-test"), "tests only ever delete their own keys"
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(autouse=True)
def clean_redis():
    _flush_test_redis()
    yield


@pytest.fixture(autouse=True)
def shard_contract(request):
    """Every database test sees the frozen relation shard contract (a transactional test's flush
    removes it, so it is ensured per test)."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        yield
        return
    request.getfixturevalue("_django_db_helper")
    relation_shard_contract_ensure()
    yield
    routing.reset_cache()


@pytest.fixture
def make_user():
    return factories.make_user


@pytest.fixture
def make_video():
    return factories.make_video


@pytest.fixture
def api():
    return factories.ApiClientFactory()


@pytest.fixture
def close_db_connections():
    """For threaded tests: close every connection a worker thread opened."""
    yield
    for alias in connections:
        connections[alias].close()
