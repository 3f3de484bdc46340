"""`seed_demo --admin-password` (issue 10): creating the superuser and changing its password are audited
as the OS account running the command, never with the password; re-running with the same password (what
`run.sh` does on every start) writes nothing."""

from __future__ import annotations

import getpass
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from likes_project.audit.models import AuditRecord

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


def seed(*args: str) -> str:
    out = io.StringIO()
    call_command("seed_demo", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def admin_audits() -> list[tuple[str, str, dict]]:
    return [(r.action, r.actor, r.params) for r in AuditRecord.objects.filter(
        target_type="user", action__startswith="user.", params__username="admin").order_by("id")]


def test_the_superuser_password_reset_is_audited_without_the_password():
    actor = f"os:{getpass.getuser()}"
    assert "superuser admin ready" in seed("--admin-password", "first-pw-1")
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff and admin.check_password("first-pw-1")
    assert admin_audits() == [("user.superuser_create", actor, {"username": "admin", "superuser_granted": False})]

    seed("--admin-password", "first-pw-1")  # run.sh's every start: nothing changes, nothing is recorded
    assert len(admin_audits()) == 1

    seed("--admin-password", "second-pw-2")
    admin.refresh_from_db()
    assert admin.check_password("second-pw-2")
    assert admin_audits()[1:] == [("user.password_reset", actor, {"username": "admin", "superuser_granted": False})]

    admin.is_superuser = False
    admin.save(update_fields=["is_superuser"])
    seed("--admin-password", "second-pw-2")
    assert admin_audits()[2:] == [("user.superuser_grant", actor, {"username": "admin", "superuser_granted": True})]

    seed()  # without --admin-password the superuser is left alone
    assert len(admin_audits()) == 3
    everything = json.dumps(list(AuditRecord.objects.values()), default=str)
    assert "first-pw-1" not in everything and "second-pw-2" not in everything


def test_a_demo_users_reissued_token_is_audited():
    from rest_framework.authtoken.models import Token

    seed()
    alice = get_user_model().objects.get(username="alice")
    Token.objects.filter(user=alice).delete()
    out = seed()
    key = Token.objects.get(user=alice).key
    assert key in out  # the tokens are still printed, as before
    [record] = AuditRecord.objects.filter(action="token.create", target_id=str(alice.pk))
    assert record.params["reason"] == "seed_demo" and key not in json.dumps(record.params)
