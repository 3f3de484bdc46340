"""Where the writes go (issue 32 §2; M4, M11): the live count projector's applied events, added up per video, bucket,
user, count partition and relation shard over 1 and 5 minutes; the skew; the suggested bucket move and its
counter-examples (no hot partition, too few writes, buckets already moving); the gauges (bounded: no user ids); and
Redis down costing the figures, never an event. Real PostgreSQL, Redis and the real projector."""

from __future__ import annotations

from collections import Counter

import pytest
from django.conf import settings
from redis.exceptions import RedisError

from counting import hotspots, routing
from counting.observability import hotspot_figures
from likes_project import metrics
from likes_project.observability import gauges_refresh
from relations import routing as relation_routing
from tests.counting.helpers import drain, project_all, publish_all
from tests.factories import redis_unreachable
from tests.metrics_helpers import parse, scrape_text
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]


@pytest.fixture
def traffic(make_user, make_video):
    """`n` users like the hot video, and one of them a cold one; projected. Returns (users, expected writes)."""
    author = make_user()
    make_video("hs-hot", author)
    make_video("hs-cold", author)

    def run(n: int):
        users = [make_user() for _ in range(n)]
        for user in users:
            cmd(user, "hs-hot")
        cmd(users[0], "hs-cold")
        cmd(users[0], "hs-cold", "UNLIKED")  # a write too: the projector applied it
        drain()
        gen = routing.active()
        expected = Counter()
        for user in users:
            expected[gen.routes[routing.virtual_bucket(gen.space, "hs-hot", user.pk)].partition] += 1
        expected[gen.routes[routing.virtual_bucket(gen.space, "hs-cold", users[0].pk)].partition] += 2
        return users, expected

    return run


def test_the_projector_adds_up_the_writes_by_video_bucket_partition_user_and_shard(traffic):
    users, expected = traffic(12)
    for seconds in hotspots.WINDOWS_S:
        w = hotspots.read(seconds)
        assert w.videos == [("hs-hot", 12), ("hs-cold", 2)]
        assert w.partitions == {alias: expected[alias] for alias in settings.COUNT_PARTITION_ALIASES}
        assert w.total == 14 and sum(n for hot in w.buckets.values() for _vb, n in hot) <= 14
        gen = routing.active()
        for alias, hot in w.buckets.items():
            assert all(gen.routes[vb].partition == alias for vb, _n in hot)  # a bucket is counted where it lives
        assert w.users[0] == (users[0].pk, 3)
        assert sum(w.shards.values()) == 14
        assert set(w.shards) <= set(relation_routing.all_aliases())
    replayed = project_all()  # nothing new: a second pass adds nothing (it applies nothing)
    assert replayed and hotspots.read(60).total == 14


def test_a_partition_past_the_share_gets_a_move_of_its_hottest_buckets_to_the_coldest(traffic, settings):
    settings.HOTSPOT_MIN_WRITES = 10
    _users, expected = traffic(40)
    window = hotspots.read(hotspots.SUGGEST_WINDOW_S)
    source = max(expected, key=lambda a: (expected[a], a))
    settings.HOTSPOT_MOVE_SUGGEST_SHARE = window.share(source) - 0.01
    suggestion = hotspots.suggest(window)
    assert suggestion is not None and suggestion.source == source
    assert suggestion.target == "cnt_02" and window.partitions["cnt_02"] == 0  # the empty partition takes them
    gen = routing.active()
    assert all(gen.routes[vb].partition == source for vb in suggestion.buckets)
    hot = dict(window.buckets[source])
    assert suggestion.moved_writes == sum(hot[vb] for vb in suggestion.buckets)
    # Never past even: what moves leaves the source at least as busy as the target.
    assert window.partitions[source] - suggestion.moved_writes >= suggestion.moved_writes
    assert suggestion.buckets_text == ",".join(str(vb) for vb in sorted(suggestion.buckets))

    # The counter-examples: under the share, too few writes, or its buckets already moving.
    settings.HOTSPOT_MOVE_SUGGEST_SHARE = window.share(source) + 0.01
    assert hotspots.suggest(window) is None
    settings.HOTSPOT_MOVE_SUGGEST_SHARE, settings.HOTSPOT_MIN_WRITES = 0.1, window.total + 1
    assert hotspots.suggest(window) is None
    settings.HOTSPOT_MIN_WRITES = 10
    busy = hotspots.suggest(window, busy=[vb for vb, _n in window.buckets[source]])
    assert busy is None or busy.source != source or not set(busy.buckets) & set(hot)
    settings.HOTSPOT_MOVE_MAX_BUCKETS = 1
    assert len(hotspots.suggest(window).buckets) == 1


def test_a_video_hot_in_the_figures_is_refreshed_at_most_every_hot_refresh_s(traffic, make_user, settings):
    """DEG-2, a slower display refresh for a hot video: its dirty marks count projector batches (here one each
    time), so the last minute's figures decide; a cold video is refreshed on every run, and so is the hot one once
    the figures no longer call it hot (the counter-example)."""
    from counting.services.snapshots import display_snapshot_refresh

    settings.COUNT_HOT_WRITES_PER_MINUTE, settings.COUNT_HOT_REFRESH_S = 6, 3600
    traffic(6)  # hs-hot: 6 writes in the minute (hs-cold's like and unlike fold to no bucket change)
    first = display_snapshot_refresh()
    assert (first.videos, first.skipped_hot) == (1, 0)  # never refreshed yet: the first refresh always runs
    fan = make_user()
    cmd(fan, "hs-hot")
    cmd(fan, "hs-cold")
    drain()
    throttled = display_snapshot_refresh()
    assert (throttled.videos, throttled.skipped_hot) == (1, 1)  # hs-cold shown, hs-hot waits for its hour
    settings.COUNT_HOT_WRITES_PER_MINUTE = 100
    cooled = display_snapshot_refresh()
    assert (cooled.videos, cooled.skipped_hot) == (1, 0)  # no longer hot: refreshed at once


def test_the_gauges_have_bounded_labels_and_no_user_ids(traffic, client, settings):
    settings.HOTSPOT_MIN_WRITES = 10**9  # no suggestion
    _users, expected = traffic(5)
    gauges_refresh()
    samples = parse(scrape_text(client))

    def family(name):
        return {frozenset(labels): v for (n, labels), v in samples.items() if n == name}

    videos = family("likes_hotspot_video_writes")
    assert videos[frozenset({("window", "60s"), ("video", "hs-hot")})] == 5
    shares = family("likes_partition_write_share")
    assert sum(v for labels, v in shares.items() if ("window", "300s") in labels) == pytest.approx(1.0)
    assert family("likes_partition_skew_ratio")[frozenset({("window", "60s")})] == pytest.approx(
        max(expected.values()) / (sum(expected.values()) / len(settings.COUNT_PARTITION_ALIASES)))
    ranks = family("likes_hotspot_user_writes")
    assert ranks[frozenset({("window", "60s"), ("rank", "1")})] == 3
    assert all(dict(labels).keys() == {"window", "rank"} for labels in ranks)  # a rank, never a user id
    assert family("likes_hotspot_move_suggested") == {frozenset(): 0.0}
    assert family("likes_convergence_window_seconds")[frozenset({("consumer", "count")})] == (
        settings.CONVERGENCE_WINDOW_S["count"])
    assert len(family("likes_hotspot_bucket_writes")) <= hotspots.TOP_K * len(settings.COUNT_PARTITION_ALIASES) * 2
    _windows, suggestion = hotspot_figures()
    assert suggestion is None


def test_redis_down_costs_the_figures_never_an_event(traffic, make_user, settings):
    traffic(3)
    before = metrics.value("likes_hotspot_errors_total", step="record")
    user = make_user()
    cmd(user, "hs-hot")
    publish_all()
    with redis_unreachable(settings, streams=False):
        reports = project_all()
        with pytest.raises(RedisError):
            hotspots.read(60)
    assert all(r.status == "ok" for r in reports), reports
    assert metrics.value("likes_hotspot_errors_total", step="record") == before + 1
    assert dict(hotspots.read(60).videos)["hs-hot"] == 3  # the event was applied; only its figure is missing
