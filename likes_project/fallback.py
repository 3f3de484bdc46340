"""Bounded database fallback (DEG-1 step 4): when Redis is down or bypassed, every read lands on the
databases, and a burst must queue briefly, then fail with 503 `degraded_overloaded`, rather than drain
the connection pool. One limiter per store a read path falls back to, each a per-process semaphore
sized by DB_FALLBACK_CONCURRENCY. Each read a limiter admits and each it refuses is counted by store (M15's
DB fallback volume: a read that takes a slot is one query on the databases)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from django.conf import settings

from likes_project import metrics
from likes_project.errors import DegradedOverloaded


class FallbackLimiter:
    def __init__(self, store: str, *, wait_s: Callable[[], float]):
        self.store = store
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._sem: threading.BoundedSemaphore | None = None

    def _semaphore(self) -> threading.BoundedSemaphore:
        with self._lock:
            if self._sem is None:
                self._sem = threading.BoundedSemaphore(getattr(settings, "DB_FALLBACK_CONCURRENCY", 32))
            return self._sem

    def reset(self) -> None:
        """Size the semaphore from the settings again on next use (no read may be in flight)."""
        with self._lock:
            self._sem = None

    @contextlib.contextmanager
    def slot(self):
        sem = self._semaphore()
        if not sem.acquire(timeout=max(0.0, self.wait_s())):
            metrics.inc("likes_db_fallback_rejected_total", store=self.store)  # M15: DB fallback volume, refused
            raise DegradedOverloaded(headers={"Retry-After": "1"})
        metrics.inc("likes_db_fallback_reads_total", store=self.store)  # M15: DB fallback volume, admitted
        try:
            yield
        finally:
            sem.release()
