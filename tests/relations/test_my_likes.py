"""The caller's liked list and its exact export (spec §4.13, LIST-1 … LIST-7): keyset pages over the
relation facts, signed cursors, a scan that moves past filtered videos, live-traversal semantics, and
an export that is exact as of one snapshot while writes commit around it."""

from __future__ import annotations

import io
import itertools
import json
import threading
from datetime import datetime, timedelta

import pytest
from django.core import signing
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import Actor
from relations import routing, selectors_my_likes
from relations.models import LikeRelation, VideoSnapshot
from relations.services import export
from relations.services.commands import relation_set_state
from tests.factories import grant, login_non_staff, put_like, run_jobs

pytestmark = pytest.mark.django_db(databases="__all__")
transactional = pytest.mark.django_db(databases="__all__", transaction=True)

LIKED, UNLIKED = "LIKED", "UNLIKED"
URL = "/v1/me/likes"
EXPORT_ADMIN_URL = "/admin/relations/likes-export/"
_ops = itertools.count(1)


def set_state(user, video_id: str, desired: str = LIKED):
    return relation_set_state(user_id=user.pk, video_id=video_id, desired_state=desired,
                              operation_id=f"op-{next(_ops)}")


def like_new(user, author, make_video, video_ids) -> list[str]:
    """Create each video and like it, in order (so the last one is the newest like)."""
    for vid in video_ids:
        make_video(vid, author)
        set_state(user, vid)
    return list(video_ids)


def ids(n: int, prefix: str = "v") -> list[str]:
    # Zero-padded so that, should two likes share a timestamp, video_id DESC still orders them newest first.
    return [f"{prefix}-{i:03d}" for i in range(n)]


def page(client, **params):
    resp = client.get(URL, params)
    assert resp.status_code == 200, resp.content
    return resp.json()


def traverse(client, *, limit: int, cursor: str | None = None, max_pages: int = 50):
    """Follow nextCursor to the end; returns (video ids in order, pages). Fails rather than loops."""
    pages = []
    while len(pages) < max_pages:
        body = page(client, limit=limit, **({"cursor": cursor} if cursor else {}))
        pages.append(body)
        cursor = body["nextCursor"]
        if cursor is None:
            return [i["videoId"] for p in pages for i in p["items"]], pages
    raise AssertionError(f"traversal did not end within {max_pages} pages")


def cursor_key(user, cursor: str) -> tuple:
    key = selectors_my_likes.list_cursor_decode(user_id=user.pk, cursor=cursor)
    return key.updated_at, key.video_id


@pytest.fixture
def viewer(make_user):
    return make_user(shard="rel_00")


# --- shape and order -----------------------------------------------------------------------------


def test_a_page_has_the_exact_contract_shape(api, viewer, author, make_video):
    like_new(viewer, author, make_video, ["shape-a", "shape-b"])
    set_state(viewer, "shape-a", UNLIKED)
    set_state(viewer, "shape-a", LIKED)  # v3, and now the newest

    body = page(api.as_user(viewer))

    assert set(body) == {"items", "nextCursor"}
    assert body["nextCursor"] is None
    assert [set(item) for item in body["items"]] == [{"videoId", "likedAt", "relationVersion"}] * 2
    assert [(i["videoId"], i["relationVersion"]) for i in body["items"]] == [("shape-a", 3), ("shape-b", 1)]
    for item in body["items"]:
        row = LikeRelation.objects.using("rel_00").get(user_id=viewer.pk, video_id=item["videoId"])
        assert item["likedAt"].endswith("Z")
        assert datetime.fromisoformat(item["likedAt"]) == row.state_changed_at


def test_newest_first_and_an_unliked_video_drops_out(api, viewer, author, make_video):
    liked = like_new(viewer, author, make_video, ids(10))
    set_state(viewer, "v-004", UNLIKED)
    set_state(viewer, "v-002", LIKED)  # a no-op on an older like: it must not move or re-date the row

    items = page(api.as_user(viewer))["items"]

    assert [i["videoId"] for i in items] == [v for v in reversed(liked) if v != "v-004"]
    assert all(i["relationVersion"] == 1 for i in items)


def test_the_default_limit_is_20_and_100_is_the_maximum(api, viewer, author, make_video):
    like_new(viewer, author, make_video, ids(105))
    client = api.as_user(viewer)

    assert len(page(client)["items"]) == 20
    assert len(page(client, limit=1)["items"]) == 1
    full = page(client, limit=100)
    assert len(full["items"]) == 100 and full["nextCursor"] is not None


@pytest.mark.parametrize("raw", ["0", "101", "-1", "abc", "1.5", "", " 5", "1e2", "9999999", "５"])
def test_a_bad_limit_is_400_invalid_limit(api, viewer, raw):
    resp = api.as_user(viewer).get(URL, {"limit": raw})
    assert resp.status_code == 400
    assert resp.json()["code"] == "invalid_limit"
    assert set(resp.json()) == {"code", "message"}


def test_anonymous_is_401(api):
    resp = api.anonymous().get(URL)
    assert resp.status_code == 401
    assert resp.json()["code"] == "not_authenticated"


# --- pagination ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shard", ["rel_00", "rel_01"])
def test_pages_cover_the_list_without_duplicates_or_gaps_on_each_shard(api, make_user, author, make_video, shard):
    user = make_user(shard=shard)
    neighbour = make_user(shard=shard)  # same shard, own likes: must never leak into the list
    liked = like_new(user, author, make_video, ids(23))
    like_new(neighbour, author, make_video, ids(4, prefix="n"))
    set_state(neighbour, "v-010")

    videos, pages = traverse(api.as_user(user), limit=5)

    assert videos == list(reversed(liked))
    assert [len(p["items"]) for p in pages] == [5, 5, 5, 5, 3]
    other = next(a for a in routing.all_aliases() if a != shard)
    assert not LikeRelation.objects.using(other).filter(user_id=user.pk).exists()
    keys = [cursor_key(user, p["nextCursor"]) for p in pages[:-1]]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)


def test_a_page_that_ends_exactly_on_the_last_like_reports_the_end(api, viewer, author, make_video):
    like_new(viewer, author, make_video, ids(10))
    body = page(api.as_user(viewer), limit=10)
    assert len(body["items"]) == 10
    assert body["nextCursor"] is None


def test_a_user_with_no_likes_gets_an_empty_final_page(api, viewer):
    assert page(api.as_user(viewer)) == {"items": [], "nextCursor": None}


def test_a_page_costs_one_shard_query_and_one_snapshot_query(viewer, author, make_video):
    like_new(viewer, author, make_video, ids(45))
    alias = routing.alias_for_user(viewer.pk)
    with CaptureQueriesContext(connections[alias]) as shard_q, CaptureQueriesContext(connections["default"]) as dflt_q:
        first = selectors_my_likes.liked_page_list(user_id=viewer.pk, limit=20)
        second = selectors_my_likes.liked_page_list(user_id=viewer.pk, limit=20, after=first.next_key)
    assert len(first.items) == len(second.items) == 20
    assert len(shard_q.captured_queries) == 2 and len(dflt_q.captured_queries) == 2
    assert not any("OFFSET" in q["sql"].upper() for q in shard_q.captured_queries)


def test_the_page_query_is_an_index_range_scan_without_a_sort(viewer, make_user):
    # Planner choices depend on table statistics, so this one test writes rows in bulk (not through the
    # command service: it is about the query plan only) and analyzes the table, as production would be.
    alias = routing.alias_for_user(viewer.pk)
    other = make_user(shard=alias)
    base = timezone.now()
    LikeRelation.objects.using(alias).bulk_create(
        LikeRelation(user_id=uid, video_id=f"bulk-{i:05d}", state=LIKED if i % 10 else UNLIKED,
                     relation_version=1, last_operation_id=f"bulk-{i}", state_changed_at=base - timedelta(seconds=i),
                     created_at=base, updated_at=base - timedelta(seconds=i))
        for uid in (viewer.pk, other.pk) for i in range(3000)
    )
    with connections[alias].cursor() as cursor:
        cursor.execute(f"ANALYZE {LikeRelation._meta.db_table}")
    after = selectors_my_likes.ListKey(updated_at=base - timedelta(seconds=1500), video_id="bulk-01500")
    qs = selectors_my_likes.liked_rows_scan_queryset(alias=alias, user_id=viewer.pk, after=after, count=21)

    assert [row[1] for row in qs[:3]] == ["bulk-01501", "bulk-01502", "bulk-01503"]
    plan = qs.explain()
    assert "relation_user_list_idx" in plan, plan
    assert "Sort" not in plan, plan
    index_cond = next(line for line in plan.splitlines() if "Index Cond" in line)
    assert "ROW(updated_at" in index_cond, plan  # the cursor is a range start, not a filter over skipped rows


# --- cursors (LIST-7) ----------------------------------------------------------------------------


@pytest.fixture
def cursor_setup(api, make_user, author, make_video):
    alice, bob = make_user(shard="rel_00"), make_user(shard="rel_01")
    like_new(alice, author, make_video, ids(6))
    like_new(bob, author, make_video, ids(6))
    cursor = page(api.as_user(alice), limit=2)["nextCursor"]
    assert cursor is not None
    return alice, bob, cursor


def _flip(text: str, i: int) -> str:
    return text[:i] + ("A" if text[i] != "A" else "B") + text[i + 1:]


def test_a_valid_cursor_continues_the_list(api, cursor_setup):
    alice, _bob, cursor = cursor_setup
    assert [i["videoId"] for i in page(api.as_user(alice), limit=2, cursor=cursor)["items"]] == ["v-003", "v-002"]


def test_a_tampered_cursor_is_400_invalid_cursor(api, cursor_setup):
    alice, _bob, cursor = cursor_setup
    client = api.as_user(alice)
    payload_end = cursor.rindex(":")
    # In the payload (the sort key), just before the separator, and in the signature.
    for i in (0, payload_end // 2, payload_end - 1, payload_end + 1, len(cursor) - 1):
        resp = client.get(URL, {"cursor": _flip(cursor, i)})
        assert resp.status_code == 400, i
        assert resp.json()["code"] == "invalid_cursor"


@pytest.mark.parametrize("garbage", ["", "garbage", "a:b", ":", "x" * 2000, "eyJ2IjoxfQ", "\u00e9\u00e9:\u00e9"])
def test_a_garbage_cursor_is_400_invalid_cursor(api, cursor_setup, garbage):
    alice, _bob, _cursor = cursor_setup
    resp = api.as_user(alice).get(URL, {"cursor": garbage})
    assert resp.status_code == 400
    assert resp.json()["code"] == "invalid_cursor"


def test_another_users_cursor_is_400_invalid_cursor(api, cursor_setup):
    _alice, bob, cursor = cursor_setup
    resp = api.as_user(bob).get(URL, {"cursor": cursor})
    assert resp.status_code == 400
    assert resp.json()["code"] == "invalid_cursor"


def test_a_cursor_signed_with_another_key_or_format_is_refused(api, cursor_setup, settings):
    alice, _bob, cursor = cursor_setup
    client = api.as_user(alice)
    key = selectors_my_likes.list_cursor_decode(user_id=alice.pk, cursor=cursor)
    wrong_version = signing.Signer(key=settings.CURSOR_SIGNING_KEY, salt=selectors_my_likes.CURSOR_SALT).sign_object(
        {"v": 99, "u": alice.pk, "t": 0, "k": key.video_id})
    assert client.get(URL, {"cursor": wrong_version}).json()["code"] == "invalid_cursor"

    settings.CURSOR_SIGNING_KEY = "another-key"
    resp = client.get(URL, {"cursor": cursor})
    assert resp.status_code == 400 and resp.json()["code"] == "invalid_cursor"


# --- filtered videos (LIST-6) --------------------------------------------------------------------


def test_all_filtered_pages_still_advance_the_cursor_and_the_traversal_ends(api, viewer, author, make_video,
                                                                            settings):
    settings.MY_LIKES_SCAN_LIMIT = 12
    visible = like_new(viewer, author, make_video, ids(5, prefix="ok"))  # the oldest likes
    hidden = like_new(viewer, author, make_video, ids(30, prefix="gone"))  # the 30 newest
    for vid in hidden[:28]:
        make_video(vid, author, status="taken_down")
    make_video(hidden[28], author, status="deleted")
    VideoSnapshot.objects.filter(video_id=hidden[29]).delete()  # no snapshot row: not visible either

    videos, pages = traverse(api.as_user(viewer), limit=10)

    assert videos == list(reversed(visible))
    assert [len(p["items"]) for p in pages] == [0, 0, 5]  # 12 + 12 raw rows scanned, then the rest
    keys = [cursor_key(viewer, p["nextCursor"]) for p in pages[:-1]]
    assert keys[0] > keys[1]  # the cursor moved forward although nothing was returned
    assert keys[0][1] == hidden[30 - 12] and keys[1][1] == hidden[30 - 24]  # last SCANNED raw key


def test_filtered_rows_are_skipped_and_the_page_is_still_filled(api, viewer, author, make_video):
    liked = like_new(viewer, author, make_video, ids(24))
    for vid in liked[1::2]:
        make_video(vid, author, status="taken_down")
    shown = [v for v in reversed(liked) if v not in liked[1::2]]

    first = page(api.as_user(viewer), limit=5)
    videos, _pages = traverse(api.as_user(viewer), limit=5)

    assert [i["videoId"] for i in first["items"]] == shown[:5]  # several scan batches to fill one page
    assert videos == shown


# --- live traversal (LIST-4) and read-your-like (LIST-1) ---------------------------------------


def test_a_like_during_paging_appears_only_after_refreshing_page_one(api, viewer, author, make_video):
    liked = like_new(viewer, author, make_video, ids(12))
    client = api.as_user(viewer)
    first = page(client, limit=5)

    like_new(viewer, author, make_video, ["fresh"])
    rest, _pages = traverse(client, limit=5, cursor=first["nextCursor"])

    seen = [i["videoId"] for i in first["items"]] + rest
    assert seen == list(reversed(liked))  # no "fresh", no duplicate, no gap
    assert page(client, limit=5)["items"][0]["videoId"] == "fresh"


def test_an_unlike_during_paging_drops_the_item(api, viewer, author, make_video):
    liked = like_new(viewer, author, make_video, ids(12))
    newest_first = list(reversed(liked))
    client = api.as_user(viewer)
    first = page(client, limit=5)

    set_state(viewer, newest_first[7], UNLIKED)  # not yet seen
    set_state(viewer, newest_first[1], UNLIKED)  # already seen on page 1
    rest, _pages = traverse(client, limit=5, cursor=first["nextCursor"])

    assert [i["videoId"] for i in first["items"]] == newest_first[:5]
    assert rest == newest_first[5:7] + newest_first[8:]
    fresh, _ = traverse(client, limit=5)
    assert fresh == [v for v in newest_first if v not in (newest_first[1], newest_first[7])]


def test_a_relike_during_paging_moves_in_front_and_is_not_seen_twice(api, viewer, author, make_video):
    liked = like_new(viewer, author, make_video, ids(12))
    newest_first = list(reversed(liked))
    client = api.as_user(viewer)
    first = page(client, limit=5)

    set_state(viewer, newest_first[8], UNLIKED)
    set_state(viewer, newest_first[8], LIKED)  # re-liked: v3, now the newest
    rest, _pages = traverse(client, limit=5, cursor=first["nextCursor"])

    seen = [i["videoId"] for i in first["items"]] + rest
    assert seen == [v for v in newest_first if v != newest_first[8]]
    top = page(client, limit=1)["items"][0]
    assert (top["videoId"], top["relationVersion"]) == (newest_first[8], 3)


def test_a_like_is_listed_right_after_its_200_and_an_unlike_removes_it(api, viewer, author, make_video):
    like_new(viewer, author, make_video, ids(3))
    make_video("just-now", author)
    client = api.as_user(viewer)

    resp = put_like(client, "just-now", LIKED, "k-like")
    assert resp.status_code == 200
    top = page(client, limit=1)["items"][0]
    assert (top["videoId"], top["relationVersion"]) == ("just-now", resp.json()["relationVersion"])

    assert put_like(client, "just-now", UNLIKED, "k-unlike").status_code == 200
    assert "just-now" not in [i["videoId"] for i in page(client)["items"]]


def test_users_on_both_shards_list_only_their_own_likes(api, make_user, author, make_video):
    alice, bob = make_user(shard="rel_00"), make_user(shard="rel_01")
    like_new(alice, author, make_video, ["both", "only-a"])
    set_state(bob, "both")
    like_new(bob, author, make_video, ["only-b"])

    assert [i["videoId"] for i in page(api.as_user(alice))["items"]] == ["only-a", "both"]
    assert [i["videoId"] for i in page(api.as_user(bob))["items"]] == ["only-b", "both"]
    assert LikeRelation.objects.using("rel_01").filter(user_id=bob.pk).count() == 2
    assert not LikeRelation.objects.using("rel_00").filter(user_id=bob.pk).exists()


# --- exact export (LIST-5) -----------------------------------------------------------------------

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
    header, likes, end = read_export(b"".join(resp.streaming_content).decode())
    assert [row["videoId"] for row in likes] == ids(4) and end["rowCount"] == 4
    audit = AuditRecord.objects.get(action="likes.export")
    assert (audit.actor, audit.channel, audit.target_id) == (staff.username, "admin", str(user.pk))
    assert audit.params["asOf"] == header["asOf"]


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

