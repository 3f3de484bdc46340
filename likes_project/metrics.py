"""In-process counters, exposed in Prometheus text format at `/metrics`.

Per process (each gunicorn worker has its own); a scrape of each worker or a push gateway
aggregates them. Kept dependency-free on purpose.
"""

from __future__ import annotations

import threading
from collections import defaultdict

_lock = threading.Lock()
_counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)


def inc(name: str, amount: float = 1.0, **labels: str) -> None:
    key = (name, tuple(sorted(labels.items())))
    with _lock:
        _counters[key] += amount


def observe(name: str, amount: float, **labels: str) -> None:
    """A summary: `<name>_sum`, `<name>_count` and `<name>_max` (enough for a mean and a bound)."""
    with _lock:
        _counters[(name + "_sum", tuple(sorted(labels.items())))] += amount
        _counters[(name + "_count", tuple(sorted(labels.items())))] += 1
        key = (name + "_max", tuple(sorted(labels.items())))
        _counters[key] = max(_counters.get(key, amount), amount)


def value(name: str, **labels: str) -> float:
    with _lock:
        return _counters.get((name, tuple(sorted(labels.items()))), 0.0)


def render() -> str:
    lines = []
    with _lock:
        for (name, labels), val in sorted(_counters.items()):
            label_txt = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.append(f"{name}{{{label_txt}}} {val}" if label_txt else f"{name} {val}")
    return "\n".join(lines) + "\n"
