"""What a Celery task costs the worker (D142): `likes_task_cpu_seconds_total{task}` and `likes_task_runs_total{task}`,
counted between Celery's own `task_prerun` and `task_postrun` signals, as a worker sends them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery import signals

import likes_project.celery  # noqa: F401 - connects the receivers, as the worker's app does
from likes_project import metrics

pytestmark = pytest.mark.topology_independent


class _Task:
    name = "tests.task_cpu"
    request = SimpleNamespace(is_eager=True)  # run in the caller: its connections are the caller's


def _counted() -> tuple[float, float]:
    return (metrics.value("likes_task_runs_total", task=_Task.name),
            metrics.value("likes_task_cpu_seconds_total", task=_Task.name))


def test_a_task_run_adds_one_run_and_the_cpu_it_used():
    runs, cpu = _counted()
    signals.task_prerun.send(sender=_Task, task_id="cpu-1", task=_Task, args=(), kwargs={})
    sum(i * i for i in range(300_000))  # some CPU inside the run
    signals.task_postrun.send(sender=_Task, task_id="cpu-1", task=_Task, args=(), kwargs={}, retval=None,
                              state="SUCCESS")
    after_runs, after_cpu = _counted()
    assert after_runs == runs + 1 and after_cpu > cpu


def test_an_end_without_its_start_counts_nothing():
    before = _counted()
    signals.task_postrun.send(sender=_Task, task_id="never-started", task=_Task, args=(), kwargs={}, retval=None,
                              state="SUCCESS")
    assert _counted() == before


def test_the_counters_read_back_summed_from_the_metric_files():
    """What `bench/run.sh convergence` reads from the worker's files (`metrics.counter_samples`)."""
    signals.task_prerun.send(sender=_Task, task_id="cpu-2", task=_Task, args=(), kwargs={})
    signals.task_postrun.send(sender=_Task, task_id="cpu-2", task=_Task, args=(), kwargs={}, retval=None,
                              state="SUCCESS")
    runs = [v for name, labels, v in metrics.counter_samples(["likes_task_runs_total"])
            if labels.get("task") == _Task.name]
    assert runs and runs[0] >= 1
