"""Exporting a video's likers (issue 14 §6, OPS-9, PRIV-1): a permission no role holds by default, a stated
purpose, an audited export and an audited download of its file."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from likes_project.audit.models import AuditRecord
from likes_project.opsjobs.models import OpsJob
from tests.factories import grant, run_jobs
from tests.reconciliation.helpers import roles_ensure
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

URL = "/admin/relations/likers-export/"


def read(text: str) -> tuple[dict, list[dict], list[dict], dict]:
    lines = [json.loads(line) for line in text.splitlines()]
    return (lines[0], [x for x in lines if x["type"] == "liker"], [x for x in lines if x["type"] == "shard"],
            lines[-1])


@pytest.fixture
def ring(make_user, make_video):
    """A video liked by users on both relation shards, one of whom unliked again; and another video."""
    video = make_video("lx-v", make_user())
    other = make_video("lx-other", make_user())
    likers = [make_user(shard="rel_00"), make_user(shard="rel_01"), make_user(shard="rel_01")]
    for u in likers:
        cmd(u, video.video_id, "LIKED")
    gone = make_user(shard="rel_00")
    cmd(gone, video.video_id, "LIKED")
    cmd(gone, video.video_id, "UNLIKED")
    cmd(make_user(), other.video_id, "LIKED")
    return likers


def test_the_export_lists_exactly_the_likers_with_the_purpose_and_is_audited(ring, tmp_path):
    out = tmp_path / "likers.jsonl"
    stdout = io.StringIO()
    call_command("export_video_likers", "lx-v", "--purpose", "abuse report 77", "--out", str(out), "--json",
                 stdout=stdout, stderr=io.StringIO())
    header, likers, shards, end = read(out.read_text())
    assert header["format"] == "likers-export" and header["purpose"] == "abuse report 77"
    assert header["privacyRulesVersion"] == 1  # the rules it applied, pinned (REV-9)
    assert sorted(x["userId"] for x in likers) == sorted(u.pk for u in ring)  # not the one who unliked
    assert {x["shard"] for x in likers} == {"rel_00", "rel_01"} and [s["shard"] for s in shards] == ["rel_00",
                                                                                                       "rel_01"]
    assert end == {"type": "end", "rowCount": 3}
    summary = json.loads(stdout.getvalue().splitlines()[-1])
    assert summary["rowCount"] == 3 and summary["videoId"] == "lx-v" and summary["out"] == str(out)
    [audit] = AuditRecord.objects.filter(action="likers.export")
    assert (audit.target_id, audit.params["purpose"], audit.params["rowCount"]) == ("lx-v", "abuse report 77", 3)


@pytest.mark.parametrize(("args", "code"), [
    (["lx-v", "--purpose", "   "], "purpose_required"),
    (["bad id/", "--purpose", "x"], "invalid_video_id"),
])
def test_bad_input_is_refused_and_nothing_is_exported(ring, tmp_path, args, code):
    out = tmp_path / "likers.jsonl"
    with pytest.raises(CommandError, match=code):
        call_command("export_video_likers", *args, "--out", str(out), stdout=io.StringIO(), stderr=io.StringIO())
    assert not out.exists() and not list(tmp_path.iterdir())
    assert not AuditRecord.objects.filter(action="likers.export").exists()
    assert not OpsJob.objects.filter(kind="likers.export").exists()


def test_no_role_may_export_and_the_named_permission_may(ring, make_user, tmp_path):
    roles_ensure()
    operator = make_user("lx-operator")
    operator.groups.add(Group.objects.get(name="likes-operator"))
    with pytest.raises(CommandError, match="permission_denied"):
        call_command("export_video_likers", "lx-v", "--purpose", "p", "--out", str(tmp_path / "a"),
                     "--actor", operator.username, stdout=io.StringIO(), stderr=io.StringIO())
    grant(operator, "relations.export_video_likers")
    call_command("export_video_likers", "lx-v", "--purpose", "p", "--out", str(tmp_path / "b"),
                 "--actor", operator.username, stdout=io.StringIO(), stderr=io.StringIO())
    assert (tmp_path / "b").exists()
    assert AuditRecord.objects.get(action="likers.export").actor == operator.username


def test_the_console_export_needs_a_purpose_and_audits_the_download(ring, client, make_user):
    roles_ensure()
    staff = make_user("lx-staff")
    staff.is_staff = True
    staff.save()
    staff.groups.add(Group.objects.get(name="likes-operator"))
    client.force_login(staff)
    assert client.get(URL).status_code == 403  # an operator's role does not include it
    grant(staff, "relations.export_video_likers")
    assert client.get(URL).status_code == 200
    blank = client.post(URL, {"video_id": "lx-v", "purpose": ""})
    assert blank.status_code == 200 and not OpsJob.objects.filter(kind="likers.export").exists()
    started = client.post(URL, {"video_id": "lx-v", "purpose": "legal hold 5"})
    assert started.status_code == 302
    [job] = run_jobs()
    assert job.status == "SUCCEEDED" and job.result["rowCount"] == 3
    download = client.get(reverse("admin:opsjobs_opsjob_download", args=[job.pk]))
    assert download.status_code == 200
    body = b"".join(download.streaming_content).decode()
    assert read(body)[0]["purpose"] == "legal hold 5"
    [fetched] = AuditRecord.objects.filter(action="job.file_download")
    assert (fetched.actor, fetched.target_id) == ("lx-staff", str(job.pk))


def test_a_deleted_account_is_left_out_of_the_export(ring, tmp_path):
    """PRIV-4: while its likes are being withdrawn (or one could not be), a deleted account is not exported."""
    from relations.models import AccountStatus

    AccountStatus.objects.create(user_id=ring[1].pk, status="deleted")
    out = tmp_path / "likers.jsonl"
    call_command("export_video_likers", "lx-v", "--purpose", "abuse report 78", "--out", str(out),
                 stdout=io.StringIO(), stderr=io.StringIO())
    _header, likers, _shards, end = read(out.read_text())
    assert sorted(x["userId"] for x in likers) == sorted([ring[0].pk, ring[2].pk]) and end["rowCount"] == 2
