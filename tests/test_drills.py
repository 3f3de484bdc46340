"""The fault drills (issue 9 §5), run through the one shared implementation (opsconsole.drills) on a
real Celery worker (every Procfile queue) and beat: each drill injects a real fault while commands
flow through the API, and its verdict must PASS: the behaviour during the fault, the time to heal
(bounded by 120 s, never asserted as a duration) and the exact comparison of every projection with
the relation facts and the acknowledged commands afterwards. Plus the command's refusals.

Each drill holds its fault for its own length capped at DRILL_FAULT_MAX_S (4 s in the test settings: still
several retries) and waits at most 120 s to heal; the cache drill runs its own redis-server as the cache
role, the event-log drill its own as the event log and broker, so what they stop or flush is theirs alone."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from counting import cache as count_cache
from counting.selectors import count_cache_generations_get
from counting.services.count_cache.layers import count_cache_generations_mirror
from likes_project import l1cache
from likes_project.redis_client import reset_clients
from opsconsole.drills import DRILLS, drill_run
from opsconsole.models import DrillRecord
from tests import drills
from tests.conftest import ensure_contracts

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


@pytest.fixture
def drills_on(settings):
    settings.LIKES_DRILLS_ENABLED = True


@pytest.fixture
def private_cache(settings):
    """A redis-server of this test's own as the cache role (the event log and broker stay where they are)."""
    server = drills.PrivateRedis().start()
    settings.REDIS_URL = server.url
    reset_clients()
    ensure_contracts()  # the relation-cache registry and sentinel, in the new cache
    count_cache_generations_mirror()
    count_cache.sentinel_set(count_cache_generations_get(fresh=True).active)  # the new cache is whole: empty
    yield server
    server.stop()
    reset_clients()
    l1cache.clear_all()


@pytest.fixture
def private_eventlog(settings):
    """A redis-server of this test's own as the event log and the Celery broker (the broker follows the
    event log by default in a deployment, so a flush of its database takes the queues too)."""
    server = drills.PrivateRedis().start()
    settings.REDIS_STREAMS_URL = server.url
    settings.CELERY_BROKER_URL = server.url
    reset_clients()
    yield server
    server.stop()
    reset_clients()


def run(name: str, *, cache: drills.PrivateRedis | None = None, env: dict[str, str] | None = None, **options):
    pipeline = drills.Pipeline(**(env or {})).start()
    try:
        verdict = drill_run(name, stage=drills.SuiteStage(pipeline, cache), say=print, **options)
    finally:
        output = pipeline.stop()
    print(verdict.as_text())
    assert verdict.passed, verdict.as_text() + "\n--- worker/beat output ---\n" + output[-8000:]
    assert DrillRecord.objects.filter(drill=name, run_id=verdict.run_id, verdict="PASS").count() == 1  # TEST-5
    assert verdict.heal_s is not None and verdict.comparison["ok"]
    assert not verdict.comparison["partial"]
    return verdict


def _fault(verdict) -> dict:
    return verdict.phases["fault"]


def test_count_partition_down(drills_on):
    verdict = run("count-partition-down")
    assert verdict.fault_confirmed is True  # the partition really refused connections while held
    commands = _fault(verdict)["commands"]
    assert commands.get("200", 0) > 0 and set(commands) == {"200"}


def test_relation_shard_down(drills_on):
    verdict = run("relation-shard-down")
    assert verdict.fault_confirmed is True
    commands = _fault(verdict)["commands"]
    assert commands.get("503 service_unavailable", 0) > 0  # the downed shard's users, cleanly refused
    assert commands.get("200", 0) > 0  # the other shard's users, unaffected
    assert set(commands) <= {"200", "503 service_unavailable"}
    assert verdict.resolved["failed"] == commands["503 service_unavailable"]


# Which pass runs which drill: tests/drills.py (D138, D141).
on_its_own_redis, process_fault = drills.single_pass_only(), drills.scaled_pass_only()


@on_its_own_redis
def test_eventlog_flush(drills_on, private_eventlog):
    verdict = run("eventlog-flush")
    assert "FLUSHDB" in verdict.injected[0]
    assert set(_fault(verdict)["commands"]) == {"200"}


# spec §7 drill 4: the workers killed mid-batch.
@process_fault
def test_worker_kill(drills_on):
    verdict = run("worker-kill")
    assert "SIGKILL" in verdict.injected[0]
    assert set(_fault(verdict)["commands"]) == {"200"}


# spec §7 drill 1: the relation Redis (the cache role) shut down.
@on_its_own_redis
def test_cache_redis_down(drills_on, private_cache):
    verdict = run("cache-redis-down", cache=private_cache)
    assert verdict.fault_confirmed is True  # the cache server was really gone
    fault = _fault(verdict)
    assert set(fault["commands"]) == {"200"}
    assert not any(key.split()[1].startswith("5") and "503" not in key for key in fault["reads"])  # no 500s
    for kind in ("like-relation", "batch-query", "like-count"):
        assert fault["reads"].get(f"{kind} 200", 0) > 0  # answered from the databases


@drills.scaled_pass_only(reason="needs the Redis Cluster of LIKES_TOPOLOGY=scaled")
@pytest.mark.exclusive  # stops a node of the Cluster every test process uses
def test_cluster_node_restart(drills_on):
    """Issue 16: a Cluster node (caches and stream partitions, no replica) is killed and comes back empty."""
    from counting.models import CountCacheGeneration
    from relations.models import RelationCacheGeneration

    def active(model) -> int:
        return model.objects.filter(status="ACTIVE").values_list("generation", flat=True).get()

    before = active(RelationCacheGeneration), active(CountCacheGeneration)
    verdict = run("cluster-node-restart")
    assert verdict.fault_confirmed is True  # the node really was down
    assert "SHUTDOWN NOSAVE" in verdict.injected[0]
    assert set(_fault(verdict)["commands"]) == {"200"}  # the outbox takes every command meanwhile
    # Its caches were found lost (the node's own sentinels) and rebuilt as new generations.
    pipeline = drills.Pipeline().start()
    try:
        drills.wait_for(lambda: (active(RelationCacheGeneration) > before[0]
                                 and active(CountCacheGeneration) > before[1]),
                        timeout_s=120, what="the lost caches to be rebuilt as new generations")
    finally:
        pipeline.stop()


# --- the command's refusals -----------------------------------------------------------------------


def _users() -> int:
    return get_user_model().objects.count()


def test_the_command_is_refused_unless_drills_are_enabled():
    before = _users()
    with pytest.raises(CommandError, match="LIKES_DRILLS_ENABLED"):
        call_command("drill", "count-partition-down", stdout=io.StringIO(), stderr=io.StringIO())
    assert _users() == before  # refused before anything was created


def test_an_unknown_drill_is_refused(drills_on):
    before = _users()
    with pytest.raises(CommandError, match="unknown drill 'no-such-drill'") as refused:
        call_command("drill", "no-such-drill", stdout=io.StringIO(), stderr=io.StringIO())
    assert all(name in str(refused.value) for name in DRILLS)
    assert _users() == before


def test_the_deployment_cache_drill_is_refused_when_the_cache_shares_its_server(drills_on, settings):
    """The deployment injection pauses the whole cache server: refused while the event log and broker
    live there too (the test settings' default), never half-run."""
    assert settings.REDIS_URL == settings.REDIS_STREAMS_URL
    before = _users()
    with pytest.raises(CommandError, match="live on it too"):
        call_command("drill", "cache-redis-down", stdout=io.StringIO(), stderr=io.StringIO())
    assert _users() == before


def test_a_shard_that_is_the_same_database_as_another_alias_is_refused(drills_on, settings):
    from opsconsole.drills.faults import DatabaseRefusal, DrillRefused

    assert DatabaseRefusal("rel_00").check() is None  # distinct databases: allowed
    with pytest.raises(DrillRefused, match="no database alias"):
        DatabaseRefusal("rel_99").check()


# spec §7 drill 8: a rebalance during a snapshot's cut.
@process_fault
def test_snapshot_rebalance(drills_on):
    """T12 on real workers: the snapshot cut across a rebalance fails, a new one seals and test-restores."""
    verdict = run("snapshot-rebalance")
    assert any("aborted [" in line and "then snapshot" in line for line in verdict.injected), verdict.injected


# spec §7 drill 11: the workers killed during a migration.
@process_fault
def test_migration_worker_kill(drills_on):
    """MIG-2 on real workers: killed mid-migration, the job is resumed from the ledger and ends RETIRED with one
    writer per bucket; exact convergence. (Small copy chunks so the kill lands inside the copy; a short job
    lease so the sweeper finds the dead worker in seconds.)"""
    verdict = run("migration-worker-kill", env={"BUCKET_MIGRATION_COPY_CHUNK": "2", "OPS_JOB_LEASE_S": "5"})
    assert any("killed at" in line for line in verdict.injected), verdict.injected


@process_fault
def test_slot_move_worker_kill(drills_on, settings):
    """Issue 16 §3 on real workers: killed mid-move, the slot move is resumed from its ledger and ends RETIRED
    and verified, every moved slot on the target; exact convergence. (Small copy chunks so the kill lands inside
    the copy; a short job lease so the sweeper finds the dead worker in seconds; every process reloads the
    relation contract each second, as a deployment does.)"""
    settings.RELATION_CONTRACT_REFRESH_S = 1.0
    verdict = run("slot-move-worker-kill", env={"RELATION_MOVE_COPY_CHUNK": "2", "OPS_JOB_LEASE_S": "5",
                                                "RELATION_CONTRACT_REFRESH_S": "1"})
    assert any("killed at" in line for line in verdict.injected), verdict.injected
