"""The reverse "who liked" projection against real partitions and streams (issue 5 §1): golden vectors,
test-matrix rows T13, T14, T15 and the projection part of T34, receipts, a crash after commit, and the
shadow-generation rebuild into a new R, each with its counter-example."""

from __future__ import annotations

import datetime as dt
import hashlib
import io

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from counting import routing as reverse_routing
from counting.models import LikeReverseProjection, LikeReverseSort, ReverseEventReceipt, ReverseIndexGeneration
from counting.services.reverse.projector import ReverseIndexProjector
from counting.services.reverse.rebuild import reverse_generation_shadow_create, reverse_index_rebuild
from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_partition
from likes_project.eventlog.models import ConsumerCheckpoint
from relations import routing as relation_routing
from relations.models import LikeRelation, VideoSnapshot
from tests.counting.helpers import (
    apply_then_crash,
    drain_reverse,
    envelopes,
    mark_all_sent,
    project_reverse,
    publish_all,
)
from tests.relations.helpers import cmd

# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def fact(user, video_id) -> LikeRelation:
    return LikeRelation.objects.using(relation_routing.alias_for_user(user.pk)).get(user_id=user.pk, video_id=video_id)


def state_row(generation: int, user_id: int, video_id: str) -> LikeReverseProjection | None:
    gen = reverse_routing.reverse_generation_load(generation)
    return LikeReverseProjection.objects.using(gen.alias_of(user_id)).filter(
        generation=generation, video_id=video_id, user_id=user_id).first()


def entries(generation: int, video_id: str) -> list[tuple[int, dt.datetime]]:
    """Every sort entry of a video in one generation, newest first (liked_at DESC, user_id)."""
    out = []
    for alias in settings.COUNT_PARTITION_ALIASES:
        out += LikeReverseSort.objects.using(alias).filter(generation=generation, video_id=video_id).values_list(
            "user_id", "liked_at")
    return sorted(out, key=lambda e: (-e[1].timestamp(), e[0]))


def g1() -> int:
    return reverse_routing.reverse_active().generation


# --- the frozen contract (REV-4) ----------------------------------------------------------------

PINNED_R8 = {1: 0, 7: 7, 42: 2, 123456: 5, 9007199254740993: 0}


def _independent_shard(user_id: int, r: int) -> int:
    # The contract, restated: sha256("likes-reverse-v1" ‖ 0x1f ‖ decimal ASCII user id), first 8 bytes
    # big-endian, mod R.
    digest = hashlib.sha256(b"likes-reverse-v1\x1f" + str(user_id).encode("ascii")).digest()
    return int.from_bytes(digest[:8], "big") % r


def test_generation_1_contract_and_golden_vectors():
    gen = reverse_routing.reverse_active()
    assert (gen.generation, gen.status, gen.hash_algorithm, gen.hash_seed, gen.user_id_encoding, gen.shards) == (
        1, "ACTIVE", "sha256-be64", "likes-reverse-v1", "decimal-ascii-v1", 8)
    aliases = list(settings.COUNT_BOOTSTRAP_PARTITIONS)  # a partition added later gets no reverse shards
    assert gen.placement == tuple(aliases[s % len(aliases)] for s in range(8))
    assert set(gen.placement) == set(aliases)  # one video's shards spread over every bootstrap partition
    got = {u: reverse_routing.reverse_shard(gen, u) for u in PINNED_R8}
    assert got == PINNED_R8
    assert got == {u: _independent_shard(u, 8) for u in PINNED_R8}
    assert {u: gen.alias_of(u) for u in PINNED_R8} == {u: gen.placement[s] for u, s in PINNED_R8.items()}


# spec §7 drill 10: a changed R.
def test_a_new_r_is_a_new_generation_and_never_changes_the_active_one():
    before = {u: reverse_routing.reverse_active().shard_of(u) for u in PINNED_R8}
    shadow = reverse_routing.reverse_from_row(reverse_generation_shadow_create(shards=4))
    assert reverse_routing.reverse_active().generation == 1
    assert {u: reverse_routing.reverse_active().shard_of(u) for u in PINNED_R8} == before
    assert {u: shadow.shard_of(u) for u in PINNED_R8} == {u: _independent_shard(u, 4) for u in PINNED_R8}
    assert {u: shadow.shard_of(u) for u in PINNED_R8} != before
    assert [g.generation for g in reverse_routing.reverse_live()] == [1, shadow.generation]


# --- REV-2 ordering cases --------------------------------------------------------------------------


# spec §7 drill 7: v12 before v11, the reverse sort.
def test_t13_v12_before_v11_leaves_a_tombstone_and_no_entry(make_user, make_video, author):
    user = make_user()
    make_video("rv-13", author)
    cmd(user, "rv-13", "LIKED")
    cmd(user, "rv-13", "UNLIKED")
    v1, v2 = envelopes(user.pk, "rv-13")
    mark_all_sent()
    streams.publish_pipeline([v2])
    assert sum(r.applied for r in project_reverse()) == 1
    row = state_row(g1(), user.pk, "rv-13")
    assert (row.state, row.relation_version, row.liked_at) == ("UNLIKED", 2, None)
    assert entries(g1(), "rv-13") == []
    streams.publish_pipeline([v1])  # the late v11
    reports = project_reverse()
    assert (sum(r.applied for r in reports), sum(r.stale for r in reports)) == (0, 1)
    row = state_row(g1(), user.pk, "rv-13")
    assert (row.state, row.relation_version, row.liked_at) == ("UNLIKED", 2, None)
    assert entries(g1(), "rv-13") == []


def test_t13_counter_example_v11_then_v12_deletes_the_exact_entry(make_user, make_video, author):
    user, other = make_user(), make_user()
    make_video("rv-13b", author)
    cmd(user, "rv-13b", "LIKED")
    cmd(other, "rv-13b", "LIKED")
    drain_reverse()
    liked_at = fact(user, "rv-13b").state_changed_at
    assert (user.pk, liked_at) in entries(g1(), "rv-13b")
    row = state_row(g1(), user.pk, "rv-13b")
    assert (row.state, row.relation_version, row.liked_at) == ("LIKED", 1, liked_at)
    cmd(user, "rv-13b", "UNLIKED")
    drain_reverse()
    assert entries(g1(), "rv-13b") == [(other.pk, fact(other, "rv-13b").state_changed_at)]
    row = state_row(g1(), user.pk, "rv-13b")
    assert (row.state, row.relation_version, row.liked_at) == ("UNLIKED", 2, None)


# spec §7 drill 7: v13 skipping v12, the reverse sort.
def test_t14_v13_across_a_missing_v12_moves_the_entry_to_v13s_time(make_user, make_video, author):
    user = make_user()
    make_video("rv-14", author)
    for desired in ["LIKED", "UNLIKED", "LIKED"]:
        cmd(user, "rv-14", desired)
    v1, v2, v3 = envelopes(user.pk, "rv-14")
    mark_all_sent()
    streams.publish_pipeline([v1])
    project_reverse()
    t1 = dt.datetime.fromisoformat(v1["stateChangedAt"].replace("Z", "+00:00"))
    assert entries(g1(), "rv-14") == [(user.pk, t1)]
    streams.publish_pipeline([v3])  # v12 is still missing
    project_reverse()
    t3 = fact(user, "rv-14").state_changed_at
    assert t3 > t1
    assert entries(g1(), "rv-14") == [(user.pk, t3)]  # replaced, never the first like's time
    row = state_row(g1(), user.pk, "rv-14")
    assert (row.state, row.relation_version, row.liked_at, row.reverse_shard) == (
        "LIKED", 3, t3, reverse_routing.reverse_active().shard_of(user.pk))
    streams.publish_pipeline([v2])  # the late v12 changes nothing
    assert sum(r.stale for r in project_reverse()) == 1
    assert entries(g1(), "rv-14") == [(user.pk, t3)]


def test_t15_a_backlog_replay_orders_by_state_changed_at_not_by_consume_time(make_user, make_video, author):
    early, late = make_user(), make_user()
    make_video("rv-15", author)
    cmd(early, "rv-15", "LIKED")
    cmd(late, "rv-15", "LIKED")
    (e_early,), (e_late,) = envelopes(early.pk, "rv-15"), envelopes(late.pk, "rv-15")
    mark_all_sent()
    published_after = timezone.now()
    streams.publish_pipeline([e_late])  # the backlog: published late, the later like first
    streams.publish_pipeline([e_early])
    consumed_after = timezone.now()
    project_reverse()
    t_early, t_late = fact(early, "rv-15").state_changed_at, fact(late, "rv-15").state_changed_at
    assert t_early < t_late < published_after < consumed_after
    assert entries(g1(), "rv-15") == [(late.pk, t_late), (early.pk, t_early)]  # newest first by the facts' time
    assert state_row(g1(), early.pk, "rv-15").liked_at == t_early


def test_unlike_then_relike_gives_a_new_entry_at_the_new_time(make_user, make_video, author):
    user = make_user()
    make_video("rv-rl", author)
    cmd(user, "rv-rl", "LIKED")
    drain_reverse()
    first = fact(user, "rv-rl").state_changed_at
    cmd(user, "rv-rl", "UNLIKED")
    drain_reverse()
    assert entries(g1(), "rv-rl") == []
    cmd(user, "rv-rl", "LIKED")
    drain_reverse()
    again = fact(user, "rv-rl").state_changed_at
    assert again > first
    assert entries(g1(), "rv-rl") == [(user.pk, again)]
    assert state_row(g1(), user.pk, "rv-rl").relation_version == 3


def test_state_row_and_sort_entry_live_on_the_placement_partition(make_user, make_video, author):
    users = [make_user() for _ in range(8)]
    make_video("rv-place", author)
    for u in users:
        cmd(u, "rv-place", "LIKED")
    drain_reverse()
    gen = reverse_routing.reverse_active()
    for u in users:
        alias = gen.placement[gen.shard_of(u.pk)]
        for other in settings.COUNT_PARTITION_ALIASES:
            here = other == alias
            assert LikeReverseSort.objects.using(other).filter(
                generation=1, video_id="rv-place", user_id=u.pk, reverse_shard=gen.shard_of(u.pk)).exists() == here
            assert LikeReverseProjection.objects.using(other).filter(
                generation=1, video_id="rv-place", user_id=u.pk).exists() == here


# --- receipts and crashes ----------------------------------------------------------------------------


def test_duplicates_are_absorbed_by_receipts(make_user, make_video, author):
    user = make_user()
    make_video("rv-dup", author)
    cmd(user, "rv-dup", "LIKED")
    (v1,) = envelopes(user.pk, "rv-dup")
    mark_all_sent()
    streams.publish_pipeline([v1, v1, v1])
    reports = project_reverse()
    assert (sum(r.applied for r in reports), sum(r.duplicates for r in reports)) == (1, 2)
    assert len(entries(g1(), "rv-dup")) == 1
    assert sum(ReverseEventReceipt.objects.using(a).filter(generation=1).count()
               for a in settings.COUNT_PARTITION_ALIASES) == 3


def test_crash_after_commit_before_checkpoint_does_not_double_anything(make_user, make_video, author):
    user = make_user()
    make_video("rv-crash", author)
    cmd(user, "rv-crash", "LIKED")
    cmd(user, "rv-crash", "UNLIKED")
    cmd(user, "rv-crash", "LIKED")
    publish_all()
    p = streams.partition_for(f"{user.pk}:rv-crash")
    result, batch = apply_then_crash(ReverseIndexProjector(), partition=p)
    assert result.applied == 3
    report = consume_partition(ReverseIndexProjector(), partition=p)
    assert (report.applied, report.duplicates) == (0, 3)
    assert entries(g1(), "rv-crash") == [(user.pk, fact(user, "rv-crash").state_changed_at)]
    assert ConsumerCheckpoint.objects.get(consumer="reverse", partition=p).last_done_id == batch[-1].entry_id


def test_an_old_lease_holder_is_fenced_off(make_user, make_video, author):
    user = make_user()
    make_video("rv-fence", author)
    cmd(user, "rv-fence", "LIKED")
    publish_all()
    p = streams.partition_for(f"{user.pk}:rv-fence")
    batch = streams.read_after(p, "0-0", 100)
    new = ReverseIndexProjector().apply(batch, consumer="reverse", partition=p, token=10)
    assert new.applied == 1
    old = ReverseIndexProjector().apply(batch, consumer="reverse", partition=p, token=9)
    assert old.done == set() and set(old.failed) == {batch[0].entry_id}


# --- T34 (projection part) --------------------------------------------------------------------------


def test_t34_a_deleted_video_still_records_tombstones_and_a_late_like_cannot_revive(make_user, make_video, author):
    # The projector records versions whatever the video's status; serving a deleted video's likers is
    # refused at read time by the likers API (REV-6), and its rows are retired by a job.
    user = make_user()
    make_video("rv-34", author)
    cmd(user, "rv-34", "LIKED")
    cmd(user, "rv-34", "UNLIKED")
    VideoSnapshot.objects.filter(video_id="rv-34").delete()
    v1, v2 = envelopes(user.pk, "rv-34")
    mark_all_sent()
    streams.publish_pipeline([v2])
    project_reverse()
    streams.publish_pipeline([v1])  # the late like, after the deletion
    project_reverse()
    row = state_row(g1(), user.pk, "rv-34")
    assert (row.state, row.relation_version) == ("UNLIKED", 2)
    assert entries(g1(), "rv-34") == []


# --- shadow generations (REV-4) -----------------------------------------------------------------------


def _population(make_user, make_video, author):
    users = [make_user() for _ in range(10)]
    for vid in ("rv-r1", "rv-r2"):
        make_video(vid, author)
    for i, u in enumerate(users):
        cmd(u, "rv-r1", "LIKED")
        if i % 3 == 0:
            cmd(u, "rv-r1", "UNLIKED")
        if i % 4 == 0:
            cmd(u, "rv-r2", "LIKED")
            cmd(u, "rv-r2", "UNLIKED")
            cmd(u, "rv-r2", "LIKED")
    drain_reverse()
    return users


def _rows(generation: int) -> tuple[set, set]:
    sort, state = set(), set()
    for a in settings.COUNT_PARTITION_ALIASES:
        sort |= {(a, *r) for r in LikeReverseSort.objects.using(a).filter(generation=generation).values_list(
            "video_id", "user_id", "liked_at", "reverse_shard")}
        state |= {(a, *r) for r in LikeReverseProjection.objects.using(a).filter(generation=generation).values_list(
            "video_id", "user_id", "state", "relation_version", "liked_at", "updated_at")}
    return sort, state


def test_rebuild_into_a_new_r_gives_the_same_likers_and_leaves_the_old_rows(make_user, make_video, author):
    _population(make_user, make_video, author)
    old_sort, old_state = _rows(1)
    assert len(old_sort) == 6 + 3  # 10 likers of r1 minus 4 unliked, 3 re-likers of r2
    err = io.StringIO()
    call_command("rebuild_reverse_index", "--shards", "4", stderr=err, stdout=io.StringIO())
    assert "relations replayed into generation 2" in err.getvalue() and "generation 2: ACTIVE" in err.getvalue()
    assert dict(ReverseIndexGeneration.objects.values_list("generation", "status")) == {1: "RETIRED", 2: "ACTIVE"}
    new = reverse_routing.reverse_active()
    assert (new.generation, new.shards) == (2, 4)
    new_sort, new_state = _rows(2)
    assert {(v, u, t) for _a, v, u, t, _s in new_sort} == {(v, u, t) for _a, v, u, t, _s in old_sort}
    assert all(s == new.shard_of(u) and a == new.placement[s] for a, _v, u, _t, s in new_sort)
    assert {(v, u, st, ver) for _a, v, u, st, ver, _t, _up in new_state} == {
        (v, u, st, ver) for _a, v, u, st, ver, _t, _up in old_state}
    assert _rows(1) == (old_sort, old_state)  # the old generation is untouched
    audit = AuditRecord.objects.get(action="reverse.rebuild_activate")
    assert (audit.target_id, audit.outcome, audit.params["shards"]) == ("2", "active", 4)


def test_the_projector_writes_the_shadow_generation_from_its_creation(make_user, make_video, author):
    user = make_user()
    make_video("rv-tail", author)
    shadow = reverse_generation_shadow_create(shards=3)
    cmd(user, "rv-tail", "LIKED")
    drain_reverse()
    t = fact(user, "rv-tail").state_changed_at
    assert entries(1, "rv-tail") == [(user.pk, t)]
    assert entries(shadow.generation, "rv-tail") == [(user.pk, t)]


def test_a_failed_rebuild_stays_failed_and_the_old_generation_stays_active(make_user, make_video, author):
    users = _population(make_user, make_video, author)
    report = reverse_index_rebuild(shards=4, fail_after_backfill=True)
    assert report.status == "FAILED"
    assert dict(ReverseIndexGeneration.objects.values_list("generation", "status")) == {1: "ACTIVE", 2: "FAILED"}
    assert reverse_routing.reverse_active().generation == 1
    before_failed = _rows(2)
    cmd(users[1], "rv-r1", "UNLIKED")
    drain_reverse()
    assert (users[1].pk, fact(users[1], "rv-r1").state_changed_at) not in entries(1, "rv-r1")
    assert state_row(1, users[1].pk, "rv-r1").relation_version == 2
    assert _rows(2) == before_failed  # a FAILED generation is no longer written


def test_a_second_rebuild_is_refused_while_a_shadow_exists():
    from likes_project.generations import RebuildRunning

    reverse_generation_shadow_create(shards=4)
    with pytest.raises(RebuildRunning):
        reverse_generation_shadow_create(shards=5)
