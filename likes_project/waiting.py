"""Bounded polling of a condition other processes make true (a worker took a lease, a job finished): there
is nothing to wait on, so it is looked at every `poll_s` until it holds or `timeout_s` passes."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], *, timeout_s: float, poll_s: float = 0.2) -> object:
    """Poll `condition` until truthy or `timeout_s` passes (then its last value). The timeout bounds a
    broken wait; the caller measures nothing with it."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(poll_s)  # polling an observable condition of other processes: nothing to wait on
