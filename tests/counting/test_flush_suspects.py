"""The event-log flush loss (issue 9 §3): each suspect the issue names, with a test that fails on the
code before the fix.

1. The display snapshot took its id at the start while its upsert did not compare it: an older run
   committing last overwrote a newer sum after the newer run had cleared the dirty marks. Runs now
   hold one lease, a run whose lease moved writes nothing, and a video's snapshot id only grows.
2. A failed Redis view write still deleted the dirty marks: the marks now stay (behind the others).
3. The republisher compared entries above the current lowest checkpoint: after a flush the consumers
   read the new entries and moved past the lost ids, so the lost events were never found. It now
   looks above its own watermark (the lowest checkpoint when it last ran), reading each range once.
4. A count-cache rebuild copying an older snapshot after the snapshot job wrote a newer view.
5. Trimming and archiving ignored consumers with no checkpoint row yet (tests/counting/
   test_stream_contract.py and tests/relations/test_publisher.py hold those counter-examples).
"""

from __future__ import annotations

import pytest
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError

from counting import cache
from counting.models import DirtyVideo, VideoDisplayCount
from counting.selectors import count_cache_generations_get
from counting.services import snapshots
from counting.services.count_cache import layers
from likes_project import leases
from likes_project.eventlog import streams
from likes_project.redis_client import stream_redis
from relations.services import outbox
from tests.counting.helpers import consume_everything, drain, lease_expire, liked_facts, publish_all
from tests.flush import redis_flush
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


@pytest.fixture
def video(make_user, make_video):
    return make_video("flush-v", make_user())


def display(video_id: str) -> int | None:
    return VideoDisplayCount.objects.filter(video_id=video_id).values_list("display_count", flat=True).first()


def dirty(video_id: str) -> int:
    return sum(DirtyVideo.objects.using(a).filter(video_id=video_id).count() for a in settings.COUNT_PARTITION_ALIASES)


def view(video_id: str):
    gen = count_cache_generations_get(fresh=True).active
    return cache.views_read(gen, [video_id]).get(video_id)


def test_an_older_snapshot_run_that_commits_last_cannot_overwrite_a_newer_sum(make_user, video, monkeypatch):
    users = [make_user() for _ in range(3)]
    for u in users[:2]:
        cmd(u, video.video_id, "LIKED")
    drain()
    real_refresh = snapshots._refresh
    state = {"paused": False}

    def slow_old_run(grant, *, limit):
        """Run A has read its sums (2) and stalls before its upsert; meanwhile its lease runs out, a
        third like lands and run B refreshes the video to 3 and clears the marks."""
        real_get = snapshots.checkpoints_get

        def stall(consumer):
            if not state["paused"]:
                state["paused"] = True
                lease_expire(grant)
                cmd(users[2], video.video_id, "LIKED")
                drain()
                monkeypatch.setattr(snapshots, "checkpoints_get", real_get)
                assert snapshots.display_snapshot_refresh(holder="run-b").status == "ok"
                assert display(video.video_id) == 3 and dirty(video.video_id) == 0
            return real_get(consumer)

        monkeypatch.setattr(snapshots, "checkpoints_get", stall)
        return real_refresh(grant, limit=limit)

    monkeypatch.setattr(snapshots, "_refresh", slow_old_run)
    report = snapshots.display_snapshot_refresh(holder="run-a")
    assert report.status == "lease_lost"  # A's upsert is refused: it no longer holds the snapshot lease
    assert display(video.video_id) == liked_facts(video.video_id) == 3


def test_a_second_snapshot_run_is_busy_while_one_runs(make_user, video):
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    holder = leases.lease_acquire(resource=snapshots.SNAPSHOT_LEASE, holder="someone", ttl_s=30)
    assert snapshots.display_snapshot_refresh().status == "busy"
    assert display(video.video_id) is None and dirty(video.video_id) == 1  # nothing written, marks kept
    leases.lease_release(holder)
    assert snapshots.display_snapshot_refresh().status == "ok"
    assert display(video.video_id) == 1 and dirty(video.video_id) == 0


def test_a_refresh_with_nothing_dirty_returns_without_the_lease(make_user, video):
    """D139: an idle run (the beat's, every second) looks for dirty marks first and takes no lease when there are
    none; with one mark it asks for the lease as before (the counter-example: here another run holds it)."""
    holder = leases.lease_acquire(resource=snapshots.SNAPSHOT_LEASE, holder="someone", ttl_s=30)
    report = snapshots.display_snapshot_refresh()
    assert (report.status, report.videos) == ("ok", 0)  # not "busy": it never asked
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    assert snapshots.display_snapshot_refresh().status == "busy"
    leases.lease_release(holder)


def test_a_video_snapshot_id_only_grows_even_against_a_clock_behind(make_user, video):
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    snapshots.display_snapshot_refresh()
    ahead = VideoDisplayCount.objects.get(video_id=video.video_id).snapshot_id + 10**12  # a host whose clock ran ahead
    VideoDisplayCount.objects.filter(video_id=video.video_id).update(snapshot_id=ahead)
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    snapshots.display_snapshot_refresh()
    row = VideoDisplayCount.objects.get(video_id=video.video_id)
    assert (row.snapshot_id, row.display_count) == (ahead + 1, 2)
    assert view(video.video_id)[:2] == (2, ahead + 1)  # so the view takes it too


def test_a_failed_view_write_keeps_the_dirty_marks_and_the_next_run_writes_the_view(make_user, video, monkeypatch):
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    snapshots.display_snapshot_refresh()
    assert view(video.video_id)[0] == 1
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    real = layers.count_cache_views_write
    monkeypatch.setattr(layers, "count_cache_views_write", lambda **kw: (_ for _ in ()).throw(RedisConnectionError()))
    assert snapshots.display_snapshot_refresh().status == "views_failed"
    assert display(video.video_id) == 2  # the durable snapshot is current ...
    assert view(video.video_id)[0] == 1  # ... the view is not ...
    assert dirty(video.video_id) == 1  # ... and its marks stay, so it is written again
    monkeypatch.setattr(layers, "count_cache_views_write", real)
    assert snapshots.display_snapshot_refresh().status == "ok"
    assert view(video.video_id)[0] == 2 and dirty(video.video_id) == 0


def test_a_rebuild_copying_an_older_snapshot_cannot_replace_a_newer_view(make_user, video):
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    snapshots.display_snapshot_refresh()
    old = VideoDisplayCount.objects.get(video_id=video.video_id)
    cmd(make_user(), video.video_id, "LIKED")
    drain()
    snapshots.display_snapshot_refresh()
    gen = count_cache_generations_get(fresh=True).active
    # The rebuild read the old row before the snapshot job committed the new one, and writes it now.
    assert cache.views_write(gen, [(video.video_id, old.display_count, old.snapshot_id, "2026-01-01T00:00:00Z")]) == 0
    assert view(video.video_id)[0] == 2


def test_the_republisher_finds_a_flushed_tail_the_consumers_have_passed_reading_each_range_once(
        make_user, video, monkeypatch):
    users = [make_user() for _ in range(8)]
    for u in users[:2]:
        cmd(u, video.video_id, "LIKED")
    publish_all()
    consume_everything()
    for alias in settings.RELATION_SHARD_ALIASES:  # a check ran before the flush: its watermark stays
        assert outbox.outbox_republish_lost(alias=alias, older_than_s=0).republished == 0
    for u in users[2:6]:
        cmd(u, video.video_id, "LIKED")
    publish_all()  # published, not consumed ...
    redis_flush(stream_redis())  # ... and the event-log Redis is flushed
    for u in users[6:]:
        cmd(u, video.video_id, "LIKED")
    publish_all()  # new traffic recreates the streams, with ids after the lost ones ...
    consume_everything()  # ... and the consumers' checkpoints move past the lost ids
    calls = []
    real = stream_redis().xrange

    def counting_xrange(name, *args, **kwargs):
        calls.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(stream_redis(), "xrange", counting_xrange)
    found = 0
    for alias in settings.RELATION_SHARD_ALIASES:
        calls.clear()
        found += outbox.outbox_republish_lost(alias=alias, older_than_s=0).republished
        per_key = {k: calls.count(k) for k in set(calls)}
        assert all(n == 1 for n in per_key.values()), per_key  # one read of each partition's range per shard
    assert found == 4
    monkeypatch.setattr(stream_redis(), "xrange", real)
    drain()
    snapshots.display_snapshot_refresh()
    assert display(video.video_id) == liked_facts(video.video_id) == 8
    assert streams.all_partitions()


@pytest.mark.parametrize("lookback_s", [900, 0])
def test_a_first_check_after_a_flush_the_consumers_have_passed_still_finds_the_lost_rows(
        make_user, video, settings, lookback_s):
    """The drill's order (issue 10's CI failure): the log is flushed before the shard's first check
    ever ran, and the consumers are past the lost ids by then, so the checkpoints alone would start
    the watermark above them. With no look-back (the counter-example) they stay lost for good."""
    from relations.events import aggregate_key

    settings.OUTBOX_LOST_TAIL_LOOKBACK_S = lookback_s
    lost = [make_user() for _ in range(4)]
    for u in lost:
        cmd(u, video.video_id, "LIKED")
    publish_all()  # published, not consumed ...
    redis_flush(stream_redis())  # ... the event-log Redis is flushed before any lost-tail check ran
    # Then new traffic on every partition, so every consumer's checkpoint moves past the lost ids.
    uncovered, later = set(streams.all_partitions()), 0
    while uncovered:
        u = make_user()
        cmd(u, video.video_id, "LIKED")
        uncovered.discard(streams.partition_for(aggregate_key(u.pk, video.video_id)))
        later += 1
    publish_all()
    consume_everything()
    found = sum(outbox.outbox_republish_lost(alias=a, older_than_s=0).republished
                for a in settings.RELATION_SHARD_ALIASES)
    drain()
    snapshots.display_snapshot_refresh()
    if lookback_s:
        assert found == 4
        assert display(video.video_id) == liked_facts(video.video_id) == 4 + later
    else:
        assert found == 0 and display(video.video_id) == later < liked_facts(video.video_id)


def test_the_watermark_stays_below_rows_too_young_to_check_and_they_are_checked_later(make_user, video):
    from likes_project.eventlog.models import LostTailWatermark

    for alias in settings.RELATION_SHARD_ALIASES:  # the first check sets the watermarks
        outbox.outbox_republish_lost(alias=alias, older_than_s=0)
    users = [make_user() for _ in range(4)]
    for u in users:
        cmd(u, video.video_id, "LIKED")
    publish_all()
    redis_flush(stream_redis())
    for u in [make_user() for _ in range(2)]:
        cmd(u, video.video_id, "LIKED")
    publish_all()
    consume_everything()  # past the lost ids
    for alias in settings.RELATION_SHARD_ALIASES:  # every lost row is still too young: nothing checked yet
        assert outbox.outbox_republish_lost(alias=alias, older_than_s=3600).republished == 0
    assert all(len(mark) <= 32 for mark in LostTailWatermark.objects.values_list("checked_above", flat=True))
    found = sum(outbox.outbox_republish_lost(alias=a, older_than_s=0).republished
                for a in settings.RELATION_SHARD_ALIASES)
    assert found == 4  # the watermark waited below them
    drain()
    snapshots.display_snapshot_refresh()
    assert display(video.video_id) == liked_facts(video.video_id) == 6
