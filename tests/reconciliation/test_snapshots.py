"""Recovery snapshots (issue 12; SNAP-4 … SNAP-11, INV-16, T11, T12, T17, T19; T18 and the other rejection
cases: tests/reconciliation/test_recovery_rejections.py): the build at an exact cut
with the whole offset vector, the cut that fails (never enlarged) on a receipt beyond it or a lease that
changed hands, verification that names why a snapshot is unusable, the restore of a damaged partition
through an approved repair while commands go on, and the daily test-restore. The restore on the generation
lifecycle: tests/reconciliation/test_restore_lifecycle.py."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from counting import routing as count_routing
from counting.models import CountGenerationFence, CountProjectionGeneration, LikeCountProjection, VideoLikeCountVbucket
from counting.services import projection as count_projection
from likes_project import leases
from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.opsjobs.services import job_run_inline
from reconciliation.models import RecoverySnapshot
from reconciliation.services import repair
from reconciliation.services.recovery import artifacts, restore, snapshot
from tests.counting.helpers import drain, lease_expire
from tests.reconciliation import helpers as live
from tests.reconciliation.helpers import snapshot_take as _take

pytestmark = [pytest.mark.topology, *live.LIVE_STORES]


def _relations(generation: int) -> dict[tuple[int, str], tuple[str, int]]:
    return {(u, v): (s, ver) for alias in settings.COUNT_PARTITION_ALIASES
            for u, v, s, ver in LikeCountProjection.objects.using(alias).filter(generation=generation)
            .values_list("user_id", "video_id", "projected_state", "projected_version")}


def _buckets(generation: int) -> dict[tuple[str, int], int]:
    return {(v, vb): n for alias in settings.COUNT_PARTITION_ALIASES
            for v, vb, n in VideoLikeCountVbucket.objects.using(alias).filter(generation=generation)
            .exclude(active_count=0).values_list("video_id", "virtual_bucket", "active_count")}


def _path(record: dict) -> str:
    return os.path.join(settings.SNAPSHOT_STORAGE_DIR, record["uri"][len(artifacts.URI_SCHEME):])


# --- the build ---------------------------------------------------------------------------------------


def test_a_snapshot_seals_with_every_partition_in_its_vector_and_both_artifacts_of_every_partition(
        api, make_user, make_video):
    live.api_liked_video(api, make_user, make_video, "sn-seal", 3)
    gen = count_routing.load_generation()
    snap = _take()
    assert snap.status == "SEALED", snap.failure
    assert (snap.generation, snap.manifest_id, snap.bucket_space_version) == (
        gen.generation, gen.manifest_id, gen.space.version)
    parts = streams.all_partitions()
    done = checkpoints_get("count")
    # T17: every partition of the topic appears, the untouched ones too, each at the checkpoint of the cut.
    assert [o["partition"] for o in snap.offsets] == parts
    for o in snap.offsets:
        assert o["through"] == done.get(o["partition"], "0-0")
        assert o["nextOffset"] == snapshot.next_offset(o["through"])
    assert any(o["through"] == "0-0" for o in snap.offsets) or len(done) == len(parts)
    kinds = sorted((a["kind"], a["partition"]) for a in snap.artifacts)
    assert kinds == sorted((k, a) for k in ("projection", "vbuckets") for a in settings.COUNT_PARTITION_ALIASES)
    assert sum(a["rows"] for a in snap.artifacts if a["kind"] == "projection") == len(_relations(gen.generation))
    assert snap.dispatch_paused_ms is not None and snap.dispatch_paused_ms >= 0
    assert snapshot.snapshot_verify(snap.pk, actor=live.OPERATOR) == {"snapshotId": snap.pk, "status": "SEALED",
                                                                  "usable": True, "problems": []}
    assert [r.outcome for r in AuditRecord.objects.filter(target_type="recovery_snapshot", target_id=str(snap.pk))
            .order_by("id")] == ["applied", "sealed", "usable"]


def test_a_receipt_beyond_the_cut_fails_the_snapshot_and_the_cut_is_not_enlarged(api, make_user, make_video,
                                                                                  settings):
    """T11 / T12: a dispatcher that skipped ahead committed an entry after B[p] while dispatch was stopped."""
    settings.SNAPSHOT_ABORT_RETRIES = 0  # this snapshot alone (a retry would find the receipt in its drain)
    _video, users = live.api_liked_video(api, make_user, make_video, "sn-skip", 2)
    gen = count_routing.load_generation()
    recorded = {}

    def skip_ahead(_grants):
        p = streams.partition_for(f"{users[0].pk}:sn-skip")
        through = checkpoints_get("count")[p]
        recorded[p] = through
        ms, _seq = streams.entry_id_key(through)
        alias = settings.COUNT_PARTITION_ALIASES[0]
        live.sql(alias, "INSERT INTO counting_counteventreceipt (generation, source_topic, source_partition, "
                 "source_offset, event_id, outcome, created_at) "
                 "VALUES (%s, %s, %s, %s, 'skipped-ahead', 'applied', now())",
                 [gen.generation, streams.TOPIC, p, f"{ms + 5}-0"])

    snapshot.after_dispatch_stopped = skip_ahead
    try:
        snap = _take()
    finally:
        snapshot.after_dispatch_stopped = None
    assert snap.status == "FAILED" and "receipts beyond the boundary" in snap.failure
    assert snap.offsets == [] and snap.artifacts == []  # nothing recorded for a cut that failed
    assert snapshot.snapshot_verify(snap.pk, actor=live.OPERATOR)["usable"] is False
    # Counter-example: without the skipped-ahead receipt the same cut seals.
    live.sql(settings.COUNT_PARTITION_ALIASES[0], "DELETE FROM counting_counteventreceipt WHERE event_id = %s",
        ["skipped-ahead"])
    again = _take()
    assert again.status == "SEALED", again.failure
    assert {o["partition"]: o["through"] for o in again.offsets}[next(iter(recorded))] == next(iter(recorded.values()))


def _rebalance(grants, moved: list) -> None:
    """Another worker takes the first partition's lease (ours ran out) and hands it back at once."""
    lease_expire(grants[0])
    other = leases.lease_acquire(resource=grants[0].resource, holder="another-worker", ttl_s=30)
    assert other is not None
    leases.lease_release(other)
    moved.append(grants[0].resource)


def test_a_lease_that_changes_hands_during_the_build_aborts_it_and_a_new_snapshot_is_taken(
        api, make_user, make_video, settings):
    """T12 (a rebalance, SNAP-6 step 4): ownership of a partition moved between the stop of dispatch and the cut.
    That snapshot fails and is never reused; the job takes a new one, which seals once nothing moves."""
    live.api_liked_video(api, make_user, make_video, "sn-lease", 1)
    moved: list = []

    def once(grants):
        snapshot.after_dispatch_stopped = None  # a single rebalance: the next attempt is undisturbed
        _rebalance(grants, moved)

    snapshot.after_dispatch_stopped = once
    try:
        snap = _take()
    finally:
        snapshot.after_dispatch_stopped = None
    first = RecoverySnapshot.objects.order_by("id").first()
    assert first.status == "FAILED" and "lease changed hands" in first.failure, first.failure
    assert first.artifacts == [] and first.pk != snap.pk and len(moved) == 1
    assert snap.status == "SEALED" and "again after snapshot" in snap.reason
    # Counter-example: a partition that keeps changing hands never yields a sealed snapshot.
    settings.SNAPSHOT_ABORT_RETRIES = 2
    moved.clear()
    snapshot.after_dispatch_stopped = lambda grants: _rebalance(grants, moved)
    try:
        last = _take()
    finally:
        snapshot.after_dispatch_stopped = None
    assert last.status == "FAILED" and len(moved) == 3  # the first attempt and two retries, all aborted


# --- verification (T19) ------------------------------------------------------------------------------


@pytest.fixture
def sealed(api, make_user, make_video):
    live.api_liked_video(api, make_user, make_video, "sn-verify", 3)
    snap = _take()
    assert snap.status == "SEALED", snap.failure
    return snap


def _problems(snap) -> list[str]:
    return snapshot.snapshot_verify(snap.pk, actor=live.OPERATOR)["problems"]


@pytest.mark.parametrize("where", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_a_tampered_artifact_makes_the_snapshot_unusable(sealed, where):
    """A flipped byte anywhere (the gzip header, the JSON header line, the rows, the trailer) is a
    checksum mismatch, never an exception: a flip inside the deflate stream raises zlib.error, which
    is not an OSError (CI caught that at the half-way byte of a small artifact)."""
    record = next(a for a in sealed.artifacts if a["kind"] == "projection" and a["rows"])
    at = int(record["bytes"] * where)
    with open(_path(record), "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0xFF]))
    problems = _problems(sealed)
    assert any(p.startswith("checksum_mismatch") and record["uri"] in p for p in problems), problems


def test_a_truncated_artifact_makes_the_snapshot_unusable(sealed):
    record = next(a for a in sealed.artifacts if a["kind"] == "vbuckets" and a["rows"])
    with open(_path(record), "r+b") as fh:
        fh.truncate(record["bytes"] // 2)
    problems = _problems(sealed)
    assert any(p.startswith("checksum_mismatch") for p in problems), problems
    assert any(p.startswith("artifact_unreadable") for p in problems), problems


def test_a_vector_missing_a_partition_makes_the_snapshot_unusable(sealed):
    from likes_project import metrics

    before = metrics.value("likes_snapshot_problems_total", problem="offset_vector_incomplete")
    assert not _problems(sealed)  # whole: nothing counted
    assert metrics.value("likes_snapshot_problems_total", problem="offset_vector_incomplete") == before
    RecoverySnapshot.objects.filter(pk=sealed.pk).update(offsets=sealed.offsets[1:])
    problems = _problems(sealed)
    assert any(p.startswith("offset_vector_incomplete") for p in problems), problems
    # M7: a hole in the offset vector is counted by kind (issue 32 §2).
    assert metrics.value("likes_snapshot_problems_total", problem="offset_vector_incomplete") == before + 1


def test_an_offset_past_the_streams_retention_makes_the_snapshot_unusable(api, make_user, make_video, sealed):
    users = [make_user() for _ in range(6)]
    for u in users:
        assert live.api_like(api, u, "sn-verify").status_code == 200
    drain()
    assert _problems(sealed) == []  # counter-example: nothing trimmed yet
    # The partition the six likes went to: its stream grew past the cut. (Not the longest stream: a
    # worker's streams keep earlier tests' entries, so the longest may have nothing after the cut.)
    cut = {int(o["partition"]): streams.entry_id_key(o["nextOffset"]) for o in sealed.offsets}
    p = next(q for q in streams.all_partitions() if streams.entry_id_key(streams.last_generated_id(q)) >= cut[q])
    streams.trim_below(p, snapshot.next_offset(streams.last_generated_id(p)))  # retention dropped them all
    problems = _problems(sealed)
    assert any(p_.startswith("offset_past_retention") and "--source facts" in p_ for p_ in problems), problems
    with pytest.raises(restore.SnapshotUnusable):
        restore.restore_execute(sealed.pk, actor=live.OPERATOR)


# --- restore ------------------------------------------------------------------------------------------


def test_a_damaged_partition_is_restored_from_a_snapshot_while_commands_go_on(api, make_user, make_video):
    """Done means: a snapshot taken under load, restored over a deliberately damaged partition and
    replayed, gives counts equal to the acknowledged likes."""
    videos = [f"sn-restore-{i}" for i in range(3)]
    for v in videos:
        live.api_liked_video(api, make_user, make_video, v, 4)
    late_users = [make_user() for _ in range(24)]

    def traffic(users):
        for i, u in enumerate(users):
            assert live.api_like(api, u, videos[i % len(videos)]).status_code == 200
            drain()

    during = live.Background(traffic, late_users[:8])
    snap = _take("before the damage")
    during.join()
    assert snap.status == "SEALED", snap.failure
    old = count_routing.load_generation()
    damaged = settings.COUNT_PARTITION_ALIASES[0]
    assert live.sql(damaged, "DELETE FROM counting_likecountprojection WHERE generation = %s", [old.generation]) > 0
    assert live.run_check("coverage", all_videos=True).status == "FAILED"
    req = repair.repair_request(actor=live.REQUESTER, source=f"snapshot:{snap.pk}", reason="partition 0 lost its rows")
    assert req.params["videos"] == [] and req.status == "AWAITING_APPROVAL"
    req = repair.repair_approve(repair_id=req.pk, actor=live.APPROVER)
    after = live.Background(traffic, late_users[8:])
    job_run_inline(req.job_id)
    after.join()
    req.refresh_from_db()
    assert req.status == "SUCCEEDED", (req.error, req.result)
    new = count_routing.load_generation()
    assert new.generation == req.result["generation"] != old.generation
    assert CountProjectionGeneration.objects.get(pk=old.generation).status == "RETIRED"
    assert {CountGenerationFence.objects.using(a).get().generation for a in settings.COUNT_PARTITION_ALIASES} == {
        new.generation}
    drain()
    assert sum(len(live.facts_liked(v)) for v in videos) == 3 * 4 + len(late_users)  # every acknowledged like
    live.counts_match_the_facts(videos)


def test_a_restore_replayed_to_the_barrier_equals_the_live_projection_at_it(api, make_user, make_video):
    """T11: a snapshot taken during live load, restored and replayed to the same barrier T."""
    videos = [f"sn-t11-{i}" for i in range(2)]
    for v in videos:
        live.api_liked_video(api, make_user, make_video, v, 2)
    users = [make_user() for _ in range(12)]

    def traffic():
        for i, u in enumerate(users):
            assert live.api_like(api, u, videos[i % 2], "LIKED").status_code == 200
            if i % 3 == 0:
                assert live.api_like(api, u, videos[i % 2], "UNLIKED").status_code == 200
            drain()

    load = live.Background(traffic)
    snap = _take("under load")
    load.join()
    drain()
    assert snap.status == "SEALED", snap.failure
    old = count_routing.load_generation()
    live_relations, live_buckets = _relations(old.generation), _buckets(old.generation)
    report = restore.restore_execute(snap.pk, actor=live.OPERATOR)
    assert report["identityDiffs"] == [] and report["coverageDiffs"] == []
    # Nothing moved after the switch: the replayed generation is the live one at T, row for row.
    assert _relations(report["generation"]) == live_relations
    assert _buckets(report["generation"]) == live_buckets
    assert report["consumptionBarrier"] == {p: checkpoints_get("count").get(p, "0-0") for p in streams.all_partitions()}


def test_a_pass_still_routing_to_the_replaced_generation_is_refused_by_the_fence(api, make_user, make_video):
    live.api_liked_video(api, make_user, make_video, "sn-fence", 1)
    snap = _take()
    old = count_routing.load_generation()
    restore.restore_execute(snap.pk, actor=live.OPERATOR)
    u = make_user()
    assert live.api_like(api, u, "sn-fence").status_code == 200
    from relations.services.outbox import outbox_publish_batch

    for alias in settings.RELATION_SHARD_ALIASES:
        outbox_publish_batch(alias=alias, holder="test")
    p = streams.partition_for(f"{u.pk}:sn-fence")
    entries = streams.read_after(p, checkpoints_get("count").get(p, "0-0"), 10)
    grant = leases.lease_acquire(resource=f"consumer:count:{p}", holder="stale-worker", ttl_s=30)
    stale = count_projection.apply_entries(old, entries, consumer="count", partition=p, token=grant.token)
    assert stale.failed and all(isinstance(e, count_projection.GenerationMoved) for e in stale.failed.values())
    assert not stale.done
    leases.lease_release(grant)
    # Counter-example: the same entries against the active generation are applied.
    drain()
    assert live.displayed("sn-fence") == 2


def test_the_test_restore_reports_and_drops_its_scratch_generation(api, make_user, make_video):
    live.api_liked_video(api, make_user, make_video, "sn-drill", 2)
    snap = _take()
    before = set(CountProjectionGeneration.objects.values_list("generation", flat=True))
    result = restore.test_restore(snap.pk, actor=live.OPERATOR)
    assert result["ok"] is True, result
    scratch = CountProjectionGeneration.objects.get(pk=result["generation"])
    assert scratch.generation not in before and scratch.scratch and scratch.rows_dropped_at is not None
    assert scratch.status == "RETIRED" and count_routing.load_generation().generation != scratch.generation
    assert _relations(scratch.generation) == {}
    snap.refresh_from_db()
    assert snap.test_result["ok"] is True and snap.tested_at is not None
    # Counter-example: the drill of a tampered snapshot fails, and says why.
    record = next(a for a in snap.artifacts if a["rows"])
    with open(_path(record), "ab") as fh:
        fh.write(b"garbage")
    result = restore.test_restore(snap.pk, actor=live.OPERATOR)
    assert result["ok"] is False and any("checksum_mismatch" in p for p in result["problems"])
