"""The Redis count cache's keys and its bucket write script: the key layout and Redis Cluster slot
spread (CCACHE-2), the bucket-version/route-epoch rule of the write script (CCACHE-3 step 3) and the
registry of generations it checks."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import timezone
from redis.exceptions import ResponseError

from counting import cache
from counting import routing as count_routing
from counting.models import VideoLikeCountVbucket
from counting.services.count_cache.layers import count_cache_buckets_refresh, count_cache_generation_bootstrap
from likes_project.redis_client import cache_redis

# fresh_process_state is autouse: imported here, every test of this module starts with empty per-process caches.
from tests.counting.helpers import ALL_DB, fresh_process_state  # noqa: F401

pytestmark = pytest.mark.topology

# --- CCACHE-2: key layout and Redis Cluster slots --------------------------------------------------


def test_keyslot_matches_redis_cluster():
    assert cache.crc16_xmodem(b"123456789") == 0x31C3
    assert cache.keyslot("123456789") == 12739  # the reference vector of the Redis Cluster spec
    # hash-tag rules of the spec: the first non-empty {...} is hashed, anything else is the whole key
    assert cache.keyslot("{user1000}.following") == cache.keyslot("{user1000}.followers")
    assert cache.hash_tag("foo{}{bar}") == b"foo{}{bar}"
    assert cache.hash_tag("foo{{bar}}zap") == b"{bar"
    assert cache.hash_tag("foo{bar}{zap}") == b"bar"
    keys = ["123456789", cache.bucket_key(3, "viral", 37), cache.view_key(3, "viral"), "foo{{bar}}zap"]
    try:
        server = [cache_redis().execute_command("CLUSTER KEYSLOT", k) for k in keys]
    except ResponseError:
        server = None  # not a cluster node: the reference vector above is the check
    if server is not None:
        assert server == [cache.keyslot(k) for k in keys]


def test_a_hot_videos_buckets_spread_over_many_slots():
    prefix = settings.LIKES_REDIS_PREFIX  # likes-test, or likes-test-gw0 under pytest-xdist
    assert cache.bucket_key(7, "viral", 37) == f"{prefix}:count:g7:{{viral|vb-37}}"
    assert cache.view_key(7, "viral") == f"{prefix}:count:view:g7:{{viral}}"
    slots = {cache.keyslot(cache.bucket_key(7, "viral", vb)) for vb in range(1024)}
    assert len(slots) > 500
    # the counter-example of CCACHE-2: a tag holding only the video puts every bucket on one slot
    wrong = {cache.keyslot(f"like:count:{{viral}}:vb-{vb}") for vb in range(1024)}
    assert len(wrong) == 1


# --- the bucket write script (CCACHE-3 step 3) -----------------------------------------------------------


@ALL_DB
def test_bucket_writes_keep_the_highest_route_epoch_and_bucket_version():
    gen = count_cache_generation_bootstrap().generation
    key = cache.bucket_key(gen, "vid", 7)
    assert cache.buckets_write(gen, [("vid", 7, 5, 3, 1)]) == ["OK"]
    assert cache.buckets_write(gen, [("vid", 7, 4, 2, 1)]) == ["STALE_VERSION"]  # a lower version loses
    assert cache_redis().get(key) == f"5|3|1|{gen}".encode()
    assert cache.buckets_write(gen, [("vid", 7, 5, 3, 1)]) == ["OK"]  # the same version again is harmless
    assert cache.buckets_write(gen, [("vid", 7, 1, 1, 2)]) == ["OK"]  # a newer route epoch wins
    assert cache.buckets_write(gen, [("vid", 7, 9, 9, 1)]) == ["STALE_EPOCH"]  # an old-route task loses
    assert cache.buckets_read(gen, [("vid", 7)]) == {("vid", 7): (1, 1, 2)}
    assert 0 < cache_redis().pttl(key) <= 1.2 * cache.BUCKET_TTL_S * 1000
    assert cache.buckets_write(gen + 5, [("vid", 7, 1, 1, 2)]) == ["GEN_UNKNOWN"]
    assert not cache_redis().exists(cache.bucket_key(gen + 5, "vid", 7))


@ALL_DB
def test_a_lost_registry_is_restored_from_the_durable_table(make_user):
    gen = count_cache_generation_bootstrap().generation
    routes = count_routing.active()
    user = make_user()
    vb = count_routing.virtual_bucket(routes.space, "vid-r", user.pk)
    VideoLikeCountVbucket.objects.using(routes.routes[vb].partition).create(
        generation=routes.generation, video_id="vid-r", virtual_bucket=vb, bucket_space_version=routes.space.version,
        active_count=3, bucket_version=4, updated_at=timezone.now())
    cache_redis().delete(cache.gens_key())
    assert cache.buckets_write(gen, [("vid-r", vb, 3, 4, 1)]) == ["NO_REGISTRY"]  # nothing written blind
    report = count_cache_buckets_refresh(video_ids=["vid-r"])
    assert report.verdicts == {gen: {"OK": 1}}
    assert cache.gens_mirror_read() == {gen: "ACTIVE"}
    assert cache.buckets_read(gen, [("vid-r", vb)]) == {("vid-r", vb): (3, 4, routes.routes[vb].epoch)}
