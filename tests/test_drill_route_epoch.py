"""Spec §7's drill 12 (`old-epoch-write`, T23) on a real Celery worker and beat, as tests/test_drills.py runs the
others: a bucket migration of buckets holding the drill's relations runs on the worker while commands flow; right
after its route CAS a count-projector pass with the routes of before it writes to the source at the old epoch
(refused there, nothing written), then retries with refreshed routes at the target (applied by version); one writer
per bucket and exact counts. The `single` pass, on the drills' worker after them (`tests/passes.py` JOINS)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from counting import routing
from counting.models import BucketMigration
from counting.services.migration import ledger
from likes_project.audit.services import system_actor
from opsconsole.drills import DrillRefused, drill_run
from opsconsole.models import DrillRecord
from tests import drills

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

POPULATION = {"users_per_shard": 6, "videos": 4}


def _figures(text: str, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, text)
    assert found, (pattern, text)
    return tuple(int(n) for n in found.groups())


# spec §7 drill 12: an old-epoch write after the route CAS.
def test_old_epoch_write_after_the_route_cas(settings):
    settings.LIKES_DRILLS_ENABLED = True
    pipeline = drills.Pipeline().start()
    output = ""
    try:
        verdict = drill_run("old-epoch-write", stage=drills.SuiteStage(pipeline, None), say=print, **POPULATION)
    finally:
        output = pipeline.stop()
    print(verdict.as_text())
    assert verdict.passed, verdict.as_text() + "\n--- worker/beat output ---\n" + output[-8000:]
    assert DrillRecord.objects.filter(drill="old-epoch-write", run_id=verdict.run_id, verdict="PASS").count() == 1
    assert verdict.heal_s is not None and verdict.comparison["ok"] and not verdict.comparison["partial"]
    assert set(verdict.phases["fault"]["commands"]) == {"200"}, verdict.phases

    # The drill's own evidence: the writes went out after the CAS, each was refused by the source's fence, and the
    # retry applied every v2 at the target and ignored every late v1.
    injected = verdict.injected[0]
    migration, manifest = _figures(injected, r"migration (\d+) of buckets .* CAS to manifest (\d+) seen")
    sent, = _figures(injected, r"(\d+) old-epoch writes")
    fenced, of = _figures(injected, r"(\d+)/(\d+) refused ROUTE_EPOCH_MISMATCH")
    applied, ignored, failed = _figures(injected, r"(\d+) applied at cnt_\d+, (\d+) ignored by version, (\d+) failed")
    assert sent == of == fenced == 8 and (applied, ignored, failed) == (4, 4, 0), injected
    assert float(re.search(r"sent ([\d.]+) s after the CAS", injected).group(1)) >= 0, injected

    # Nothing undone: the buckets stay where the migration put them, and the verdict says where.
    m = BucketMigration.objects.get(pk=migration)
    assert m.state == "RETIRED" and m.target_manifest_id == manifest, (m.state, m.error)
    routing.reset_cache()
    gen = routing.active()
    assert gen.manifest_id == manifest
    assert all(gen.routes[vb].partition == m.target_partition for vb in m.buckets)
    assert f"now live on {m.target_partition} at epoch" in verdict.recovered[0], verdict.recovered
    assert m.target_partition not in set(m.source_partitions.values())
    assert len(settings.COUNT_PARTITION_ALIASES) >= 2


def test_refused_while_a_migration_is_unfinished(settings):
    settings.LIKES_DRILLS_ENABLED = True
    routing.reset_cache()
    gen = routing.active()
    planned = ledger.migration_plan(target="cnt_02", buckets=gen.buckets_on("cnt_00")[:2], reason="an operator's",
                                    actor=system_actor("planner"))
    users = get_user_model().objects.count()
    with pytest.raises(DrillRefused, match=rf"a bucket migration is in flight already \(\[\({planned.pk}, "):
        drill_run("old-epoch-write")
    assert get_user_model().objects.count() == users  # refused before anything was created
