"""Spec §7 drill 9 (`snapshot-artifact-tamper`) and drill 10 (`generation-params-change`) on a real Celery worker and
beat, as tests/test_drills.py runs the others, on one pipeline: recovery snapshots damaged between their
dump and their seal never seal and are never restored while an undamaged one seals; a new hash seed and V for the
count projection, and a new R for the reverse index, go in only through shadow generations, the old ones' results
unchanged, and every count and likers list is exact after the switches. Once (the `single` pass), on the drills'
worker after them (`tests/passes.py` JOINS).

Both drills run in ONE test on ONE pipeline: a worker kept across two transactional tests re-consumes the first
test's stream entries into the flushed databases (the flush empties the checkpoints before the next test empties the
streams), which leaves count rows without facts behind for the second drill."""

from __future__ import annotations

import pytest

from opsconsole.drills import drill_run
from opsconsole.models import DrillRecord
from tests import drills

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]


def run(pipeline, settings, name: str, **options):
    settings.LIKES_DRILLS_ENABLED = True
    verdict = drill_run(name, stage=drills.SuiteStage(pipeline, None), say=print, users_per_shard=6, videos=4,
                        **options)
    print(verdict.as_text())
    assert verdict.passed, verdict.as_text()
    assert DrillRecord.objects.filter(drill=name, run_id=verdict.run_id, verdict="PASS").count() == 1
    assert verdict.heal_s is not None and verdict.comparison["ok"] and not verdict.comparison["partial"]
    assert set(verdict.phases["fault"]["commands"]) == {"200"}
    return verdict


# spec §7 drill 9 (an artifact deleted, a row count or checksum tampered with, a manifest missing a bucket) and
# drill 10 (a new hash seed and V, a new R, switched only through shadow generations).
def test_snapshot_artifact_tamper_then_generation_params_change(settings):
    pipeline = drills.Pipeline().start()
    try:
        _snapshot_artifact_tamper(pipeline, settings)
        _generation_params_change(pipeline, settings)
    finally:
        pipeline.stop()


def _snapshot_artifact_tamper(pipeline, settings):
    from counting.models import CountRouteManifest
    from reconciliation.models import RecoveryRestore, RecoverySnapshot

    verdict = run(pipeline, settings, "snapshot-artifact-tamper")
    snaps = list(RecoverySnapshot.objects.filter(reason__startswith="drill snapshot-artifact-tamper").order_by("pk"))
    damaged, sealed = [s for s in snaps if "damaged on purpose" in s.reason], [s for s in snaps if "undamaged" in
                                                                                s.reason]
    assert [s.status for s in damaged] == ["FAILED"] * 4, [(s.pk, s.status, s.failure) for s in damaged]
    for snap, prefix in zip(damaged, ["artifact_missing", "row_count_mismatch", "checksum_mismatch",
                                      "manifest_incomplete"], strict=True):
        assert prefix in snap.failure, (prefix, snap.failure)  # the damage really happened, and was named
    assert not RecoveryRestore.objects.filter(snapshot_id__in=[s.pk for s in damaged]).exists()
    [good] = sealed
    assert good.status == "SEALED" and good.test_result.get("ok") is True, good.test_result
    assert "the same damage after its seal refused: ['artifact-deleted', 'row-count', 'checksum', " \
           "'manifest-missing-a-bucket']" in verdict.injected[0], verdict.injected
    assert not CountRouteManifest.objects.exclude(pk=good.manifest_id).filter(
        bucket_space_version=good.bucket_space_version).exists()  # the drill's broken copy is gone


def _generation_params_change(pipeline, settings):
    from counting import routing
    from counting.models import CountBucketSpace, CountProjectionGeneration, ReverseIndexGeneration

    old = routing.load_generation()
    verdict = run(pipeline, settings, "generation-params-change", alias="512")
    text = verdict.injected[0]
    assert "in place: refused" in text, verdict.injected
    assert text.count("looks while it was a shadow") == 2 and " 0 looks" not in text, text
    routing.reset_cache()
    new = routing.load_generation()
    bound = CountBucketSpace.objects.get(version=old.space.version)
    assert (bound.hash_seed, bound.virtual_buckets) == (old.space.hash_seed, old.space.virtual_buckets)
    if "switched in: generation" in text:
        assert new.generation > old.generation and new.space.virtual_buckets == 512
        assert new.space.hash_seed.startswith("drill-") and new.space.version == old.space.version + 1
        assert CountProjectionGeneration.objects.get(pk=old.generation).status == "RETIRED"
    else:  # the service refused its own switch (its barrier): the shadow discarded, the service as found, noted
        assert (new.generation, new.manifest_id) == (old.generation, old.manifest_id), text
        assert any("refused to switch the shadow generation in" in n for n in verdict.notes), verdict.notes
    # R changed through its own shadow generation; a cursor of the old one is never read against the new R (T33).
    rev = routing.reverse_active()
    if rev.generation > 1:
        assert rev.shards == 16 and ReverseIndexGeneration.objects.get(generation=1).status == "RETIRED"
        assert "now answers 410 cursor_expired" in verdict.recovered[0], verdict.recovered
    else:
        assert any("reverse-index rebuild refused" in n for n in verdict.notes), verdict.notes
