"""The shell side of the operator surfaces of issue 10 (D48): `api_token` and `periodic_task` do what
their admin pages do, with the same permissions, reasons and audit records, against the real stores."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from rest_framework.authtoken.models import Token

from likes_project.audit.models import AuditRecord
from tests.factories import make_user

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


def run(*argv) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_api_token_issue_prints_the_key_once_and_audits_without_it():
    user = get_user_model().objects.create_user("cmd-token-user")
    out, err = run("api_token", "issue", user.username, "--reason", "new client")
    key = out.strip().splitlines()[-1]
    assert Token.objects.get(user=user).key == key
    assert key not in err
    record = AuditRecord.objects.get(action="token.create", target_id=str(user.pk))
    assert record.params["reason"] == "new client" and key not in str(record.params)
    with pytest.raises(CommandError, match="token_exists"):
        run("api_token", "issue", user.username, "--reason", "again")
    assert Token.objects.filter(user=user).count() == 1


def test_api_token_revoke_is_audited_and_checks_the_actor_permission():
    user = make_user("cmd-token-revoke")
    Token.objects.create(user=user)
    clerk = get_user_model().objects.create_user("cmd-token-clerk")
    with pytest.raises(CommandError, match=r"lacks the permission authtoken\.delete_token"):
        run("api_token", "revoke", user.username, "--reason", "leaked", "--actor", clerk.username)
    assert Token.objects.filter(user=user).exists()
    out, _ = run("api_token", "revoke", user.username, "--reason", "leaked")
    assert "revoked API token" in out and not Token.objects.filter(user=user).exists()
    assert AuditRecord.objects.get(action="token.revoke", target_id=str(user.pk)).params["reason"] == "leaked"
    with pytest.raises(CommandError, match="token_not_found"):
        run("api_token", "revoke", user.username, "--reason", "twice")


def test_a_reason_is_required():
    user = make_user("cmd-token-reason")
    Token.objects.create(user=user)
    with pytest.raises(CommandError):
        run("api_token", "revoke", user.username)
    with pytest.raises(CommandError, match="reason_required"):
        run("api_token", "revoke", user.username, "--reason", "   ")
    assert Token.objects.filter(user=user).exists()


def _task(name: str) -> PeriodicTask:
    every, _ = IntervalSchedule.objects.get_or_create(every=10, period=IntervalSchedule.SECONDS)
    return PeriodicTask.objects.create(name=name, task="eventlog.redrive", interval=every)


def test_periodic_task_disable_and_enable_are_audited_per_task():
    a, b = _task("cmd-beat-a"), _task("cmd-beat-b")
    out, _ = run("periodic_task", "disable", a.name, b.name, "--reason", "incident 42")
    assert "disabled: cmd-beat-a, cmd-beat-b" in out
    assert not PeriodicTask.objects.filter(pk__in=[a.pk, b.pk], enabled=True).exists()
    records = AuditRecord.objects.filter(action="periodic_task.disable").order_by("target_id")
    assert [(r.target_id, r.outcome, r.params["reason"]) for r in records] == [
        ("cmd-beat-a", "applied", "incident 42"), ("cmd-beat-b", "applied", "incident 42")]
    out, _ = run("periodic_task", "enable", a.name, "--reason", "resolved")
    assert PeriodicTask.objects.get(pk=a.pk).enabled and not PeriodicTask.objects.get(pk=b.pk).enabled


def test_periodic_task_refuses_an_unknown_name_or_actor_and_changes_nothing():
    a = _task("cmd-beat-c")
    with pytest.raises(CommandError, match="periodic_task_not_found"):
        run("periodic_task", "disable", a.name, "no-such-task", "--reason", "x")
    clerk = get_user_model().objects.create_user("cmd-beat-clerk")
    with pytest.raises(CommandError, match=r"lacks the permission django_celery_beat\.change_periodictask"):
        run("periodic_task", "disable", a.name, "--reason", "x", "--actor", clerk.username)
    assert PeriodicTask.objects.get(pk=a.pk).enabled
    assert not AuditRecord.objects.filter(action__startswith="periodic_task.").exists()
