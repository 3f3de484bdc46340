"""Django's PostgreSQL backend, with the connection health check paid only by a connection that sat idle.

With CONN_HEALTH_CHECKS a persistent connection runs `SELECT 1` before the first query of every request and task:
one round trip more per command (issue 34 §1 found it in the HTTP profile). A connection used less than
`DB_HEALTH_CHECK_IDLE_S` ago is presumed alive, as the statement it just ran proved: a server that went away in
that moment fails the next query instead, which the request answers 503 `service_unavailable` (a command's retry with
its Idempotency-Key is safe), and Django closes the broken connection at the request's end, so the next request
connects again. An idle connection is checked as before, and a Celery task checks every connection before its
first query (`check_at_next_use`): a pass handles a batch, so the round trip is cheap there, and a worker whose
shard was restarted reconnects rather than failing a pass into its backoff (D137)."""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connections
from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    used_at = float("-inf")  # time.monotonic() of the last cursor this connection gave out

    def close_if_health_check_failed(self) -> None:
        now = time.monotonic()
        if self.connection is not None and now - self.used_at < settings.DB_HEALTH_CHECK_IDLE_S:
            self.health_check_done = True  # used a moment ago: no round trip to prove it again
        super().close_if_health_check_failed()
        self.used_at = now


def check_at_next_use() -> None:
    """Every connection this thread opened checks itself before its next query, however recently it was used."""
    for conn in connections.all(initialized_only=True):
        conn.used_at = float("-inf")
