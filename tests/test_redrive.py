"""Redrive (issue 9 §2): dead letters are requeued (applied again by the redrive path, never by
rewinding a checkpoint) or discarded with a reason; DEAD outbox rows are requeued. Each from the
service, the admin and `manage.py`, each audited."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import OperationalError

from counting.services import projection
from likes_project.audit.models import AuditRecord
from likes_project.errors import InvalidInput
from likes_project.eventlog import redrive, streams
from likes_project.eventlog.consumer import dead_letter_record
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter
from likes_project.eventlog.retry import NonRetryable, Retryable
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_start
from relations.models import OutboxEvent
from tests.counting.helpers import bucket_sum, drain, publish_all
from tests.factories import TEST_ACTOR, grant, run_jobs, staff_client
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def holed(user, video_id: str, state: str = "LIKED") -> DeadLetter:
    """A like whose count event was dead-lettered while the store was down (as before issue 9) and
    whose checkpoint has passed it: the hole the redrive path must fill."""
    cmd(user, video_id, state)
    publish_all()
    p = next(p for p in streams.all_partitions()
             if any(e.event["videoId"] == video_id and e.event["userId"] == user.pk
                    for e in streams.read_after(p, "0-0", 500)))
    entry = [e for e in streams.read_after(p, "0-0", 500) if e.event["userId"] == user.pk
             and e.event["videoId"] == video_id][-1]
    dead_letter_record(consumer="count", entry=entry, error=Retryable("connection failed"), attempts=5)
    ConsumerCheckpoint.objects.update_or_create(consumer="count", partition=p,
                                                defaults={"last_done_id": entry.entry_id})
    return DeadLetter.objects.get(entry_id=entry.entry_id)


@pytest.fixture
def video(make_user, make_video):
    return make_video("redrive-v", make_user())


def test_a_requeued_dead_letter_fills_its_hole_without_rewinding_the_checkpoint(make_user, video):
    dl = holed(make_user(), video.video_id)
    checkpoint = ConsumerCheckpoint.objects.get(consumer="count", partition=streams.partition_of(dl.stream_key))
    assert bucket_sum(video.video_id) == 0  # the like is lost from the count ...
    job = job_start(kind=redrive.REQUEUE_JOB, actor=TEST_ACTOR, params={"ids": [dl.pk], "reason": "partition back"})
    (job,) = run_jobs()
    assert (job.status, job.result) == ("SUCCEEDED", {"resolved": 1, "still_poison": 0, "waiting": 0})
    assert bucket_sum(video.video_id) == 1  # ... until the redrive applies it
    dl.refresh_from_db()
    assert (dl.status, dl.resolver) == ("RESOLVED", "tests") and dl.resolved_at is not None
    again = ConsumerCheckpoint.objects.get(pk=checkpoint.pk)
    assert again.last_done_id == checkpoint.last_done_id  # never rewound
    actions = set(AuditRecord.objects.values_list("action", flat=True))
    assert {"job.start", "deadletter.requeue", "deadletter.redrive"} <= actions


def requeue_again(dl: DeadLetter) -> None:
    """The same dead letter NEW again (a second copy of the event) and requeued through the job."""
    DeadLetter.objects.filter(pk=dl.pk).update(status="NEW")
    job_start(kind=redrive.REQUEUE_JOB, actor=TEST_ACTOR, params={"ids": [dl.pk]})
    run_jobs()


def test_requeue_is_always_safe_a_duplicate_or_an_older_event_changes_nothing(make_user, video):
    user = make_user()
    dl = holed(user, video.video_id)
    job_start(kind=redrive.REQUEUE_JOB, actor=TEST_ACTOR, params={"ids": [dl.pk]})
    run_jobs()
    assert bucket_sum(video.video_id) == 1
    requeue_again(dl)  # a duplicate by receipt and version
    assert bucket_sum(video.video_id) == 1
    # The user unlikes (v2, projected); the old LIKED v1 redriven afterwards is stale.
    cmd(user, video.video_id, "UNLIKED")
    drain()
    assert bucket_sum(video.video_id) == 0
    requeue_again(dl)
    assert bucket_sum(video.video_id) == 0
    assert DeadLetter.objects.get(pk=dl.pk).status == "RESOLVED"


def test_a_requeued_poison_event_goes_back_to_new_with_its_error(make_user, video):
    dl = holed(make_user(), video.video_id)
    DeadLetter.objects.filter(pk=dl.pk).update(payload={**dl.payload, "relationVersion": "eleven"})
    job_start(kind=redrive.REQUEUE_JOB, actor=TEST_ACTOR, params={"all": True, "consumer": "count"})
    (job,) = run_jobs()
    assert job.result["still_poison"] == 1
    dl.refresh_from_db()
    assert (dl.status, dl.error_class, dl.attempts) == ("NEW", "NonRetryable", 6)


def test_a_redrive_whose_store_is_down_waits_requeued_and_the_beat_job_finishes_it(make_user, video, monkeypatch):
    from likes_project.eventlog.tasks import redrive_task

    dl = holed(make_user(), video.video_id)
    real = projection._apply_group
    monkeypatch.setattr(projection, "_apply_group", lambda *a, **k: (_ for _ in ()).throw(OperationalError("down")))
    job_start(kind=redrive.REQUEUE_JOB, actor=TEST_ACTOR, params={"ids": [dl.pk]})
    (job,) = run_jobs()
    assert job.result["waiting"] == 1
    assert DeadLetter.objects.get(pk=dl.pk).status == "REQUEUED" and bucket_sum(video.video_id) == 0
    monkeypatch.setattr(projection, "_apply_group", real)  # the partition is back
    assert redrive_task()["resolved"] == 1
    assert bucket_sum(video.video_id) == 1 and DeadLetter.objects.get(pk=dl.pk).status == "RESOLVED"


def test_discard_needs_a_reason_and_is_audited(make_user, video):
    dl = holed(make_user(), video.video_id)
    for reason in ["", "   "]:
        with pytest.raises(InvalidInput) as refused:
            redrive.dead_letters_discard(ids=[dl.pk], actor=TEST_ACTOR, reason=reason)
        assert refused.value.code == "reason_required"
    assert DeadLetter.objects.get(pk=dl.pk).status == "NEW"  # nothing written
    assert redrive.dead_letters_discard(ids=[dl.pk], actor=TEST_ACTOR, reason="test traffic") == 1
    dl.refresh_from_db()
    assert (dl.status, dl.reason, dl.resolver) == ("DISCARDED", "test traffic", "tests")
    record = AuditRecord.objects.get(action="deadletter.discard")
    assert record.params["ids"] == [dl.pk] and record.params["events"][0]["entry_id"] == dl.entry_id
    # a discarded dead letter is not requeued by "all"
    job_start(kind=redrive.REQUEUE_JOB, actor=TEST_ACTOR, params={"all": True})
    (job,) = run_jobs()
    assert job.done == 0 and bucket_sum(video.video_id) == 0


def test_the_commands_requeue_and_discard_with_clear_errors(make_user, video):
    dl = holed(make_user(), video.video_id)
    other = holed(make_user(), video.video_id)
    for bad in (["--ids", "1,x"], ["--ids", ","], []):
        with pytest.raises(CommandError):
            call_command("requeue_dead_letters", *bad, stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError):
        call_command("discard_dead_letters", "--ids", str(other.pk), stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError, match="reason_required"):
        call_command("discard_dead_letters", "--ids", str(other.pk), "--reason", " ", stdout=io.StringIO())
    out = io.StringIO()
    call_command("requeue_dead_letters", "--ids", str(dl.pk), stdout=out, stderr=io.StringIO())
    assert out.getvalue().strip() == "requeued 1 dead letters: 1 resolved, 0 still poison, 0 waiting for their store"
    out = io.StringIO()
    call_command("discard_dead_letters", "--ids", str(other.pk), "--reason", "replayed by hand", stdout=out)
    assert out.getvalue().strip() == "discarded 1 of 1 dead letters"
    assert bucket_sum(video.video_id) == 1
    assert AuditRecord.objects.filter(action="deadletter.discard", actor__startswith="os:").exists()


def dead_outbox_row(user, video_id: str) -> OutboxEvent:
    from relations import routing

    cmd(user, video_id, "LIKED")
    alias = routing.alias_for_user(user.pk)
    OutboxEvent.objects.using(alias).update(status="DEAD", retry_count=3, last_error="payload")
    return OutboxEvent.objects.using(alias).get()


def test_dead_outbox_rows_are_requeued_by_command_and_then_published(make_user, video):
    user = make_user(shard="rel_01")
    row = dead_outbox_row(user, video.video_id)
    with pytest.raises(CommandError):
        call_command("requeue_dead_outbox", "--shard", "rel_99", "--all", stdout=io.StringIO())
    with pytest.raises(CommandError):
        call_command("requeue_dead_outbox", "--shard", "rel_01", stdout=io.StringIO())  # --ids or --all
    out = io.StringIO()
    call_command("requeue_dead_outbox", "--shard", "rel_01", "--all", "--reason", "fixed", stdout=out,
                 stderr=io.StringIO())
    assert out.getvalue().strip() == "requeued 1 DEAD outbox rows on rel_01"
    row.refresh_from_db(using="rel_01")
    assert (row.status, row.retry_count) == ("RETRY", 0)
    drain()
    assert bucket_sum(video.video_id) == 1
    record = AuditRecord.objects.get(action="outbox.requeue")
    assert (record.target_id, record.params["ids"], record.params["reason"]) == ("rel_01", [row.pk], "fixed")


# --- the admin ------------------------------------------------------------------------------------


@pytest.fixture
def staff():
    return staff_client("redrive-staff")


def test_the_admin_requeues_through_a_job_and_discards_with_a_reason(staff, make_user, video):
    user, client = staff
    dl = holed(make_user(), video.video_id)
    other = holed(make_user(), video.video_id)
    url = "/admin/eventlog/deadletter/"
    grant(user, "eventlog.view_deadletter")
    denied = client.post(url, {"action": "requeue", "_selected_action": [dl.pk]})
    assert denied.status_code == 200 and not OpsJob.objects.exists()  # no permission: the action is not offered
    grant(user, "eventlog.requeue_deadletter", "eventlog.discard_deadletter", "opsjobs.view_opsjob")
    user = get_user_model().objects.get(pk=user.pk)  # fresh permission cache
    resp = client.post(url, {"action": "requeue", "_selected_action": [dl.pk]})
    job = OpsJob.objects.get()
    assert resp.status_code == 302 and resp["Location"].endswith(f"/admin/opsjobs/opsjob/{job.pk}/change/")
    run_jobs()
    assert bucket_sum(video.video_id) == 1
    first = client.post(url, {"action": "discard", "_selected_action": [other.pk]})
    assert first.status_code == 200 and b"Discard dead letters" in first.content
    assert DeadLetter.objects.get(pk=other.pk).status == "NEW"  # asked for a reason, nothing written yet
    blank = client.post(url, {"action": "discard", "_selected_action": [other.pk], "confirm": "1", "reason": " "})
    assert blank.status_code == 200 and b"This field is required." in blank.content
    done = client.post(url, {"action": "discard", "_selected_action": [other.pk], "confirm": "1",
                             "reason": "duplicate traffic"}, follow=True)
    assert b"Discarded 1 dead letters." in done.content
    assert DeadLetter.objects.get(pk=other.pk).status == "DISCARDED"
    assert AuditRecord.objects.get(action="deadletter.discard").actor == "redrive-staff"


def test_the_admin_page_requeues_dead_outbox_rows(staff, make_user, video):
    user, client = staff
    row = dead_outbox_row(make_user(shard="rel_00"), video.video_id)
    page = "/admin/relations/outbox-requeue/"
    assert client.get(page).status_code == 403
    grant(user, "relations.requeue_outbox")
    assert b"rel_00: 1" in client.get(page).content
    bad = client.post(page, {"shard": "rel_00", "ids": "one"})
    assert bad.status_code == 200 and b"Comma-separated whole numbers." in bad.content
    done = client.post(page, {"shard": "rel_00", "ids": str(row.pk), "reason": "fixed"}, follow=True)
    assert b"Requeued 1 DEAD outbox rows on rel_00." in done.content
    row.refresh_from_db(using="rel_00")
    assert row.status == "RETRY"
    assert AuditRecord.objects.get(action="outbox.requeue").actor == "redrive-staff"


def test_the_redrive_path_dead_letters_nothing_new_for_poison(make_user, video):
    """Counter-example: requeueing needs no checkpoint rewind, and a poison event stays a single row."""
    dl = holed(make_user(), video.video_id)
    DeadLetter.objects.filter(pk=dl.pk).update(payload={"broken": True})
    redrive.dead_letters_requeue(ids=[dl.pk], actor=TEST_ACTOR)
    report = redrive.dead_letters_redrive()
    assert (report.resolved, report.still_poison) == (0, 1)
    assert DeadLetter.objects.count() == 1
    assert isinstance(NonRetryable("x"), Exception)
