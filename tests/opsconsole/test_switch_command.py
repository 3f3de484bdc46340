"""`manage.py switch` (issue 14 §3): list, set and clear every kind of runtime switch, as an operator holding the
kind's permission, each change audited; bad input and a missing permission are refused with a stable code,
a non-zero exit and nothing written."""

from __future__ import annotations

import getpass

import pytest

from likes_project.audit.models import AuditRecord
from likes_project.switches import switch_is_set, switch_models
from relations.models import LikesReadOnlySwitch
from tests.reconciliation.helpers import manage, member_of

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

def role_member(group: str):
    """A member of `group`, whose roles (`roles_ensure`) hold the switch permissions the switch migrations
    grant (relations 0011, reconciliation 0004, eventlog 0005)."""
    return member_of(group)


def switch_rows() -> int:
    return sum(m.objects.count() for m in switch_models())


KINDS = [  # kind, key given, key stored, audit action prefix, target type
    ("read-only", None, "global", "likes.read_only_", "likes"),
    ("publisher", "rel_01", "rel_01", "outbox.publisher_", "shard"),
    ("consumer", "count", "count", "consumer.", "consumer"),
    ("consumer", "count:1", "count:1", "consumer.", "consumer_partition"),
    ("auto-repair", None, "global", "reconcile.auto_repair_", "reconciliation"),
    ("refresh", "vid-hot", "vid-hot", "count.refresh_", "video"),
]


@pytest.mark.parametrize("kind, key, stored, prefix, target_type", KINDS)
def test_an_operator_sets_and_clears_every_kind_and_each_change_is_audited(kind, key, stored, prefix, target_type):
    operator = role_member("likes-operator")
    key_args = [key] if key else []

    ran = manage("switch", "set", kind, *key_args, "--reason", "incident 7", "--actor", operator.username, "--json")
    assert ran.code == 0, ran.err
    state = ran.json
    assert {k: v for k, v in state.items() if k != "updatedAt"} == {
        "kind": kind, "key": stored, "paused": True, "reason": "incident 7", "updatedBy": operator.username}
    assert state["updatedAt"]
    listed = manage("switch", "list", "--json")
    assert listed.code == 0 and listed.json == [state]

    ran = manage("switch", "clear", kind, *key_args, "--actor", operator.username, "--json")
    assert ran.code == 0, ran.err
    assert (ran.json["paused"], ran.json["key"], ran.json["reason"]) == (False, stored, "")
    assert manage("switch", "list", "--json").json == []
    assert manage("switch", "list").out.strip() == "no switch is set"
    assert [s["key"] for s in manage("switch", "list", "--all", "--json").json] == [stored]

    records = list(AuditRecord.objects.filter(target_type=target_type, target_id=stored).order_by("id"))
    assert [(r.action, r.actor, r.channel, r.params) for r in records] == [
        (f"{prefix}pause", operator.username, "cli", {"reason": "incident 7"}),
        (f"{prefix}resume", operator.username, "cli", {"reason": ""}),
    ]


def test_read_only_set_by_the_command_refuses_the_next_like_command_in_this_process(make_user, make_video):
    from relations.errors import LikesReadOnly
    from tests.relations.helpers import cmd

    video = make_video("sw-cmd-v", make_user())
    assert manage("switch", "set", "read-only", "--reason", "failover").code == 0
    assert switch_is_set(LikesReadOnlySwitch)
    with pytest.raises(LikesReadOnly):
        cmd(make_user(), video.video_id)
    assert manage("switch", "clear", "read-only").code == 0
    assert cmd(make_user(), video.video_id).result.state == "LIKED"
    # without --actor the OS account running the command is recorded
    assert {r.actor for r in AuditRecord.objects.filter(target_type="likes")} == {f"os:{getpass.getuser()}"}


@pytest.mark.parametrize("args, code", [
    (["set", "read-only-ish", "--reason", "r"], "unknown_switch_kind"),
    (["set", "publisher", "--reason", "r"], "switch_key_required"),
    (["set", "publisher", "rel_99", "--reason", "r"], "unknown_switch_key"),
    (["set", "consumer", "count:99", "--reason", "r"], "unknown_switch_key"),
    (["set", "consumer", "nobody", "--reason", "r"], "unknown_switch_key"),
    (["set", "consumer", "nobody:0", "--reason", "r"], "unknown_switch_key"),
    (["set", "read-only", "rel_00", "--reason", "r"], "unknown_switch_key"),
    (["set", "auto-repair", "all", "--reason", "r"], "unknown_switch_key"),
    (["set", "refresh", "bad video id!", "--reason", "r"], "invalid_video_id"),
    (["set", "refresh", "--reason", "r"], "switch_key_required"),
    (["set", "read-only", "--reason", "   "], "reason_required"),
    (["clear", "publisher", "rel_99"], "unknown_switch_key"),
])
def test_bad_input_is_refused_with_a_stable_code_and_nothing_is_written(args, code):
    operator = role_member("likes-operator")
    audits = AuditRecord.objects.count()
    ran = manage("switch", *args, "--actor", operator.username, "--json")
    assert ran.code != 0
    assert ran.json["code"] == code, ran.json
    assert code in ran.err and "Traceback" not in ran.err
    assert switch_rows() == 0 and AuditRecord.objects.count() == audits


@pytest.mark.parametrize("kind, key", [(k, key) for k, key, *_ in KINDS])
def test_without_the_kinds_permission_nothing_is_written(kind, key):
    viewer = role_member("likes-viewer")
    audits = AuditRecord.objects.count()
    ran = manage("switch", "set", kind, *([key] if key else []), "--reason", "r", "--actor", viewer.username, "--json")
    assert ran.code != 0 and ran.json["code"] == "permission_denied"
    ran = manage("switch", "set", kind, *([key] if key else []), "--reason", "r", "--actor", "nobody-at-all")
    assert ran.code != 0 and "unknown_actor" in ran.err
    assert switch_rows() == 0 and AuditRecord.objects.count() == audits
    # the counter-example: the operator role holds it
    operator = role_member("likes-operator")
    ran = manage("switch", "set", kind, *([key] if key else []), "--reason", "r", "--actor", operator.username)
    assert ran.code == 0, ran.err
    assert switch_rows() == 1
