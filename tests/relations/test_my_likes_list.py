"""The caller's liked list (spec §4.13, LIST-1 … LIST-4, LIST-6, LIST-7): keyset pages over the
relation facts, signed cursors, a scan that moves past filtered videos, and live-traversal semantics.
The exact export (LIST-5) is in test_likes_export.py."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core import signing
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from relations import routing
from relations.models import LikeRelation, VideoSnapshot
from relations.selectors import my_likes as selectors_my_likes
from tests.factories import put_like
from tests.relations.helpers import LIKED, UNLIKED, ids, like_new, set_state

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]

URL = "/v1/me/likes"


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
