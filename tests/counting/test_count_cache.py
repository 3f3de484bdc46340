"""The Redis count cache (CCACHE-1 … CCACHE-4) and the in-process L1 of display counts: test-matrix
row T16 (a count Redis flush rebuilt from the durable vbuckets without touching them), T7 for counts
(a late old-generation task cannot write), the bucket-version/route-epoch rule, the manifest pin,
Redis Cluster slot spread, L1 single-flight/bounds/TTL and the one-round-trip batch read."""

from __future__ import annotations

import io
import queue
import threading

import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections
from django.utils import timezone
from redis.exceptions import ResponseError

from counting import cache, selectors
from counting import models as count_models
from counting import routing as count_routing
from counting.models import (
    CountCacheGeneration,
    CountProjectionGeneration,
    CountRouteManifest,
    CountRouteManifestItem,
    VideoDisplayCount,
    VideoLikeCountVbucket,
)
from counting.selectors import count_cache_generations_get, display_count_get, display_counts_get
from counting.services.count_cache import layers as count_cache
from counting.services.count_cache.layers import count_cache_buckets_refresh, count_cache_generation_bootstrap
from counting.services.count_cache.rebuild import REBUILD_LEASE, CountCacheRebuildRunning, count_cache_rebuild
from counting.services.snapshots import display_snapshot_refresh
from counting.tasks import count_cache_refresh_buckets_task
from likes_project import l1cache, metrics
from likes_project.audit.models import AuditRecord
from likes_project.errors import DegradedOverloaded
from likes_project.eventlog.leases import lease_acquire
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.l1cache import L1Cache
from likes_project.redis_client import cache_redis
from tests.counting.helpers import count_partition_of, drain, liked_facts
from tests.factories import TEST_ACTOR, grant, run_jobs
from tests.relations.helpers import cmd as like

ALL_DB = pytest.mark.django_db(databases="__all__")
# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
TX_DB = pytest.mark.django_db(databases="__all__", transaction=True)


@pytest.fixture(autouse=True)
def fresh_process_state():
    """Per-process caches start empty: the count-cache generation cache and every L1."""
    selectors.reset_generation_cache()
    l1cache.clear_all()
    yield
    selectors.reset_generation_cache()
    l1cache.clear_all()


@pytest.fixture
def strict_verify(settings):
    # Verify every sampled bucket strictly, even one written a moment ago (the rebuild follows drain()).
    settings.COUNT_CACHE_VERIFY_IN_FLIGHT_S = 0


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# --- helpers -------------------------------------------------------------------------------------


def count_keys(pattern: str | None = None) -> list[bytes]:
    return list(cache_redis().scan_iter(match=pattern or cache.key_pattern(), count=1000))


def flush_count_cache() -> int:
    keys = count_keys()
    if keys:
        cache_redis().delete(*keys)
    return len(keys)


def durable_state() -> dict:
    """Every durable row the count projection owns, in primary-key order."""
    m = count_models
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        for model in (m.LikeCountProjection, m.VideoLikeCountVbucket, m.CountEventReceipt, m.DirtyVideo,
                      m.CountRouteFence, m.CountConsumerFence):
            out[(alias, model.__name__)] = list(model.objects.using(alias).order_by("pk").values())
    for model in (m.VideoDisplayCount, ConsumerCheckpoint, m.CountProjectionGeneration, m.CountRouteManifest,
                  m.CountRouteManifestItem, m.CountBucketRoute):
        out[("default", model.__name__)] = list(model.objects.order_by("pk").values())
    return out


def routed_rows(video_id: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(video, bucket) -> (count, version, epoch) of the durable rows the active manifest routes."""
    gen = count_routing.active()
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        for vb, c, ver in VideoLikeCountVbucket.objects.using(alias).filter(
                generation=gen.generation, video_id=video_id, virtual_bucket__in=gen.buckets_on(alias)
        ).values_list("virtual_bucket", "active_count", "bucket_version"):
            out[(video_id, vb)] = (c, ver, gen.routes[vb].epoch)
    return out


def seed_likes(make_user, make_video) -> dict[str, int]:
    """Three videos, the hot one liked from both count partitions; projected and snapshotted."""
    author = make_user()
    for video_id in ("hot", "v2", "v3"):
        make_video(video_id, author)
    likers, partitions = [], set()
    while len(likers) < 12 or len(partitions) < 2:
        assert len(likers) < 60, "could not spread the likers over both count partitions"
        user = make_user()
        like(user, "hot")
        likers.append(user)
        partitions.add(count_partition_of(user, "hot"))
    for user in likers[:3]:
        like(user, "v2")
    like(likers[0], "v2", "UNLIKED")
    like(likers[1], "v3")
    drain()
    display_snapshot_refresh()
    expected = {"hot": len(likers), "v2": 2, "v3": 1}
    assert {v: liked_facts(v) for v in expected} == expected
    return expected


def statuses() -> dict[int, str]:
    return dict(CountCacheGeneration.objects.values_list("generation", "status"))


def new_active_manifest() -> int:
    """A sealed copy of the active manifest, made the active pointer (what a route cutover's CAS does)."""
    gen = CountProjectionGeneration.objects.get(status="ACTIVE")
    old = CountRouteManifest.objects.get(pk=gen.active_manifest_id)
    new = CountRouteManifest.objects.create(bucket_space_version=old.bucket_space_version, status="SEALED",
                                            row_count=old.row_count, checksum=old.checksum, sealed_at=timezone.now())
    CountRouteManifestItem.objects.bulk_create(
        CountRouteManifestItem(manifest_id=new.pk, virtual_bucket=i.virtual_bucket,
                               physical_partition=i.physical_partition, route_epoch=i.route_epoch)
        for i in CountRouteManifestItem.objects.filter(manifest_id=old.pk))
    CountProjectionGeneration.objects.filter(pk=gen.pk).update(active_manifest_id=new.pk)
    return new.pk


class RoundTrips:
    """Counts what the process sends to Redis (one send = one round trip), still calling Redis."""

    def __init__(self, monkeypatch):
        self.sent: list = []
        real = redis.connection.Connection.send_packed_command

        def spy(conn, command, check_health=True):
            self.sent.append(command)
            return real(conn, command, check_health)

        monkeypatch.setattr(redis.connection.Connection, "send_packed_command", spy)

    def __len__(self) -> int:
        return len(self.sent)


@pytest.fixture
def round_trips(monkeypatch):
    cache_redis().ping()  # a just-used connection sends no health-check PING inside the measured call
    return RoundTrips(monkeypatch)


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
    assert cache.bucket_key(7, "viral", 37) == "likes-test:count:g7:{viral|vb-37}"
    assert cache.view_key(7, "viral") == "likes-test:count:view:g7:{viral}"
    slots = {cache.keyslot(cache.bucket_key(7, "viral", vb)) for vb in range(1024)}
    assert len(slots) > 500
    # the counter-example of CCACHE-2: a tag holding only the video puts every bucket on one slot
    wrong = {cache.keyslot(f"like:count:{{viral}}:vb-{vb}") for vb in range(1024)}
    assert len(wrong) == 1


# --- L1 ---------------------------------------------------------------------------------------------


def test_l1_single_flight_one_caller_refreshes_an_expired_hot_key_the_others_get_the_stale_value():
    clock = FakeClock()
    l1 = L1Cache("t-stale", ttl_s=1.0, max_entries=10, stale_s=60.0, clock=clock)
    assert l1.get("hot", lambda: "v1") == "v1"
    clock.t = 1.5  # logically expired, still within the stale window
    calls, entered, release = [], threading.Event(), threading.Event()

    def loader():
        calls.append(threading.get_ident())
        entered.set()
        assert release.wait(10)
        return "v2"

    n = 8
    before = metrics.value("likes_l1_stale_served_total", cache="t-stale")
    results: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=lambda: results.put(l1.get("hot", loader))) for _ in range(n)]
    for t in threads:
        t.start()
    assert entered.wait(10)
    # everyone but the refresher returns while the refresh is still running
    assert [results.get(timeout=10) for _ in range(n - 1)] == ["v1"] * (n - 1)
    release.set()
    assert results.get(timeout=10) == "v2"
    for t in threads:
        t.join(10)
    assert len(calls) == 1
    assert metrics.value("likes_l1_stale_served_total", cache="t-stale") - before == n - 1
    assert l1.get("hot", lambda: pytest.fail("fresh again: no load")) == "v2"


def test_l1_concurrent_misses_of_a_cold_key_make_one_load():
    waited = threading.Semaphore(0)
    l1 = L1Cache("t-cold", ttl_s=1.0, max_entries=10, wait_s=30, clock=FakeClock(),
                 on_wait=lambda key: waited.release())
    calls, entered, release = [], threading.Event(), threading.Event()

    def loader():
        calls.append(1)
        entered.set()
        assert release.wait(10)
        return 42

    n = 6
    results: queue.Queue = queue.Queue()
    threads = [threading.Thread(target=lambda: results.put(l1.get("cold", loader))) for _ in range(n)]
    for t in threads:
        t.start()
    assert entered.wait(10)
    for _ in range(n - 1):
        assert waited.acquire(timeout=10)  # the others wait for the one load instead of loading
    release.set()
    assert sorted(results.get(timeout=10) for _ in range(n)) == [42] * n
    for t in threads:
        t.join(10)
    assert len(calls) == 1


def test_l1_is_bounded_and_evicts_the_least_recently_used():
    l1 = L1Cache("t-lru", ttl_s=100.0, max_entries=3, clock=FakeClock())
    for key in "abc":
        l1.get(key, lambda key=key: key.upper())
    assert l1.get("a", lambda: pytest.fail("a is cached")) == "A"  # a is now the most recent
    l1.get("d", lambda: "D")
    assert len(l1) == 3
    loads = []
    assert l1.get("b", lambda: loads.append("b") or "B2") == "B2"  # b was the least recent: evicted
    assert l1.get("a", lambda: loads.append("a") or "A2") == "A"
    assert loads == ["b"]


def test_l1_ttl_logical_expiry_and_physical_drop_with_an_injected_clock():
    clock = FakeClock()
    l1 = L1Cache("t-ttl", ttl_s=1.0, max_entries=10, stale_s=5.0, clock=clock)
    assert l1.get("k", lambda: 1) == 1
    clock.t = 0.999
    assert l1.get("k", lambda: 2) == 1  # still fresh
    refreshes = metrics.value("likes_l1_refreshes_total", cache="t-ttl")
    clock.t = 1.0
    assert l1.get("k", lambda: 2) == 2  # expired: the only caller refreshes it and gets the new value
    assert metrics.value("likes_l1_refreshes_total", cache="t-ttl") == refreshes + 1
    misses = metrics.value("likes_l1_misses_total", cache="t-ttl")
    clock.t = 1.0 + 1.0 + 5.0  # past the stale window: gone, a plain miss
    assert l1.get("k", lambda: 3) == 3
    assert metrics.value("likes_l1_misses_total", cache="t-ttl") == misses + 1


def test_l1_a_failed_load_releases_the_key_and_a_zero_ttl_disables_the_cache():
    l1 = L1Cache("t-fail", ttl_s=1.0, max_entries=10, clock=FakeClock())
    with pytest.raises(RuntimeError):
        l1.get("x", lambda: (_ for _ in ()).throw(RuntimeError("db down")))
    assert l1.get("x", lambda: 5) == 5
    off = L1Cache("t-off", ttl_s=0, max_entries=10)
    loads = []
    for _ in range(3):
        off.get("x", lambda: loads.append(1) or 1)
    assert len(loads) == 3 and len(off) == 0


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
    round_trips.sent.clear()
    with django_assert_num_queries(1, connection=connections["default"]):
        got = display_counts_get(video_ids=[*ids, "no-snapshot", ids[0]])
    assert len(round_trips) == 1
    assert list(got) == [*ids, "no-snapshot"]
    assert [(got[v].display_count, got[v].source) for v in ids[:10]] == [(1000 + i, "redis") for i in range(10)]
    assert [(got[v].display_count, got[v].source) for v in ids[10:]] == [(i, "snapshot") for i in range(10, 20)]
    assert (got["no-snapshot"].display_count, got["no-snapshot"].snapshot_at, got["no-snapshot"].source) == (
        0, None, "none")
    # within the L1 TTL the same page costs nothing
    round_trips.sent.clear()
    with django_assert_num_queries(0, connection=connections["default"]):
        again = display_counts_get(video_ids=ids)
    assert len(round_trips) == 0 and {v: again[v] for v in ids} == {v: got[v] for v in ids}


@ALL_DB
def test_display_counts_all_in_redis_touch_no_database(round_trips, django_assert_num_queries):
    gen = count_cache_generation_bootstrap().generation
    ids = _snapshots(5)
    cache.views_write(gen, [(v, 7, 300, "2030-01-01T00:00:00Z") for v in ids])
    count_cache_generations_get()
    round_trips.sent.clear()
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
    round_trips.sent.clear()
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


# --- T16: rebuild after a count Redis flush ----------------------------------------------------------------


@TX_DB
def test_t16_a_flushed_count_cache_is_rebuilt_from_the_durable_buckets_without_touching_them(
        make_user, make_video, strict_verify, round_trips):
    expected = seed_likes(make_user, make_video)
    assert statuses() == {1: "ACTIVE"}  # the snapshot job bootstrapped generation 1 and wrote its views
    assert cache.view_read(1, "hot")[0] == expected["hot"]
    # A leftover copy of a routed bucket on the partition the manifest does NOT route it to (what a
    # bucket move leaves behind): never read, never added (ROUTE-6).
    gen = count_routing.active()
    (_video, vb), _ = sorted(routed_rows("hot").items())[0]
    elsewhere = next(a for a in settings.COUNT_PARTITION_ALIASES if a != gen.routes[vb].partition)
    VideoLikeCountVbucket.objects.using(elsewhere).create(
        generation=gen.generation, video_id="hot", virtual_bucket=vb, bucket_space_version=gen.space.version,
        active_count=100, bucket_version=99, updated_at=timezone.now())
    before = durable_state()
    assert all(before[(a, "VideoLikeCountVbucket")] for a in settings.COUNT_PARTITION_ALIASES)
    assert flush_count_cache() > 0 and count_keys() == []

    progress: list[str] = []
    report = count_cache_rebuild(actor=TEST_ACTOR, progress=progress.append, batch=4)

    assert report.status == "ACTIVE", report.failure
    assert statuses() == {1: "RETIRED", 2: "ACTIVE"}
    row = CountCacheGeneration.objects.get(generation=2)
    assert row.route_manifest_id == count_routing.active().manifest_id and row.previous_generation == 1
    assert durable_state() == before  # the durable store is read, never written (CCACHE-3, CCACHE-4)
    for alias in settings.COUNT_PARTITION_ALIASES:
        routed = VideoLikeCountVbucket.objects.using(alias).filter(virtual_bucket__in=gen.buckets_on(alias)).count()
        assert report.rows[alias] == routed
        assert f"  {alias}: done, {routed} rows" in progress
    assert any(m.startswith(f"  {settings.COUNT_PARTITION_ALIASES[0]}: 4 rows") for m in progress)
    for video_id, facts in expected.items():
        rows = routed_rows(video_id)
        assert cache.buckets_read(2, sorted(rows)) == rows  # every routed bucket, exactly as durable
        assert sum(c for c, _v, _e in rows.values()) == facts
        assert cache.view_read(2, video_id)[0] == facts
    total = sum(len(routed_rows(v)) for v in expected)
    assert len(count_keys(f"{settings.LIKES_REDIS_PREFIX}:count:g2:*")) == total  # nothing else written
    assert count_keys(f"{settings.LIKES_REDIS_PREFIX}:count:*g1:*") == []
    assert cache.gens_mirror_read() == {1: "RETIRED", 2: "ACTIVE"}
    actions = list(AuditRecord.objects.filter(target_type="count_cache_generation", target_id="2")
                   .values_list("action", flat=True).order_by("id"))
    assert actions == ["count_cache.rebuild_start", "count_cache.rebuild_activate"]
    # reads now come from generation 2's views, in one round trip
    selectors.reset_generation_cache()
    count_cache_generations_get()
    round_trips.sent.clear()
    got = display_counts_get(video_ids=list(expected))
    assert len(round_trips) == 1
    assert {v: (c.display_count, c.source) for v, c in got.items()} == {v: (n, "redis") for v, n in expected.items()}


@TX_DB
def test_a_late_task_of_the_old_generation_cannot_write_after_activation(make_user, make_video, strict_verify):
    seed_likes(make_user, make_video)
    flush_count_cache()
    assert count_cache_rebuild(actor=TEST_ACTOR).status == "ACTIVE"
    n = len(routed_rows("hot"))
    late = count_cache_refresh_buckets_task(["hot"], 1)  # enqueued for generation 1 before the switch
    assert late == {"rows": n, "verdicts": {"1": {"GEN_RETIRED": n}}}
    assert count_keys(f"{settings.LIKES_REDIS_PREFIX}:count:g1:*") == []
    current = count_cache_refresh_buckets_task(["hot"], 2)
    assert current["verdicts"] == {"2": {"OK": n}}


@TX_DB
def test_changes_made_during_the_build_are_caught_up(make_user, make_video, strict_verify):
    expected = seed_likes(make_user, make_video)
    first = settings.COUNT_PARTITION_ALIASES[0]
    late_likers = []
    while not any(count_partition_of(u, "hot") == first for u in late_likers):
        assert len(late_likers) < 40
        late_likers.append(make_user())

    def progress(msg: str) -> None:
        if msg.startswith(f"  {first}: done"):  # that partition is scanned: these changes land behind it
            for user in late_likers:
                like(user, "hot")
            drain()

    report = count_cache_rebuild(actor=TEST_ACTOR, progress=progress)
    assert report.status == "ACTIVE", report.failure
    assert report.caught_up_rows >= 1
    facts = expected["hot"] + len(late_likers)
    assert liked_facts("hot") == facts
    rows = routed_rows("hot")
    assert cache.buckets_read(2, sorted(rows)) == rows
    display_snapshot_refresh()  # the pending change reaches the view of the ACTIVE generation 2
    assert cache.view_read(2, "hot")[0] == facts


@TX_DB
@pytest.mark.parametrize("when", ["partition", "activation"])
def test_a_rebuild_whose_manifest_pointer_moves_fails_and_leaves_the_old_generation_active(
        make_user, make_video, strict_verify, when):
    expected = seed_likes(make_user, make_video)
    trigger = f"  {settings.COUNT_PARTITION_ALIASES[0]}: done" if when == "partition" else "  sample check"
    moved = []

    def progress(msg: str) -> None:
        if msg.startswith(trigger) and not moved:
            moved.append(new_active_manifest())

    messages: list[str] = []
    report = count_cache_rebuild(actor=TEST_ACTOR, progress=lambda m: (messages.append(m), progress(m)))
    assert moved and report.status == "FAILED"
    if when == "partition":  # noticed right after that partition, before anything else was built
        assert report.views_written == 0 and not any(m.startswith("  views") for m in messages)
    assert report.failure.startswith("ManifestMoved")
    assert statuses() == {1: "ACTIVE", 2: "FAILED"}
    assert "manifest" in CountCacheGeneration.objects.get(generation=2).failure_reason
    assert cache.gens_mirror_read() == {1: "ACTIVE", 2: "FAILED"}
    assert AuditRecord.objects.filter(action="count_cache.rebuild_failed", target_id="2", outcome="failed").exists()
    assert display_count_get(video_id="hot").display_count == expected["hot"]
    assert count_cache_generations_get(fresh=True).active == 1


@TX_DB
def test_a_snapshot_that_disagrees_with_the_buckets_fails_verification(make_user, make_video, strict_verify):
    seed_likes(make_user, make_video)
    VideoDisplayCount.objects.filter(video_id="v2").update(raw_active_count=7)  # no pending change explains it
    report = count_cache_rebuild(actor=TEST_ACTOR)
    assert report.status == "FAILED" and "disagree" in report.failure and report.mismatches == 1
    assert statuses() == {1: "ACTIVE", 2: "FAILED"}


@ALL_DB
def test_only_one_rebuild_runs_and_an_abandoned_one_is_failed_by_the_next():
    count_cache_generation_bootstrap()
    other = lease_acquire(resource=REBUILD_LEASE, holder="another-host", ttl_s=60)
    assert other is not None
    with pytest.raises(CountCacheRebuildRunning):
        count_cache_rebuild(actor=TEST_ACTOR)
    assert statuses() == {1: "ACTIVE"}
    from likes_project.eventlog.leases import lease_release

    lease_release(other)  # that run died and its lease ran out, leaving generation 2 BACKFILLING
    now = timezone.now()
    CountCacheGeneration.objects.create(generation=2, status="BACKFILLING", projection_generation=1,
                                        route_manifest_id=count_routing.active().manifest_id, build_from=now,
                                        started_at=now)
    report = count_cache_rebuild(actor=TEST_ACTOR)
    assert report.status == "ACTIVE" and report.generation == 3
    assert statuses() == {1: "RETIRED", 2: "FAILED", 3: "ACTIVE"}
    assert CountCacheGeneration.objects.get(generation=2).failure_reason.startswith("abandoned")


@ALL_DB
def test_the_snapshot_job_writes_the_views_of_a_rebuilding_generation_too(make_user):
    count_cache_generation_bootstrap()
    now = timezone.now()
    CountCacheGeneration.objects.create(generation=2, status="BACKFILLING", projection_generation=1,
                                        route_manifest_id=count_routing.active().manifest_id, build_from=now,
                                        started_at=now)
    assert count_cache.count_cache_write_targets() == [1, 2]
    assert count_cache.count_cache_views_write(rows=[("vid-w", 3, 10, "2030-01-01T00:00:00Z")]) == 2
    assert cache.view_read(1, "vid-w") == cache.view_read(2, "vid-w") == (3, 10, "2030-01-01T00:00:00Z")
    # an older snapshot cannot overwrite a newer view
    assert count_cache.count_cache_views_write(rows=[("vid-w", 1, 9, "2029-01-01T00:00:00Z")]) == 0
    assert cache.view_read(2, "vid-w")[0] == 3


# --- operator entry points ------------------------------------------------------------------------------------


@ALL_DB
def test_rebuild_command_shows_progress_and_fails_cleanly_when_one_is_running():
    count_cache_generation_bootstrap()
    out, err = io.StringIO(), io.StringIO()
    call_command("rebuild_count_cache", stdout=out, stderr=err)
    assert "count cache generation 2: ACTIVE" in out.getvalue()
    for alias in settings.COUNT_PARTITION_ALIASES:
        assert f"{alias}: done, 0 rows" in err.getvalue()
    assert AuditRecord.objects.filter(action="count_cache.rebuild_activate", channel="cli").exists()
    lease_acquire(resource=REBUILD_LEASE, holder="another-host", ttl_s=60)
    with pytest.raises(CommandError, match="count_cache_rebuild_running"):
        call_command("rebuild_count_cache", stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(CommandError, match="unknown_actor"):
        call_command("rebuild_count_cache", "--actor", "nobody", stdout=io.StringIO(), stderr=io.StringIO())


@ALL_DB
def test_admin_rebuild_action_needs_its_permission_and_is_audited(client, staff):
    count_cache_generation_bootstrap()
    url = "/admin/counting/countcachegeneration/"
    grant(staff, "counting.view_countcachegeneration")
    client.force_login(staff)
    assert client.get(url).status_code == 200
    assert "rebuild_count_cache" not in client.get(url).content.decode()
    client.post(url, {"action": "rebuild_count_cache", "_selected_action": ["1"]})
    assert statuses() == {1: "ACTIVE"}  # refused: the action is not offered without the permission

    grant(staff, "counting.rebuild_count_cache")
    client.force_login(staff)
    assert "rebuild_count_cache" in client.get(url).content.decode()
    resp = client.post(url, {"action": "rebuild_count_cache", "_selected_action": ["1"]}, follow=True)
    assert "Started job" in resp.content.decode()  # the request only started the job ...
    assert statuses() == {1: "ACTIVE", 2: "SHADOW"}
    run_jobs()  # ... the workers run it
    assert statuses() == {1: "RETIRED", 2: "ACTIVE"}
    audit = AuditRecord.objects.get(action="count_cache.rebuild_activate", target_id="2")
    assert (audit.actor, audit.channel) == (staff.username, "admin")


@TX_DB
def test_a_flush_is_detected_by_the_sentinel_and_rebuilt(make_user, make_video, strict_verify):
    from counting.services.count_cache.layers import count_cache_check_loss

    expected = seed_likes(make_user, make_video)
    cache.sentinel_set(1)  # generation 1 is whole
    assert count_cache_check_loss() == "ok"
    assert flush_count_cache() > 0
    assert count_cache_check_loss() == "rebuild_started"  # a job: the beat task never runs the rebuild itself
    run_jobs()
    assert statuses() == {1: "RETIRED", 2: "ACTIVE"}
    assert cache.sentinel_present(2)
    for video_id, facts in expected.items():
        assert cache.view_read(2, video_id)[0] == facts
    assert count_cache_check_loss() == "ok"
