"""The relation cache against real Redis and real shards: RCACHE-3 … RCACHE-8 and test-matrix rows T6
and T7, with counter-examples."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_partition
from likes_project.redis_client import cache_redis
from relations import cache, routing, selectors
from relations.models import LikeRelationCacheProjection, RelationCacheGeneration
from relations.services.relation_cache import (
    RelationCacheProjector,
    floors_advance,
    relation_cache_check_loss,
    relation_cache_repair,
)
from relations.services.relation_cache_rebuild import _sample_verify, relation_cache_rebuild
from tests.counting.helpers import envelopes, mark_all_sent, publish_all
from tests.factories import grant, redis_unreachable, run_jobs
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def project_relcache():
    return [consume_partition(RelationCacheProjector(), partition=p, ignore_backoff=True)
            for p in streams.all_partitions()]


def flush_cache_redis(settings):
    client = cache_redis()
    keys = list(client.scan_iter(match=f"{settings.LIKES_REDIS_PREFIX}:rel:*", count=1000))
    if keys:
        client.delete(*keys)


def active_gen() -> int:
    return RelationCacheGeneration.objects.get(status="ACTIVE").generation


def run_and_cache(user, video_id: str, *states: str) -> int:
    """Commit the commands, publish them and project them into the relation cache; returns the active
    cache generation."""
    for desired in states:
        cmd(user, video_id, desired)
    publish_all()
    project_relcache()
    return active_gen()


def read(user, video_ids, mins=None):
    selectors.reset_generation_cache()
    return selectors.relation_states_get(user_id=user.pk, video_ids=video_ids, min_versions=mins)


def test_projector_writes_the_floor_then_redis(make_user, make_video, author):
    user = make_user()
    make_video("rc-1", author)
    g = run_and_cache(user, "rc-1", "LIKED")
    floor = LikeRelationCacheProjection.objects.using(routing.alias_for_user(user.pk)).get(
        cache_generation=g, user_id=user.pk, video_id="rc-1")
    assert (floor.state, floor.relation_version) == ("LIKED", 1)
    assert cache.relation_cache_read(g, user.pk, ["rc-1"]) == {"rc-1": ("LIKED", 1)}


# spec §7 drill 5: relation Redis flushed, a low-version backfill.
def test_t6_after_a_redis_flush_a_late_v1_cannot_overwrite_v2(make_user, make_video, author, settings):
    user = make_user()
    make_video("rc-6", author)
    run_and_cache(user, "rc-6", "LIKED", "UNLIKED")
    v1, _v2 = envelopes(user.pk, "rc-6")
    flush_cache_redis(settings)  # Redis loses everything, the durable floor does not
    relation_cache_check_loss()  # the loss is detected and the cache rebuilt into G+1
    streams.publish_pipeline([v1])  # the late, lower-version event arrives
    project_relcache()
    g = active_gen()
    assert cache.relation_cache_read(g, user.pk, ["rc-6"]) == {"rc-6": ("UNLIKED", 2)}
    assert read(user, ["rc-6"])["rc-6"].as_dict() == {"state": "UNLIKED", "relationVersion": 2}


def test_t6_counter_example_without_the_floor_redis_alone_would_take_v1(make_user, make_video, author, settings):
    # Why the durable floor exists: after a flush, an empty key accepts any version.
    user = make_user()
    make_video("rc-6b", author)
    g = active_gen()
    flush_cache_redis(settings)
    from relations.services.relation_cache import cache_generations_mirror

    cache_generations_mirror()
    assert cache.relation_cache_write(g, [(user.pk, "rc-6b", "LIKED", 1)]) == [1]  # an empty key takes v1


# spec §7 drill 5: an old-generation backfill.
def test_t7_an_old_generation_task_arriving_after_the_rebuild_cannot_write(make_user, make_video, author):
    user = make_user()
    make_video("rc-7", author)
    old = run_and_cache(user, "rc-7", "LIKED")
    report = relation_cache_rebuild()
    assert report.status == "ACTIVE" and report.generation == old + 1
    assert RelationCacheGeneration.objects.get(generation=old).status == "RETIRED"
    # a task created under the old generation writes late: refused by the script
    assert cache.relation_cache_write(old, [(user.pk, "rc-7", "UNLIKED", 99)]) == [-1]
    assert cache.relation_cache_read(old, user.pk, ["rc-7"]).get("rc-7") != ("UNLIKED", 99)
    assert read(user, ["rc-7"])["rc-7"].as_dict() == {"state": "LIKED", "relationVersion": 1}


def test_rcache5_a_stale_read_hint_after_a_newer_event_changes_nothing(make_user, make_video, author):
    user = make_user()
    make_video("rc-5", author)
    # A reader sees v1 in the database (a miss) ... an unlike commits v2 and its event reaches the cache.
    g = run_and_cache(user, "rc-5", "LIKED", "UNLIKED")
    alias = routing.alias_for_user(user.pk)
    floors = floors_advance(alias=alias, generations=[g], facts=[(user.pk, "rc-5", "LIKED", 1)])  # the late hint
    assert floors[(g, user.pk, "rc-5")] == ("UNLIKED", 2)
    relation_cache_repair(user_id=user.pk, video_ids=["rc-5"])
    assert cache.relation_cache_read(g, user.pk, ["rc-5"]) == {"rc-5": ("UNLIKED", 2)}


def test_an_evicted_key_is_never_backfilled_by_a_reader(make_user, make_video, author):
    user = make_user()
    make_video("rc-ev", author)
    g = run_and_cache(user, "rc-ev", "LIKED")
    cache_redis().delete(cache.relation_key(g, user.pk, "rc-ev"))  # evicted
    assert read(user, ["rc-ev"])["rc-ev"].as_dict() == {"state": "LIKED", "relationVersion": 1}
    assert not cache_redis().exists(cache.relation_key(g, user.pk, "rc-ev"))  # the reader wrote nothing
    relation_cache_repair(user_id=user.pk, video_ids=["rc-ev"])  # the hint is served by the projection side
    assert cache.relation_cache_read(g, user.pk, ["rc-ev"]) == {"rc-ev": ("LIKED", 1)}


def test_read_your_writes_with_min_relation_version(make_user, make_video, author):
    user = make_user()
    make_video("rc-ryw", author)
    run_and_cache(user, "rc-ryw", "LIKED")
    second = cmd(user, "rc-ryw", "UNLIKED")  # committed; its event has not reached the cache yet
    assert read(user, ["rc-ryw"])["rc-ryw"].as_dict() == {"state": "LIKED", "relationVersion": 1}  # cached, older
    fresh = read(user, ["rc-ryw"], {"rc-ryw": second.result.relation_version})["rc-ryw"]
    assert fresh.as_dict() == {"state": "UNLIKED", "relationVersion": 2}


def test_cold_user_feed_costs_one_query_per_shard_then_is_served_from_cache(make_user, make_video, author):
    user = make_user()
    videos = [make_video(f"feed-{i}", author).video_id for i in range(20)]
    for v in videos[:7]:
        cmd(user, v, "LIKED")
    alias = routing.alias_for_user(user.pk)
    with CaptureQueriesContext(connections[alias]) as cold:
        first = read(user, videos)
    assert len(cold.captured_queries) == 1
    relation_cache_repair(user_id=user.pk, video_ids=videos)  # what the hint does, asynchronously
    with CaptureQueriesContext(connections[alias]) as warm:
        second = read(user, videos)
    assert len(warm.captured_queries) == 0
    assert first == second
    assert [second[v].state for v in videos] == ["LIKED"] * 7 + ["UNLIKED"] * 13
    # never-liked videos are cached explicitly as UNLIKED v0, so they do not miss every time
    assert cache.relation_cache_read(active_gen(), user.pk, [videos[-1]]) == {videos[-1]: ("UNLIKED", 0)}


def test_reads_bypass_redis_while_a_generation_is_rebuilding(make_user, make_video, author):
    user = make_user()
    make_video("rc-by", author)
    g = active_gen()
    cache.relation_cache_write(g, [(user.pk, "rc-by", "LIKED", 5)])  # a bogus cached value
    assert read(user, ["rc-by"])["rc-by"].relation_version == 5  # served from Redis
    RelationCacheGeneration.objects.create(generation=g + 1, status="BACKFILLING")
    assert read(user, ["rc-by"])["rc-by"].as_dict() == {"state": "UNLIKED", "relationVersion": 0}  # facts


def test_a_failed_rebuild_is_marked_failed_and_the_old_generation_keeps_serving(make_user, make_video, author):
    user = make_user()
    make_video("rc-f", author)
    cmd(user, "rc-f", "LIKED")
    old = active_gen()
    report = relation_cache_rebuild(fail_after_scan=True)
    assert report.status == "FAILED"
    assert RelationCacheGeneration.objects.get(generation=report.generation).status == "FAILED"
    assert active_gen() == old
    selectors.reset_generation_cache()
    assert selectors.cache_generation_for_reads() == old
    assert read(user, ["rc-f"])["rc-f"].state == "LIKED"


def test_flush_detection_rebuilds_from_the_facts(make_user, make_video, author, settings):
    users = [make_user() for _ in range(5)]
    make_video("rc-fl", author)
    for u in users[:3]:
        cmd(u, "rc-fl", "LIKED")
    assert relation_cache_check_loss() == "ok"
    flush_cache_redis(settings)
    assert relation_cache_check_loss() == "rebuild_started"  # a job: the beat task never runs the rebuild itself
    run_jobs()
    g = active_gen()
    for u in users:
        expected = ("LIKED", 1) if u in users[:3] else None
        assert cache.relation_cache_read(g, u.pk, ["rc-fl"]).get("rc-fl") == expected
    assert relation_cache_check_loss() == "ok"


def test_the_script_refuses_a_lower_version_within_a_generation(make_user):
    user = make_user()
    g = active_gen()
    assert cache.relation_cache_write(g, [(user.pk, "v", "UNLIKED", 4)]) == [1]
    assert cache.relation_cache_write(g, [(user.pk, "v", "LIKED", 3)]) == [0]
    assert cache.relation_cache_read(g, user.pk, ["v"]) == {"v": ("UNLIKED", 4)}


def test_relation_keys_are_tagged_by_user_and_bucket_with_a_ttl(make_user):
    user = make_user()
    g = active_gen()
    key = cache.relation_key(g, user.pk, "some-video")
    assert key.endswith(f"{{{user.pk}|{cache.relation_bucket('some-video')}}}")
    assert f":g{g}:" in key
    assert key[key.index("{") + 1:key.index("}")] == f"{user.pk}|{cache.relation_bucket('some-video')}"
    cache.relation_cache_write(g, [(user.pk, "some-video", "LIKED", 1)])
    assert cache_redis().pttl(key) > 0
    assert len({cache.relation_bucket(f"v{i}") for i in range(200)}) == cache.RELATION_CACHE_BUCKETS


def test_redis_down_reads_stay_correct(make_user, make_video, author, settings):
    user = make_user()
    make_video("rc-down", author)
    cmd(user, "rc-down", "LIKED")
    with redis_unreachable(settings, streams=False):
        assert read(user, ["rc-down", "other"]) == {
            "rc-down": selectors.RelationView("LIKED", 1), "other": selectors.UNLIKED_V0}


def test_events_reordered_in_the_stream_still_leave_the_highest_version(make_user, make_video, author):
    user = make_user()
    make_video("rc-ro", author)
    for desired in ["LIKED", "UNLIKED", "LIKED"]:
        cmd(user, "rc-ro", desired)
    events = envelopes(user.pk, "rc-ro")
    mark_all_sent()
    streams.publish_pipeline([events[2], events[0], events[1], events[0]])
    project_relcache()
    assert cache.relation_cache_read(active_gen(), user.pk, ["rc-ro"]) == {"rc-ro": ("LIKED", 3)}


def test_the_rebuild_is_an_audited_admin_action_too(admin_client, make_user):
    from likes_project.audit.models import AuditRecord

    old = active_gen()
    resp = admin_client.post("/admin/relations/relationcachegeneration/", {
        "action": "rebuild_relation_cache", "_selected_action": [str(old)]}, follow=True)
    assert resp.status_code == 200 and "Started job" in resp.content.decode()
    assert active_gen() == old  # the request only started the job ...
    run_jobs()  # ... the workers run it
    assert active_gen() == old + 1
    record = AuditRecord.objects.get(action="relcache.rebuild_activate")
    assert (record.channel, record.outcome, record.target_id) == ("admin", "active", str(old + 1))


def test_a_staff_user_without_the_permission_cannot_rebuild(client, staff):
    grant(staff, "relations.view_relationcachegeneration")
    client.force_login(staff)
    old = active_gen()
    resp = client.post("/admin/relations/relationcachegeneration/", {
        "action": "rebuild_relation_cache", "_selected_action": [str(old)]})
    assert active_gen() == old
    assert resp.status_code in (200, 302, 403)


def test_the_rebuild_command_shows_progress_and_audits(make_user, make_video, author):
    import io

    from django.core.management import call_command

    from likes_project.audit.models import AuditRecord

    make_video("rc-cmd", author)
    cmd(make_user(), "rc-cmd", "LIKED")
    out, err = io.StringIO(), io.StringIO()
    call_command("rebuild_relation_cache", stdout=out, stderr=err)
    assert "relations scanned" in err.getvalue() and "ACTIVE" in out.getvalue()
    assert AuditRecord.objects.filter(action="relcache.rebuild_activate", channel="cli").count() == 1


def test_the_sampler_finds_a_stale_cached_relation_and_repairs_it(make_user, make_video, author):
    from relations.services.relation_cache import relation_cache_sample_check

    user = make_user()
    make_video("rc-dirty", author)
    cmd(user, "rc-dirty", "LIKED")
    cmd(user, "rc-dirty", "UNLIKED")
    g = active_gen()
    cache_redis().delete(cache.relation_key(g, user.pk, "rc-dirty"))
    cache.relation_cache_write(g, [(user.pk, "rc-dirty", "LIKED", 1)])  # dirty: below the fact v2
    report = relation_cache_sample_check(per_shard=1000)
    assert (report.stale, report.repaired) == (1, 1)
    assert cache.relation_cache_read(g, user.pk, ["rc-dirty"]) == {"rc-dirty": ("UNLIKED", 2)}
    again = relation_cache_sample_check(per_shard=1000)
    assert again.stale == 0 and again.sampled >= 1


def test_the_rebuild_sample_waits_for_a_fact_committed_while_it_checks(make_user, make_video, author, settings):
    """D147: a relation the cache lacks at the first look because the projector had not got to it yet (live
    traffic) passes once the projector brings it, within RELATION_CACHE_VERIFY_SETTLE_S; one that never comes is
    a mismatch at the end of the wait (the counter-example); a settle of 0 fails even the one the projector
    brings (the protection removed)."""
    user = make_user()
    make_video("rc-settle", author)
    g = run_and_cache(user, "rc-settle", "LIKED")
    settings.RELATION_CACHE_SAMPLE_SIZE = 400  # every relation of the test is sampled
    assert _sample_verify(g) == (1, 0)
    cmd(user, "rc-settle", "UNLIKED")  # committed, not projected: the cache holds version 1 of 2
    settings.RELATION_CACHE_VERIFY_SETTLE_S = 0.0
    assert _sample_verify(g) == (1, 1)
    settings.RELATION_CACHE_VERIFY_SETTLE_S = 0.3
    assert _sample_verify(g) == (1, 1)  # nothing brings it: a mismatch after the wait
    settings.RELATION_CACHE_VERIFY_SETTLE_S = 30.0
    projector = threading.Timer(0.3, lambda: (publish_all(), project_relcache(), connections.close_all()))
    projector.start()
    try:
        assert _sample_verify(g) == (1, 0)
    finally:
        projector.join()
