"""CMD-15 / E-2 retention of no-op command rows: old `changed = false` rows go, in bounded batches, on
every shard; rows inside the window, rows that changed a relation and the relations (UNLIKED tombstones
included) stay; a retry inside the window still replays. The beat task and the command, audited."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

from likes_project import leases
from likes_project.audit.models import AuditRecord
from relations import routing
from relations.models import LikeCommand, LikeRelation
from relations.services.retention import (
    RETENTION_LEASE,
    RETENTION_PERMISSION,
    RetentionRunning,
    command_retention_run,
)
from relations.tasks import command_retention_task
from tests.factories import TEST_ACTOR, grant, make_user
from tests.relations.helpers import cmd, relation_row, total

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]
WINDOW_H = settings.RELATION_COMMAND_RETENTION_HOURS


def age(user, operation_id: str, hours: float) -> None:
    """Make a command row look `hours` old (what the clock would do)."""
    LikeCommand.objects.using(routing.alias_for_user(user.pk)).filter(
        user_id=user.pk, operation_id=operation_id).update(created_at=timezone.now() - dt.timedelta(hours=hours))


def command_ids(user) -> set[str]:
    return set(LikeCommand.objects.using(routing.alias_for_user(user.pk)).filter(user_id=user.pk)
               .values_list("operation_id", flat=True))


@pytest.fixture
def history(make_video, author):
    """On both shards: an old no-op unlike of a never-liked video, an old repeated like, an old like and
    unlike that changed the relation (leaving an UNLIKED tombstone), and a recent no-op unlike."""
    users = [make_user(shard=a) for a in settings.RELATION_SHARD_ALIASES]
    for v in ("rt-never", "rt-twice", "rt-tomb", "rt-recent"):
        make_video(v, author)
    for u in users:
        p = f"u{u.pk}"
        cmd(u, "rt-never", "UNLIKED", key=f"{p}-noop-old")
        cmd(u, "rt-twice", "LIKED", key=f"{p}-like")
        cmd(u, "rt-twice", "LIKED", key=f"{p}-like-again-old")
        cmd(u, "rt-tomb", "LIKED", key=f"{p}-tomb-like")
        cmd(u, "rt-tomb", "UNLIKED", key=f"{p}-tomb-unlike")
        cmd(u, "rt-recent", "UNLIKED", key=f"{p}-noop-recent")
        for op in ("noop-old", "like", "like-again-old", "tomb-like", "tomb-unlike"):
            age(u, f"{p}-{op}", WINDOW_H + 24)
        age(u, f"{p}-noop-recent", WINDOW_H - 1)  # inside the window, only just
    return users


def test_old_no_op_rows_go_and_everything_else_stays(history):
    report = command_retention_run(actor=TEST_ACTOR)
    assert report.deleted == {a: 2 for a in settings.RELATION_SHARD_ALIASES} and report.finished
    for u in history:
        p = f"u{u.pk}"
        # the no-op rows past the window are gone; the recent one and every changing command stay
        assert command_ids(u) == {f"{p}-like", f"{p}-tomb-like", f"{p}-tomb-unlike", f"{p}-noop-recent"}
        tomb = relation_row(u.pk, "rt-tomb")
        assert (tomb.state, tomb.relation_version) == ("UNLIKED", 2)  # the tombstone stays
        assert relation_row(u.pk, "rt-twice").state == "LIKED"
    assert total(LikeRelation) == 2 * len(history)
    again = command_retention_run(actor=TEST_ACTOR)  # idempotent
    assert again.total == 0


def test_a_retry_inside_the_window_still_replays_its_verdict(history):
    u = history[0]
    p = f"u{u.pk}"
    cmd(u, "rt-recent", "LIKED", key=f"{p}-like-recent")  # the relation moved on since the no-op unlike
    command_retention_run(actor=TEST_ACTOR)
    retry = cmd(u, "rt-recent", "UNLIKED", key=f"{p}-noop-recent")  # the client retries the old unlike
    assert retry.replayed and not retry.changed
    assert retry.result.as_dict() == {"state": "UNLIKED", "relationVersion": 0}
    assert retry.current.as_dict() == {"state": "LIKED", "relationVersion": 1}
    assert relation_row(u.pk, "rt-recent").state == "LIKED"  # the retry changed nothing


def test_counter_example_a_retry_after_the_window_runs_again(history):
    """Why the window must exceed the longest client retry window: once its row is gone, a retried
    no-op operation is a new command."""
    u = history[0]
    p = f"u{u.pk}"
    cmd(u, "rt-never", "LIKED", key=f"{p}-like-never")
    command_retention_run(actor=TEST_ACTOR)
    retry = cmd(u, "rt-never", "UNLIKED", key=f"{p}-noop-old")
    assert not retry.replayed and retry.changed  # it unliked what the user liked since
    assert relation_row(u.pk, "rt-never").state == "UNLIKED"


def test_a_bounded_run_stops_after_its_batches_and_the_next_run_goes_on(history):
    first = command_retention_run(actor=TEST_ACTOR, batch=1, max_batches=1)
    assert first.deleted == {a: 1 for a in settings.RELATION_SHARD_ALIASES} and not first.finished
    second = command_retention_run(actor=TEST_ACTOR, batch=1, max_batches=5)
    assert second.deleted == {a: 1 for a in settings.RELATION_SHARD_ALIASES} and second.finished


def test_the_beat_task_runs_it_and_audits_only_a_run_that_deleted(history):
    assert command_retention_task() == {"status": "ok", "finished": True,
                                        "deleted": {a: 2 for a in settings.RELATION_SHARD_ALIASES}}
    assert command_retention_task()["deleted"] == {a: 0 for a in settings.RELATION_SHARD_ALIASES}
    audits = AuditRecord.objects.filter(action="relations.command_retention")
    assert [(a.channel, a.params["deleted"]) for a in audits] == [
        ("system", {a: 2 for a in settings.RELATION_SHARD_ALIASES})]


def test_a_run_overlapping_another_is_refused(history):
    held = leases.lease_acquire(resource=RETENTION_LEASE, holder="another-run", ttl_s=60)
    try:
        with pytest.raises(RetentionRunning):
            command_retention_run(actor=TEST_ACTOR)
        assert command_retention_task() == {"status": "busy"}
        with pytest.raises(CommandError, match="retention_running"):
            call_command("prune_noop_commands", stdout=io.StringIO(), stderr=io.StringIO())
    finally:
        leases.lease_release(held)
    assert all(f"u{u.pk}-noop-old" in command_ids(u) for u in history)  # nothing deleted meanwhile


# --- the command ---------------------------------------------------------------------------------


def test_the_command_runs_it_once_with_progress_and_an_audit_record(history):
    operator = make_user("retention-operator")
    grant(operator, RETENTION_PERMISSION)
    out, err = io.StringIO(), io.StringIO()
    call_command("prune_noop_commands", "--batch", "1", "--actor", operator.username, stdout=out, stderr=err)
    assert "Deleted 4 no-op command rows" in out.getvalue()
    for alias in settings.RELATION_SHARD_ALIASES:
        assert f"{alias}: 2 no-op command rows deleted" in err.getvalue()
    record = AuditRecord.objects.get(action="relations.command_retention")
    assert (record.actor, record.channel, record.params["retentionHours"]) == (operator.username, "cli", WINDOW_H)
    assert all(f"u{u.pk}-noop-recent" in command_ids(u) for u in history)


def test_the_command_takes_a_shorter_window(history):
    out = io.StringIO()
    call_command("prune_noop_commands", "--retention-hours", str(WINDOW_H - 2), stdout=out, stderr=io.StringIO())
    assert "Deleted 6 no-op command rows" in out.getvalue()  # the recent no-op rows are past this window


@pytest.mark.parametrize(("argv", "match"), [
    (["--retention-hours", "0"], "invalid_parameter: retention_hours"),
    (["--retention-hours", "-5"], "invalid_parameter: retention_hours"),
    (["--batch", "0"], "invalid_parameter: batch"),
    (["--batch", "1001"], "invalid_parameter: batch"),
    (["--retention-hours", "soon"], "invalid int value"),
])
def test_a_bad_argument_is_a_clear_error_and_deletes_nothing(history, argv, match):
    with pytest.raises(CommandError, match=match):
        call_command("prune_noop_commands", *argv, stdout=io.StringIO(), stderr=io.StringIO())
    assert sum(len(command_ids(u)) for u in history) == 6 * len(history)
    assert not AuditRecord.objects.filter(action="relations.command_retention").exists()


def test_an_actor_without_the_permission_is_refused(history):
    make_user("no-perm-operator")
    with pytest.raises(CommandError, match=r"lacks the permission relations\.delete_likecommand"):
        call_command("prune_noop_commands", "--actor", "no-perm-operator", stdout=io.StringIO(),
                     stderr=io.StringIO())
    assert sum(len(command_ids(u)) for u in history) == 6 * len(history)


def test_the_admin_page_runs_one_bounded_audited_run(history):
    from django.contrib.auth import get_user_model
    from django.test import Client

    staff = get_user_model().objects.create_user("rt-staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    page = "/admin/relations/command-retention/"
    assert client.get(page).status_code == 403
    grant(staff, "relations.delete_likecommand")
    assert client.post(page, {}).status_code == 200  # not confirmed: the form again, nothing deleted
    assert all(f"u{u.pk}-noop-old" in command_ids(u) for u in history)
    done = client.post(page, {"confirm": "on"}, follow=True)
    assert b"Deleted 4 no-op command rows" in done.content
    assert all(f"u{u.pk}-noop-old" not in command_ids(u) for u in history)
    assert AuditRecord.objects.filter(action="relations.command_retention", actor="rt-staff").exists()
