"""The projector-maintained "recent likers" summary (REV-10), the retirement job for deleted videos
(issue 5 §3) and the reverse consumer's lag on /metrics, against real partitions and streams. The index
is built by the real publisher and reverse projector."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import CaptureQueriesContext

from counting import cache as count_cache
from counting import routing as reverse_routing
from counting.models import (
    CountCacheGeneration,
    LikeReverseProjection,
    LikeReverseRecent,
    LikeReverseSort,
    VideoDisplayCount,
)
from counting.services.reverse.projector import RECENT_KEEP
from counting.services.reverse.retire import reverse_index_retire_deleted
from counting.tasks import display_snapshot_task, retire_deleted_videos_task
from likes_project.eventlog import streams
from relations import routing as relation_routing
from relations.models import LikeRelation, UserPrivacy
from tests.counting.helpers import drain, drain_reverse, publish_all
from tests.metrics_helpers import scrape_text
from tests.relations.helpers import cmd

# Transactional: the publisher only takes rows whose transaction has committed.
pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def gen():
    return reverse_routing.reverse_active()


def recent(video_id: str, alias: str | None = None) -> dict[int, object]:
    """user_id -> liked_at of the summary rows of a video (one partition, or all of them)."""
    out = {}
    for a in [alias] if alias else settings.COUNT_PARTITION_ALIASES:
        out.update(LikeReverseRecent.objects.using(a).filter(generation=gen().generation, video_id=video_id)
                   .values_list("user_id", "liked_at"))
    return out


def newest_sort(video_id: str, alias: str, k: int) -> dict[int, object]:
    rows = LikeReverseSort.objects.using(alias).filter(generation=gen().generation, video_id=video_id).order_by(
        "-liked_at", "-user_id").values_list("user_id", "liked_at")[:k]
    return dict(rows)


def changed_at(user, video_id):
    return LikeRelation.objects.using(relation_routing.alias_for_user(user.pk)).get(
        user_id=user.pk, video_id=video_id).state_changed_at


def test_summary_follows_like_unlike_and_relike(make_user, make_video):
    author, u = make_user(), make_user()
    make_video("rs-one", author)
    cmd(u, "rs-one", "LIKED")
    drain_reverse()
    alias = gen().alias_of(u.pk)
    first = changed_at(u, "rs-one")
    assert recent("rs-one", alias) == {u.pk: first}
    assert recent("rs-one") == {u.pk: first}  # and nowhere else

    cmd(u, "rs-one", "UNLIKED")
    drain_reverse()
    assert recent("rs-one") == {}

    cmd(u, "rs-one", "LIKED")
    drain_reverse()
    second = changed_at(u, "rs-one")
    assert second > first
    assert recent("rs-one") == {u.pk: second}  # moved to the re-like's stateChangedAt


def test_summary_keeps_only_the_newest_k_per_partition_and_refills(make_user, make_video):
    author = make_user()
    make_video("rs-many", author)
    g = gen()
    per_alias: dict[str, list] = {a: [] for a in settings.COUNT_BOOTSTRAP_PARTITIONS}  # where reverse shards live
    while min(len(v) for v in per_alias.values()) < RECENT_KEEP + 2:
        u = make_user()
        cmd(u, "rs-many", "LIKED")
        per_alias[g.alias_of(u.pk)].append(u)
    drain_reverse()
    for alias, users in per_alias.items():
        assert LikeReverseSort.objects.using(alias).filter(generation=g.generation, video_id="rs-many").count() \
            == len(users) > RECENT_KEEP
        kept = recent("rs-many", alias)
        assert len(kept) == RECENT_KEEP
        assert kept == newest_sort("rs-many", alias, RECENT_KEEP)
        assert set(kept) == {u.pk for u in users[-RECENT_KEEP:]}

    # A kept liker leaves: the partition's summary is refilled from its own sort entries.
    alias = settings.COUNT_PARTITION_ALIASES[0]
    gone = per_alias[alias][-1]
    cmd(gone, "rs-many", "UNLIKED")
    drain_reverse()
    kept = recent("rs-many", alias)
    assert gone.pk not in kept
    assert len(kept) == RECENT_KEEP
    assert kept == newest_sort("rs-many", alias, RECENT_KEEP)
    assert per_alias[alias][-RECENT_KEEP - 1].pk in kept  # the refilled one


def test_recent_endpoint_reads_the_summary_not_the_sort_index(make_user, make_video, api):
    author = make_user()
    make_video("rs-api", author, visibility="public")
    users = [make_user() for _ in range(6)]
    for u in users:
        cmd(u, "rs-api", "LIKED")
    drain_reverse()
    UserPrivacy.objects.create(user_id=users[-2].pk, likes_private=True)  # the second newest liker
    client = api.as_user(author)
    captures = [CaptureQueriesContext(connections[a]) for a in ["default", *settings.COUNT_PARTITION_ALIASES]]
    for c in captures:
        c.__enter__()
    try:
        r = client.get("/v1/videos/rs-api/likers/recent")
    finally:
        for c in captures:
            c.__exit__(None, None, None)
    assert r.status_code == 200, r.content
    assert [i["userId"] for i in r.json()["items"]] == [users[-1].pk, users[-3].pk, users[-4].pk]
    sql = [q["sql"] for c in captures for q in c.captured_queries]
    assert not [s for s in sql if LikeReverseSort._meta.db_table in s]
    assert sum(LikeReverseRecent._meta.db_table in s for s in sql) == len(settings.COUNT_PARTITION_ALIASES)

    # The summary, not the sort index, is what is served: without it, nothing is returned.
    for alias in settings.COUNT_PARTITION_ALIASES:
        LikeReverseRecent.objects.using(alias).filter(video_id="rs-api").delete()
    assert client.get("/v1/videos/rs-api/likers/recent").json()["items"] == []


def _rows(video_id: str) -> dict[str, int]:
    out = {"state": 0, "sort": 0, "recent": 0}
    for alias in settings.COUNT_PARTITION_ALIASES:
        out["state"] += LikeReverseProjection.objects.using(alias).filter(video_id=video_id).count()
        out["sort"] += LikeReverseSort.objects.using(alias).filter(video_id=video_id).count()
        out["recent"] += LikeReverseRecent.objects.using(alias).filter(video_id=video_id).count()
    return out


def test_retirement_removes_a_deleted_videos_rows_and_leaves_others(make_user, make_video):
    author = make_user()
    make_video("rs-dead", author)
    make_video("rs-live", author)
    users = [make_user() for _ in range(8)]
    for u in users:
        cmd(u, "rs-dead", "LIKED")
        cmd(u, "rs-live", "LIKED")
    cmd(users[0], "rs-dead", "UNLIKED")  # a tombstone too
    drain_reverse()
    assert _rows("rs-dead") == {"state": 8, "sort": 7, "recent": 7}
    live = _rows("rs-live")
    assert live == {"state": 8, "sort": 8, "recent": 8}

    assert reverse_index_retire_deleted(limit=1000).videos == 0  # nothing deleted yet: nothing retired
    assert _rows("rs-dead")["state"] == 8

    make_video("rs-dead", author, status="deleted")
    first = reverse_index_retire_deleted(limit=2)  # small chunks: progress, and more to do
    assert first.videos == 1 and first.more
    assert sum(sum(c.values()) for c in first.deleted.values()) > 0
    assert sum(_rows("rs-dead").values()) > 0
    result = retire_deleted_videos_task.run(limit=2, rounds=50)
    assert result["more"] is False
    assert _rows("rs-dead") == {"state": 0, "sort": 0, "recent": 0}
    assert _rows("rs-live") == live
    again = reverse_index_retire_deleted(limit=1000)  # idempotent
    assert not again.more and all(n == 0 for c in again.deleted.values() for n in c.values())


def _lag_lines(text: str, family: str) -> dict[str, int]:
    pat = re.compile(rf'^{family}{{consumer="reverse",partition="(\d+)"}} (\S+)$', re.M)
    return {p: float(v) for p, v in pat.findall(text)}


def test_metrics_show_the_reverse_consumer_lag(make_user, make_video, client):
    author, u, v = make_user(), make_user(), make_user()
    make_video("rs-lag", author)
    assert _lag_lines(scrape_text(client), "likes_consumer_lag_entries") == {}

    cmd(u, "rs-lag", "LIKED")
    drain_reverse()
    text = scrape_text(client)
    entries = _lag_lines(text, "likes_consumer_lag_entries")
    assert set(entries) == {str(p) for p in streams.all_partitions()}
    assert set(entries.values()) == {0}
    assert set(_lag_lines(text, "likes_consumer_lag_seconds").values()) == {0}

    cmd(v, "rs-lag", "LIKED")
    publish_all()  # published, not yet consumed by the reverse projector
    p = str(streams.partition_for(f"{v.pk}:rs-lag"))
    text = scrape_text(client)
    assert _lag_lines(text, "likes_consumer_lag_entries")[p] >= 1


def test_retirement_also_stops_serving_a_deleted_videos_count(make_user, make_video):
    author = make_user()
    make_video("ret-gone", author)
    make_video("ret-kept", author)
    for video_id in ("ret-gone", "ret-kept"):
        cmd(make_user(), video_id, "LIKED")
    drain()
    display_snapshot_task()
    gen = CountCacheGeneration.objects.get(status="ACTIVE").generation
    assert count_cache.view_read(gen, "ret-gone") is not None
    make_video("ret-gone", author, status="deleted")
    result = retire_deleted_videos_task()
    assert result["counts"]["snapshots"] == 1 and result["counts"]["views"] == 1
    assert not VideoDisplayCount.objects.filter(video_id="ret-gone").exists()
    assert count_cache.view_read(gen, "ret-gone") is None
    assert VideoDisplayCount.objects.filter(video_id="ret-kept").exists()  # others untouched
    assert count_cache.view_read(gen, "ret-kept") is not None
    assert retire_deleted_videos_task()["counts"] == {"snapshots": 0, "views": 0, "dirty": 0}
