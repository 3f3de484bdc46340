"""Best-effort, debounced nudges of Celery tasks. A nudge only cuts latency; the beat sweepers are
what guarantee progress (consistency-techniques T2), so a failed nudge is counted and dropped.

A nudge never waits for the broker (issue 9 §4): it is put on a bounded in-process queue and one
daemon thread per process sends it (`retry=False`, under the broker's connect and socket timeouts).
An unreachable broker therefore costs the request nothing: the sender thread waits out its timeouts,
the queue fills and further nudges are dropped (`likes_nudge_dropped_total`) until it answers again.

Coalesced across processes (issue 15 §2, D89): at most one nudged copy of a (task, args) waits in the
broker at any time. Before sending, the sender thread sets a flag for it in Redis (`SET NX`, expiring
after NUDGE_PENDING_TTL_S); a nudge that finds the flag set is dropped, since the queued copy has not
started yet and will see everything committed before this nudge. The task clears its flag when it
starts (a Celery `task_prerun` receiver, `pending_clear`), before it reads anything, so a change
committed after that start sets the flag again and queues the next run: no wake-up is lost. A flag
whose task was lost expires; meanwhile the beat sweepers run everything every second anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import threading
import time

from django.conf import settings
from redis.exceptions import RedisClusterException, RedisError

from likes_project import metrics
from likes_project.redis_client import stream_redis
from likes_project.taskapp import app

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


def pending_key(task_name: str, args) -> str:
    """The flag that says a nudged copy of task_name(*args) waits in the broker (not started yet)."""
    return f"{settings.LIKES_REDIS_PREFIX}:nudge:{task_name}:{json.dumps(list(args), separators=(',', ':'))}"


def _claim(task_name: str, args: tuple) -> bool:
    """True when this nudge must be sent: no copy is waiting (the flag was not set and is set now), or
    Redis could not say (a send too many is harmless, a lost wake-up only waits for the sweeper)."""
    ttl_ms = int(float(getattr(settings, "NUDGE_PENDING_TTL_S", 5.0)) * 1000)
    if ttl_ms <= 0:
        return True
    try:
        return bool(stream_redis().set(pending_key(task_name, args), "1", nx=True, px=ttl_ms))
    except (RedisError, RedisClusterException):  # the Cluster's slot errors are not RedisErrors (a node restarting)
        return True


def pending_clear(task_name: str, args) -> None:
    """A task started: later nudges of the same (task, args) queue a new run."""
    with contextlib.suppress(RedisError):  # the flag expires by itself
        stream_redis().delete(pending_key(task_name, args))


def pending_forget_all() -> int:
    """Drop every flag (after a purge of the broker's queues, whose tasks will never clear theirs)."""
    client = stream_redis()
    keys = list(client.scan_iter(match=f"{settings.LIKES_REDIS_PREFIX}:nudge:*", count=1000))
    return int(client.delete(*keys)) if keys else 0


def _on_task_prerun(task=None, args=None, **_kw) -> None:
    if task is not None:
        pending_clear(task.name, tuple(args or ()))


def celery_connect() -> None:
    """Connect the flag-clearing receiver (called by `likes_project.celery`)."""
    from celery import signals

    signals.task_prerun.connect(_on_task_prerun, weak=False)


def send_unless_pending(task_name: str, args: tuple, *, retry: bool = True) -> bool:
    """Send task_name(*args) now, in this thread, unless a copy already waits in the broker (its flag is
    set): what the beat sweepers send, so that a sweep adds nothing where a nudged copy is queued and the
    queue holds at most one waiting copy per (task, args) however busy it gets. Raises the broker's
    error (a sweeper's failure is the beat's to log)."""
    if not _claim(task_name, args):
        metrics.inc("likes_nudge_coalesced_total", task=task_name)
        return False
    try:
        app.send_task(task_name, args=list(args), retry=retry)
    except Exception:
        pending_clear(task_name, args)
        raise
    return True


def _send(task_name: str, args: tuple) -> None:
    try:
        send_unless_pending(task_name, args, retry=False)
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
