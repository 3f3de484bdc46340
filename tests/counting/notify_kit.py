"""Driving the `notify` consumer in tests (issue 31 §2): the window constants, the real pass task, the published
entries re-timed, a batch handed to the projector as the framework does, and the author's list."""

from __future__ import annotations

import dataclasses
import datetime as dt

from counting.notifications import tasks
from counting.notifications.models import NotifyRelation, NotifyWindow
from counting.notifications.projector import NotifyProjector
from likes_project.cursors import iso_utc
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import ApplyResult
from tests.counting.helpers import publish_all
from tests.relations.helpers import cmd

W = 600
S = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)  # a window start for W = 600 (midnight is on every 600 s boundary)
ALL_IN_ONE = 10**9  # every like made by the test falls in one window (its edges are in 2001 and 2033)
URL = "/v1/me/notifications"


def notify_pass() -> list[dict]:
    """The real pass task of the `notify` consumer over every stream partition."""
    return [tasks.project_notify_task(p) for p in streams.all_partitions()]


def published(video_id: str) -> dict[tuple[int, int], streams.StreamEntry]:
    """Every entry of `video_id` on the stream, by (userId, relationVersion)."""
    out = {}
    for p in streams.all_partitions():
        for e in streams.read_after(p, "0-0", 10_000):
            if e.event["videoId"] == video_id:
                out[(e.event["userId"], e.event["relationVersion"])] = e
    return out


def at(entry: streams.StreamEntry, seconds: float) -> streams.StreamEntry:
    """The entry as if its relation changed `seconds` after S."""
    when = S + dt.timedelta(seconds=seconds)
    return dataclasses.replace(entry, event={**entry.event, "stateChangedAt": iso_utc(when)})


def apply(entries: list[streams.StreamEntry], projector: NotifyProjector | None = None) -> ApplyResult:
    """Hand the entries to the projector as the framework does: a batch per stream partition (entry ids are
    unique within one), in the given order within each; each must be done. Returns the summed result."""
    projector, total = projector or NotifyProjector(), ApplyResult()
    for p in sorted({e.partition for e in entries}):
        batch = [e for e in entries if e.partition == p]
        result = projector.apply(batch, consumer="notify", partition=p, token=1)
        assert not result.failed, result.failed
        assert result.done == {e.entry_id for e in batch}
        total.applied += result.applied
        total.duplicates += result.duplicates
        total.stale += result.stale
    return total


def windows() -> dict[tuple[str, dt.datetime], tuple[int, list[int]]]:
    """Every listed window: (video, start) -> (newLikes, its likers' ids). new_likes always equals the likers."""
    out = {}
    for w in NotifyWindow.objects.all():
        likers = sorted(w.likers.values_list("user_id", flat=True))
        assert w.new_likes == len(likers), (w, likers)
        if w.new_likes:
            out[(w.video_id, w.window_start)] = (w.new_likes, likers)
    return out


def notifications_reset() -> None:
    NotifyWindow.objects.all().delete()
    NotifyRelation.objects.all().delete()


def listed(api, user, **params) -> dict:
    resp = api.as_user(user).get(URL, params)
    assert resp.status_code == 200, resp.content[:300]
    return resp.json()


def windows_of_five_videos(make_user, make_video, author) -> list[str]:
    """One like on each of five videos, each in its own window, the last one newest."""
    fan = make_user()
    videos = [f"nt-page-{i}" for i in range(5)]
    for vid in videos:
        make_video(vid, author)
        cmd(fan, vid)
    publish_all()
    apply([at(published_for(fan, vid), i * W) for i, vid in enumerate(videos)])
    return videos


def published_for(user, video_id: str) -> streams.StreamEntry:
    return published(video_id)[(user.pk, 1)]

