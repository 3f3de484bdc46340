"""Shared fixtures. Tests run against real PostgreSQL (default + 2 relation shards + 2 count
partitions) and real Redis; nothing here mocks a store."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from likes_project import l1cache
from likes_project.redis_client import cache_redis, stream_redis
from opsconsole.services import contracts_ensure
from relations.models import RelationCacheGeneration
from relations.services.relation_cache import cache_generations_mirror
from tests import factories, legacy


def ensure_contracts() -> None:
    """The frozen contracts every database test needs (what `migrate_all` creates): relation shards,
    stream partitions, the count projection's bucket space, generation, sealed manifest, routes and
    fences, and the first generations of the caches and the reverse index."""
    l1cache.clear_all()  # the per-process contract and generation caches
    contracts_ensure()
    gen = RelationCacheGeneration.objects.get(status="ACTIVE")
    # Each test starts with a healthy relation cache: the registry mirrored and the sentinel present.
    cache_generations_mirror(sentinel_for=gen.generation)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        if os.environ.get("LIKES_TEST_DATABASES") == "upgraded":
            # The databases as the landed code created them, migrated forward in place.
            for alias in connections:
                legacy.database_load(alias)
                call_command("migrate", database=alias, interactive=False, verbosity=0)
        ensure_contracts()


def _flush_test_redis() -> None:
    prefix = settings.LIKES_REDIS_PREFIX
    assert prefix.startswith("likes-test"), "tests only ever delete their own keys"
    for client in {id(c): c for c in (cache_redis(), stream_redis())}.values():
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture(autouse=True)
def clean_redis():
    _flush_test_redis()
    l1cache.clear_all()
    yield


@pytest.fixture(autouse=True)
def shard_contract(request, clean_redis):
    """Every database test sees the frozen relation shard contract (a transactional test's flush
    removes it, so it is ensured per test)."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        yield
        return
    request.getfixturevalue("_django_db_helper")
    ensure_contracts()
    yield
    l1cache.clear_all()


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
