"""Counters and histograms, exposed in Prometheus text format at `/metrics` (issue 10 §1).

prometheus-client in multiprocess mode: every process (gunicorn workers, Celery workers and their
pool children, beat, management commands) writes its values to memory-mapped files of its own in
`PROMETHEUS_MULTIPROC_DIR`, and a scrape of any gunicorn worker sums the files of every process of
the host, dead ones included, so a counter never goes backwards whichever worker answers (D45).

This is the only module that imports prometheus_client. The mode is chosen when prometheus_client is
first imported, so the directory is put into the environment here, before that import, and inherited
by every child process. The directory is shared by every process of one host (one pid namespace): it
must be emptied only while none of them runs (by the start script, before it starts them; D45): a live
process whose file was deleted keeps counting into nothing.

Metrics are made on first use from the name and the sorted label names, so call sites need no
declarations: `inc` makes a Counter, `observe` a Histogram (latency buckets, or lag buckets for a name
ending in `_lag_seconds`), `gauge_inc` a per-process Gauge summed over live processes.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Iterable
from pathlib import Path

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
DEFAULT_MULTIPROC_DIR = Path(__file__).resolve().parent.parent / ".data" / "prometheus"

os.environ.setdefault(MULTIPROC_DIR_ENV, str(DEFAULT_MULTIPROC_DIR))
MULTIPROC_DIR = os.environ[MULTIPROC_DIR_ENV]
os.makedirs(MULTIPROC_DIR, exist_ok=True)

# These imports must follow the environment set above.
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values  # noqa: E402
from prometheus_client import multiprocess as _multiprocess  # noqa: E402
from prometheus_client.core import Metric  # noqa: E402
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4  # noqa: E402

if not getattr(values.ValueClass, "_multiprocess", False):
    # Something imported prometheus_client before this module set the directory: its value class is
    # per-process. Metrics read `values.ValueClass` when they are made, so switching it here is enough.
    values.ValueClass = values.get_value_class()

logger = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Request and query latency: 1 ms .. 10 s.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, math.inf)
# Pipeline lags (commit -> published / applied / displayed): 10 ms .. 10 min.
# Histograms of things that take minutes, with the lag buckets (up to 600 s): repairs, a ledger's time in a state.
LONG_HISTOGRAMS = frozenset({"likes_repair_duration_seconds", "likes_ledger_state_seconds"})
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf)

_lock = threading.Lock()
_metrics: dict[str, tuple[type, tuple[str, ...], object]] = {}


def _metric(kind: type, name: str, labelnames: tuple[str, ...], **kwargs):
    """The metric `name` (made on first use). A name is one metric: reusing it with another type or
    other label names is a programming error and raises."""
    found = _metrics.get(name)
    if found is None:
        with _lock:
            found = _metrics.get(name)
            if found is None:
                # registry=None: a scrape reads the files (MultiProcessCollector), not a registry.
                metric = kind(name, name.replace("_", " "), labelnames=labelnames, registry=None, **kwargs)
                found = _metrics[name] = (kind, labelnames, metric)
    if found[0] is not kind or found[1] != labelnames:
        raise ValueError(f"metric {name} is a {found[0].__name__} with labels {found[1]}, "
                         f"not a {kind.__name__} with labels {labelnames}")
    return found[2]


def _child(metric, labels: dict[str, object]):
    return metric.labels(**{k: str(v) for k, v in labels.items()}) if labels else metric


def inc(name: str, amount: float = 1.0, **labels: str) -> None:
    """Add `amount` (>= 0) to the counter `name` (a name ending in `_total` is exported as is)."""
    if amount < 0:
        logger.error("metric %s: a counter only grows (inc by %s ignored)", name, amount)
        return
    _child(_metric(Counter, name, tuple(sorted(labels))), labels).inc(amount)


def observe(name: str, amount: float, **labels: str) -> None:
    """Record one observation in the histogram `name` (`_bucket`, `_sum`, `_count` are exported)."""
    buckets = LAG_BUCKETS if name.endswith("_lag_seconds") or name in LONG_HISTOGRAMS else LATENCY_BUCKETS
    _child(_metric(Histogram, name, tuple(sorted(labels)), buckets=buckets), labels).observe(max(0.0, amount))


def gauge_inc(name: str, amount: float = 1.0, **labels: str) -> None:
    """Move the per-process gauge `name` by `amount` (negative to decrease). A scrape sums it over the
    live processes (`livesum`): a process that exits is dropped from the sum once gunicorn's
    `child_exit` marked it dead (likes_project.gunicorn_conf)."""
    _child(_metric(Gauge, name, tuple(sorted(labels)), multiprocess_mode="livesum"), labels).inc(amount)


def value(name: str, **labels: str) -> float:
    """This process's value of a counter (or of a histogram's `<name>_count` / `<name>_sum`); 0 for
    a metric this process never touched. The scrape's value is the sum over every process."""
    base, _, suffix = name.rpartition("_")
    found = _metrics.get(name)
    if found is None and suffix in ("count", "sum") and base in _metrics and _metrics[base][0] is Histogram:
        found = _metrics[base]
    if found is None:
        return 0.0
    kind, labelnames, metric = found
    if tuple(sorted(labels)) != labelnames:
        return 0.0
    child = _child(metric, labels)
    if kind is Histogram:
        # The families' _sum / _count samples, from this process's own values.
        samples = {s.name: s.value for s in child._child_samples() if s.name in ("_sum", "_count")}
        return float(samples.get("_sum" if suffix == "sum" else "_count", 0.0))
    return float(child._value.get())


class _Families:
    """A collector of ready-made gauge families (the stored scrape-time gauges)."""

    def __init__(self, families: Iterable[tuple[str, str, list[tuple[dict[str, str], float]]]]) -> None:
        self._families = list(families)

    def collect(self):
        for name, help_text, samples in self._families:
            family = Metric(name, help_text, "gauge")
            for labels, val in samples:
                family.add_sample(name, {k: str(v) for k, v in labels.items()}, float(val))
            yield family


def render(gauges: Iterable[tuple[str, str, list[tuple[dict[str, str], float]]]] = ()) -> str:
    """Every process's counters, histograms and live gauges of this host, summed, then `gauges`
    (name, help, [(labels, value)]) as gauge families."""
    registry = CollectorRegistry()
    os.makedirs(MULTIPROC_DIR, exist_ok=True)  # emptied by hand while running: answer, do not 500
    _multiprocess.MultiProcessCollector(registry, path=MULTIPROC_DIR)
    registry.register(_Families(gauges))
    return generate_latest(registry).decode()


def counter_samples(names: Iterable[str], *, path: str | None = None) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of the counters `names` (their `_total` samples), summed over every process whose
    files are in `path` (default: this host's directory): what a scrape would show, without rendering it."""
    wanted, registry = set(names), CollectorRegistry()
    _multiprocess.MultiProcessCollector(registry, path=path or MULTIPROC_DIR)
    return [(sample.name, dict(sample.labels), float(sample.value)) for family in registry.collect()
            for sample in family.samples if sample.name in wanted]


def mark_process_dead(pid: int) -> None:
    """Drop an exited process's live gauges (its counters and histograms stay in the sums)."""
    _multiprocess.mark_process_dead(pid, path=MULTIPROC_DIR)
