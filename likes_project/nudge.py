"""Best-effort, debounced nudges of Celery tasks. A nudge only cuts latency; the beat sweepers are
what guarantee progress (consistency-techniques T2), so a failed nudge is counted and dropped.

A nudge never waits for the broker (issue 9 §4): it is put on a bounded in-process queue and one
daemon thread per process sends it (`retry=False`, under the broker's connect and socket timeouts).
An unreachable broker therefore costs the request nothing: the sender thread waits out its timeouts,
the queue fills and further nudges are dropped (`likes_nudge_dropped_total`) until it answers again.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time

from django.conf import settings

from likes_project import metrics

logger = logging.getLogger(__name__)
_lock = threading.Lock()
_last: dict[tuple, float] = {}
_QUEUE_MAX = 1000
_outbox: queue.Queue | None = None
_owner_pid = 0


def nudge(task_name: str, *args, debounce_s: float = 0.05) -> bool:
    """Queue a send of `task_name(*args)`; False when nudges are off, debounced, or the queue is full."""
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
        _sender().put_nowait((task_name, args))
    except queue.Full:
        metrics.inc("likes_nudge_dropped_total", task=task_name)
        return False
    return True


def _sender() -> queue.Queue:
    """This process's queue and its sender thread (started again in a forked child, which inherits
    the parent's queue object but not its thread)."""
    global _outbox, _owner_pid
    with _lock:
        if _outbox is None or _owner_pid != os.getpid():
            _outbox, _owner_pid = queue.Queue(maxsize=_QUEUE_MAX), os.getpid()
            threading.Thread(target=_send_loop, args=(_outbox,), name="nudge-sender", daemon=True).start()
        return _outbox


def _send_loop(pending: queue.Queue) -> None:
    from likes_project.celery import app

    while True:
        task_name, args = pending.get()
        try:
            app.send_task(task_name, args=list(args), retry=False)
        except Exception as exc:  # noqa: BLE001 - the sweeper guarantees progress; never fail anyone
            metrics.inc("likes_nudge_failures_total", task=task_name)
            logger.warning("nudge %s failed: %s", task_name, exc.__class__.__name__)
        finally:
            pending.task_done()


def nudges_flush(timeout_s: float = 2.0) -> bool:
    """Wait (bounded) until this process's queued nudges were handed to the broker; True if they were.
    Runs at exit, so a short-lived command's last nudges are not lost with its process."""
    pending = _outbox if _owner_pid == os.getpid() else None
    if pending is None:
        return True
    deadline = time.monotonic() + timeout_s
    while pending.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.01)  # queue.join() has no timeout; poll the counter until it drains or time is up
    return not pending.unfinished_tasks


atexit.register(nudges_flush)
