"""Spec §7's drill 5 (`relation-cache-flush`, T6) and drill 6 (`count-cache-flush`, T16) on a real Celery worker and
beat, as tests/test_drills.py runs the others, on a private cache redis-server (the drills delete the cache role's
keys): commands succeed while the caches are flushed, reads are answered from the databases, the late low-version and
old-generation writes are refused, the service's loss checks build new generations (from the facts, from the durable
buckets), and every projection converges exactly. Both drills run on one pipeline (one worker and beat start), once
(the `single` pass), on the drills' worker after them (`tests/passes.py` JOINS). Plus the refusal where the cache
shares its Redis database with the event log and the broker (the test settings' default)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from counting import cache as count_cache
from counting.models import CountCacheGeneration
from opsconsole.drills import DrillRefused, drill_run
from opsconsole.models import DrillRecord
from relations import routing
from relations.models import RelationCacheGeneration
from tests import drills
from tests.test_drills import private_cache  # noqa: F401 - a fixture

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

SMALL = {"users_per_shard": 6, "videos": 4}


def statuses(model) -> dict[int, str]:
    return dict(model.objects.values_list("generation", "status"))


def assert_rebuilt(model, before: dict[int, str]):
    """The generation ACTIVE before is RETIRED, a later one is ACTIVE and was built after it; returns its row."""
    [old] = [g for g, s in before.items() if s == "ACTIVE"]
    after = statuses(model)
    [new] = [g for g, s in after.items() if s == "ACTIVE"]
    assert after[old] == "RETIRED" and new > old, after
    row = model.objects.get(generation=new)
    assert row.previous_generation == old, after
    return row


def passed(name: str, pipeline: drills.Pipeline, cache: drills.PrivateRedis):
    """Run `name` on the running pipeline; the assertions of tests/test_drills.py's `run`."""
    started = time.monotonic()
    verdict = drill_run(name, stage=drills.SuiteStage(pipeline, cache),
                        say=lambda line: print(f"[{time.monotonic() - started:5.1f} s] {line}"), **SMALL)
    print(verdict.as_text())
    assert verdict.passed, (verdict.as_text() + "\n--- worker/beat output ---\n"
                            + Path(pipeline.log_path).read_text(errors="replace")[-8000:])
    assert DrillRecord.objects.filter(drill=name, run_id=verdict.run_id, verdict="PASS").count() == 1  # TEST-5
    assert verdict.heal_s is not None and verdict.comparison["ok"] and not verdict.comparison["partial"]
    assert set(verdict.phases["fault"]["commands"]) == {"200"}, verdict.phases
    return verdict


# spec §7 drills 5 and 6: the relation cache's and the count cache's Redis flushed.
def test_cache_flushes(settings, private_cache):  # noqa: F811
    settings.LIKES_DRILLS_ENABLED = True
    relation_before = statuses(RelationCacheGeneration)
    count_before = statuses(CountCacheGeneration)
    pipeline = drills.Pipeline().start()
    try:
        relation = passed("relation-cache-flush", pipeline, private_cache)
        count = passed("count-cache-flush", pipeline, private_cache)
    finally:
        pipeline.stop()

    # Drill 5: the flush took keys; the stale writes were really made, and refused.
    assert "relation cache keys" in relation.injected[0], relation.injected
    assert not relation.injected[0].startswith("0 "), relation.injected
    probes = len(routing.all_aliases())  # one probe relation per relation shard, at v3
    notes = "\n".join(relation.notes)
    assert f"stale backfill right after the flush: {2 * probes} late events applied" in notes, notes  # v1 and v2
    assert f"stale backfill after the rebuild: {2 * probes} late events applied" in notes, notes
    assert f"answered {[-1] * probes} (-1: refused)" in relation.recovered[0], relation.recovered
    assert relation.phases["fault"]["reads"].get("batch-query 200", 0) > 0
    # A new relation-cache generation, built by the service's own loss check (a rebuild whose sample check met an
    # event not yet projected fails, and the next loss check starts another: the drill notes it).
    assert_rebuilt(RelationCacheGeneration, relation_before)

    # Drill 6: the flush took keys; a new count-cache generation from the durable buckets; the late refresh refused.
    assert "count cache keys" in count.injected[0] and not count.injected[0].startswith("0 "), count.injected
    assert "GEN_RETIRED" in count.recovered[0] and "'OK'" not in count.recovered[0], count.recovered
    assert count.phases["fault"]["reads"].get("like-count 200", 0) > 0
    row = assert_rebuilt(CountCacheGeneration, count_before)
    assert row.rows_written > 0
    # The quiet video (one like per shard, untouched after the flush) is in the new generation: only its copy of
    # the durable store could have put it there.
    quiet = f"drill-{count.run_id}-quiet"
    assert quiet in count.injected[0], count.injected
    assert count_cache.view_read(row.generation, quiet)[0] == probes
    assert any("none going backwards" in n for n in count.notes), count.notes


@pytest.mark.parametrize("name", ["relation-cache-flush", "count-cache-flush"])
def test_refused_where_the_cache_shares_its_database_with_the_event_log(settings, name):
    settings.LIKES_DRILLS_ENABLED = True
    assert settings.REDIS_URL == settings.REDIS_STREAMS_URL  # the test settings: one Redis database for all roles
    users = get_user_model().objects.count()
    with pytest.raises(DrillRefused, match="live in the cache's Redis database too"):
        drill_run(name)
    assert get_user_model().objects.count() == users  # refused before anything was created
