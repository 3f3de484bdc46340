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
_last: dict[tuple, float] = {}  # key -> when its last send was queued
_trailing: dict[tuple, tuple[float, str, tuple]] = {}  # key -> (due, task name, args): one held-back send
_QUEUE_MAX = 1000
_WAKE = object()  # tells the sender thread a trailing send was added (it recomputes its timeout)
_outbox: queue.Queue | None = None
_owner_pid = 0


def _default_debounce_s() -> float:
    return float(getattr(settings, "NUDGE_DEBOUNCE_S", 0.2))


def nudge(task_name: str, *args, debounce_s: float | None = None) -> bool:
    """Queue a send of `task_name(*args)`; False when nudges are off, folded into a pending send, or
    the queue is full.

    Debounced per (task, args) on both edges (issue 15: a send costs the process about 1 ms of CPU,
    a third of a like command's): the first nudge of a quiet key is sent at once; nudges within
    `debounce_s` (NUDGE_DEBOUNCE_S, 0.2 s) of the last send fold into one trailing send at the end
    of that window, so a burst costs one send per window and its last change still gets a nudge.
    `debounce_s=0` sends every nudge."""
    if not settings.LIKES_NUDGE_ENABLED:
        return False
    window = _default_debounce_s() if debounce_s is None else debounce_s
    if window > 0:
        key = (task_name, repr(args))
        now = time.monotonic()
        with _lock:
            last = _last.get(key)
            if last is not None and now - last < window:
                if key in _trailing:
                    return False
                _trailing[key] = (last + window, task_name, args)
                item = _WAKE
            else:
                _last[key] = now
                item = (task_name, args)
    else:
        item = (task_name, args)
    try:
        _sender().put_nowait(item)
    except queue.Full:
        if item is not _WAKE:
            metrics.inc("likes_nudge_dropped_total", task=task_name)
            return False
    return item is not _WAKE


def _sender() -> queue.Queue:
    """This process's queue and its sender thread (started again in a forked child, which inherits
    the parent's queue object but not its thread)."""
    global _outbox, _owner_pid
    with _lock:
        if _outbox is None or _owner_pid != os.getpid():
            _outbox, _owner_pid = queue.Queue(maxsize=_QUEUE_MAX), os.getpid()
            _trailing.clear()
            threading.Thread(target=_send_loop, args=(_outbox,), name="nudge-sender", daemon=True).start()
        return _outbox


def _due_trailing(*, everything: bool = False) -> list[tuple[str, tuple]]:
    """Take the trailing sends that are due (all of them with `everything`), marking each as sent now."""
    now = time.monotonic()
    with _lock:
        due = [k for k, (when, _t, _a) in _trailing.items() if everything or when <= now]
        out = []
        for key in due:
            _when, task_name, args = _trailing.pop(key)
            _last[key] = now
            out.append((task_name, args))
        return out


def _next_due_in() -> float | None:
    with _lock:
        if not _trailing:
            return None
        return max(0.0, min(when for when, _t, _a in _trailing.values()) - time.monotonic())


def _send(task_name: str, args: tuple) -> None:
    from likes_project.celery import app

    try:
        app.send_task(task_name, args=list(args), retry=False)
    except Exception as exc:  # noqa: BLE001 - the sweeper guarantees progress; never fail anyone
        metrics.inc("likes_nudge_failures_total", task=task_name)
        logger.warning("nudge %s failed: %s", task_name, exc.__class__.__name__)


def _send_loop(pending: queue.Queue) -> None:
    while True:
        try:
            item = pending.get(timeout=_next_due_in())
        except queue.Empty:
            item = None
        try:
            for task_name, args in _due_trailing():
                _send(task_name, args)
            if item is not None and item is not _WAKE:
                _send(*item)
        finally:
            if item is not None:
                pending.task_done()


def nudges_flush(timeout_s: float = 2.0) -> bool:
    """Wait (bounded) until this process's queued nudges were handed to the broker; True if they were.
    Trailing sends still held back are queued at once. Runs at exit, so a short-lived command's last
    nudges are not lost with its process."""
    pending = _outbox if _owner_pid == os.getpid() else None
    if pending is None:
        return True
    for item in _due_trailing(everything=True):
        try:
            pending.put_nowait(item)
        except queue.Full:
            break
    deadline = time.monotonic() + timeout_s
    while pending.unfinished_tasks and time.monotonic() < deadline:
        time.sleep(0.01)  # queue.join() has no timeout; poll the counter until it drains or time is up
    return not pending.unfinished_tasks


atexit.register(nudges_flush)
