"""A deleted account's user id leaves every retained row (issue 31 §4, PRIV-4): the account-delete job withdraws the
likes, waits until the pipeline applied the withdrawal, then erases the id on the relation shards (tombstones and
cache floors deleted, commands, outbox and archive under the pseudonymous id) and runs every registered eraser
(the projections' among them). Reconciliation passes afterwards, and nobody else's count moves."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from counting.models import LikeCountProjection, LikeReverseProjection, LikeReverseRecent, LikeReverseSort
from counting.services import snapshots
from likes_project import erasure as core_erasure
from likes_project.audit.models import AuditRecord
from likes_project.erasure import user_pseudonym
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline, job_start
from relations import routing
from relations.jobs import ACCOUNT_DELETE
from relations.models import LikeCommand, LikeRelation, LikeRelationCacheProjection, OutboxArchive, OutboxEvent
from relations.services import erasure, outbox
from tests.counting.helpers import bucket_sum, consume_everything, liked_facts, publish_all
from tests.factories import TEST_ACTOR
from tests.reconciliation.helpers import run_check
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True),
              pytest.mark.usefixtures("close_db_connections")]

VIDEOS = [f"er-{i}" for i in range(4)]


def naming(user_id: int) -> dict[str, int]:
    """Rows that still name `user_id`, per table, on every relation shard and count partition (nonzero only)."""
    found: dict[str, int] = {}
    key = f"{user_id}:%"

    def add(name: str, n: int) -> None:
        if n:
            found[name] = found.get(name, 0) + n

    for alias in settings.RELATION_SHARD_ALIASES:
        add("relations", LikeRelation.objects.using(alias).filter(user_id=user_id).count())
        add("cache floors", LikeRelationCacheProjection.objects.using(alias).filter(user_id=user_id).count())
        add("commands", LikeCommand.objects.using(alias).filter(user_id=user_id).count())
        add("command ids", LikeCommand.objects.using(alias).filter(operation_id__contains=f"/{user_id}/").count())
        for model in (OutboxEvent, OutboxArchive):
            with connections[alias].cursor() as cursor:
                cursor.execute(f"SELECT count(*) FROM {model._meta.db_table} WHERE aggregate_key LIKE %s OR "
                               "(payload->>'userId')::bigint = %s OR payload->>'operationId' LIKE %s",
                               [key, user_id, f"%/{user_id}/%"])
                add(model.__name__, cursor.fetchone()[0])
    for alias in settings.COUNT_PARTITION_ALIASES:
        for model in (LikeCountProjection, LikeReverseProjection, LikeReverseSort, LikeReverseRecent):
            add(model.__name__, model.objects.using(alias).filter(user_id=user_id).count())
    return found


def kept(pseudo: int) -> dict[str, list]:
    """What the shards keep under the pseudonymous id: its commands and events, their ids and devices."""
    rows: dict[str, list] = {"commands": [], "events": []}
    for alias in settings.RELATION_SHARD_ALIASES:
        rows["commands"] += sorted(LikeCommand.objects.using(alias).filter(user_id=pseudo).values_list(
            "operation_id", "video_id", "result_version", "device_id"))
        for model in (OutboxEvent, OutboxArchive):
            rows["events"] += sorted((model.__name__, r["aggregate_key"], r["relation_version"], r["payload"]["userId"],
                                      r["payload"]["operationId"], r["payload"]["deviceId"])
                                     for r in model.objects.using(alias).filter(
                                         aggregate_key__startswith=f"{pseudo}:").values(
                                         "aggregate_key", "relation_version", "payload"))
    return rows


def archive_what_is_published() -> int:
    """Move every published, consumed event into the outbox archive (as the archiver does after the retention)."""
    for alias in settings.RELATION_SHARD_ALIASES:
        OutboxEvent.objects.using(alias).update(published_at=timezone.now() - dt.timedelta(hours=2))
    return sum(outbox.outbox_archive_batch(alias=alias) for alias in settings.RELATION_SHARD_ALIASES)


def delete_account(user) -> OpsJob:
    """The deletion as `manage.py delete_account` runs it: the ops job, in the foreground."""
    job = job_start(kind=ACCOUNT_DELETE, actor=TEST_ACTOR, params={"user_id": user.pk, "username": user.username},
                    target=f"user:{user.pk}")
    return job_run_inline(job.pk)


def in_a_thread(fn, out: list) -> threading.Thread:
    def body():
        try:
            out.append(fn())
        finally:
            for alias in connections:
                connections[alias].close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


@pytest.fixture
def fake_eraser(monkeypatch):
    calls: list[int] = []
    monkeypatch.setitem(core_erasure._ERASERS, "test-fake", lambda user_id: calls.append(user_id) or {"seen": 1})
    return calls


@pytest.fixture
def liked(make_user, make_video, settings):
    """Two accounts to delete, one on each relation shard, and two keepers: each likes every video; each doomed
    account unliked the last one before, and its first likes are already in the outbox archive."""
    author = make_user()
    for v in VIDEOS:
        make_video(v, author)
    doomed = [make_user(shard="rel_00"), make_user(shard="rel_01")]
    keepers = [make_user(shard="rel_00"), make_user(shard="rel_01")]
    for u in doomed + keepers:
        cmd(u, VIDEOS[0], "LIKED")
    publish_all()
    consume_everything()
    settings.OUTBOX_RETENTION_HOURS = 1
    assert archive_what_is_published() == 4
    for u in doomed + keepers:
        for v in VIDEOS[1:]:
            cmd(u, v, "LIKED")
    for u in doomed:
        cmd(u, VIDEOS[-1], "UNLIKED")
    publish_all()
    consume_everything()
    return doomed, keepers


def test_a_deleted_account_leaves_no_row_with_its_id_and_reconciliation_passes(liked, fake_eraser, settings):
    doomed, keepers = liked
    settings.ACCOUNT_ERASE_STALL_S = 20.0  # the test plays the pipeline: the job must wait for it
    gone = doomed[0]
    assert {"relations", "commands", "OutboxEvent", "OutboxArchive", "LikeCountProjection",
            "LikeReverseProjection"} <= set(naming(gone.pk))
    ran: list[OpsJob] = []
    worker = in_a_thread(lambda: delete_account(gone), ran)
    for _ in range(400):  # the withdrawal is done, and the job waits for the pipeline to apply it ...
        job = OpsJob.objects.filter(kind=ACCOUNT_DELETE).first()
        if job is not None and job.state.get("withdrawn"):
            break
        worker.join(0.05)
    assert job.state.get("withdrawn") and not fake_eraser and naming(gone.pk)  # ... nothing erased meanwhile
    publish_all()  # the pipeline: the withdrawal's unlikes published, then consumed by every consumer
    consume_everything()
    worker.join(30)
    [job] = ran
    assert job.status == "SUCCEEDED", job.last_error
    assert job.result["erasure"]["status"] == "done" and job.result["unliked"] == 3

    assert naming(gone.pk) == {}  # the counter-example: without the relation step, commands and events keep it
    pseudo = erasure.pseudonymous_user_id(gone.pk)
    assert pseudo < 0 and routing.placement(pseudo) == routing.placement(gone.pk)  # its slot, so its shard
    rows = kept(pseudo)
    assert [(op, v) for op, v, _ver, _dev in rows["commands"] if op.startswith("sys/")] == [
        (f"sys/account-delete/{pseudo}/{v}", v) for v in VIDEOS[:-1]]
    assert len(rows["commands"]) == 8 and {dev for *_r, dev in rows["commands"]} == {""}
    assert {(table, user) for table, _k, _v, user, _op, _dev in rows["events"]} == {
        ("OutboxArchive", pseudo), ("OutboxEvent", pseudo)}
    assert len(rows["events"]) == 8  # 4 likes (one archived), 1 unlike, 3 withdrawals
    assert fake_eraser == [gone.pk]  # the registered erasers ran, each once
    assert set(job.result["erasure"]["erasers"]) >= {"audit", "notifications", "projections", "test-fake"}
    [record] = AuditRecord.objects.filter(action=erasure.ERASE_AUDIT_ACTION)
    assert (record.target_type, record.target_id) == ("user_pseudonym", user_pseudonym(gone.pk))
    assert not AuditRecord.objects.filter(target_type="user", target_id=str(gone.pk)).exists()

    before = (naming(gone.pk), kept(pseudo))
    again = delete_account(gone)  # a re-run (the same deletion, started again) finds nothing
    assert again.result["erasure"] == {**again.result["erasure"], "status": "done", "videos": 0, "commands": 0,
                                       "events": 0, "archived": 0, "tombstones": 0}
    assert again.result["erasure"]["erasers"]["projections"] == {"reverse_rows": 0, "count_rows": 0, "deferred": 0,
                                                                 "kept_liked": 0}
    assert (naming(gone.pk), kept(pseudo)) == before

    # Nobody else's count moved, and every mode of reconciliation agrees with the facts.
    assert [bucket_sum(v) for v in VIDEOS] == [liked_facts(v) for v in VIDEOS] == [3, 3, 3, 2]
    snapshots.display_snapshot_refresh()
    for mode in ("identity", "coverage", "exact"):
        run = run_check(mode, videos=VIDEOS)
        assert (run.status, run.diffs_found) == ("PASSED", 0), (mode, run.refused_because, list(run.diffs.values()))
    assert naming(doomed[1].pk) and all(naming(k.pk) for k in keepers)  # only the deleted account was erased


def test_with_the_pipeline_stopped_the_job_ends_with_the_erasure_waiting_and_a_rerun_erases(
        liked, fake_eraser, settings):
    _doomed, keepers = liked
    gone = _doomed[1]
    settings.ACCOUNT_ERASE_STALL_S = 0.5  # nothing publishes nor consumes: the job stops waiting
    job = delete_account(gone)
    assert job.status == "SUCCEEDED" and "NOT erased yet" in job.message
    assert job.result["erasure"] == {"status": "waiting", "unpublished": 3, "dead": 0, "unconsumed": 0,
                                     "moving": False}
    assert "relations" in naming(gone.pk) and not fake_eraser  # nothing erased before the pipeline applied it
    assert not AuditRecord.objects.filter(action=erasure.ERASE_AUDIT_ACTION).exists()

    publish_all()  # published, not consumed yet: still waiting, now on the consumers
    assert erasure.account_erasure_pending(gone.pk).as_dict() == {"unpublished": 0, "dead": 0, "unconsumed": 3,
                                                                  "moving": False}
    consume_everything()
    [again] = erasure.account_erasures_resume()  # the beat runs the deletion again, as the system
    assert erasure.account_erasures_resume() == []  # once: a later deletion job of the account follows it
    job = job_run_inline(again)
    assert (job.result["already_deleted"], job.result["scanned"], job.result["erasure"]["status"]) == (
        True, 0, "done")
    assert naming(gone.pk) == {} and fake_eraser == [gone.pk]
    assert all(naming(k.pk) for k in keepers)
