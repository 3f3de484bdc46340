"""The batch read of display counts: one Redis round trip for the page and one query for the misses,
the durable snapshot answering when Redis is down or no generation is active, and the concurrency
limit of that database fallback."""

from __future__ import annotations

import pytest
from django.db import connections
from django.utils import timezone

from counting import cache, selectors
from counting.models import CountCacheGeneration, VideoDisplayCount
from counting.selectors import count_cache_generations_get, display_count_get, display_counts_get
from counting.services.count_cache.layers import count_cache_generation_bootstrap
from likes_project import metrics
from likes_project.errors import DegradedOverloaded

# fresh_process_state is autouse: imported here, every test of this module starts with empty per-process caches.
from tests.counting.helpers import ALL_DB, fresh_process_state  # noqa: F401

pytestmark = pytest.mark.topology

# --- the batch read ----------------------------------------------------------------------------------


def _snapshots(n: int) -> list[str]:
    now = timezone.now()
    ids = [f"v{i:02d}" for i in range(n)]
    VideoDisplayCount.objects.bulk_create(
        VideoDisplayCount(video_id=v, generation=1, manifest_id=1, raw_active_count=i, display_count=i,
                          snapshot_id=100 + i, generated_at=now) for i, v in enumerate(ids))
    return ids


@ALL_DB
def test_display_counts_one_redis_round_trip_and_one_query_for_the_misses(round_trips, django_assert_num_queries):
    gen = count_cache_generation_bootstrap().generation
    ids = _snapshots(20)
    # Redis holds newer views for the first ten (different numbers, so the source shows)
    cache.views_write(gen, [(v, 1000 + i, 200 + i, "2030-01-01T00:00:00Z") for i, v in enumerate(ids[:10])])
    count_cache_generations_get()  # the generation is known before the measured call
    round_trips.clear()
    with django_assert_num_queries(1, connection=connections["default"]):
        got = display_counts_get(video_ids=[*ids, "no-snapshot", ids[0]])
    assert len(round_trips) == 1
    assert list(got) == [*ids, "no-snapshot"]
    assert [(got[v].display_count, got[v].source) for v in ids[:10]] == [(1000 + i, "redis") for i in range(10)]
    assert [(got[v].display_count, got[v].source) for v in ids[10:]] == [(i, "snapshot") for i in range(10, 20)]
    assert (got["no-snapshot"].display_count, got["no-snapshot"].snapshot_at, got["no-snapshot"].source) == (
        0, None, "none")
    # within the L1 TTL the same page costs nothing
    round_trips.clear()
    with django_assert_num_queries(0, connection=connections["default"]):
        again = display_counts_get(video_ids=ids)
    assert len(round_trips) == 0 and {v: again[v] for v in ids} == {v: got[v] for v in ids}


@ALL_DB
def test_display_counts_all_in_redis_touch_no_database(round_trips, django_assert_num_queries):
    gen = count_cache_generation_bootstrap().generation
    ids = _snapshots(5)
    cache.views_write(gen, [(v, 7, 300, "2030-01-01T00:00:00Z") for v in ids])
    count_cache_generations_get()
    round_trips.clear()
    with django_assert_num_queries(0, connection=connections["default"]):
        got = display_counts_get(video_ids=ids)
    assert len(round_trips) == 1 and {c.source for c in got.values()} == {"redis"}
    assert display_count_get(video_id=ids[0]).display_count == 7


@ALL_DB
def test_redis_down_the_durable_snapshot_answers(unreachable_redis):
    count_cache_generation_bootstrap()
    ids = _snapshots(4)
    before = metrics.value("likes_count_cache_fallback_total", reason="redis_error")
    got = display_counts_get(video_ids=ids)
    assert [(got[v].display_count, got[v].source) for v in ids] == [(i, "snapshot") for i in range(4)]
    assert metrics.value("likes_count_cache_fallback_total", reason="redis_error") == before + 4


@ALL_DB
def test_without_an_active_generation_redis_is_skipped(round_trips):
    gen = count_cache_generation_bootstrap().generation
    ids = _snapshots(3)
    cache.views_write(gen, [(v, 999, 900, "2030-01-01T00:00:00Z") for v in ids])
    CountCacheGeneration.objects.filter(generation=gen).update(status="BACKFILLING")
    selectors.reset_generation_cache()
    count_cache_generations_get()
    before = metrics.value("likes_count_cache_fallback_total", reason="no_active_generation")
    round_trips.clear()
    got = display_counts_get(video_ids=ids)
    assert len(round_trips) == 0
    assert [(got[v].display_count, got[v].source) for v in ids] == [(i, "snapshot") for i in range(3)]
    assert metrics.value("likes_count_cache_fallback_total", reason="no_active_generation") == before + 3


@ALL_DB
def test_the_database_fallback_is_concurrency_limited(monkeypatch, settings):
    count_cache_generation_bootstrap()
    ids = _snapshots(2)
    settings.DB_FALLBACK_CONCURRENCY = 1
    settings.COUNT_DB_FALLBACK_WAIT_S = 0
    selectors.SNAPSHOT_FALLBACK.reset()
    with selectors.SNAPSHOT_FALLBACK.slot(), pytest.raises(DegradedOverloaded):  # every slot taken by another read
        display_counts_get(video_ids=ids)
    assert display_counts_get(video_ids=ids)[ids[1]].display_count == 1
    selectors.SNAPSHOT_FALLBACK.reset()
