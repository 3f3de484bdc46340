"""Recovery snapshots (issue 12; SNAP-4 … SNAP-11, INV-16, T11, T12, T17–T19): the build at an exact cut
with the whole offset vector, the cut that fails (never enlarged) on a receipt beyond it or a lease that
changed hands, verification that names why a snapshot is unusable, the restore of a damaged partition
through an approved repair while commands go on, and the daily test-restore. The restore on the generation
lifecycle (issue 29 §6): audited once at its start and once at its end, its lease renewed while it works,
FAILED past its time limit, and a restore whose worker died reclaimed (by the next start, or with its job)."""

from __future__ import annotations

import os
import time

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from counting import routing as count_routing
from counting.models import CountGenerationFence, CountProjectionGeneration, LikeCountProjection, VideoLikeCountVbucket
from counting.services import projection as count_projection
from likes_project import leases
from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.eventlog.models import Lease
from likes_project.generations import engine as generations_engine
from likes_project.generations import generation_start
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline, job_start, jobs_sweep
from reconciliation.jobs import SNAPSHOT_JOB
from reconciliation.models import RecoveryRestore, RecoverySnapshot, RepairRequest
from reconciliation.services import repair
from reconciliation.services.recovery import artifacts, restore, snapshot
from tests import drills
from tests.counting.helpers import drain, lease_expire
from tests.reconciliation.helpers import (
    APPROVER,
    OPERATOR,
    REQUESTER,
    Background,
    api_like,
    api_liked_video,
    displayed,
    facts_liked,
    run_check,
    sql,
)

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True),
              pytest.mark.usefixtures("close_db_connections")]


def _take(reason: str = "test") -> RecoverySnapshot:
    """A snapshot as `manage.py snapshot_create` takes it (its ops job, run here to its end)."""
    job = job_run_inline(job_start(kind=SNAPSHOT_JOB, actor=OPERATOR, params={"reason": reason}).pk)
    return snapshot.snapshot_get(job.params["snapshotId"])


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
    api_liked_video(api, make_user, make_video, "sn-seal", 3)
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
    assert snapshot.snapshot_verify(snap.pk, actor=OPERATOR) == {"snapshotId": snap.pk, "status": "SEALED",
                                                                  "usable": True, "problems": []}
    assert [r.outcome for r in AuditRecord.objects.filter(target_type="recovery_snapshot", target_id=str(snap.pk))
            .order_by("id")] == ["applied", "sealed", "usable"]


def test_a_receipt_beyond_the_cut_fails_the_snapshot_and_the_cut_is_not_enlarged(api, make_user, make_video,
                                                                                  settings):
    """T11 / T12: a dispatcher that skipped ahead committed an entry after B[p] while dispatch was stopped."""
    settings.SNAPSHOT_ABORT_RETRIES = 0  # this snapshot alone (a retry would find the receipt in its drain)
    _video, users = api_liked_video(api, make_user, make_video, "sn-skip", 2)
    gen = count_routing.load_generation()
    recorded = {}

    def skip_ahead(_grants):
        p = streams.partition_for(f"{users[0].pk}:sn-skip")
        through = checkpoints_get("count")[p]
        recorded[p] = through
        ms, _seq = streams.entry_id_key(through)
        alias = settings.COUNT_PARTITION_ALIASES[0]
        sql(alias, "INSERT INTO counting_counteventreceipt (generation, source_topic, source_partition, source_offset, "
                   "event_id, outcome, created_at) VALUES (%s, %s, %s, %s, 'skipped-ahead', 'applied', now())",
            [gen.generation, streams.TOPIC, p, f"{ms + 5}-0"])

    snapshot.after_dispatch_stopped = skip_ahead
    try:
        snap = _take()
    finally:
        snapshot.after_dispatch_stopped = None
    assert snap.status == "FAILED" and "receipts beyond the boundary" in snap.failure
    assert snap.offsets == [] and snap.artifacts == []  # nothing recorded for a cut that failed
    assert snapshot.snapshot_verify(snap.pk, actor=OPERATOR)["usable"] is False
    # Counter-example: without the skipped-ahead receipt the same cut seals.
    sql(settings.COUNT_PARTITION_ALIASES[0], "DELETE FROM counting_counteventreceipt WHERE event_id = %s",
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
    """T18 (and T12's rebalance): ownership of a partition moved between the stop of dispatch and the cut.
    That snapshot fails and is never reused; the job takes a new one, which seals once nothing moves."""
    api_liked_video(api, make_user, make_video, "sn-lease", 1)
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
    api_liked_video(api, make_user, make_video, "sn-verify", 3)
    snap = _take()
    assert snap.status == "SEALED", snap.failure
    return snap


def _problems(snap) -> list[str]:
    return snapshot.snapshot_verify(snap.pk, actor=OPERATOR)["problems"]


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
    RecoverySnapshot.objects.filter(pk=sealed.pk).update(offsets=sealed.offsets[1:])
    problems = _problems(sealed)
    assert any(p.startswith("offset_vector_incomplete") for p in problems), problems


def test_an_offset_past_the_streams_retention_makes_the_snapshot_unusable(api, make_user, make_video, sealed):
    users = [make_user() for _ in range(6)]
    for u in users:
        assert api_like(api, u, "sn-verify").status_code == 200
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
        restore.restore_execute(sealed.pk, actor=OPERATOR)


# --- restore ------------------------------------------------------------------------------------------


def test_a_damaged_partition_is_restored_from_a_snapshot_while_commands_go_on(api, make_user, make_video):
    """Done means: a snapshot taken under load, restored over a deliberately damaged partition and
    replayed, gives counts equal to the acknowledged likes."""
    videos = [f"sn-restore-{i}" for i in range(3)]
    for v in videos:
        api_liked_video(api, make_user, make_video, v, 4)
    late_users = [make_user() for _ in range(24)]

    def traffic(users):
        for i, u in enumerate(users):
            assert api_like(api, u, videos[i % len(videos)]).status_code == 200
            drain()

    during = Background(traffic, late_users[:8])
    snap = _take("before the damage")
    during.join()
    assert snap.status == "SEALED", snap.failure
    old = count_routing.load_generation()
    damaged = settings.COUNT_PARTITION_ALIASES[0]
    assert sql(damaged, "DELETE FROM counting_likecountprojection WHERE generation = %s", [old.generation]) > 0
    assert run_check("coverage", all_videos=True).status == "FAILED"
    req = repair.repair_request(actor=REQUESTER, source=f"snapshot:{snap.pk}", reason="partition 0 lost its rows")
    assert req.params["videos"] == [] and req.status == "AWAITING_APPROVAL"
    req = repair.repair_approve(repair_id=req.pk, actor=APPROVER)
    after = Background(traffic, late_users[8:])
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
    assert sum(len(facts_liked(v)) for v in videos) == 3 * 4 + len(late_users)  # every acknowledged like
    for v in videos:
        assert displayed(v) == len(facts_liked(v))
    assert run_check("exact", all_videos=True).status == "PASSED"


def test_a_restore_replayed_to_the_barrier_equals_the_live_projection_at_it(api, make_user, make_video):
    """T11: a snapshot taken during live load, restored and replayed to the same barrier T."""
    videos = [f"sn-t11-{i}" for i in range(2)]
    for v in videos:
        api_liked_video(api, make_user, make_video, v, 2)
    users = [make_user() for _ in range(12)]

    def traffic():
        for i, u in enumerate(users):
            assert api_like(api, u, videos[i % 2], "LIKED").status_code == 200
            if i % 3 == 0:
                assert api_like(api, u, videos[i % 2], "UNLIKED").status_code == 200
            drain()

    load = Background(traffic)
    snap = _take("under load")
    load.join()
    drain()
    assert snap.status == "SEALED", snap.failure
    old = count_routing.load_generation()
    live_relations, live_buckets = _relations(old.generation), _buckets(old.generation)
    report = restore.restore_execute(snap.pk, actor=OPERATOR)
    assert report["identityDiffs"] == [] and report["coverageDiffs"] == []
    # Nothing moved after the switch: the replayed generation is the live one at T, row for row.
    assert _relations(report["generation"]) == live_relations
    assert _buckets(report["generation"]) == live_buckets
    assert report["consumptionBarrier"] == {p: checkpoints_get("count").get(p, "0-0") for p in streams.all_partitions()}


def test_a_pass_still_routing_to_the_replaced_generation_is_refused_by_the_fence(api, make_user, make_video):
    api_liked_video(api, make_user, make_video, "sn-fence", 1)
    snap = _take()
    old = count_routing.load_generation()
    restore.restore_execute(snap.pk, actor=OPERATOR)
    u = make_user()
    assert api_like(api, u, "sn-fence").status_code == 200
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
    assert displayed("sn-fence") == 2


def test_the_test_restore_reports_and_drops_its_scratch_generation(api, make_user, make_video):
    api_liked_video(api, make_user, make_video, "sn-drill", 2)
    snap = _take()
    before = set(CountProjectionGeneration.objects.values_list("generation", flat=True))
    result = restore.test_restore(snap.pk, actor=OPERATOR)
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
    result = restore.test_restore(snap.pk, actor=OPERATOR)
    assert result["ok"] is False and any("checksum_mismatch" in p for p in result["problems"])


# --- the restore on the generation lifecycle (issue 29 §6) ---------------------------------------------


def _restore_actions(restore_id: int) -> list[tuple[str, str]]:
    """The audit records of one restore (its lifecycle's target), in order: (action, outcome)."""
    return list(AuditRecord.objects.filter(target_type="recovery_restore", target_id=str(restore_id))
                .order_by("pk").values_list("action", "outcome"))


def _slow_first_load(monkeypatch, *, pieces: int, pace_s: float, probe_after_s: float | None = None) -> dict:
    """The next artifact a restore loads streams in slowly (`pieces` more reads, `pace_s` each, after its
    rows): one long chunk of the load, during which only the restore's ticks can renew its lease. With
    `probe_after_s`, that far into the chunk an intruder tries to take the restore's lease; the returned
    dict gets its grant (None: refused) as "intruder"."""
    real_load, real_stream, seen = restore._load_artifact, artifacts.artifact_stream, {}

    def paced_stream(uri, **kwargs):
        header, chunks, hashing = real_stream(uri, **kwargs)

        def paced():
            yield from chunks
            for _ in range(pieces):
                time.sleep(pace_s)  # the store answers slowly: the chunk outlives the lease's TTL
                if (probe_after_s is not None and "intruder" not in seen
                        and time.monotonic() - seen["started"] > probe_after_s):
                    seen["intruder"] = leases.lease_acquire(resource=restore.RESTORE_LEASE, holder="intruder",
                                                            ttl_s=30)
                yield b""

        return header, paced(), hashing

    def load(*args, **kwargs):
        if seen:
            return real_load(*args, **kwargs)
        seen["started"] = time.monotonic()
        monkeypatch.setattr(artifacts, "artifact_stream", paced_stream)
        try:
            return real_load(*args, **kwargs)
        finally:
            monkeypatch.setattr(artifacts, "artifact_stream", real_stream)

    monkeypatch.setattr(restore, "_load_artifact", load)
    return seen


def test_a_restore_is_audited_at_its_start_and_end_and_a_dead_one_is_reclaimed_by_the_next_start(
        api, make_user, make_video):
    api_liked_video(api, make_user, make_video, "sn-life", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    # A restore whose holder died right after its start: its row building, its lease not yet expired.
    grant = leases.lease_acquire(resource=restore.RESTORE_LEASE, holder="dying-worker", ttl_s=30)
    with transaction.atomic(using="default"):
        dead = generation_start(restore.LIFECYCLE, actor=OPERATOR, params={"snapshotId": snap.pk}, grant=grant)
    # Counter-example: while its lease is held it is alive; the next restore is refused and takes nothing.
    with pytest.raises(restore.RestoreFailed, match="another restore is running"):
        restore.restore_execute(snap.pk, actor=OPERATOR)
    assert RecoveryRestore.objects.get(pk=dead.pk).status == "SHADOW"
    lease_expire(grant)
    report = restore.restore_execute(snap.pk, actor=OPERATOR)
    dead.refresh_from_db()
    assert dead.status == "FAILED" and dead.failure_reason.startswith("abandoned")
    assert CountProjectionGeneration.objects.get(pk=dead.count_generation).status == "RETIRED"  # never switched in
    done = RecoveryRestore.objects.get(pk=report["restore"])
    assert (done.status, done.count_generation, done.replaced_generation) == ("ACTIVE", report["generation"], active)
    assert count_routing.load_generation().generation == report["generation"]
    assert report["previousGeneration"] == active and report["identityDiffs"] == [] and report["fenceMs"] >= 0
    # One record when each started, one when it ended, with the outcome; nothing else names them.
    assert [a for a, _o in _restore_actions(dead.pk)] == ["restore.rebuild_start", "restore.rebuild_abandoned"]
    assert _restore_actions(done.pk)[1:] == [("restore.rebuild_activate", "active")]
    assert len(_restore_actions(done.pk)) == 2
    # The daily test-restore is a dry run of the same lifecycle: verified, RETIRED, never switched in.
    drill = restore.test_restore(snap.pk, actor=OPERATOR)
    assert drill["ok"] is True, drill
    scratch = RecoveryRestore.objects.get(pk=drill["restore"])
    assert (scratch.status, scratch.scratch, scratch.activated_at) == ("RETIRED", True, None)
    assert RecoveryRestore.objects.get(pk=done.pk).status == "ACTIVE"  # the drill retired no restore
    assert [a for a, _o in _restore_actions(scratch.pk)] == ["restore.rebuild_start", "restore.rebuild_verified"]


@pytest.mark.parametrize("ticks", [True, False], ids=["renewed", "not_renewed_counter_example"])
def test_a_slow_restore_keeps_its_lease_past_the_ttl_by_renewing_it_as_it_works(
        api, make_user, make_video, monkeypatch, settings, ticks):
    api_liked_video(api, make_user, make_video, "sn-slow", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    settings.OPS_JOB_LEASE_S = 1.0  # the restore's lease: 1 s, renewed by its ticks at most every 0.25 s
    if not ticks:
        monkeypatch.setattr(generations_engine, "_tick", lambda sl: None)
    seen = _slow_first_load(monkeypatch, pieces=7, pace_s=0.2, probe_after_s=1.2)
    if ticks:
        report = restore.restore_execute(snap.pk, actor=OPERATOR)
        assert seen["intruder"] is None  # 1.2 s into one chunk, past the 1 s TTL, the lease was still the restore's
        assert RecoveryRestore.objects.get(pk=report["restore"]).status == "ACTIVE"
        assert count_routing.load_generation().generation == report["generation"]
        return
    # Without the ticks the lease ran out inside the chunk, another holder took it, and the restore was
    # fenced out at its next save: FAILED, its count generation retired, the active one untouched.
    with pytest.raises(restore.RestoreFailed, match="taken over"):
        restore.restore_execute(snap.pk, actor=OPERATOR)
    assert seen["intruder"] is not None
    failed = RecoveryRestore.objects.get()
    assert failed.status == "FAILED" and "LeaseLost" in failed.failure_reason
    assert CountProjectionGeneration.objects.get(pk=failed.count_generation).status == "RETIRED"
    assert count_routing.load_generation().generation == active
    leases.lease_release(seen["intruder"])


def test_a_restore_past_its_time_limit_ends_failed_with_one_end_record(
        api, make_user, make_video, monkeypatch, settings):
    api_liked_video(api, make_user, make_video, "sn-limit", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    settings.RESTORE_TIME_LIMIT_S = 0.5
    _slow_first_load(monkeypatch, pieces=6, pace_s=0.2)  # one chunk of 1.2 s
    with pytest.raises(restore.RestoreFailed, match="time limit"):
        restore.restore_execute(snap.pk, actor=OPERATOR)
    failed = RecoveryRestore.objects.get()
    assert failed.status == "FAILED" and "time limit of 0.5 s" in failed.failure_reason
    assert CountProjectionGeneration.objects.get(pk=failed.count_generation).status == "RETIRED"
    assert count_routing.load_generation().generation == active  # never switched in
    assert _restore_actions(failed.pk)[1:] == [("restore.rebuild_failed", "failed")]
    assert len(_restore_actions(failed.pk)) == 2
    # Counter-example: the same slow restore within its limit switches in.
    settings.RESTORE_TIME_LIMIT_S = 60.0
    _slow_first_load(monkeypatch, pieces=6, pace_s=0.2)
    report = restore.restore_execute(snap.pk, actor=OPERATOR)
    assert RecoveryRestore.objects.get(pk=report["restore"]).status == "ACTIVE"


def test_a_restore_whose_worker_was_killed_is_reclaimed_with_its_job_and_the_next_one_switches_in(
        api, make_user, make_video):
    """The restore of an approved repair runs in the repair's job on a worker, which is SIGKILLed during the
    load: nothing marks anything then. Once the worker's leases expired the sweeper fails the job, and with it
    the repair and the restore (its count generation retired); reads never left the active generation, and
    the next restore is accepted."""
    api_liked_video(api, make_user, make_video, "sn-kill", 2)
    snap = _take()
    active = count_routing.load_generation().generation
    req = repair.repair_request(actor=REQUESTER, source=f"snapshot:{snap.pk}", reason="partition lost")
    req = repair.repair_approve(repair_id=req.pk, actor=APPROVER)
    worker = drills.start(["manage.py", "shell", "-c", "from likes_project.opsjobs.services import job_run_inline; "
                           f"job_run_inline({req.job_id})"], OPS_JOB_LEASE_S="1", GENERATION_THROTTLE_S="0.5")
    try:
        row = drills.wait_for(lambda: next((r for r in RecoveryRestore.objects.filter(status="BACKFILLING")
                                            if r.progress.get("cursor")), None),
                              what="the restore's load to be under way")
    finally:
        output = drills.kill(worker)
    row.refresh_from_db()
    job = OpsJob.objects.get(pk=req.job_id)
    # Counter-example: without the reclaim the dead restore stays building (and its job running) for ever.
    assert row.status == "BACKFILLING" and row.job_id == job.pk, output
    assert job.status == "RUNNING" and job.holder
    drills.wait_for(lambda: not Lease.objects.filter(resource__in=[restore.RESTORE_LEASE, f"opsjob:{job.pk}"],
                                                     expires_at__gte=timezone.now()).exists(),
                    what="the dead worker's leases to expire")
    assert job.pk in jobs_sweep().abandoned
    row.refresh_from_db()
    assert row.status == "FAILED" and row.failure_reason.startswith("abandoned")
    assert AuditRecord.objects.filter(action="restore.rebuild_abandoned", target_id=str(row.pk), job_id=job.pk).exists()
    assert CountProjectionGeneration.objects.get(pk=row.count_generation).status == "RETIRED"
    assert RepairRequest.objects.get(pk=req.pk).status == "FAILED"
    assert count_routing.load_generation().generation == active
    report = restore.restore_execute(snap.pk, actor=OPERATOR)
    assert RecoveryRestore.objects.get(pk=report["restore"]).status == "ACTIVE"
