"""The audit log is append-only in the database (issue 10, D49): a row trigger refuses UPDATE and DELETE
from the ORM, a raw cursor and a session of its own (what `psql` would be), while INSERT works and
TRUNCATE (the test flush) is not blocked."""

from __future__ import annotations

import psycopg
import pytest
from django.core.management.color import no_style
from django.db import DatabaseError, connections, transaction

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import audit_record
from tests.factories import TEST_ACTOR

pytestmark = [pytest.mark.topology_independent, pytest.mark.schema]

TABLE = AuditRecord._meta.db_table
REFUSED = "Cannot update or delete rows"


def record(target_id: str = "t-1") -> AuditRecord:
    with transaction.atomic(using="default"):
        return audit_record(actor=TEST_ACTOR, action="test.action", target_type="test", target_id=target_id,
                            params={"n": 1})


def refused(run) -> None:
    """`run()` is refused by the trigger; the savepoint keeps the test's transaction usable."""
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic(using="default"):
        run()


def raw(sql: str, *params) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(sql, params)


@pytest.mark.django_db(databases="__all__")
def test_an_insert_works_and_the_orm_cannot_change_or_delete_the_row():
    row = record()
    assert AuditRecord.objects.filter(pk=row.pk).exists()

    row.outcome = "forged"
    refused(row.save)
    refused(lambda: AuditRecord.objects.filter(pk=row.pk).update(actor="forged"))
    refused(row.delete)
    refused(lambda: AuditRecord.objects.all().delete())

    stored = AuditRecord.objects.get(pk=row.pk)
    assert (stored.actor, stored.outcome, stored.params) == ("tests", "applied", {"n": 1})


@pytest.mark.django_db(databases="__all__")
def test_raw_sql_update_and_delete_are_refused():
    row = record()
    raw(f"INSERT INTO {TABLE} (at, actor, channel, action, target_type, target_id, params, outcome) "
        "VALUES (now(), 'raw', 'cli', 'raw.insert', 'test', 't-2', '{}', 'applied')")
    refused(lambda: raw(f"UPDATE {TABLE} SET actor = 'forged' WHERE id = %s", row.pk))
    refused(lambda: raw(f"UPDATE {TABLE} SET outcome = 'forged'"))
    refused(lambda: raw(f"DELETE FROM {TABLE} WHERE id = %s", row.pk))
    refused(lambda: raw(f"DELETE FROM {TABLE}"))
    assert sorted(AuditRecord.objects.values_list("actor", "outcome")) == [("raw", "applied"), ("tests", "applied")]


@pytest.mark.django_db(databases="__all__")
def test_a_session_of_its_own_is_refused_too():
    """What an operator with the service's database credentials would do in psql."""
    cfg = connections["default"].settings_dict
    info = {"dbname": cfg["NAME"], "host": cfg.get("HOST") or "127.0.0.1", "port": cfg.get("PORT") or 5432,
            "user": cfg.get("USER") or None, "password": cfg.get("PASSWORD") or None}
    with psycopg.connect(**{k: v for k, v in info.items() if v is not None}) as conn:
        try:
            row_id = conn.execute(
                f"INSERT INTO {TABLE} (at, actor, channel, action, target_type, target_id, params, outcome) "
                "VALUES (now(), 'psql', 'cli', 'raw.insert', 'test', 't-3', '{}', 'applied') RETURNING id",
            ).fetchone()[0]
            for statement in (f"UPDATE {TABLE} SET actor = 'forged' WHERE id = %s",
                              f"DELETE FROM {TABLE} WHERE id = %s"):
                with pytest.raises(psycopg.errors.RaiseException, match=REFUSED), conn.transaction():
                    conn.execute(statement, (row_id,))
            assert conn.execute(f"SELECT actor FROM {TABLE} WHERE id = %s", (row_id,)).fetchone() == ("psql",)
        finally:
            conn.rollback()  # nothing of this session outlives the test


@pytest.mark.django_db(databases="__all__")
def test_the_trigger_is_installed_on_default_only():
    sql = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE 'pgtrigger_audit_append_only%%'"
    for alias in connections:
        with connections[alias].cursor() as cursor:
            cursor.execute(sql)
            names = [r[0] for r in cursor.fetchall()]
        assert len(names) == (1 if alias == "default" else 0), (alias, names)


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_truncate_the_test_flush_is_not_blocked():
    """A transactional test's teardown flushes the databases without firing a row trigger (Django's TRUNCATE,
    or the suite's DELETE with session_replication_role = replica, tests/flush.py): run the very statements
    the flush runs on the audit table, the way it runs them."""
    record()
    connection = connections["default"]
    connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), [TABLE]))
    assert AuditRecord.objects.count() == 0
    record("t-after")  # and this row goes with the teardown's flush
