"""The count projection against real shards, partitions and streams: test-matrix rows T5, T8, T9,
T10 and T20, negative-bucket isolation, lease fencing, and the convergence property."""

from __future__ import annotations

import itertools
import random
import uuid

import pytest
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from counting import routing as count_routing
from counting.models import CountBucketSpace, CountEventReceipt, VideoLikeCountVbucket
from counting.services import projection
from counting.services.projection import CountProjector
from likes_project import leases
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import ApplyResult, consume_partition, contiguous_prefix_end
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter
from likes_project.hashing import length_prefixed_utf8, stable_hash
from tests.counting.helpers import (
    apply_then_crash,
    bucket_sum,
    count_partition_of,
    drain,
    envelopes,
    lease_expire,
    liked_facts,
    mark_all_sent,
    project_all,
    projection_row,
    publish_all,
)
from tests.relations.helpers import cmd

# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
pytestmark = [pytest.mark.topology, pytest.mark.schema, pytest.mark.django_db(databases="__all__", transaction=True)]


def partition_of(user, video_id) -> int:
    return streams.partition_for(f"{user.pk}:{video_id}")


def like_published(user, video_id: str) -> int:
    """The user's like of the video, committed and published; returns its stream partition."""
    cmd(user, video_id, "LIKED")
    publish_all()
    return partition_of(user, video_id)


@pytest.fixture
def video(make_user, make_video):
    return make_video("vid-c", make_user())


# --- golden vectors and contracts (BKT-1, BKT-6, T20) -------------------------------------------

def _independent_bucket(video_id: str, user_id: int) -> int:
    # The contract, restated: sha256(seed ‖ 0x1f ‖ len32(video) ‖ video ‖ len32(user) ‖ user), first 8
    # bytes big-endian, mod V.
    import hashlib

    v, u = video_id.encode(), str(user_id).encode()
    key = len(v).to_bytes(4, "big") + v + len(u).to_bytes(4, "big") + u
    digest = hashlib.sha256(b"likes-count-bucket-v1\x1f" + key).digest()
    return int.from_bytes(digest[:8], "big") % 1024


PINNED = {("V9001", 7): 149, ("v-public-1", 1): 129, ("viral", 123456): 111, ("é🎬", 42): 239}


def test_bucket_space_v1_golden_vectors():
    space = count_routing.active().space
    assert (space.version, space.hash_algorithm, space.hash_seed, space.key_encoding, space.virtual_buckets) == (
        1, "sha256-be64", "likes-count-bucket-v1", "lp-utf8-v1", 1024)
    got = {k: count_routing.virtual_bucket(space, *k) for k in PINNED}
    assert got == PINNED
    assert got == {k: _independent_bucket(*k) for k in PINNED}


def test_length_prefix_removes_concatenation_ambiguity():
    assert length_prefixed_utf8("ab", "c") != length_prefixed_utf8("a", "bc")
    assert stable_hash("sha256-be64", "s", length_prefixed_utf8("ab", "1")) != stable_hash(
        "sha256-be64", "s", length_prefixed_utf8("a", "b1"))


# spec §7 drill 10: a changed seed, encoding or V.
def test_t20_a_new_contract_is_a_new_version_and_never_changes_the_bound_one():
    gen = count_routing.active()
    before = {k: count_routing.virtual_bucket(gen.space, *k) for k in PINNED}
    CountBucketSpace.objects.create(version=2, hash_algorithm="sha256-be64", hash_seed="another-seed",
                                    key_encoding="lp-utf8-v1", virtual_buckets=4096)
    count_routing.reset_cache()
    again = count_routing.active()
    assert again.space.version == 1  # the generation binds v1, not the newest space (BKT-3)
    assert {k: count_routing.virtual_bucket(again.space, *k) for k in PINNED} == before
    v2 = count_routing.BucketSpace(2, "sha256-be64", "another-seed", "lp-utf8-v1", 4096)
    assert {k: count_routing.virtual_bucket(v2, *k) for k in PINNED} != before


def test_a_relation_keeps_its_bucket_through_like_unlike_relike(make_user, video):
    user = make_user()
    buckets = set()
    for desired in ["LIKED", "UNLIKED", "LIKED"]:
        cmd(user, video.video_id, desired)
        drain()
        buckets.add(projection_row(user.pk, video.video_id).virtual_bucket)
    assert len(buckets) == 1  # INV-11
    assert bucket_sum(video.video_id) == 1


def test_manifest_is_sealed_and_covers_every_bucket_on_both_partitions():
    from counting.models import CountRouteManifest
    from counting.services.manifests import manifest_verify

    gen = count_routing.active()
    manifest = CountRouteManifest.objects.get(pk=gen.manifest_id)
    assert manifest.status == "SEALED" and manifest.row_count == 1024
    items = manifest_verify(manifest, 1024)
    assert {p for _, p, _ in items} == set(settings.COUNT_BOOTSTRAP_PARTITIONS)
    assert {e for _, _, e in items} == {1}


def test_a_tampered_manifest_fails_verification():
    from counting.models import CountRouteManifest, CountRouteManifestItem
    from counting.services.manifests import ManifestInvalid, manifest_verify

    gen = count_routing.active()
    CountRouteManifestItem.objects.filter(manifest_id=gen.manifest_id, virtual_bucket=5).update(
        physical_partition=settings.COUNT_PARTITION_ALIASES[0] if gen.routes[5].partition != settings.
        COUNT_PARTITION_ALIASES[0] else settings.COUNT_PARTITION_ALIASES[1])
    with pytest.raises(ManifestInvalid):
        manifest_verify(CountRouteManifest.objects.get(pk=gen.manifest_id), 1024)


# --- T5 / T8: reordering and duplicates ----------------------------------------------------------


def _xadd_in_order(events: list[dict]) -> None:
    streams.publish_pipeline(events)


# spec §7 drill 7: v12 before v11, the count.
def test_t5_unlike_v2_consumed_before_like_v1_ends_unliked_with_no_net_change(make_user, video):
    user = make_user()
    cmd(user, video.video_id, "LIKED")
    cmd(user, video.video_id, "UNLIKED")
    v1, v2 = envelopes(user.pk, video.video_id)
    mark_all_sent()
    _xadd_in_order([v2, v1])  # v12 before v11
    project_all()
    row = projection_row(user.pk, video.video_id)
    assert (row.projected_state, row.projected_version) == ("UNLIKED", 2)
    assert bucket_sum(video.video_id) == 0
    assert DeadLetter.objects.count() == 0  # no negative attempt: v2 first made a tombstone, no -1


def test_t5_counter_example_in_order_like_then_unlike_also_nets_zero(make_user, video):
    user = make_user()
    cmd(user, video.video_id, "LIKED")
    drain()
    assert bucket_sum(video.video_id) == 1
    cmd(user, video.video_id, "UNLIKED")
    drain()
    assert bucket_sum(video.video_id) == 0


# spec §7 drill 7: v13 skipping v12, the count.
def test_proj1_v12_straight_after_v10_advances_the_version_only(make_user, video):
    user = make_user()
    for desired in ["LIKED", "UNLIKED", "LIKED", "UNLIKED"]:
        cmd(user, video.video_id, desired)
    events = envelopes(user.pk, video.video_id)
    mark_all_sent()
    _xadd_in_order([events[1], events[3]])  # v2 UNLIKED then v4 UNLIKED: no +1, no -1
    project_all()
    assert bucket_sum(video.video_id) == 0
    assert projection_row(user.pk, video.video_id).projected_version == 4
    _xadd_in_order([events[0], events[2]])  # the late v1 and v3 are lower: ignored
    project_all()
    assert bucket_sum(video.video_id) == 0
    assert projection_row(user.pk, video.video_id).projected_version == 4


def test_t8_an_outbox_duplicate_does_not_double_add(make_user, video):
    user = make_user()
    cmd(user, video.video_id, "LIKED")
    (v1,) = envelopes(user.pk, video.video_id)
    mark_all_sent()
    _xadd_in_order([v1, v1, v1])
    reports = project_all()
    assert bucket_sum(video.video_id) == 1
    assert sum(r.applied for r in reports) == 1
    assert sum(r.duplicates for r in reports) == 2
    # the duplicates are receipted too, so a replay of any of them is absorbed
    gen = count_routing.active()
    assert sum(CountEventReceipt.objects.using(a).filter(generation=gen.generation).count()
               for a in settings.COUNT_PARTITION_ALIASES) == 3


def test_t8_counter_example_a_real_relike_does_add(make_user, video):
    user = make_user()
    for desired in ["LIKED", "UNLIKED", "LIKED"]:
        cmd(user, video.video_id, desired)
    drain()
    assert bucket_sum(video.video_id) == 1


# --- T9 / T10: crashes and partial batches -------------------------------------------------------


# spec §7 drill 4: the projector killed after its commit.
def test_t9_crash_after_projection_commit_before_checkpoint_does_not_double_apply(make_user, video):
    user = make_user()
    p = like_published(user, video.video_id)
    result, entries = apply_then_crash(CountProjector(), partition=p)
    assert result.applied == 1
    report = consume_partition(CountProjector(), partition=p)
    assert (report.applied, report.duplicates) == (0, 1)
    assert bucket_sum(video.video_id) == 1
    assert ConsumerCheckpoint.objects.get(consumer="count", partition=p).last_done_id == entries[-1].entry_id


# spec §7 drill 4: the projector killed before its commit.
def test_t9_counter_example_crash_before_commit_replays_normally(make_user, video, monkeypatch):
    user = make_user()
    p = like_published(user, video.video_id)
    real = projection._apply_group
    monkeypatch.setattr(projection, "_apply_group", lambda *a, **k: (_ for _ in ()).throw(OperationalError("down")))
    first = consume_partition(CountProjector(), partition=p)
    assert first.applied == 0 and first.advanced_to is None
    assert bucket_sum(video.video_id) == 0
    monkeypatch.setattr(projection, "_apply_group", real)
    second = consume_partition(CountProjector(), partition=p, ignore_backoff=True)
    assert second.applied == 1
    assert bucket_sum(video.video_id) == 1


def _users_spanning_both_count_partitions(make_user, video_id, stream_partition=None, n=6):
    """Users whose like of `video_id` lands in one stream partition but on both count partitions."""
    found: dict[str, list] = {a: [] for a in settings.COUNT_BOOTSTRAP_PARTITIONS}  # the partitions with buckets
    target = stream_partition
    for _ in range(400):
        u = make_user()
        p = streams.partition_for(f"{u.pk}:{video_id}")
        if target is None:
            target = p
        if p != target:
            continue
        found[count_partition_of(u, video_id)].append(u)
        if all(len(v) >= n // 2 for v in found.values()):
            return target, found
    raise AssertionError("could not find users spanning both count partitions")


def test_t10_only_some_groups_commit_then_the_replay_completes_the_rest(make_user, video, monkeypatch):
    p, by_alias = _users_spanning_both_count_partitions(make_user, video.video_id)
    failing = settings.COUNT_PARTITION_ALIASES[1]
    healthy = settings.COUNT_PARTITION_ALIASES[0]
    # Interleaved, a user of the failing partition first: the healthy group's entries lie after the first failed
    # one, so the replay meets them again (a shuffle made that depend on which user ids the run handed out).
    users = [u for pair in itertools.zip_longest(by_alias[failing], by_alias[healthy]) for u in pair if u is not None]
    # Published one by one: publish_all() drains shard by shard, so the stream's order would follow which relation
    # shard each user landed on, not this interleaving.
    for u in users:
        cmd(u, video.video_id, "LIKED")
        publish_all()
    real = projection._apply_group

    def flaky(alias, *args, **kwargs):
        if alias == failing:
            raise OperationalError("partition unavailable")
        return real(alias, *args, **kwargs)

    monkeypatch.setattr(projection, "_apply_group", flaky)
    entries = streams.read_after(p, "0-0", 100)
    assert [e.event["userId"] for e in entries] == [u.pk for u in users]  # the order this test is about
    first = consume_partition(CountProjector(), partition=p)
    assert first.applied == len(by_alias[settings.COUNT_PARTITION_ALIASES[0]])
    # the checkpoint never passes the first entry of the failed group (no hole is skipped)
    first_failed = next(e.entry_id for e in entries if count_partition_of(
        next(u for u in users if u.pk == e.event["userId"]), video.video_id) == failing)
    cp = ConsumerCheckpoint.objects.get(consumer="count", partition=p)
    assert streams.entry_id_key(cp.last_done_id) < streams.entry_id_key(first_failed)
    assert bucket_sum(video.video_id) == len(by_alias[settings.COUNT_PARTITION_ALIASES[0]])

    monkeypatch.setattr(projection, "_apply_group", real)
    assert consume_partition(CountProjector(), partition=p).status == "backoff"  # until its retry is due
    second = consume_partition(CountProjector(), partition=p, ignore_backoff=True)
    assert second.applied == len(by_alias[failing])
    assert second.duplicates >= 1  # committed groups are absorbed by their receipts
    assert bucket_sum(video.video_id) == liked_facts(video.video_id) == len(users)
    assert ConsumerCheckpoint.objects.get(consumer="count", partition=p).last_done_id == entries[-1].entry_id


def test_contiguous_prefix_never_passes_a_hole():
    assert contiguous_prefix_end(["1-0", "2-0", "3-0"], {"1-0", "3-0"}) == "1-0"
    assert contiguous_prefix_end(["1-0", "2-0", "3-0"], {"2-0", "3-0"}) is None
    assert contiguous_prefix_end(["1-0", "2-0", "3-0"], {"1-0", "2-0", "3-0"}) == "3-0"


# --- negative buckets (PROJ-12), poison events, fencing ------------------------------------------


def test_a_negative_bucket_is_refused_dead_lettered_and_its_neighbours_keep_flowing(make_user, make_video):
    author = make_user()
    hot, other = make_video("hot-neg", author), make_video("calm", author)
    victim, neighbour = make_user(), make_user()
    cmd(victim, hot.video_id, "LIKED")
    drain()
    # corrupt the durable bucket behind the projection's back, as a bad manual fix would
    gen = count_routing.active()
    vb = count_routing.virtual_bucket(gen.space, hot.video_id, victim.pk)
    alias = gen.routes[vb].partition
    VideoLikeCountVbucket.objects.using(alias).filter(video_id=hot.video_id, virtual_bucket=vb).update(active_count=0)
    cmd(victim, hot.video_id, "UNLIKED")
    cmd(neighbour, other.video_id, "LIKED")
    drain()
    bucket = VideoLikeCountVbucket.objects.using(alias).get(video_id=hot.video_id, virtual_bucket=vb)
    assert bucket.active_count == 0 and bucket.frozen is True  # refused, never clamped or applied
    letter = DeadLetter.objects.get(video_id=hot.video_id)
    assert letter.error_class == "NegativeBucket" and letter.payload["relationVersion"] == 2
    assert projection_row(victim.pk, hot.video_id).projected_version == 1  # the unlike was not applied
    assert bucket_sum(other.video_id) == 1  # the neighbour flowed
    # the bucket stopped propagating: a later event for it is parked too, never applied
    cmd(victim, hot.video_id, "LIKED")
    drain()
    assert DeadLetter.objects.filter(video_id=hot.video_id, error_class="BucketFrozen").count() == 1
    for p in streams.all_partitions():  # every partition moved past everything
        cp = ConsumerCheckpoint.objects.filter(consumer="count", partition=p).first()
        assert cp is None or streams.read_after(p, cp.last_done_id, 10) == []


def test_a_poison_event_is_quarantined_and_the_partition_keeps_moving(make_user, video):
    user = make_user()
    cmd(user, video.video_id, "LIKED")
    (good,) = envelopes(user.pk, video.video_id)
    mark_all_sent()
    p = streams.partition_for(good["aggregateKey"])
    poison = {**good, "relationVersion": "eleven"}
    streams.stream_redis().xadd(streams.stream_key(p), {"event": "not json at all"})
    _xadd_in_order([poison, good])
    report = consume_partition(CountProjector(), partition=p)
    assert report.dead_lettered == 2 and report.applied == 1
    assert bucket_sum(video.video_id) == 1
    assert DeadLetter.objects.filter(consumer="count").count() == 2


def test_an_infrastructure_failure_is_retried_for_as_long_as_it_takes_and_never_dead_lettered(
        make_user, video, monkeypatch, settings):
    settings.LIKES_RETRY_ALERT_AFTER = 3
    user = make_user()
    p = like_published(user, video.video_id)
    real = projection._apply_group
    monkeypatch.setattr(projection, "_apply_group", lambda *a, **k: (_ for _ in ()).throw(OperationalError("x")))
    for attempt in range(1, 16):  # far past the old five-attempt quarantine
        report = consume_partition(CountProjector(), partition=p, ignore_backoff=True)
        assert (report.dead_lettered, report.held_back) == (0, 1)
        cp = ConsumerCheckpoint.objects.get(consumer="count", partition=p)
        assert (cp.blocked_attempts, cp.blocked_reason, cp.last_done_id) == (attempt, "db_unavailable", "0-0")
        assert cp.retry_at > timezone.now()
    assert consume_partition(CountProjector(), partition=p).status == "backoff"  # it waits out its backoff
    assert not DeadLetter.objects.exists()
    monkeypatch.setattr(projection, "_apply_group", real)  # the partition is back
    report = consume_partition(CountProjector(), partition=p, ignore_backoff=True)
    assert report.applied == 1 and bucket_sum(video.video_id) == 1
    cp = ConsumerCheckpoint.objects.get(consumer="count", partition=p)
    assert (cp.blocked_attempts, cp.blocked_entry_id, cp.retry_at) == (0, "", None)


def test_a_paused_old_lease_holder_is_fenced_out(make_user, video):
    user = make_user()
    p = like_published(user, video.video_id)
    entries = streams.read_after(p, "0-0", 10)
    old = leases.lease_acquire(resource=f"consumer:count:{p}", holder="old", ttl_s=30)
    # the old holder pauses (GC, network); its lease expires and a new holder takes over
    lease_expire(old)
    new = leases.lease_acquire(resource=old.resource, holder="new", ttl_s=30)
    assert new.token > old.token
    fresh = CountProjector().apply(entries, consumer="count", partition=p, token=new.token)
    assert fresh.applied == 1
    # the old holder wakes up: its projection write and its checkpoint write are both refused
    stale = CountProjector().apply(entries, consumer="count", partition=p, token=old.token)
    assert stale.applied == 0 and set(stale.failed) == {e.entry_id for e in entries}
    from likes_project.eventlog.consumer import checkpoint_advance

    ConsumerCheckpoint.objects.get_or_create(consumer="count", partition=p)
    assert checkpoint_advance(consumer="count", partition=p, grant=old, to_id=entries[-1].entry_id, applied=1) is False
    assert checkpoint_advance(consumer="count", partition=p, grant=new, to_id=entries[-1].entry_id, applied=1) is True
    assert bucket_sum(video.video_id) == 1


def test_a_second_consumer_copy_is_harmless(make_user, video):
    user = make_user()
    p = like_published(user, video.video_id)
    held = leases.lease_acquire(resource=f"consumer:count:{p}", holder="first", ttl_s=30)
    assert consume_partition(CountProjector(), partition=p).status == "busy"
    leases.lease_release(held)
    assert consume_partition(CountProjector(), partition=p).applied == 1


def test_pause_switch_stops_dispatch(make_user, video):
    from likes_project.eventlog.services import consumer_switch_set
    from tests.factories import TEST_ACTOR

    user = make_user()
    p = like_published(user, video.video_id)
    consumer_switch_set(consumer="count", paused=True, reason="snapshot barrier", actor=TEST_ACTOR)
    assert consume_partition(CountProjector(), partition=p).status == "paused"
    assert bucket_sum(video.video_id) == 0
    consumer_switch_set(consumer="count", paused=False, reason="", actor=TEST_ACTOR)
    assert consume_partition(CountProjector(), partition=p).applied == 1


def test_route_epoch_mismatch_never_advances_the_checkpoint(make_user, video):
    from counting.models import CountRouteFence

    user = make_user()
    p = like_published(user, video.video_id)
    gen = count_routing.active()
    vb = count_routing.virtual_bucket(gen.space, video.video_id, user.pk)
    alias = gen.routes[vb].partition
    CountRouteFence.objects.using(alias).filter(virtual_bucket=vb).update(state="DRAINING")
    report = consume_partition(CountProjector(), partition=p)
    assert report.applied == 0 and report.advanced_to is None
    assert bucket_sum(video.video_id) == 0
    CountRouteFence.objects.using(alias).filter(virtual_bucket=vb).update(state="ACTIVE")
    assert consume_partition(CountProjector(), partition=p, ignore_backoff=True).applied == 1


# --- convergence property ------------------------------------------------------------------------


@hsettings(max_examples=25, deadline=None, derandomize=True,
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    commands=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1), st.booleans()), min_size=1, max_size=25),
    dup_seed=st.integers(0, 2**32 - 1),
)
def test_property_any_duplication_and_reordering_converges_to_the_facts(make_user, make_video, commands, dup_seed):
    run = uuid.uuid4().hex[:8]
    author = make_user()
    videos = [make_video(f"prop-{run}-{i}", author).video_id for i in range(2)]
    users = [make_user() for _ in range(4)]
    for u, v, like in commands:
        cmd(users[u], videos[v], "LIKED" if like else "UNLIKED")
    events = [e for u in users for v in videos for e in envelopes(u.pk, v)]
    mark_all_sent()
    rng = random.Random(dup_seed)
    delivered = events + [rng.choice(events) for _ in range(len(events))] if events else []
    rng.shuffle(delivered)
    if delivered:
        _xadd_in_order(delivered)
    project_all()
    for v in videos:
        assert bucket_sum(v) == liked_facts(v)


def test_apply_result_defaults_are_empty():
    r = ApplyResult()
    assert (r.done, r.failed, r.applied) == (set(), {}, 0)
