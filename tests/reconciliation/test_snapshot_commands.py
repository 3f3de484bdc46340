"""The recovery-snapshot commands' contracts (issue 12 §5): `snapshot_create --json` ({"snapshotId",
"status", "offsetVector", "artifacts": [{"kind", "uri", "rows", "sha256"}], "dispatchPausedMs"}, exit 0
SEALED / 1 FAILED / 3 not run), `snapshot_verify ID` ({"snapshotId", "usable", "problems"}, exit 0 / 1 /
3), `snapshot_list`, `repair_request --source snapshot:<id>`; the beat entries; the gauges; retention."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from counting.models import CountProjectionGeneration, LikeCountProjection
from likes_project.audit.models import AuditRecord
from likes_project.eventlog.models import DeadLetter
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline
from reconciliation.jobs import SNAPSHOT_TEST_JOB
from reconciliation.models import RecoverySnapshot, RepairRequest
from reconciliation.services.recovery import artifacts, restore, snapshot
from reconciliation.services.recovery import schedule as recovery_schedule
from tests.metrics_helpers import parse, scrape_text
from tests.reconciliation.helpers import OPERATOR, api_liked_video, manage, member_of

# The commands' contracts: the snapshot itself is a `topology` test of its own (test_snapshots,
# test_recovery_rejections), so this module runs on `single` only (D100).
pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True),
              pytest.mark.usefixtures("close_db_connections")]

CREATE_KEYS = {"snapshotId", "status", "offsetVector", "artifacts", "dispatchPausedMs"}
ARTIFACT_KEYS = {"kind", "uri", "rows", "sha256"}


@pytest.fixture
def operator():
    return member_of("likes-operator")


def test_snapshot_create_prints_the_contract_and_verify_and_list_read_it(api, make_user, make_video, operator):
    api_liked_video(api, make_user, make_video, "sc-cli", 2)
    ran = manage("snapshot_create", "--reason", "before the upgrade", "--actor", operator.username, "--json")
    assert ran.code == 0, ran.err
    out = ran.json
    assert set(out) >= CREATE_KEYS and out["status"] == "SEALED"
    assert [o["partition"] for o in out["offsetVector"]] == list(range(len(out["offsetVector"])))
    assert all({"topic", "partition", "nextOffset"} <= set(o) for o in out["offsetVector"])
    assert len(out["artifacts"]) == 2 * len(settings.COUNT_PARTITION_ALIASES)
    assert all(set(a) >= ARTIFACT_KEYS and len(a["sha256"]) == 64 for a in out["artifacts"])
    assert isinstance(out["dispatchPausedMs"], float)
    snap = RecoverySnapshot.objects.get(pk=out["snapshotId"])
    assert (snap.reason, snap.started_by) == ("before the upgrade", operator.username)
    verified = manage("snapshot_verify", str(snap.pk), "--actor", operator.username, "--json")
    assert (verified.code, verified.json) == (0, {"snapshotId": snap.pk, "status": "SEALED", "usable": True,
                                                  "problems": []})
    listed = manage("snapshot_list", "--json")
    assert [s["snapshotId"] for s in listed.json["snapshots"]] == [snap.pk]
    assert "SEALED" in manage("snapshot_list").out
    # A tampered artifact: verify exits 1 and names the reason.
    record = out["artifacts"][0]
    with open(os.path.join(settings.SNAPSHOT_STORAGE_DIR, record["uri"][len(artifacts.URI_SCHEME):]), "ab") as fh:
        fh.write(b"x")
    bad = manage("snapshot_verify", str(snap.pk), "--actor", operator.username, "--json")
    assert bad.code == 1 and bad.json["usable"] is False
    assert any(p.startswith("checksum_mismatch") for p in bad.json["problems"])


def test_a_failed_snapshot_exits_1_with_its_reason(api, make_user, make_video, operator, settings):
    api_liked_video(api, make_user, make_video, "sc-cli-fail", 1)
    settings.SNAPSHOT_ABORT_RETRIES = 0  # the first abort is the job's verdict

    def rebalance(grants):
        from likes_project import leases
        from tests.counting.helpers import lease_expire

        lease_expire(grants[-1])
        leases.lease_acquire(resource=grants[-1].resource, holder="another-worker", ttl_s=30)

    snapshot.after_dispatch_stopped = rebalance
    try:
        ran = manage("snapshot_create", "--actor", operator.username, "--json")
    finally:
        snapshot.after_dispatch_stopped = None
    assert ran.code == 1 and ran.json["status"] == "FAILED" and "lease changed hands" in ran.json["failure"]


def test_the_snapshot_commands_refuse_bad_input_and_actors_without_the_permission(operator):
    viewer = member_of("likes-viewer")
    before = (RecoverySnapshot.objects.count(), OpsJob.objects.count())
    refused = manage("snapshot_create", "--actor", viewer.username, "--json")
    assert refused.code == 3 and refused.json["code"] == "permission_denied"
    refused = manage("snapshot_create", "--actor", "nobody-here", "--json")
    assert refused.code == 3 and refused.json["code"] == "unknown_actor"
    assert (RecoverySnapshot.objects.count(), OpsJob.objects.count()) == before  # nothing was written
    missing = manage("snapshot_verify", "999999", "--actor", operator.username, "--json")
    assert missing.code == 3 and missing.json["code"] == "snapshot_not_found"
    junk = manage("snapshot_verify", "abc", "--actor", operator.username, "--json")
    assert junk.code == 3 and junk.json["code"] == "snapshot_not_found"
    assert manage("snapshot_verify", "1", "--actor", viewer.username, "--json").json["code"] == "permission_denied"
    assert manage("snapshot_list", "--limit", "0").code != 0


def test_repair_request_takes_a_sealed_snapshot_as_its_source(api, make_user, make_video, operator):
    api_liked_video(api, make_user, make_video, "sc-cli-rr", 1)
    snap_id = manage("snapshot_create", "--actor", operator.username, "--json").json["snapshotId"]
    ran = manage("repair_request", "--source", f"snapshot:{snap_id}", "--reason", "partition restored from backup",
                 "--actor", operator.username, "--json")
    assert ran.code == 0, ran.err
    req = RepairRequest.objects.get(pk=ran.json["repairId"])
    assert set(ran.json) == {"repairId", "status"}  # the contract of issue 11, unchanged
    assert (req.params["source"], req.params["videos"], req.status) == (f"snapshot:{snap_id}", [], "AWAITING_APPROVAL")
    before = RepairRequest.objects.count()
    for source, code in (("snapshot:999999", "snapshot_not_found"), ("snapshot:x", "invalid_source"),
                         ("backup", "invalid_source")):
        bad = manage("repair_request", "--source", source, "--reason", "r", "--actor", operator.username, "--json")
        assert bad.code != 0 and bad.json["code"] == code, (source, bad.out)
    RecoverySnapshot.objects.filter(pk=snap_id).update(status="FAILED")
    bad = manage("repair_request", "--source", f"snapshot:{snap_id}", "--reason", "r", "--actor", operator.username,
                 "--json")
    assert bad.json["code"] == "snapshot_not_sealed"
    # The facts source still needs its videos.
    bad = manage("repair_request", "--source", "facts", "--reason", "r", "--actor", operator.username, "--json")
    assert bad.json["code"] == "invalid_scope"
    assert RepairRequest.objects.count() == before


# --- the schedule, the gauges, retention ---------------------------------------------------------------


def test_the_beat_starts_a_snapshot_then_a_test_restore_of_the_latest_and_never_two_at_once(
        api, make_user, make_video, client):
    api_liked_video(api, make_user, make_video, "sc-beat", 2)
    assert recovery_schedule.test_restore_scheduled() == {"status": "no_sealed_snapshot"}
    started = recovery_schedule.snapshot_scheduled()
    assert started["status"] == "started"
    assert recovery_schedule.snapshot_scheduled() == {"status": "previous_running"}
    job = job_run_inline(started["jobId"])
    snap = RecoverySnapshot.objects.get(pk=job.params["snapshotId"])
    assert snap.status == "SEALED" and snap.started_by == "schedule:recovery-snapshot"

    def gauges() -> dict[str, float]:
        return {name: v for (name, _labels), v in parse(scrape_text(client)).items()
                if name.startswith("likes_snapshot_")}

    seen = gauges()
    assert seen["likes_snapshot_last_sealed_age_seconds"] >= 0 and "likes_snapshot_test_restore_ok" not in seen
    tested = recovery_schedule.test_restore_scheduled()
    assert OpsJob.objects.get(pk=tested["jobId"]).kind == SNAPSHOT_TEST_JOB
    job_run_inline(tested["jobId"])
    assert gauges()["likes_snapshot_test_restore_ok"] == 1.0
    snap.refresh_from_db()
    assert snap.test_result["ok"] is True
    # Counter-example: a failing drill turns the gauge to 0.
    RecoverySnapshot.objects.filter(pk=snap.pk).update(offsets=snap.offsets[1:])
    job_run_inline(recovery_schedule.test_restore_scheduled()["jobId"])
    assert gauges()["likes_snapshot_test_restore_ok"] == 0.0


def test_retention_keeps_the_newest_sealed_snapshots_and_deletes_the_others_artifacts(
        api, make_user, make_video, settings):
    api_liked_video(api, make_user, make_video, "sc-keep", 1)
    settings.SNAPSHOT_KEEP = 2
    jobs = [job_run_inline(recovery_schedule.snapshot_scheduled()["jobId"]) for _ in range(3)]
    ids = [j.params["snapshotId"] for j in jobs]
    first = RecoverySnapshot.objects.get(pk=ids[0])
    assert first.status == "EXPIRED" and first.artifacts == []  # expired by the third build's retention
    assert all(RecoverySnapshot.objects.get(pk=i).status == "SEALED" for i in ids[1:])
    assert AuditRecord.objects.filter(action="snapshot.expire", target_id=str(ids[0])).exists()
    assert snapshot.snapshot_verify(ids[0], actor=OPERATOR)["usable"] is False


def test_a_dead_letter_redriven_after_the_cut_makes_the_snapshot_unusable(api, make_user, make_video):
    api_liked_video(api, make_user, make_video, "sc-dl", 1)
    letter = DeadLetter.objects.create(consumer="count", stream_key="k", entry_id="1-0", error_class="X",
                                       first_failed_at="2026-01-01T00:00:00Z", last_failed_at="2026-01-01T00:00:00Z")
    snap = snapshot.snapshot_build(snapshot.snapshot_create(actor=OPERATOR, reason="dl").pk)
    assert snap.status == "SEALED" and snap.dead_letters_at_cut == [letter.pk]
    assert snapshot.snapshot_problems(snap) == []
    DeadLetter.objects.filter(pk=letter.pk).update(status="RESOLVED")
    assert any(p.startswith("dead_letters_redriven_since") for p in snapshot.snapshot_problems(snap))


def test_a_replaced_generation_is_dropped_after_its_observation_period_only(api, make_user, make_video, settings):
    api_liked_video(api, make_user, make_video, "sc-drop", 2)
    snap = snapshot.snapshot_build(snapshot.snapshot_create(actor=OPERATOR, reason="drop").pk)
    old = CountProjectionGeneration.objects.get(status="ACTIVE").generation
    restore.restore_execute(snap.pk, actor=OPERATOR)
    # The daily drill still works after a real restore (its replay's fence token is above the restore's).
    assert restore.test_restore(snap.pk, actor=OPERATOR)["ok"] is True

    def rows(generation: int) -> int:
        return sum(LikeCountProjection.objects.using(a).filter(generation=generation).count()
                   for a in settings.COUNT_PARTITION_ALIASES)

    assert restore.generations_drop_retired(actor=OPERATOR) == {}  # still observed: readable
    assert rows(old) == 2
    settings.COUNT_GENERATION_OBSERVATION_S = 0
    dropped = restore.generations_drop_retired(actor=OPERATOR)
    assert set(dropped) == {old} and dropped[old] >= 2
    assert rows(old) == 0 and CountProjectionGeneration.objects.get(pk=old).rows_dropped_at is not None
    new = CountProjectionGeneration.objects.get(status="ACTIVE").generation
    assert rows(new) == 2
    with pytest.raises(restore.RestoreFailed):
        restore.generation_rows_drop(new)  # the active generation's rows are never dropped


def test_a_second_snapshot_is_refused_while_one_is_being_built(api, make_user, make_video):
    from likes_project.opsjobs.services import job_start

    api_liked_video(api, make_user, make_video, "sc-two", 1)
    first = job_start(kind="recovery.snapshot", actor=OPERATOR, params={"reason": "first"})
    with pytest.raises(snapshot.SnapshotBuildRunning):
        job_start(kind="recovery.snapshot", actor=OPERATOR, params={"reason": "second"})
    assert RecoverySnapshot.objects.count() == 1
    job_run_inline(first.pk)
    # Counter-example: once the first one is sealed, the next is taken.
    assert job_run_inline(job_start(kind="recovery.snapshot", actor=OPERATOR, params={"reason": "next"}).pk
                          ).status == "SUCCEEDED"


def test_retention_spares_a_snapshot_an_open_repair_names_and_a_restore_names_no_videos(
        api, make_user, make_video, settings):
    from reconciliation.services import repair
    from tests.reconciliation.helpers import REQUESTER

    api_liked_video(api, make_user, make_video, "sc-spare", 1)
    settings.SNAPSHOT_KEEP = 1
    named = job_run_inline(recovery_schedule.snapshot_scheduled()["jobId"]).params["snapshotId"]
    with pytest.raises(Exception) as refused:
        repair.repair_request(actor=REQUESTER, source=f"snapshot:{named}", reason="r", videos=["sc-spare"])
    assert getattr(refused.value, "code", None) == "invalid_scope"
    repair.repair_request(actor=REQUESTER, source=f"snapshot:{named}", reason="restore it")
    job_run_inline(recovery_schedule.snapshot_scheduled()["jobId"])
    third = job_run_inline(recovery_schedule.snapshot_scheduled()["jobId"]).params["snapshotId"]
    statuses = dict(RecoverySnapshot.objects.values_list("pk", "status"))
    assert statuses[named] == "SEALED" and statuses[third] == "SEALED"  # the named one is kept beyond KEEP
    assert sorted(statuses.values()).count("EXPIRED") == 1
    assert AuditRecord.objects.filter(action="snapshot.expire", actor="snapshot-retention").count() == 1

