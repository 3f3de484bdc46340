"""The PostgreSQL backend's health check (D137): a connection used less than DB_HEALTH_CHECK_IDLE_S ago skips
Django's per-request `SELECT 1`, an idle one is checked and replaced when its server ended it; the counter-examples:
with the setting 0 every request checks, and a connection ended right after its last use fails its next query once,
is closed at the request's end, and the request after it connects again."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, connections

from likes_project.pgbackend.base import check_at_next_use

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]
ALIAS = "rel_00"


def _request(conn) -> int:
    """One request's use of the connection: Django's check at its start, one statement."""
    conn.close_if_unusable_or_obsolete()  # what request_started / a task's prerun does
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]


def _end_session(conn) -> None:
    pid = conn.connection.info.backend_pid
    params = {k: v for k, v in conn.get_connection_params().items() if k not in ("cursor_factory", "context")}
    with psycopg.connect(**params, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]


@pytest.fixture
def checks(monkeypatch):
    conn = connections[ALIAS]
    _request(conn)
    made: list[int] = []
    real = conn.is_usable
    monkeypatch.setattr(conn, "is_usable", lambda: made.append(1) or real())
    return conn, made


def test_a_connection_used_a_moment_ago_skips_the_check_and_an_idle_one_is_checked(checks, settings):
    conn, made = checks
    settings.DB_HEALTH_CHECK_IDLE_S = 60
    assert [_request(conn) for _ in range(3)] == [1, 1, 1] and made == []
    settings.DB_HEALTH_CHECK_IDLE_S = 0  # counter-example: every request pays its round trip
    assert [_request(conn) for _ in range(3)] == [1, 1, 1] and len(made) == 3

    settings.DB_HEALTH_CHECK_IDLE_S = 60
    _end_session(conn)
    conn.used_at = float("-inf")  # idle for long: checked, found ended, replaced before the statement
    assert _request(conn) == 1 and len(made) == 4
    _end_session(conn)
    check_at_next_use()  # a Celery task's start: checked however recently used
    assert _request(conn) == 1 and len(made) == 5


def test_a_connection_ended_right_after_its_use_fails_one_request_then_connects_again(checks, settings):
    conn, _made = checks
    settings.DB_HEALTH_CHECK_IDLE_S = 60
    _end_session(conn)
    with pytest.raises(OperationalError):
        _request(conn)
    assert _request(conn) == 1  # the failed request's end closed it; this one connected again
