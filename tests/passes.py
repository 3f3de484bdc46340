"""Which passes of `scripts/test.sh` run a test, and the one lock that lets a test run alone (D100).

Every test declares whether its outcome can depend on the topology: `topology` (it runs on `single` and
again on `scaled`) or `topology_independent` (it runs on `single` only). `unclassified` names the tests
that declare neither or both; the guard test (tests/test_passes.py) fails on any, so nobody can drop a
store test from `scaled` by forgetting a marker. `schema` adds a test to the upgraded-database pass.

Under pytest-xdist (`--dist loadgroup`, scheduled by `ModuleGroupScheduling`) a test is a unit of work of its
own, handed to the next free worker, except the modules of `WHOLE_MODULES`: each goes to one worker whole (its
module fixture is built once; its tests, which start real processes, never run beside each other), and the
biggest units start first.

The workers share the servers: a test marked `exclusive` (it stops a Cluster node or
flushes a Redis database every worker uses) runs while no other test of the run does. `RunLock` is a
writer-preferring lock over two files every worker of one run opens: each test holds the shared side, an
exclusive test the exclusive side, and a waiting exclusive test holds the gate, so workers that keep
starting tests cannot starve it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterable, Iterator

from xdist.scheduler.loadscope import LoadScopeScheduling

TOPOLOGY = "topology"
INDEPENDENT = "topology_independent"
EXCLUSIVE = "exclusive"
# Modules one worker runs whole, and why.
WHOLE_MODULES = {
    "tests/test_drills.py": "each drill starts a Celery worker and beat: two at once would starve each other",
    "tests/test_cli_help.py": "its module fixture runs `manage.py help` once a command, in subprocesses",
    "tests/test_upgrade.py": "its module fixture builds two scratch database sets with `migrate_all`",
}
# Modules that join another's unit (run on its worker, one after the other): a drill kept apart only because it
# runs on one pass, still never beside the other drills.
JOINS = {module: "tests/test_drills.py" for module in (
    "tests/test_drill_subscription.py", "tests/test_drill_hot_video.py", "tests/test_soak.py",
    "tests/test_drill_backlog.py", "tests/test_drill_ordering_paging.py", "tests/test_drill_cache_flush.py",
    "tests/test_drill_artifacts_generations.py", "tests/test_drill_route_epoch.py",
    "tests/test_drill_shadow_repair.py")}


def unclassified(items: Iterable) -> list[str]:
    """The node ids of the tests that carry neither `topology` nor `topology_independent`, or both."""
    wrong = []
    for item in items:
        marks = {TOPOLOGY, INDEPENDENT} & {mark.name for mark in item.iter_markers()}
        if len(marks) != 1:
            wrong.append(f"{item.nodeid} ({' and '.join(sorted(marks)) or 'neither'})")
    return wrong


class RunLock:
    """Shared by every test of one pytest-xdist run, exclusive for one (see the module's docstring)."""

    def __init__(self, run_id: str) -> None:
        base = self.path(run_id)
        self._gate = open(base + ".gate", "a+")  # noqa: SIM115 - held for the worker's life
        self._main = open(base + ".lock", "a+")  # noqa: SIM115

    @staticmethod
    def path(run_id: str) -> str:
        """Where one run's lock files live (`.gate`, `.lock` appended)."""
        return os.path.join(tempfile.gettempdir(), f"likes-test-run-{run_id}")

    @contextlib.contextmanager
    def held(self, *, exclusive: bool) -> Iterator[None]:
        if exclusive:
            fcntl.flock(self._gate, fcntl.LOCK_EX)  # no new test starts from here on ...
            fcntl.flock(self._main, fcntl.LOCK_EX)  # ... and the running ones finish
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(self._gate, fcntl.LOCK_EX)  # waits while an exclusive test waits or runs
            fcntl.flock(self._main, fcntl.LOCK_SH)
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)


def run_lock() -> RunLock | None:
    """The run's lock under pytest-xdist (its workers share PYTEST_XDIST_TESTRUNUID), else None: one
    process runs one test at a time anyway."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return RunLock(run_id) if run_id and os.environ.get("PYTEST_XDIST_WORKER") else None


class ModuleGroupScheduling(LoadScopeScheduling):
    """xdist's load-group scheduling with the groups named here (`WHOLE_MODULES`). The `xdist_group` marker
    does not reach the scheduler with pytest 9 (xdist 3.8 suffixes the group to `item._nodeid`, and pytest 9's
    `nodeid` no longer reads that attribute: a group's tests ran on three workers), so the controller groups by
    node id. Units are sorted biggest first (xdist's `--loadscope-reorder`, on by default)."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        module = JOINS.get(module, module)
        return module if module in WHOLE_MODULES else nodeid
