"""`POST /v1/like-relations/batch-query` (QRY-1 … QRY-6) against the real stores."""

from __future__ import annotations

import json

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from counting.tasks import display_snapshot_task
from relations import routing
from tests.counting.helpers import drain, liked_facts
from tests.factories import put_like, redis_unreachable
from tests.relations.helpers import cmd as like

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]
URL = "/v1/like-relations/batch-query"


def batch(client, video_ids, **extra):
    return client.post(URL, data=json.dumps({"videoIds": video_ids, **extra}), content_type="application/json")


def test_items_follow_first_occurrence_order_deduplicated_with_the_contract_shape(api, make_user, make_video, author):
    me = make_user()
    for v in ("a", "b", "c"):
        make_video(v, author)
    like(me, "b")
    body = batch(api.as_user(me), ["c", "b", "c", "a", "b"]).json()
    assert [i["videoId"] for i in body["items"]] == ["c", "b", "a"]
    for item in body["items"]:
        assert set(item) == {"videoId", "available", "myState", "relationVersion", "displayCount", "countSnapshotAt"}
    b = body["items"][1]
    assert (b["myState"], b["relationVersion"], b["available"]) == ("LIKED", 1, True)
    assert (body["items"][0]["myState"], body["items"][0]["relationVersion"]) == ("UNLIKED", 0)


def test_counts_come_from_the_display_snapshot(api, make_user, make_video, author):
    make_video("counted", author)
    fans = [make_user(shard=a) for a in ("rel_00", "rel_01") for _ in range(2)]
    for f in fans:
        like(f, "counted")
    drain()
    display_snapshot_task()
    item = batch(api.as_user(fans[0]), ["counted"]).json()["items"][0]
    assert item["displayCount"] == liked_facts("counted") == 4
    assert item["countSnapshotAt"].endswith("Z")


def test_unavailable_videos_get_available_false_and_null_counts(api, make_user, make_video, author):
    me = make_user()
    make_video("pub", author)
    make_video("priv", author, visibility="private")
    make_video("gone", author, status="deleted")
    make_video("down", author, status="taken_down")
    body = batch(api.as_user(me), ["pub", "priv", "gone", "down", "missing"]).json()
    items = {i["videoId"]: i for i in body["items"]}
    assert items["pub"]["available"] is True and items["pub"]["displayCount"] == 0
    for vid in ("priv", "gone", "down", "missing"):
        assert items[vid]["available"] is False
        assert items[vid]["displayCount"] is None and items[vid]["countSnapshotAt"] is None


def test_more_than_the_limit_is_refused_and_exactly_the_limit_is_served(api, make_user, settings):
    me = make_user()
    settings.BATCH_QUERY_MAX_IDS = 100
    over = batch(api.as_user(me), [f"v{i}" for i in range(101)])
    assert over.status_code == 400 and over.json()["code"] == "batch_too_large"
    ok = batch(api.as_user(me), [f"v{i}" for i in range(100)])
    assert ok.status_code == 200 and len(ok.json()["items"]) == 100


@pytest.mark.parametrize(("body", "code"), [
    ({"videoIds": "v1"}, "invalid_video_ids"),
    ({}, "invalid_video_ids"),
    ({"videoIds": ["ok", "bad id"]}, "invalid_video_id"),
    ({"videoIds": [7]}, "invalid_video_id"),
    ({"videoIds": ["a"], "minRelationVersions": {"a": -1}}, "invalid_min_relation_versions"),
    ({"videoIds": ["a"], "minRelationVersions": {"a": "3"}}, "invalid_min_relation_versions"),
    ({"videoIds": ["a"], "minRelationVersions": [1]}, "invalid_min_relation_versions"),
])
def test_bad_input_is_a_400_with_a_stable_code(api, make_user, body, code):
    resp = api.as_user(make_user()).post(URL, data=json.dumps(body), content_type="application/json")
    assert resp.status_code == 400 and resp.json()["code"] == code


def test_non_json_and_anonymous_callers_are_refused(api, make_user):
    assert api.as_user(make_user()).post(URL, data="nope", content_type="application/json").json()["code"] == \
        "invalid_json"
    assert api.anonymous().post(URL, data="{}", content_type="application/json").status_code == 401


def test_empty_list_is_an_empty_answer(api, make_user):
    assert batch(api.as_user(make_user()), []).json() == {"items": []}


def test_read_your_writes_with_min_relation_versions(api, make_user, make_video, author):
    from relations import cache
    from relations.models import RelationCacheGeneration

    me = make_user()
    make_video("ryw", author)
    client = api.as_user(me)
    put = put_like(client, "ryw", "LIKED", "k1").json()
    g = RelationCacheGeneration.objects.get(status="ACTIVE").generation
    cache.relation_cache_write(g, [(me.pk, "ryw", "UNLIKED", 0)])  # an older cached value
    stale = batch(client, ["ryw"]).json()["items"][0]
    assert (stale["myState"], stale["relationVersion"]) == ("UNLIKED", 0)
    fresh = batch(client, ["ryw"], minRelationVersions={"ryw": put["relationVersion"]}).json()["items"][0]
    assert (fresh["myState"], fresh["relationVersion"]) == ("LIKED", put["relationVersion"])


def test_relation_reads_cost_one_query_on_the_users_shard(api, make_user, make_video, author):
    me = make_user()
    ids = [make_video(f"f{i}", author).video_id for i in range(20)]
    alias = routing.alias_for_user(me.pk)
    client = api.as_user(me)
    batch(client, ids)  # warms the visibility cache
    with CaptureQueriesContext(connections[alias]) as shard:
        assert batch(client, ids).status_code == 200
    assert len(shard.captured_queries) == 1


def test_redis_down_answers_stay_correct(api, make_user, make_video, author, settings):
    me = make_user()
    make_video("rd", author)
    make_video("rd-priv", author, visibility="private")
    like(me, "rd")
    drain()
    display_snapshot_task()
    client = api.as_user(me)
    with redis_unreachable(settings, streams=False):
        items = {i["videoId"]: i for i in batch(client, ["rd", "rd-priv"]).json()["items"]}
    assert (items["rd"]["myState"], items["rd"]["relationVersion"], items["rd"]["displayCount"]) == ("LIKED", 1, 1)
    assert items["rd-priv"]["available"] is False
