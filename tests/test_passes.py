"""Every test declares the passes that run it (tests/passes.py, D100): the guard over the collected suite,
and the classifier and the run lock it relies on, each with its counter-example."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests import passes
from tests.conftest import UNCLASSIFIED

pytestmark = pytest.mark.topology_independent


def test_every_collected_test_declares_whether_its_outcome_depends_on_the_topology(request):
    unclassified = request.config.stash[UNCLASSIFIED]
    assert not unclassified, (
        "mark these `topology` (scaled runs them again) or `topology_independent` (tests/passes.py):\n"
        + "\n".join(unclassified))


class _Item:
    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid = nodeid
        self._marks = [getattr(pytest.mark, name).mark for name in marks]

    def iter_markers(self):
        return iter(self._marks)


def test_the_classifier_names_a_test_with_neither_marker_or_both():
    items = [_Item("a", "django_db"), _Item("b", "topology"), _Item("c", "topology_independent", "schema"),
             _Item("d", "topology", "topology_independent")]
    assert passes.unclassified(items) == ["a (neither)", "d (topology and topology_independent)"]


def test_an_exclusive_holder_waits_for_the_shared_ones_and_keeps_new_ones_out():
    run = uuid.uuid4().hex
    first, second = passes.RunLock(run), passes.RunLock(run)
    events: list[str] = []
    reader_in, release_reader = threading.Event(), threading.Event()

    def reader() -> None:
        with first.held(exclusive=False):
            events.append("shared in")
            reader_in.set()
            release_reader.wait(10)
            events.append("shared out")

    def writer() -> None:
        with second.held(exclusive=True):
            events.append("exclusive in")
        events.append("exclusive out")

    a = threading.Thread(target=reader)
    a.start()
    reader_in.wait(10)
    w = threading.Thread(target=writer)
    w.start()
    deadline = time.monotonic() + 10  # bounds a broken lock; measures nothing
    while not _gate_taken(run) and time.monotonic() < deadline:
        time.sleep(0.01)  # polls an observable state: the exclusive side waits holding the gate
    assert _gate_taken(run)
    assert events == ["shared in"]  # it waits for the running test; a new test would block on the gate
    release_reader.set()
    for t in (a, w):
        t.join(10)
    assert events == ["shared in", "shared out", "exclusive in", "exclusive out"]
    assert not _gate_taken(run)  # and new tests start again


def _gate_taken(run: str) -> bool:
    import fcntl

    with open(passes.RunLock.path(run) + ".gate", "a+") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def test_a_joined_module_runs_in_the_unit_of_the_module_it_joins():
    """The stall drill's module shares the drills' worker (never two drills at once); any other test is a unit."""
    scope = passes.ModuleGroupScheduling._split_scope
    assert scope(None, "tests/test_drill_subscription.py::test_subscription_stall") == "tests/test_drills.py"
    assert scope(None, "tests/test_drills.py::test_worker_kill") == "tests/test_drills.py"
    assert scope(None, "tests/test_health.py::test_x") == "tests/test_health.py::test_x"
