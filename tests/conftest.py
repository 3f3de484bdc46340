"""Shared fixtures. Tests run against real PostgreSQL (default + 2 relation shards + 2 count
partitions) and real Redis; nothing here mocks a store."""

from __future__ import annotations

import contextlib
import os

import pytest
from django.db import connections
from django.db.backends.postgresql.base import DatabaseWrapper as PostgresDatabaseWrapper
from pytest_django.fixtures import validate_django_db

from counting.services.count_cache.layers import count_cache_generations_mirror
from likes_project import l1cache
from opsconsole.services import contracts_ensure
from relations.models import RelationCacheGeneration
from relations.services.relation_cache import cache_generations_mirror
from tests import factories, flush, passes, testdb

# The browser's fixtures (debian_chromium, open_page) for every module that drives the console in Chromium.
pytest_plugins = ["tests.browser"]

flush.install()

UNCLASSIFIED = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before `-m` deselects any: the tests that declare no pass, or two (tests/passes.py)."""
    config.stash[UNCLASSIFIED] = passes.unclassified(items)

_RUN_LOCK = passes.run_lock()


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` schedules with the module groups of tests/passes.py."""
    if config.getvalue("dist") == "loadgroup":
        return passes.ModuleGroupScheduling(config, log)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist, an `exclusive` test runs while no other test of the run does (setup and
    teardown included); every other test runs beside the others."""
    if _RUN_LOCK is None:
        return (yield)
    with _RUN_LOCK.held(exclusive=item.get_closest_marker(passes.EXCLUSIVE) is not None):
        return (yield)


@contextlib.contextmanager
def _nodb_cursor_without_timeout(self):
    """Creating and dropping the test databases runs without the 5 s statement timeout every connection
    carries: DROP DATABASE forces a checkpoint, which on a loaded machine can outlast it, and a database
    left behind trips the next run. The application's own connections keep their timeouts."""
    with _nodb_cursor(self) as cursor:
        cursor.execute("SET statement_timeout = 0")
        yield cursor


_nodb_cursor = PostgresDatabaseWrapper._nodb_cursor
PostgresDatabaseWrapper._nodb_cursor = _nodb_cursor_without_timeout


def ensure_contracts() -> None:
    """The frozen contracts every database test needs (what `migrate_all` creates): relation shards,
    stream partitions, the count projection's bucket space, generation, sealed manifest, routes and
    fences, and the first generations of the caches and the reverse index."""
    l1cache.clear_all()  # the per-process contract and generation caches
    contracts_ensure()
    caches_mirrored()


def caches_mirrored() -> None:
    """What `contracts_ensure` writes to Redis when the contracts exist: the count cache's registry, and the
    relation cache's registry and sentinel (each test starts with a healthy relation cache)."""
    count_cache_generations_mirror()
    gen = RelationCacheGeneration.objects.get(status="ACTIVE")
    cache_generations_mirror(sentinel_for=gen.generation)


# Whether the contracts `ensure_contracts` creates are committed in this process's test databases. The session
# setup commits them, and a transactional test's teardown flush puts them back (tests/flush.py); where it cannot
# (not a superuser), the next database test commits them again, before its own transaction begins (a test in a
# rolled-back transaction then finds them and pays nothing for them).
_contracts = {"committed": False, "restored_by_flush": False}


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_modify_db_settings, django_db_blocker):
    """pytest-django's, with the databases cloned from migrated templates (tests/testdb.py). With
    LIKES_TEST_DATABASES=upgraded: the databases as the landed code created them (tests/legacy), migrated
    forward in place."""
    kind = "upgraded" if os.environ.get("LIKES_TEST_DATABASES") == "upgraded" else "fresh"
    with django_db_blocker.unblock():
        old_names = testdb.setup(kind)
        ensure_contracts()
        _contracts["restored_by_flush"] = flush.seed_capture()
    _contracts["committed"] = True
    yield
    with django_db_blocker.unblock():
        _end_other_sessions()
        testdb.teardown(old_names)


def _end_other_sessions() -> None:
    """Before pytest-django drops the test databases: end the sessions other threads and processes of
    this run left open on them (a live server's threads, probe pools, spawned servers). DROP DATABASE
    waits up to 5 s for them, which the 5 s statement timeout cuts short, leaving the databases behind
    for the next run to trip over."""
    servers: dict[tuple, list[str]] = {}  # on `scaled` the databases live on two servers: each ends its own
    for alias in connections:
        conf = connections[alias].settings_dict
        servers.setdefault((conf["HOST"], str(conf["PORT"])), []).append(alias)
    for aliases in servers.values():
        names = sorted({connections[alias].settings_dict["NAME"] for alias in aliases})
        with connections[aliases[0]].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = ANY(%s) AND pid <> pg_backend_pid()", [names])


@pytest.fixture(autouse=True)
def clean_redis():
    flush.redis_flush()
    l1cache.clear_all()
    yield


@pytest.fixture(autouse=True)
def shard_contract(request, clean_redis, django_db_blocker):
    """Every database test sees the frozen contracts (committed once, and again after a transactional test's
    flush) and a healthy relation cache (its Redis side is emptied before every test)."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        yield
        return
    if not _contracts["committed"]:
        with django_db_blocker.unblock():
            ensure_contracts()
        _contracts["committed"] = True
    if _transactional(request, marker) and not _contracts["restored_by_flush"]:
        _contracts["committed"] = False  # its teardown flushes every database, contracts included
    request.getfixturevalue("_django_db_helper")
    l1cache.clear_all()
    caches_mirrored()
    yield
    l1cache.clear_all()


def _transactional(request, marker) -> bool:
    """As pytest-django's `_django_db_helper` decides."""
    transaction, reset_sequences, *_ = validate_django_db(marker)
    return bool(transaction or reset_sequences
                or {"transactional_db", "django_db_reset_sequences", "live_server"} & set(request.fixturenames))


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
