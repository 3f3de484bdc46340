"""Best-effort, debounced nudges of Celery tasks. A nudge only cuts latency; the beat sweepers are
what guarantee progress (consistency-techniques T2), so a failed nudge is logged and dropped."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings

from likes_project import metrics

logger = logging.getLogger(__name__)
_lock = threading.Lock()
_last: dict[tuple, float] = {}


def nudge(task_name: str, *args, debounce_s: float = 0.05) -> bool:
    if not settings.LIKES_NUDGE_ENABLED:
        return False
    if debounce_s > 0:
        key = (task_name, repr(args))
        now = time.monotonic()
        with _lock:
            if now - _last.get(key, 0.0) < debounce_s:
                return False
            _last[key] = now
    try:
        from likes_project.celery import app

        app.send_task(task_name, args=list(args))
        return True
    except Exception as exc:  # noqa: BLE001 - the sweeper guarantees progress; never fail the caller
        metrics.inc("likes_nudge_failures_total", task=task_name)
        logger.warning("nudge %s failed: %s", task_name, exc.__class__.__name__)
        return False
