"""Statements of the hot paths through psycopg directly (issue 15 §1, §3): server-side binding (each
parameter sent typed, lists as binary arrays), optionally prepared on the server, none of Django's cursor
wrapper. Django's client-side binding quotes every array element into the SQL text, which cost the count
projector more than its statements took to run.

The cursor works on the alias's own connection, so it is inside whatever transaction Django has open
there (`transaction.atomic(using=alias)`), and errors still go through Django's error wrapping (a broken
connection is discarded at the end of the request, as with any query). What differs from a Django cursor:
a statement's parameter types are fixed by its text, so the SQL casts what it must (`%s::bigint[]`),
and Django's execute wrappers (query counting in tests) do not see these statements.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import connections


@contextmanager
def raw_cursor(alias: str) -> Iterator[psycopg.Cursor]:
    conn = connections[alias]
    conn.ensure_connection()
    with conn.wrap_database_errors, psycopg.Cursor(conn.connection) as cursor:
        yield cursor
