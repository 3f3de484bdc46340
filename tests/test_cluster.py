"""The caches and the event log on a real three-node Redis Cluster (issue 16 §2; CCACHE-2, T25, SNAP-2).
These run on the `scaled` topology (`LIKES_TOPOLOGY=scaled`, which the README's test command runs after
`single`); on a single Redis they are skipped, since what they check needs several nodes."""

from __future__ import annotations

import json

import pytest
import redis
from django.conf import settings

from counting import cache as count_cache
from counting.services.count_cache.layers import count_cache_generation_bootstrap
from likes_project.redis_client import cache_redis, is_cluster_url, node_tags, role_nodes, tagged
from relations import cache as rel_cache
from tests.counting.helpers import ALL_DB

pytestmark = [pytest.mark.topology,
              pytest.mark.skipif(not is_cluster_url(settings.REDIS_URL),
                                 reason="needs the cache role on a Redis Cluster (LIKES_TOPOLOGY=scaled)")]


def _node_of(key: str) -> str:
    client = cache_redis()
    return client.nodes_manager.get_node_from_slot(client.keyslot(key)).name


def _keys_by_node(pattern: str) -> dict[str, int]:
    """How many keys matching `pattern` each primary holds (SCAN on each node itself)."""
    client = cache_redis()
    return {node.name: sum(1 for _ in client.get_redis_connection(node).scan_iter(match=pattern, count=1000))
            for node in client.get_primaries()}


def test_the_cluster_has_three_primaries():
    assert len(role_nodes(cache_redis())) == 3


def test_key_slots_are_the_servers_own():
    keys = ["123456789", count_cache.bucket_key(3, "viral", 37), count_cache.view_key(3, "viral"), "foo{{bar}}zap",
            rel_cache.relation_key(1, 42, "v-1"), rel_cache.visibility_key("v-1"), rel_cache.edge_key(7, 8),
            *(count_cache.bucket_key(1, "hot", vb) for vb in range(0, 1024, 37))]
    server = [cache_redis().execute_command("CLUSTER KEYSLOT", k) for k in keys]
    assert server == [count_cache.keyslot(k) for k in keys]


@ALL_DB
def test_a_hot_videos_1024_buckets_spread_over_every_node():
    gen = count_cache_generation_bootstrap().generation
    rows = [("viral-16", vb, 1, 1, 1) for vb in range(1024)]
    assert count_cache.buckets_write(gen, rows) == ["OK"] * 1024  # one pipeline, split by node
    held = _keys_by_node(f"{settings.LIKES_REDIS_PREFIX}:count:g{gen}:{{viral-16|*")
    assert sum(held.values()) == 1024
    assert all(n > 1024 / 3 * 0.7 for n in held.values()), held  # every node takes about a third
    # the counter-example of CCACHE-2: a tag holding only the video puts every bucket on one node
    assert len({_node_of(f"like:count:{{viral-16}}:vb-{vb}") for vb in range(1024)}) == 1


@ALL_DB
def test_reads_of_keys_on_every_node_are_one_pipelined_call():
    """SNAP-2: the visibility and view reads of a page span the nodes; MGET would answer CROSSSLOT."""
    videos = [f"spread-{i}" for i in range(30)]
    assert len({_node_of(rel_cache.visibility_key(v)) for v in videos}) == 3
    rel_cache.visibility_cache_put_many([(v, 1, {"status": "PUBLIC", "author": 1}) for v in videos])
    assert set(rel_cache.visibility_cache_get_many(videos)) == set(videos)
    gen = count_cache_generation_bootstrap().generation
    count_cache.views_write(gen, [(v, i, 1, "2026-12-03T00:00:00Z") for i, v in enumerate(videos)])
    assert {v: d for v, (d, _s, _g) in count_cache.views_read(gen, videos).items()} == {v: i for i, v in
                                                                                       enumerate(videos)}
    with pytest.raises(redis.exceptions.ClusterCrossSlotError):
        cache_redis().get_redis_connection(cache_redis().get_primaries()[0]).execute_command(
            "MGET", *[rel_cache.visibility_key(v) for v in videos])


def test_no_script_call_touches_two_slots():
    """Every Lua call names one key (or keys of one hash tag): a Cluster refuses the others."""
    for source_keys in ([rel_cache.relation_key(1, 5, "v")], [rel_cache.visibility_key("v")],
                        [rel_cache.ratelimit_user_key(5)], [rel_cache.relation_hints_key(5)],
                        [count_cache.bucket_key(1, "v", 3)], [count_cache.view_key(1, "v")],
                        [count_cache.gens_key()], [rel_cache.relation_generations_key()]):
        assert len({count_cache.keyslot(k) for k in source_keys}) == 1
    from likes_project.eventlog import streams

    assert count_cache.keyslot(streams.stream_key(3)) == count_cache.keyslot(streams.trim_key(3))


@ALL_DB
def test_a_node_restarted_empty_is_seen_by_the_loss_sentinels():
    """Each node holds its own sentinel of a generation: losing any one node's data shows. The counter-
    example: the one untagged key of the single-Redis layout survives the loss of the other nodes."""
    tags = node_tags()
    assert len(tags) == 3 and len({_node_of(tagged("x", t)) for t in tags}) == 3
    single_key = f"{settings.LIKES_REDIS_PREFIX}:count:sentinel:g1"
    survivors = 0
    for node in cache_redis().get_primaries():
        rel_cache.relation_generations_mirror({1: "ACTIVE"}, [1])
        count_cache.sentinel_set(1)
        cache_redis().set(single_key, "1")
        assert rel_cache.relation_sentinel_present(1) and count_cache.sentinel_present(1)
        conn = cache_redis().get_redis_connection(node)  # this node's keys only, as a restart would lose them
        pipe = conn.pipeline(transaction=False)
        for key in conn.keys(f"{settings.LIKES_REDIS_PREFIX}:*"):
            pipe.delete(key)  # one key per DEL: a node refuses a DEL of keys in several slots
        pipe.execute()
        assert not rel_cache.relation_sentinel_present(1)
        assert not count_cache.sentinel_present(1)
        survivors += int(cache_redis().exists(single_key))
    assert survivors == 2  # one key would have missed two of the three losses


@ALL_DB
def test_the_write_scripts_refuse_a_generation_the_registry_does_not_name_live():
    rel_cache.relation_generations_mirror({1: "RETIRED", 2: "ACTIVE"}, [])
    assert rel_cache.relation_cache_write(1, [(5, "v", "LIKED", 3)]) == [-1]
    assert rel_cache.relation_cache_write(2, [(5, "v", "LIKED", 3)]) == [1]
    raw = cache_redis().hget(rel_cache.relation_key(2, 5, "v"), "v")
    assert raw == b"LIKED|3|2"
    count_cache.gens_mirror_write({1: "RETIRED", 2: "ACTIVE"})
    assert count_cache.buckets_write(1, [("v", 1, 1, 1, 1)]) == ["GEN_RETIRED"]
    assert count_cache.buckets_write(3, [("v", 1, 1, 1, 1)]) == ["GEN_UNKNOWN"]
    assert count_cache.buckets_write(2, [("v", 1, 1, 1, 1)]) == ["OK"]
    assert json.loads(json.dumps(count_cache.gens_mirror_read())) == {"1": "RETIRED", "2": "ACTIVE"}
