"""Rebuilding the Redis count cache (CCACHE-1, CCACHE-3, CCACHE-4): test-matrix row T16 (a count
Redis flush rebuilt from the durable vbuckets without touching them), T7 for counts (a late
old-generation task cannot write), the manifest pin, verification, the one-at-a-time lease, and the
operator entry points (command, admin action, the flush sentinel)."""

from __future__ import annotations

import io

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone

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
from counting.services.count_cache.layers import count_cache_generation_bootstrap
from counting.services.count_cache.rebuild import REBUILD_LEASE, CountCacheRebuildRunning, count_cache_rebuild
from counting.services.snapshots import display_snapshot_refresh
from counting.tasks import count_cache_refresh_buckets_task
from likes_project.audit.models import AuditRecord
from likes_project.eventlog.models import ConsumerCheckpoint
from likes_project.leases import lease_acquire
from likes_project.redis_client import cache_redis

# fresh_process_state is autouse: imported here, every test of this module starts with empty per-process caches.
from tests.counting.helpers import (
    ALL_DB,
    TX_DB,
    count_partition_of,
    drain,
    fresh_process_state,  # noqa: F401
    liked_facts,
)
from tests.factories import TEST_ACTOR, grant, run_jobs
from tests.relations.helpers import cmd as like

pytestmark = pytest.mark.topology


@pytest.fixture
def strict_verify(settings):
    # Verify every sampled bucket strictly, even one written a moment ago (the rebuild follows drain()).
    settings.COUNT_CACHE_VERIFY_IN_FLIGHT_S = 0



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


# --- T16: rebuild after a count Redis flush ----------------------------------------------------------------


@TX_DB
# spec §7 drill 6: count Redis flushed.
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
    assert all(before[(a, "VideoLikeCountVbucket")] for a in settings.COUNT_BOOTSTRAP_PARTITIONS)
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
    # Progress after every batch of 4: how many rows the first page holds depends on where the user ids put
    # the buckets, so the line is the first page's size, not always 4.
    first = settings.COUNT_PARTITION_ALIASES[0]
    assert f"  {first}: {min(4, report.rows[first])} rows" in progress and report.rows[first] > 0, progress
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
    round_trips.clear()
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
    from likes_project.leases import lease_release

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
