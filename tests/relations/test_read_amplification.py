"""Issue 9 §4, relations side: a feed of ids the user never acted on must not grow the durable floor
table (negative entries live in Redis only, and can never shadow a later like), and readers' repair
hints are coalesced per user instead of one Celery message per read. Real shards, real Redis, the
real broker."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import CaptureQueriesContext

from likes_project import metrics
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_partition
from likes_project.redis_client import cache_redis
from relations import cache, routing, selectors
from relations.models import LikeRelationCacheProjection, RelationCacheGeneration
from relations.services import relation_cache
from relations.services.relation_cache import RelationCacheProjector, relation_cache_repair
from relations.tasks import relcache_repair_task
from tests.counting.helpers import publish_all
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]
URL = "/v1/like-relations/batch-query"
REPAIR_QUEUE = settings.CELERY_TASK_ROUTES["relations.relcache_repair"]["queue"]


def floor_rows() -> int:
    return sum(LikeRelationCacheProjection.objects.using(a).count() for a in settings.RELATION_SHARD_ALIASES)


def active_gen() -> int:
    return RelationCacheGeneration.objects.get(status="ACTIVE").generation


def project_relcache() -> None:
    for p in streams.all_partitions():
        consume_partition(RelationCacheProjector(), partition=p)


def random_ids(n: int) -> list[str]:
    return [f"rnd-{uuid.uuid4().hex[:12]}" for _ in range(n)]


def batch(client, video_ids) -> dict[str, tuple[str, int]]:
    selectors.reset_generation_cache()
    resp = client.post(URL, data=json.dumps({"videoIds": video_ids}), content_type="application/json")
    assert resp.status_code == 200, resp.content[:300]
    return {i["videoId"]: (i["myState"], i["relationVersion"]) for i in resp.json()["items"]}


def read(user, video_ids) -> dict[str, tuple[str, int]]:
    selectors.reset_generation_cache()
    return {v: (r.state, r.relation_version)
            for v, r in selectors.relation_states_get(user_id=user.pk, video_ids=video_ids).items()}


@contextlib.contextmanager
def repair_messages(settings):
    """Nudges on, against the real broker; yields a function returning the repair messages queued
    (their argument lists). The queue is emptied on the way in and out."""
    from likes_project.celery import app
    from likes_project.nudge import nudges_flush, pending_forget_all

    settings.LIKES_NUDGE_ENABLED = True
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.queue_purge(REPAIR_QUEUE)
        pending_forget_all()  # no "queued" flag of an earlier test's purged message (D89)

        def queued() -> list[list]:
            assert nudges_flush(timeout_s=10)  # nudges leave from a sender thread (issue 9 §4)
            out = []
            for raw in channel.client.lrange(REPAIR_QUEUE, 0, -1):
                message = json.loads(raw)
                assert message["headers"]["task"] == "relations.relcache_repair"
                args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
                out.append(args)
            return out

        try:
            yield queued
        finally:
            settings.LIKES_NUDGE_ENABLED = False
            channel.queue_purge(REPAIR_QUEUE)
            pending_forget_all()


# --- 1. no durable floor row for a relation with no fact ------------------------------------------


def test_a_batch_query_of_100_random_ids_writes_no_floor_row_then_a_like_shows(api, make_user, make_video, author):
    user = make_user()
    client = api.as_user(user)
    videos = random_ids(settings.BATCH_QUERY_MAX_IDS)
    before = floor_rows()
    assert set(batch(client, videos).values()) == {("UNLIKED", 0)}
    relcache_repair_task(user.pk)  # the worker serves the hint
    assert floor_rows() == before  # the 100 misses left no durable row
    g = active_gen()
    # ... but an explicit negative entry each, so the next page of the same feed reads no database
    assert cache.relation_cache_read(g, user.pk, videos) == {v: ("UNLIKED", 0) for v in videos}
    with CaptureQueriesContext(connections[routing.alias_for_user(user.pk)]) as q:
        assert set(batch(client, videos).values()) == {("UNLIKED", 0)}
    assert len(q.captured_queries) == 0

    # Counter-example: the negative entry must not hide a later like of one of them.
    liked = videos[37]
    make_video(liked, author)
    cmd(user, liked, "LIKED")
    publish_all()
    project_relcache()
    after = batch(client, videos)
    assert after[liked] == ("LIKED", 1)
    assert all(after[v] == ("UNLIKED", 0) for v in videos if v != liked)
    assert floor_rows() == before + 1  # the one real relation has its floor


def test_a_hint_served_after_the_like_was_projected_and_evicted_still_shows_the_like(make_user, make_video, author):
    user = make_user()
    make_video("ra-late", author)
    assert read(user, ["ra-late"]) == {"ra-late": ("UNLIKED", 0)}  # a miss: its hint is now queued
    cmd(user, "ra-late", "LIKED")
    publish_all()
    project_relcache()
    g = active_gen()
    cache_redis().delete(cache.relation_key(g, user.pk, "ra-late"))  # evicted before the hint is served
    relcache_repair_task(user.pk)  # the late hint
    assert cache.relation_cache_read(g, user.pk, ["ra-late"]) == {"ra-late": ("LIKED", 1)}
    assert read(user, ["ra-late"]) == {"ra-late": ("LIKED", 1)}


def test_a_like_committing_inside_the_repair_is_not_shadowed_by_its_v0_entry(make_user, make_video, author,
                                                                              monkeypatch):
    """The worst interleaving: the repair finds no fact; before its v0 write lands, a like commits, is
    projected into Redis and the key is evicted; then the v0 lands in the empty key. The facts read
    after the v0 write finds the like and writes it through the floor."""
    user = make_user()
    make_video("ra-race", author)
    g = active_gen()
    real_write = cache.relation_cache_write
    seen = {}

    def interleaved_write(generation, entries):
        if not seen and any(version == 0 for *_x, version in entries):
            seen["race"] = True
            cmd(user, "ra-race", "LIKED")  # commits between the repair's facts read and its v0 write
            publish_all()
            project_relcache()
            cache_redis().delete(cache.relation_key(g, user.pk, "ra-race"))  # ... and is evicted
            verdicts = real_write(generation, entries)
            seen["after_v0"] = cache.relation_cache_read(g, user.pk, ["ra-race"])
            return verdicts
        return real_write(generation, entries)

    monkeypatch.setattr(cache, "relation_cache_write", interleaved_write)
    overtaken = metrics.value("likes_relcache_negative_overtaken_total")
    relation_cache_repair(user_id=user.pk, video_ids=["ra-race"])
    # Counter-example: the v0 did land in the empty key; without the second facts read it would stay.
    assert seen["after_v0"] == {"ra-race": ("UNLIKED", 0)}
    assert cache.relation_cache_read(g, user.pk, ["ra-race"]) == {"ra-race": ("LIKED", 1)}
    assert metrics.value("likes_relcache_negative_overtaken_total") == overtaken + 1
    assert read(user, ["ra-race"]) == {"ra-race": ("LIKED", 1)}


def test_a_stale_negative_hint_cannot_overwrite_a_cached_like(make_user, make_video, author):
    user = make_user()
    make_video("ra-cached", author)
    cmd(user, "ra-cached", "LIKED")
    publish_all()
    project_relcache()
    g = active_gen()
    # the script refuses a v0 under a cached v1 (what a v0 entry computed before the like would try)
    assert cache.relation_cache_write(g, [(user.pk, "ra-cached", "UNLIKED", 0)]) == [0]
    relation_cache_repair(user_id=user.pk, video_ids=["ra-cached"])
    assert cache.relation_cache_read(g, user.pk, ["ra-cached"]) == {"ra-cached": ("LIKED", 1)}


# --- 2. repair hints are coalesced per user -----------------------------------------------------


def test_many_reads_with_misses_for_one_user_send_one_message_and_the_repair_happens(make_user, settings):
    user = make_user()
    pages = [random_ids(10) for _ in range(25)]
    with repair_messages(settings) as queued:
        for page in pages:
            read(user, page)
        messages = queued()
        assert messages == [[user.pk]]  # 25 reads with misses, one message
        assert 0 < cache_redis().pttl(cache.relation_hints_key(user.pk)) <= settings.RELATION_REPAIR_HINT_TTL_S * 1000
        for args in messages:  # the worker runs what was queued (apply: its task_prerun clears the nudge flag)
            relcache_repair_task.apply(args=args)
        every = [v for page in pages for v in page]
        assert cache.relation_cache_read(active_gen(), user.pk, every) == {v: ("UNLIKED", 0) for v in every}
        with CaptureQueriesContext(connections[routing.alias_for_user(user.pk)]) as q:
            read(user, every[:100])
        assert len(q.captured_queries) == 0  # all served from the cache now: no miss, no hint
        assert queued() == messages
        # Counter-example: once the set was taken, the next miss sends a message again (never stranded).
        read(user, random_ids(3))
        assert len(queued()) == 2


def test_hints_of_different_users_are_not_merged(make_user, settings):
    users = [make_user(shard=a) for a in settings.RELATION_SHARD_ALIASES]
    with repair_messages(settings) as queued:
        for _ in range(5):
            for u in users:
                read(u, random_ids(4))
        assert sorted(queued()) == sorted([u.pk] for u in users)


def test_a_repair_run_drains_more_hints_than_one_round_takes(make_user, settings):
    user = make_user()
    many = random_ids(relation_cache.REPAIR_TAKE + 50)
    with repair_messages(settings) as queued:
        for i in range(0, len(many), settings.BATCH_QUERY_MAX_IDS):
            read(user, many[i:i + settings.BATCH_QUERY_MAX_IDS])
        assert queued() == [[user.pk]]
        relcache_repair_task(user.pk)
        assert not cache_redis().exists(cache.relation_hints_key(user.pk))
        assert len(cache.relation_cache_read(active_gen(), user.pk, many)) == len(many)


def test_a_message_naming_its_videos_from_before_the_hint_sets_is_still_served(make_user, make_video, author):
    user = make_user()
    make_video("ra-old", author)
    cmd(user, "ra-old", "LIKED")
    assert relcache_repair_task(user.pk, ["ra-old", "ra-none"]) == 2
    assert cache.relation_cache_read(active_gen(), user.pk, ["ra-old", "ra-none"]) == {
        "ra-old": ("LIKED", 1), "ra-none": ("UNLIKED", 0)}
