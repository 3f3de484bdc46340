"""The caller's exact likes export (spec §4.13, LIST-5): exact as of one snapshot while writes commit
around it, from the management command and from the admin (as a job), and always audited."""

from __future__ import annotations

import io
import json
import threading
from datetime import datetime

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.urls import reverse

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import Actor
from relations import routing
from relations.models import LikeRelation
from relations.selectors import my_likes as selectors_my_likes
from relations.services import export
from tests.factories import grant, login_non_staff, run_jobs
from tests.relations.helpers import LIKED, UNLIKED, ids, like_new, set_state

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]
transactional = pytest.mark.django_db(databases="__all__", transaction=True)

EXPORT_ADMIN_URL = "/admin/relations/likes-export/"

EXPORT_ACTOR = Actor(name="tests", channel="cli")


def liked_facts(user) -> dict[str, tuple[int, str]]:
    rows = LikeRelation.objects.using(routing.alias_for_user(user.pk)).filter(user_id=user.pk, state=LIKED)
    return {r.video_id: (r.relation_version, selectors_my_likes.iso_utc(r.state_changed_at)) for r in rows}


def read_export(text: str) -> tuple[dict, list[dict], dict]:
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "end"
    assert all(line["type"] == "like" for line in lines[1:-1])
    return lines[0], lines[1:-1], lines[-1]


def in_other_thread(fn) -> None:
    """Run `fn` on its own thread (own connections, own commits) and wait for it."""
    errors: list[Exception] = []

    def run():
        try:
            fn()
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the concurrent writer hung"
    assert errors == []


def export_with_concurrent_writes(user, author, make_video):
    """Export 11 likes in chunks of 3; after the first chunk another connection commits unlikes of
    exported and not-yet-exported videos, a new like and a re-like. Returns (facts before, export,
    facts after, progress calls)."""
    like_new(user, author, make_video, ["gone-1"])
    make_video("gone-1", author, status="taken_down")
    like_new(user, author, make_video, ids(10))
    make_video("late-1", author)
    before = liked_facts(user)
    calls: list[int] = []

    def writes():
        set_state(user, "v-001", UNLIKED)  # already exported (first chunk)
        set_state(user, "v-007", UNLIKED)  # not yet exported
        set_state(user, "v-003", UNLIKED)
        set_state(user, "v-005", UNLIKED)
        set_state(user, "v-005", LIKED)  # re-like: v3, moves to the end of the export order
        set_state(user, "late-1", LIKED)  # a new like

    def progress(rows: int) -> None:
        calls.append(rows)
        if len(calls) == 1:
            in_other_thread(writes)

    out = io.StringIO()
    result = export.user_likes_export(user_id=user.pk, out=out, actor=EXPORT_ACTOR, progress=progress, chunk_rows=3)
    return before, result, out.getvalue(), liked_facts(user), calls


@transactional
def test_the_export_is_exact_as_of_its_snapshot_under_concurrent_writes(make_user, author, make_video):
    user = make_user(shard="rel_01")

    before, result, text, after, calls = export_with_concurrent_writes(user, author, make_video)

    header, likes, end = read_export(text)
    exported = {row["videoId"]: (row["relationVersion"], row["likedAt"]) for row in likes}
    assert len(likes) == len(exported)  # no video twice
    assert exported == before  # not one more, not one less
    assert after != before and "late-1" in after and "v-007" not in after  # the writes did commit
    assert [row["videoId"] for row in likes][:2] == ["gone-1", "v-000"]  # oldest first
    assert {row["videoId"]: (row["videoStatus"], row["listed"]) for row in likes}["gone-1"] == ("taken_down", False)
    assert (end["rowCount"], end["unlistedCount"]) == (11, 1) == (result.row_count, result.unlisted_count)
    assert header["userId"] == user.pk and header["shard"] == "rel_01" == result.alias
    assert datetime.fromisoformat(header["asOf"]) == result.as_of
    assert calls == [3, 6, 9, 11]
    audit = AuditRecord.objects.get(action="likes.export")
    assert (audit.actor, audit.target_id, audit.params["rowCount"]) == ("tests", str(user.pk), 11)
    assert audit.params["asOf"] == header["asOf"]


@transactional
def test_without_repeatable_read_the_same_export_would_see_the_concurrent_writes(make_user, author, make_video,
                                                                                 monkeypatch):
    """The control for the test above: it fails if the export's snapshot isolation is lost."""
    monkeypatch.setattr(export, "ISOLATION_SQL", "SET TRANSACTION ISOLATION LEVEL READ COMMITTED, READ ONLY")
    user = make_user(shard="rel_00")

    before, _result, text, _after, _calls = export_with_concurrent_writes(user, author, make_video)

    exported = {row["videoId"] for row in read_export(text)[1]}
    assert exported != set(before)
    assert "late-1" in exported and "v-007" not in exported


@transactional
def test_the_export_command_writes_the_file_progress_as_of_and_an_audit_record(make_user, author, make_video,
                                                                                 tmp_path):
    user = make_user(shard="rel_00")
    like_new(user, author, make_video, ids(5))
    operator = make_user()
    grant(operator, "relations.view_likerelation")
    out, err, target = io.StringIO(), io.StringIO(), tmp_path / "likes.jsonl"

    call_command("export_user_likes", user.username, "--out", str(target), "--chunk-rows", "2",
                 "--actor", operator.username, stdout=out, stderr=err)

    header, likes, end = read_export(target.read_text())
    assert [row["videoId"] for row in likes] == ids(5)
    assert end["rowCount"] == 5
    assert f"as of {header['asOf']}" in out.getvalue()
    assert "Exported 5 likes" in out.getvalue()
    assert err.getvalue().count("likes exported") == 3  # after rows 2, 4 and 5
    audit = AuditRecord.objects.get(action="likes.export")
    assert (audit.actor, audit.channel, audit.target_id) == (operator.username, "cli", str(user.pk))
    assert audit.params["destination"] == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["likes.jsonl"]  # no temp file left behind


def test_the_export_command_refuses_an_unknown_user_or_an_unwritable_path_cleanly(make_user, tmp_path):
    user = make_user()
    target = tmp_path / "out.jsonl"

    with pytest.raises(CommandError, match="user_not_found"):
        call_command("export_user_likes", "nobody-here", "--out", str(target), stdout=io.StringIO())
    with pytest.raises(CommandError, match="Cannot write"):
        call_command("export_user_likes", user.username, "--out", str(tmp_path / "missing" / "out.jsonl"),
                     stdout=io.StringIO())
    with pytest.raises(CommandError, match="is a directory"):
        call_command("export_user_likes", user.username, "--out", str(tmp_path), stdout=io.StringIO())
    with pytest.raises(CommandError, match="lacks the permission"):
        call_command("export_user_likes", user.username, "--out", str(target), "--actor", user.username,
                     stdout=io.StringIO())

    assert list(tmp_path.iterdir()) == []
    assert not AuditRecord.objects.filter(action="likes.export").exists()


@transactional
def test_a_failed_export_leaves_no_file_and_no_audit(make_user, author, make_video, tmp_path, monkeypatch):
    user = make_user()
    like_new(user, author, make_video, ids(3))
    target = tmp_path / "likes.jsonl"
    target.write_text("previous export\n")
    monkeypatch.setattr(export, "_CHUNK_SQL", "SELECT broken FROM nowhere %s %s %s %s %s")

    with pytest.raises(CommandError, match="nothing written"):
        call_command("export_user_likes", user.username, "--out", str(target), "--chunk-rows", "1",
                     stdout=io.StringIO(), stderr=io.StringIO())

    assert target.read_text() == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["likes.jsonl"]
    assert not AuditRecord.objects.filter(action="likes.export").exists()


@transactional
def test_the_admin_export_downloads_the_same_file_and_is_audited(client, staff, make_user, author, make_video):
    user = make_user(shard="rel_01")
    like_new(user, author, make_video, ids(4))
    grant(staff, "relations.view_likerelation")
    client.force_login(staff)

    assert client.get(EXPORT_ADMIN_URL).status_code == 200
    started = client.post(EXPORT_ADMIN_URL, {"username": user.username})
    assert started.status_code == 302  # a job: the request does not run the export
    [job] = run_jobs()
    page = client.get(started["Location"]).content.decode()
    download = reverse("admin:opsjobs_opsjob_download", args=[job.pk])
    assert download in page
    resp = client.get(download)

    assert resp.status_code == 200
    assert resp["Content-Disposition"].startswith(f'attachment; filename="likes-{user.username}-')
    body = b"".join(resp.streaming_content)
    header, likes, end = read_export(body.decode())
    assert [row["videoId"] for row in likes] == ids(4) and end["rowCount"] == 4
    audit = AuditRecord.objects.get(action="likes.export")
    assert (audit.actor, audit.channel, audit.target_id) == (staff.username, "admin", str(user.pk))
    assert audit.params["asOf"] == header["asOf"]
    [fetched] = AuditRecord.objects.filter(action="job.file_download")  # the download itself (OPS-9)
    assert (fetched.actor, fetched.target_id, fetched.params["kind"]) == (staff.username, str(job.pk), job.kind)
    assert fetched.params["bytes"] == len(body)
    client.get(download)
    assert AuditRecord.objects.filter(action="job.file_download").count() == 2  # every download, not the first


def test_the_admin_export_needs_staff_and_the_permission(client, staff, make_user):
    user = make_user()
    client.force_login(staff)
    assert client.post(EXPORT_ADMIN_URL, {"username": user.username}).status_code == 403

    grant(staff, "relations.view_likerelation")
    resp = client.post(EXPORT_ADMIN_URL, {"username": "nobody-here"})
    assert resp.status_code == 200 and "No user with this username." in resp.content.decode()

    login_non_staff(client, "relations.view_likerelation")
    resp = client.post(EXPORT_ADMIN_URL, {"username": user.username})
    assert resp.status_code == 302 and "/admin/login/" in resp["Location"]
    assert not AuditRecord.objects.filter(action="likes.export").exists()

