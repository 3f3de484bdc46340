"""Issue 15 §1, §4 (D87): a request's independent Redis reads share one pipelined round trip
(`likes_project.redis_client.run_flows`), and the edges of a video's author ride with its snapshot once
the process has seen the author. Real Redis, real shards; round trips are counted on the redis-py client."""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest
import redis
import redis.client
import redis.cluster
from django.conf import settings

from counting import selectors as count_selectors
from counting.tasks import display_snapshot_task
from likes_project.redis_client import Read, run_flows
from relations import selectors
from relations.errors import BlockedByAuthor
from relations.services import commands
from relations.services.relation_cache import relation_cache_repair
from relations.services.social import block_set
from tests.counting.helpers import drain
from tests.factories import TEST_ACTOR, make_video, redis_unreachable
from tests.relations.helpers import cmd as like

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]
P = settings.LIKES_REDIS_PREFIX  # this test process's keys (tests/conftest.py deletes them before each test)


@contextlib.contextmanager
def round_trips():
    """Count the cache role's round trips: pipeline executions and direct commands (on a Cluster, a
    pipeline's execution sends each node it touches its part at once: one round trip, side by side)."""
    seen: Counter = Counter()
    patched = [(redis.client.Pipeline, "execute", "pipelines"),
               (redis.cluster.ClusterPipeline, "execute", "pipelines"),
               (redis.Redis, "execute_command", "commands"),
               (redis.cluster.RedisCluster, "execute_command", "commands")]
    originals = [(cls, name, cls.__dict__[name]) for cls, name, _kind in patched]

    def spy(original, kind):
        def counted(self, *args, **kwargs):
            seen[kind] += 1
            return original(self, *args, **kwargs)
        return counted

    for (cls, name, kind), (_c, _n, original) in zip(patched, originals, strict=True):
        setattr(cls, name, spy(original, kind))
    try:
        yield seen
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def _feed(make_user, author, n=20):
    me = make_user()
    ids = [f"rr-{i:02d}" for i in range(n)]
    for v in ids:
        make_video(v, author)
    for v in ids[::3]:
        like(me, v)
    drain()
    display_snapshot_task()
    relation_cache_repair(user_id=me.pk, video_ids=ids)
    return me, ids


def _answer(me, ids):
    visible, rels, counts = count_selectors.feed_page_read(user_id=me.pk, video_ids=ids, min_versions={})
    return {v: (visible[v], rels[v].state, rels[v].relation_version,
                counts[v].display_count if v in counts else None) for v in ids}


def test_a_warm_feed_page_costs_one_round_trip(settings, make_user, author):
    me, ids = _feed(make_user, author)
    first = _answer(me, ids)  # fills the visibility and edge caches and the process's author map
    count_selectors.display_l1().clear()  # the count views are read too, not served from the L1
    with round_trips() as seen:
        again = _answer(me, ids)
    assert again == first
    assert again[ids[0]] == (True, "LIKED", 1, 1) and again[ids[1]] == (True, "UNLIKED", 0, 0)
    assert seen == {"pipelines": 1}, seen
    # Without the author guesses (AUTHOR_HINTS_MAX=0) the edges wait for the snapshots: a second round.
    settings.AUTHOR_HINTS_MAX = 0
    count_selectors.display_l1().clear()
    with round_trips() as seen:
        assert _answer(me, ids) == first
    assert seen == {"pipelines": 2}, seen
    settings.AUTHOR_HINTS_MAX = 100_000
    # The same reads made one after another, as the view made them before flows: a round trip each.
    with round_trips() as seen:
        selectors.videos_visible_to(user_id=me.pk, video_ids=ids)
        selectors.relation_states_get(user_id=me.pk, video_ids=ids)
        count_selectors.display_l1().clear()
        count_selectors.display_counts_get(video_ids=ids)
    assert sum(seen.values()) == 3, seen


def test_a_wrong_author_guess_costs_a_round_trip_never_a_wrong_answer(make_user, author):
    """The process remembers the video's old author; the video now belongs to someone who blocked the
    caller. The guessed edges are of the wrong pair: the flow must read the right pair's edges."""
    me, other = make_user(), make_user()
    make_video("rr-moved", author)
    assert selectors.videos_visible_to(user_id=me.pk, video_ids=["rr-moved"]) == {"rr-moved": True}
    block_set(blocker_id=other.pk, blocked_id=me.pk, present=True, actor=TEST_ACTOR)
    make_video("rr-moved", other, version=2)  # the video service moved it to `other`
    assert selectors._AUTHORS["rr-moved"] == author.pk  # the stale guess is still in this process
    with round_trips() as seen:
        assert selectors.videos_visible_to(user_id=me.pk, video_ids=["rr-moved"]) == {"rr-moved": False}
    # The snapshot with the guessed (wrong) pair's edges; the right pair's edges (not cached yet); their fill.
    assert seen["pipelines"] == 3, seen
    with pytest.raises(BlockedByAuthor):
        commands.relation_set_state(user_id=me.pk, video_id="rr-moved", desired_state="LIKED",
                                    operation_id="rr-op-1")


def test_a_failed_round_falls_back_to_the_database_in_every_flow(settings, make_user, author):
    me, ids = _feed(make_user, author, n=6)
    warm = _answer(me, ids)
    with redis_unreachable(settings, streams=False):
        assert _answer(me, ids) == warm


def test_run_flows_sends_each_round_once_and_a_read_without_commands_costs_none():
    from likes_project.redis_client import cache_redis

    cache_redis().set(f"{P}:rr:a", "1")
    calls: list[str] = []

    def flow(name: str, keys: list[str]):
        got = yield Read(len(keys), lambda pipe: [pipe.get(k) for k in keys], lambda replies: replies)
        calls.append(name)
        return name, got

    with round_trips() as seen:
        out = run_flows(flow("one", [f"{P}:rr:a"]), flow("none", []), flow("two", [f"{P}:rr:b"]))
    assert out == [("one", [b"1"]), ("none", []), ("two", [None])]
    assert seen == {"pipelines": 1}
    with round_trips() as seen:
        assert run_flows(flow("empty", [])) == [("empty", [])]
    assert seen == {}


def test_a_round_error_is_thrown_into_the_flows_that_asked(settings):
    handled: list[str] = []

    def flow(name: str, size: int):
        try:
            got = yield Read(size, lambda pipe: [pipe.get(f"{P}:rr:x") for _ in range(size)], list)
        except redis.RedisError:
            handled.append(name)
            return "fallback"
        return got

    with redis_unreachable(settings, streams=False):
        assert run_flows(flow("asked", 1), flow("idle", 0)) == ["fallback", []]
    assert handled == ["asked"]


_INCR = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


@pytest.mark.exclusive  # SCRIPT FLUSH empties the script cache every test process uses
def test_lua_calls_take_one_round_trip_and_a_lost_script_runs_once():
    """`scripts_run`: EVALSHA in one pipeline (redis-py's own pipeline asks SCRIPT EXISTS first, a second
    round trip). After SCRIPT FLUSH the calls answer NOSCRIPT without running; they are sent again once."""
    from likes_project.redis_client import cache_redis, scripts_run

    client = cache_redis()
    # One hash tag: on the Cluster both keys are on one node, as one pipeline there is what this test counts
    # (keys on two nodes are two pipelines, and which node a key lands on depends on the worker's prefix).
    N1, N2 = f"{P}:rr:{{rr}}:n1", f"{P}:rr:{{rr}}:n2"
    client.delete(N1, N2)
    scripts_run([(_INCR, [N1], [1])])  # loaded
    with round_trips() as seen:
        assert scripts_run([(_INCR, [N1], [1]), (_INCR, [N2], [5])]) == [2, 5]
    assert seen == {"pipelines": 1}, seen
    client.script_flush()
    with round_trips() as seen:
        assert scripts_run([(_INCR, [N1], [1]), (_INCR, [N2], [5])]) == [3, 10]
    assert seen["pipelines"] == 2, seen  # NOSCRIPT, then the load and the calls sent again: each ran once
    assert int(client.get(N1)) == 3 and int(client.get(N2)) == 10
