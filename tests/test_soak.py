"""The seeded soak (issue 33 §1) in the suite: a fixed seed's fault windows (a relation shard and a count partition
refusing, the event log flushed, the cache Redis hanging, the worker killed, beat stopped, a bucket migration, a
slot move, a snapshot and an exact reconciliation started) under the four traffic groups, over
HTTP against the live server, with the real Celery worker and beat; then the history checker: no acknowledged
command lost, no version backwards, one version per key, no read below its floor, no 500, every projection exact and
the exact reconciliation PASSED. On `scaled` (D141), on the drills' worker after them (`tests/passes.py` JOINS), with
the cache and the event log on private redis-servers (a pause or a flush of the shared ones would hit every test)."""

from __future__ import annotations

import pytest
from django.db import connections

from opsconsole.models import DrillRecord
from opsconsole.soak import history as soak_history
from opsconsole.soak.runner import soak_run
from opsconsole.soak.schedule import FAULTS, NAMED_ONLY
from tests import drills
from tests.test_drills import private_cache, private_eventlog  # noqa: F401 - fixtures

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

# This seed draws every fault, and its event-log flush falls inside a count partition's outage: the flushed tail was
# not yet projected, so only the lost-tail republisher brings it back (with it disabled the checker names the lost
# like: the note of issue 33).
SEED, DURATION_S = 20261206, 60.0


# Half the clients of a deployment's soak: the suite's other workers share the PostgreSQL server's connections.
SIZES = {"uniform": 3, "hot": 2, "toggler": 2, "flipper": 2}


@pytest.fixture
def live_connections_per_request():
    """The live server's threads close their database connections after each request (CONN_MAX_AGE 0): a
    keep-alive client holds a server thread for the whole soak, and with 60 s connections each thread would keep one
    per database it touched, more than the server's max_connections leaves the suite's other workers."""
    saved = {alias: connections.settings[alias]["CONN_MAX_AGE"] for alias in connections.settings}
    for alias in saved:
        connections.settings[alias]["CONN_MAX_AGE"] = 0
    yield
    for alias, age in saved.items():
        connections.settings[alias]["CONN_MAX_AGE"] = age


@drills.scaled_pass_only()  # every fault at once, on the deployment's topology (D141)
def test_a_fixed_seed_soak_is_clean(settings, live_connections_per_request, live_server, private_cache,  # noqa: F811
                                    private_eventlog, tmp_path):  # noqa: F811
    settings.LIKES_DRILLS_ENABLED = True
    # Every process reloads the relation contract each second, as a deployment does (a slot move changes it); a
    # killed worker's job (a move's, a snapshot's) is found dead after 5 s, as in the ledgers' worker-kill drills.
    settings.RELATION_CONTRACT_REFRESH_S = 1.0
    pipeline = drills.Pipeline(RELATION_CONTRACT_REFRESH_S="1", OPS_JOB_LEASE_S="5").start()
    try:
        verdict = soak_run(seed=SEED, duration_s=DURATION_S, base_url=live_server.url, history_path=tmp_path / "h",
                           stage=drills.SuiteStage(pipeline, private_cache), heal_timeout_s=120, sizes=SIZES,
                           operations_wait_s=10, say=print)  # how the operations ended is noted, not judged
    finally:
        output = pipeline.stop()
    print(verdict.as_text())
    assert verdict.passed, verdict.as_text() + "\n--- worker/beat output ---\n" + output[-6000:]
    begun = {line["fault"] for line in soak_history.lines(tmp_path / "h") if line.get("phase") == "begin"}
    assert begun == {w["fault"] for w in verdict.schedule} == set(FAULTS) - set(NAMED_ONLY), verdict.injected
    assert verdict.outcomes.get("command 200", 0) > 100 and verdict.reconciliation["status"] == "PASSED"
    assert {line["client"].split("-")[0] for line in soak_history.lines(tmp_path / "h") if line.get("kind") == "command"
            } == set(SIZES)  # every group sent commands
    assert DrillRecord.objects.filter(drill="soak", seed=SEED, verdict="PASS").count() == 1
