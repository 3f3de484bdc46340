"""The flush that ends every transactional test, made cheap (issue 28, D100). Installed by tests/conftest.py for
the test process only; `manage.py flush` in a deployment is Django's own.

Django empties each database with one `TRUNCATE` of all its tables, then emits `post_migrate`, whose handlers
write back every content type and permission they find missing. Here, for six databases after every
transactional test, that was about 0.4 s a test on this machine: a TRUNCATE makes new files for every table
(~3 ms a table, ~90 tables), where a DELETE of the few rows a test leaves costs a fraction of a millisecond.

- The content types and permissions are kept (the handlers would write the same rows back), so `post_migrate`
  has nothing to do and is not emitted.
- Every other table is emptied by `DELETE` in one transaction with `session_replication_role = replica`: no
  trigger fires (the audit log's append-only guard, the slot-capture triggers) and no foreign key is checked
  (every row of every referencing table goes too). That setting needs a superuser; for any other role, or
  when a test asks for its sequences reset, Django's TRUNCATE runs as before.
- Then the rows the session setup left (the migrations' data, such as the console's role groups, and the frozen
  contracts `tests/conftest.py` commits) are put back from a copy taken once per database (`seed_capture`, in
  the schema `test_seed`): every test starts from the state a fresh deployment has, and the next test needs no
  contract bootstrap of its own (about 0.1 s of ORM work across six databases, after every transactional test).
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.commands import flush as flush_command
from django.db import connections
from django.db.backends.postgresql.operations import DatabaseOperations

from likes_project.redis_client import cache_redis, stream_redis

KEPT = frozenset({"django_content_type", "auth_permission"})
SEED = "test_seed"
_truncate = DatabaseOperations.sql_flush
_superuser: dict[str, bool] = {}
_seeded: dict[str, list[str]] = {}  # database name -> its tables that had rows when the seed was taken


def _is_superuser(connection) -> bool:
    name = connection.settings_dict["NAME"]
    if name not in _superuser:
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            _superuser[name] = bool(cursor.fetchone()[0])
    return _superuser[name]


def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
    tables = [table for table in tables if table not in KEPT]
    if reset_sequences or allow_cascade or not tables or not _is_superuser(self.connection):
        return _truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
    seeded = _seeded.get(self.connection.settings_dict["NAME"], ())
    return ["SET LOCAL session_replication_role = replica",
            *(f"DELETE FROM {self.quote_name(table)}" for table in tables),
            *(f"INSERT INTO {self.quote_name(table)} SELECT * FROM {SEED}.{self.quote_name(table)}"
              for table in seeded if table in tables)]


def seed_capture() -> bool:
    """Copy the rows every database holds now, once the session setup is done, for the flush to put back.
    True when every database's flush will (a superuser's); else the flush leaves them empty, as Django's does."""
    complete = True
    for alias in connections:
        connection = connections[alias]
        if not _is_superuser(connection):
            complete = False
            continue
        seeded = []
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        with connection.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {SEED} CASCADE; CREATE SCHEMA {SEED}")
            for table in sorted(set(tables) - KEPT):
                name = connection.ops.quote_name(table)
                cursor.execute(f"SELECT EXISTS (SELECT FROM {name})")
                if cursor.fetchone()[0]:
                    cursor.execute(f"CREATE TABLE {SEED}.{name} AS SELECT * FROM {name}")
                    seeded.append(table)
        _seeded[connection.settings_dict["NAME"]] = seeded
    return complete


_statements: dict[tuple, list[str]] = {}  # (database, flags, its seed) -> the flush's statements


def flush_statements(style, connection, reset_sequences=True, allow_cascade=False):
    """`manage.py flush`'s statements for a database, built once: the tables never change within a test run, and
    Django's builder reads the catalogue and walks every model again each time (after every transactional test,
    on every database)."""
    name = connection.settings_dict["NAME"]
    key = (name, reset_sequences, allow_cascade, tuple(_seeded.get(name, ())))
    if key not in _statements:
        _statements[key] = _django_statements(style, connection, reset_sequences=reset_sequences,
                                              allow_cascade=allow_cascade)
    return list(_statements[key])


_django_statements = flush_command.sql_flush


def install() -> None:
    DatabaseOperations.sql_flush = sql_flush
    flush_command.sql_flush = flush_statements
    # What post_migrate writes (content types, permissions) was kept; it has nothing to add.
    flush_command.emit_post_migrate_signal = lambda *args, **kwargs: None


def redis_flush(*clients) -> None:
    """What a FLUSHDB is to the service, for this test process only: every key under its own prefix goes
    (the service keeps nothing outside it), and the other xdist workers' keys on the same database stay, so a
    test that flushes the event log need not run alone. Default: the cache and event-log Redis."""
    prefix = settings.LIKES_REDIS_PREFIX
    assert prefix.startswith("likes-test"), "tests only ever delete their own keys"
    if not clients:
        clients = (cache_redis(), stream_redis())
    for client in {id(c): c for c in clients}.values():
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
