"""The recovery snapshot's rejection cases (issue 33 §3; SNAP-9 … SNAP-11, T17, T18, T19), each beside its
counter-example: a snapshot that must not seal stays FAILED, and one that can no longer be trusted is refused
by `snapshot_verify` and by the restore before anything is written (no generation, no restore run), so it is
never used for replay. The happy paths and the restore itself: tests/reconciliation/test_snapshots.py.

Transactional (LIVE_STORES): the build opens its own REPEATABLE READ snapshot per count partition."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from counting.models import CountProjectionGeneration, CountRouteManifestItem
from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.redis_client import stream_redis
from reconciliation.models import RecoveryRestore, RecoverySnapshot
from reconciliation.services.recovery import artifacts, restore, snapshot
from tests.counting.helpers import drain
from tests.reconciliation import helpers as live
from tests.reconciliation.helpers import snapshot_take as _take

pytestmark = [pytest.mark.topology, *live.LIVE_STORES]


@pytest.fixture
def sealed(api, make_user, make_video):
    """A sealed snapshot of a video with four likes; verified usable first (every test's counter-example)."""
    live.api_liked_video(api, make_user, make_video, "rj-video", 4)
    snap = _take()
    assert snap.status == "SEALED", snap.failure
    assert _problems(snap) == []
    return snap


def _problems(snap) -> list[str]:
    return snapshot.snapshot_verify(snap.pk, actor=live.OPERATOR)["problems"]


def _path(record: dict) -> str:
    return os.path.join(settings.SNAPSHOT_STORAGE_DIR, record["uri"][len(artifacts.URI_SCHEME):])


def _never_replayed(snap, prefix: str) -> None:
    """`snap` is refused for `prefix`, by verify and by the restore, which writes nothing: no count generation
    and no restore run are created (and the daily drill says why)."""
    problems = _problems(snap)
    assert any(p.startswith(prefix) for p in problems), problems
    generations, runs = CountProjectionGeneration.objects.count(), RecoveryRestore.objects.count()
    with pytest.raises(restore.SnapshotUnusable) as refused:
        restore.restore_execute(snap.pk, actor=live.OPERATOR)
    assert any(p.startswith(prefix) for p in refused.value.extra["problems"])
    drill = restore.test_restore(snap.pk, actor=live.OPERATOR)
    assert drill["ok"] is False and any(p.startswith(prefix) for p in drill["problems"]), drill
    assert (CountProjectionGeneration.objects.count(), RecoveryRestore.objects.count()) == (generations, runs)


def _built_with(monkeypatch, damage):
    """A snapshot whose build is damaged between its dump and its seal: `damage(snap, records)` returns the
    artifact records the build goes on with (what a coordinator that lost or misrecorded part of its output
    would seal)."""
    dump = snapshot._dump
    monkeypatch.setattr(snapshot, "_dump", lambda snap, gen, say: damage(snap, dump(snap, gen, say)))
    try:
        return _take("damaged build")
    finally:
        monkeypatch.setattr(snapshot, "_dump", dump)


def _used_partition(snap) -> dict:
    """The offset entry of a stream partition the cut consumed entries from."""
    return next(o for o in snap.offsets if o["through"] != "0-0" and o["streamAdded"] > 0)


# --- T17: the offset vector -----------------------------------------------------------------------------


# spec §7 drill 8: an offset vector missing a partition.
def test_t17_a_vector_that_lost_a_partition_is_refused_sealed_and_never_replayed(sealed, monkeypatch):
    """T17: the vector recorded for the seal lacks a partition (SNAP-4: a partition with no new messages must
    still appear) -> FAILED, never restored. Counter-example: the fixture's whole vector sealed and verifies."""
    def drop_partition(snap, records):
        RecoverySnapshot.objects.filter(pk=snap.pk).update(offsets=snapshot.snapshot_get(snap.pk).offsets[1:])
        return records

    failed = _built_with(monkeypatch, drop_partition)
    assert failed.status == "FAILED" and "offset_vector_incomplete" in failed.failure, failed.failure
    _never_replayed(failed, "not_sealed")


# spec §7 drill 8: an offset regression.
def test_t17_a_cut_below_the_one_sealed_before_it_is_refused_sealed(sealed, api, make_user):
    """T17: an offset that went backwards between two cuts (checkpoints only advance: the consumer's position
    or the log was rolled back in between). Counter-example: the next cut, at or past the last, seals."""
    assert live.api_like(api, make_user(), "rj-video").status_code == 200
    drain()
    later = _take("the next one")
    assert later.status == "SEALED", later.failure  # counter-example: no offset below the sealed one's
    used = _used_partition(later)
    # The last sealed cut was ahead of where the consumer now stands on one partition.
    ahead = snapshot.next_offset(streams.last_generated_id(used["partition"]))
    RecoverySnapshot.objects.filter(pk=later.pk).update(offsets=[
        {**o, "through": ahead} if o["partition"] == used["partition"] else o for o in later.offsets])
    regressed = _take("after the rollback")
    assert regressed.status == "FAILED" and "offset_regressed" in regressed.failure, regressed.failure
    assert f"partition {used['partition']}" in regressed.failure
    _never_replayed(regressed, "not_sealed")


def test_t17_a_checkpoint_that_went_backwards_since_the_cut_makes_the_snapshot_unusable(sealed):
    """T17, SNAP-11: the count consumer's durable checkpoint is now below the cut's `through[p]` (a checkpoint
    table restored from a backup): replaying from nextOffset[p] no longer meets the live position. The
    fixture verified usable first."""
    used = _used_partition(sealed)
    ConsumerCheckpoint.objects.filter(consumer="count", partition=used["partition"]).update(last_done_id="0-0")
    _never_replayed(sealed, "offset_regressed")


# --- T18: buckets without the relation projection --------------------------------------------------------


def test_t18_buckets_without_the_relation_projection_are_refused_sealed_and_never_replayed(sealed, monkeypatch):
    """T18, SNAP-9: the bucket artifacts without the relation-projection ones (an unlike replayed onto them
    could not know whether to subtract) -> FAILED at the seal, and a sealed snapshot whose record lost them is
    refused. Counter-example: the fixture, complete, sealed and verified usable."""
    failed = _built_with(monkeypatch, lambda _snap, records: [r for r in records if r["kind"] == "vbuckets"])
    assert failed.status == "FAILED" and "artifact_missing" in failed.failure, failed.failure
    assert "no projection artifact" in failed.failure
    _never_replayed(failed, "not_sealed")

    RecoverySnapshot.objects.filter(pk=sealed.pk).update(
        artifacts=[r for r in sealed.artifacts if r["kind"] == "vbuckets"])
    _never_replayed(sealed, "artifact_missing")


def test_t18_a_projection_artifact_emptier_than_its_buckets_is_judged_incomplete(sealed):
    """T18: a projection artifact that is present and intact (its own rows and SHA-256 as recorded) but holds
    fewer LIKED relations than its partition's buckets count: buckets without the relation projection at the
    same watermark. Counter-example: the fixture, whose artifacts agree partition by partition."""
    buckets = next(r for r in sealed.artifacts if r["kind"] == "vbuckets" and r["rows"])
    alias = buckets["partition"]
    empty = artifacts.artifact_write(
        name=f"snapshot-{sealed.pk:06d}/projection-{alias}-empty.copy.gz",
        header={"kind": "projection", "partition": alias, "snapshotId": sealed.pk, "generation": sealed.generation,
                "bucketSpaceVersion": sealed.bucket_space_version, "manifestId": sealed.manifest_id,
                "columns": list(snapshot.PROJECTION_COLUMNS)},
        chunks=iter(()))
    RecoverySnapshot.objects.filter(pk=sealed.pk).update(artifacts=[
        empty.as_dict() if (r["kind"], r["partition"]) == ("projection", alias) else r for r in sealed.artifacts])
    sealed.refresh_from_db()
    assert [p for p in _problems(sealed) if not p.startswith("artifact_inconsistent")] == []
    _never_replayed(sealed, "artifact_inconsistent")


# --- T19: artifacts and manifest that do not match the record ---------------------------------------------


def _recorded_rows_wrong(snap, records):
    record = next(r for r in records if r["rows"])
    return [{**r, "rows": r["rows"] + 1} if r is record else r for r in records]


def _artifact_deleted(snap, records):
    os.remove(_path(next(r for r in records if r["kind"] == "projection" and r["rows"])))
    return records


def _manifest_lost_a_bucket(snap, records):
    manifest_id = snapshot.snapshot_get(snap.pk).manifest_id
    assert CountRouteManifestItem.objects.filter(manifest_id=manifest_id, virtual_bucket=0).delete()[0] == 1
    return records


@pytest.mark.parametrize(("damage", "prefix"), [(_recorded_rows_wrong, "row_count_mismatch"),
                                                (_artifact_deleted, "artifact_missing"),
                                                (_manifest_lost_a_bucket, "manifest_incomplete")],
                         ids=["row-count", "deleted-artifact", "manifest-missing-a-bucket"])
# spec §7 drill 9: an artifact deleted, a row count tampered with, a manifest missing a bucket.
def test_t19_an_artifact_or_manifest_that_does_not_match_the_record_stays_failed_and_is_never_replayed(
        sealed, monkeypatch, damage, prefix):
    """T19, SNAP-10: damaged between the dump and the seal -> the snapshot stays FAILED; the same damage to a
    sealed snapshot afterwards -> refused by verify and by the restore. Counter-example: the fixture, sealed
    and usable before the damage."""
    failed = _built_with(monkeypatch, damage)
    assert failed.status == "FAILED" and prefix in failed.failure, failed.failure
    _never_replayed(failed, "not_sealed")
    if damage is not _manifest_lost_a_bucket:  # the manifest is the one both snapshots pin: already damaged
        records = damage(sealed, sealed.artifacts)
        RecoverySnapshot.objects.filter(pk=sealed.pk).update(artifacts=records)
    _never_replayed(sealed, prefix)


# --- SNAP-11: a log lost and written again since the cut --------------------------------------------------


def _lost(p: int, kept: list) -> None:
    """The stream of partition p is lost; `kept` (entry id, fields) pairs survive into its new incarnation."""
    client, key = stream_redis(), streams.stream_key(p)
    client.delete(key)
    for entry_id, fields in kept:
        client.xadd(key, fields, id=entry_id)


def _written(p: int, n: int) -> None:
    """n entries written to partition p's stream now (publishers go on; nothing consumes them here)."""
    for _ in range(n):
        stream_redis().xadd(streams.stream_key(p), {"event": "{}"})


# spec §7 drill 8: log expiry and a log lost since the cut.
@pytest.mark.parametrize("how", ["lost-then-fewer", "lost-then-more", "failed-over-to-a-lagging-copy"])
def test_snap11_a_stream_lost_and_written_again_since_the_cut_is_never_used_for_log_recovery(sealed, how):
    """SNAP-11: the log of one partition is not the one the cut was taken from: lost and republished (fewer or
    more entries than it had at the cut: the lost-tail check republishes, commands go on), or rolled back to a
    copy that lagged and then written on. Replaying it from nextOffset[p] would miss entries, so the snapshot
    is refused and the fallback named. Counter-example: the same stream, written on since, stays usable."""
    used = _used_partition(sealed)
    p, added = used["partition"], used["streamAdded"]
    _written(p, 3)
    assert _problems(sealed) == []  # the stream of the cut, grown: usable
    entries = [(e.entry_id, {"event": "{}"}) for e in streams.read_after(p, "0-0", 10_000)]
    if how == "lost-then-fewer":
        _lost(p, [])
        _written(p, max(0, added - 1))
    elif how == "lost-then-more":
        _lost(p, [])
        _written(p, added + 5)
    else:  # the copy lacks the last entries of the cut (its ids kept), then takes new writes
        _lost(p, entries[:added - 1])
        _written(p, 10)
    _never_replayed(sealed, "offset_past_retention")
    assert any("written again" in p_ and "--source facts" in p_ for p_ in _problems(sealed))
