"""The offline feature export (issue 31 §3): closed periods of the log written once each, in the built-in
subscription's fields with its pseudonyms; manifests that verify, and the counter-examples that do not (a tampered
file, a missing period); account deletion rewriting the files without the user, audited; the retention rule; the
un-acknowledged export position holding the log back. Real PostgreSQL, Redis and a storage directory; periods of
1 s and an explicit `now`, so nothing waits for an hour to close."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import time
import uuid
from pathlib import Path

import pytest
from django.core.files.storage import storages
from django.core.management import call_command
from django.core.management.base import CommandError

from counting.features import files, policy, retention, selectors, services, tasks
from likes_project import leases
from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from likes_project.eventlog.services import streams_trim
from likes_project.redis_client import stream_redis
from likes_project.retention import retention_rule_get
from likes_project.subscriptions.models import SubscriptionNotice
from likes_project.subscriptions.services import pseudonym
from tests.counting.helpers import consume_everything, like_storm, publish_all

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


@pytest.fixture(autouse=True)
def exports(settings):
    """Periods of 1 s with no grace, in the test run's own export directory, emptied around each test."""
    settings.FEATURE_EXPORT_FILE_S, settings.FEATURE_EXPORT_GRACE_S = 1, 0.0
    location = getattr(storages["feature_exports"], "location", None)
    if location is None:
        pytest.skip("the export tests read and tamper files of a filesystem storage")
    root = Path(location) / files.ROOT
    shutil.rmtree(root, ignore_errors=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def storm(make_user, make_video):
    """Likes and unlikes of `n` users on 3 videos (some flipped), published to the log."""
    author = make_user()
    videos = [f"fx-v{v}" for v in range(3)]
    for video_id in videos:
        make_video(video_id, author)

    def run(n: int = 3):
        users = [make_user() for _ in range(n)]
        like_storm(users, videos)
        return users

    return run


_seq = iter(range(1, 10**9))


def craft(at_ms: int, user_id: int, video: str = "fx-crafted") -> str:
    """A relation event on the log at a chosen millisecond (so periods are known without waiting)."""
    event = {"eventType": "LikeRelationChanged", "eventId": str(uuid.uuid4()), "aggregateKey": f"{user_id}:{video}",
             "userId": user_id, "videoId": video, "relationVersion": 1, "absoluteState": "LIKED",
             "stateChangedAt": policy.iso_ms(at_ms)}
    stream_redis().xadd(streams.stream_key(streams.partition_for(event["aggregateKey"])),
                        {"event": json.dumps(event)}, id=f"{at_ms}-{next(_seq)}")
    return event["eventId"]


def three_periods(user_ids: list[int]) -> list[str]:
    """Events of these users in three consecutive closed periods, 30 s ago."""
    base = (int(time.time()) - 30) * 1000
    return [craft(base + 1000 * k + 100 + u, uid) for k in range(3) for u, uid in enumerate(user_ids)]


def run(**kw) -> services.ExportReport:
    kw.setdefault("now", time.time() + 5)  # every period of what was published is closed
    return services.feature_export_run(**kw)


def stored_rows() -> list[dict]:
    out = []
    for name in files.manifests():
        with files.rows_read(files.manifest_read(name)["file"]) as (rows, _hashing):
            out += list(rows)
    return out


def log_event_ids() -> set[str]:
    return {e.event["eventId"] for p in streams.all_partitions() for e in streams.read_after(p, "0-0", 10_000)
            if e.event.get("eventType") == "LikeRelationChanged"}


def verify() -> tuple[int, dict]:
    out = io.StringIO()
    try:
        call_command("feature_export_verify", "--json", stdout=out)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


def test_a_storm_is_exported_once_across_periods_in_the_allowed_fields_with_pseudonyms_only(storm, exports,
                                                                                             settings):
    sub = services.feature_export_ensure()
    first = storm()
    # Counter-example: a period inside its grace is not written, and nothing is acknowledged.
    settings.FEATURE_EXPORT_GRACE_S = 3600.0
    assert run(now=time.time()).files == [] and not list(files.manifests())
    settings.FEATURE_EXPORT_GRACE_S = 0.0
    assert run(now=time.time() + 1).files
    second = storm(2)  # after the written periods: their entries may fall in one already written (a later file)
    assert run().files and run().files == []  # a third run finds nothing new
    rows = stored_rows()
    assert sorted(r["eventId"] for r in rows) == sorted(log_event_ids())  # every event, once
    assert len(list(files.manifests())) >= 2
    assert all(list(r) == list(policy.ROW_FIELDS) for r in rows)
    raw = b"".join(gzip.decompress(p.read_bytes()) for p in exports.rglob("*.jsonl.gz"))
    assert b"userId" not in raw
    assert {r["userPseudonym"] for r in rows} == {pseudonym(sub, u.pk) for u in first + second}
    manifest = files.manifest_read(next(files.manifests()))
    assert manifest["keyId"] == policy.key_id(sub.pseudonym_key) and sub.pseudonym_key not in json.dumps(manifest)
    assert manifest["fieldPolicy"] == {"version": 1, "fields": list(policy.ROW_FIELDS)}
    code, result = verify()
    assert (code, result["ok"], result["rows"]) == (0, True, len(rows))


def test_a_tampered_file_or_a_missing_period_fails_verification(make_user):
    user = make_user()
    three_periods([user.pk])
    out = io.StringIO()
    call_command("feature_export_run", stdout=out)  # the periods are 30 s old: closed now
    assert out.getvalue().count("wrote features/v1/") == 3
    assert verify()[0] == 0
    first, middle, _last = [files.manifest_read(n) for n in files.manifests()]
    path = Path(files.storage().path(middle["file"]))
    row = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps({**row, "state": "UNLIKED"}).encode() + b"\n"))
    code, result = verify()
    assert code == 1 and not result["ok"]
    assert [c["ok"] for c in result["checks"]] == [True, False, True]
    assert result["checks"][1]["problems"][0].startswith("checksum_mismatch")
    files.period_delete(files.stem_of(result["checks"][1]["manifest"]))  # the period goes: a gap in its place
    code, result = verify()
    assert code == 1 and [c["ok"] for c in result["checks"]] == [True, False]
    assert result["checks"][1]["problems"][0].startswith("gap: partition")
    Path(files.storage().path(first["file"])).with_name("planted.jsonl.gz").write_bytes(b"")
    assert [p.split(" ")[0] for p in verify()[1]["problems"]] == ["orphan:"]


def test_an_account_deletion_rewrites_the_files_without_the_user_audited_and_its_later_events_stay_out(storm):
    from relations.services.accounts import account_delete
    from tests.factories import TEST_ACTOR

    sub = services.feature_export_ensure()  # it must exist to receive the deletion's notice
    gone, kept, *_ = storm()
    assert run().files
    before = stored_rows()
    assert {pseudonym(sub, gone.pk), pseudonym(sub, kept.pk)} <= {r["userPseudonym"] for r in before}
    account_delete(user_id=gone.pk, actor=TEST_ACTOR)  # the notice, and the withdrawal's unlikes on the log
    publish_all()
    report = run()
    assert report.notices == 1 and report.rewrites
    assert not SubscriptionNotice.objects.filter(subscription=sub).exists()  # acknowledged
    after = stored_rows()
    assert pseudonym(sub, gone.pk) not in {r["userPseudonym"] for r in after}  # nor its later unlikes
    assert after == [r for r in before if r["userPseudonym"] != pseudonym(sub, gone.pk)]
    assert sum(f["rows"] for f in report.files) == 0  # the withdrawal was the deleted user's only events
    assert verify()[0] == 0
    audits = list(AuditRecord.objects.filter(action="features.export_rewrite").order_by("seq"))
    assert [a.target_id for a in audits] == [r["file"] for r in report.rewrites]
    for audit, rewrite in zip(audits, report.rewrites, strict=True):
        manifest = files.manifest_read(files.manifest_name(files.stem_of(rewrite["replaces"])))
        assert manifest["file"] == rewrite["file"] and manifest["rewrites"] == 1
        assert audit.params["rowsRemoved"] == rewrite["rowsRemoved"] > 0 and audit.actor == policy.ACTOR
        assert set(audit.params) == {"file", "replaces", "rowsRemoved", "rows", "rewrites", "sourceVerified",
                                     "notices"}  # neither the user id nor the pseudonym
        assert pseudonym(sub, gone.pk) not in json.dumps(audit.params)
        assert not Path(files.storage().path(rewrite["replaces"])).exists()  # the old file is gone
    assert run().rewrites == []  # nothing left to erase


def test_the_retention_sweep_deletes_the_periods_that_ended_before_the_cutoff_only(make_user):
    three_periods([make_user().pk])
    run()
    assert retention_rule_get("feature-exports").setting == "FEATURE_EXPORT_RETENTION_DAYS"
    first, second, third = [files.manifest_read(n) for n in files.manifests()]
    cutoff = policy.when(first["periodEnd"])
    assert retention.exports_sweep(cutoff, 10) == 1  # counter-example below the cutoff: the other two stay
    assert [files.manifest_read(n)["file"] for n in files.manifests()] == [second["file"], third["file"]]
    assert not Path(files.storage().path(first["file"])).exists()
    assert selectors.feature_export_oldest() == policy.when(second["periodStart"])
    assert verify()[0] == 0  # the chain starts at the oldest period kept
    far = policy.when(second["periodEnd"]).replace(year=2100)
    assert retention.exports_sweep(far, 1) == 1 and retention.exports_sweep(far, 10) == 1
    assert retention.exports_sweep(far, 10) == 0 and selectors.feature_export_oldest() is None


def test_the_unexported_position_holds_trimming_back_until_the_export_acknowledges(storm):
    services.feature_export_ensure()
    storm()
    consume_everything()  # every internal consumer is past every entry
    held = {p: streams.length(p) for p in streams.all_partitions()}
    streams_trim(retention_s=0)
    assert {p: streams.length(p) for p in streams.all_partitions()} == held
    run()
    streams_trim(retention_s=0)
    assert all(streams.length(p) <= 1 for p in streams.all_partitions())  # MINID keeps from the next entry on


def test_a_run_while_another_holds_the_lease_is_skipped():
    assert tasks.export_task.name == "features.export"  # the beat entry's name (settings/downstream.py)
    grant = leases.lease_acquire(resource=services.LEASE, holder="another-run", ttl_s=60)
    assert tasks.export_task() == {"status": "busy"}
    with pytest.raises(services.ExportRunning):
        run()
    leases.lease_release(grant)
    assert tasks.export_task()["status"] == "ok"


def test_a_crash_before_the_ack_writes_the_period_again_and_a_late_entry_goes_in_the_next_file(make_user,
                                                                                             monkeypatch):
    user = make_user()
    base = (int(time.time()) - 30) * 1000
    ids = [craft(base + 100, user.pk)]
    real_ack = services.subscriptions.subscription_ack

    def crash(**kw):
        raise RuntimeError("the worker died before the acknowledgement")

    monkeypatch.setattr(services.subscriptions, "subscription_ack", crash)
    with pytest.raises(RuntimeError):
        run()
    [written] = [files.manifest_read(n) for n in files.manifests()]  # stored, never acknowledged
    monkeypatch.setattr(services.subscriptions, "subscription_ack", real_ack)
    names = [files.data_name(files.stem(policy=1, start_ms=base + k * 1000, file_s=1), 0) for k in range(2)]
    assert written["file"] == names[0] and [f["file"] for f in run().files] == names[:1]  # the same name again
    ids.append(craft(base + 900, user.pk))  # after the first period was written: its id falls inside it
    assert [f["file"] for f in run().files] == names[1:]  # not period 0 again: the one after the newest written
    assert sorted(r["eventId"] for r in stored_rows()) == sorted(ids)  # each once
    assert verify()[0] == 0
