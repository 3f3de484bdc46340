"""Creator notifications (issue 31 §2): the `notify` consumer coalesces the likes of each (author, video) into
fixed windows of NOTIFY_WINDOW_S, idempotent by relation version, an unlike before the window's end taking
its like back; the author's list (newest window first, signed cursor, privacy applied when read), mark-read,
unknown videos and self-likes, and the pause switch that leaves the counts flowing (DEG-1 step 2). Likes go
through the real command and the real publisher; the consumer runs its real task, or its projector is handed
the published entries (re-timed where a test needs a window boundary). Each protection has its
counter-example: a projector without the version guard, one whose unlikes cancel after the window, and one that
writes about deleted accounts. A deleted account is erased (issue 31 §4, PRIV-4); the retention rule `notifications`
deletes old windows (PRIV-3)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from counting.notifications import tasks
from counting.notifications.models import NotifyRelation, NotifyWindow
from counting.notifications.projector import NotifyProjector
from counting.notifications.windows import window_of
from likes_project.audit.services import system_actor
from likes_project.cursors import iso_utc
from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint, ConsumerSwitch, DeadLetter
from likes_project.switches import switch_set
from relations.models import AccountStatus, UserPrivacy
from tests.counting.helpers import bucket_sum, envelopes, liked_facts, project_all, publish_all
from tests.counting.notify_kit import (
    ALL_IN_ONE,
    URL,
    S,
    W,
    apply,
    at,
    listed,
    notifications_reset,
    notify_pass,
    published,
    published_for,
    windows,
    windows_of_five_videos,
)
from tests.relations.helpers import assert_error, cmd

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


# --- coalescing, the open window -----------------------------------------------------------------


def test_likes_of_several_users_coalesce_into_one_window_per_video(one_window, make_user, make_video, author, api):
    fans = [make_user() for _ in range(4)]
    make_video("nt-a", author)
    make_video("nt-b", author)
    for fan in fans:
        cmd(fan, "nt-a")
    cmd(fans[0], "nt-b")
    publish_all()
    assert sum(r["applied"] for r in notify_pass()) == 5

    start, end = window_of(dt.datetime.now(dt.UTC), ALL_IN_ONE)
    body = listed(api, author)
    assert body["nextCursor"] is None
    # Both windows end together; which was created first depends on the partitions' order (the users' ids).
    items = sorted(body["items"], key=lambda i: i["videoId"])
    assert [(i["videoId"], i["newLikes"], i["windowStart"], i["windowEnd"], i["read"]) for i in items] == [
        ("nt-a", 4, iso_utc(start), iso_utc(end), False), ("nt-b", 1, iso_utc(start), iso_utc(end), False)]
    names = items[0]["sampleLikers"]
    assert len(names) == 3 and set(names) <= {f.username for f in fans}
    assert listed(api, fans[0])["items"] == []  # only the author is told


def test_an_open_window_is_listed_at_once_and_grows_until_it_ends(one_window, make_user, make_video, author, api):
    make_video("nt-open", author)
    first, second = make_user(), make_user()
    cmd(first, "nt-open")
    publish_all()
    notify_pass()
    [item] = listed(api, author)["items"]
    assert item["newLikes"] == 1 and item["sampleLikers"] == [first.username]
    assert dt.datetime.fromisoformat(item["windowEnd"]) > dt.datetime.now(dt.UTC)  # still open

    cmd(second, "nt-open")
    publish_all()
    notify_pass()
    [item] = listed(api, author)["items"]
    assert item["newLikes"] == 2 and item["sampleLikers"] == [second.username, first.username]  # newest first


# --- idempotency by version ----------------------------------------------------------------------


def _like_unlike_like(make_user, make_video, author):
    """u1 likes then unlikes inside the window (v1, v2); u2 likes (v1). Returns (u1, u2, entries)."""
    make_video("nt-ver", author)
    u1, u2 = make_user(), make_user()
    cmd(u1, "nt-ver")
    cmd(u1, "nt-ver", "UNLIKED")
    cmd(u2, "nt-ver")
    publish_all()
    e = published("nt-ver")
    return u1, u2, {"u1v1": at(e[(u1.pk, 1)], 10), "u1v2": at(e[(u1.pk, 2)], 20), "u2v1": at(e[(u2.pk, 1)], 30)}


def test_duplicates_and_reordering_converge(window, make_user, make_video, author):
    u1, u2, e = _like_unlike_like(make_user, make_video, author)
    apply([e["u1v1"], e["u1v2"], e["u2v1"]])
    expected = {("nt-ver", S): (1, [u2.pk])}
    assert windows() == expected
    result = apply([e["u1v1"], e["u1v2"], e["u2v1"]])  # the same entries again (a replay)
    assert (result.applied, result.duplicates, result.stale) == (0, 2, 1)  # v1 is below the stored v2
    assert windows() == expected

    notifications_reset()
    result = apply([e["u2v1"], e["u1v2"], e["u1v1"]])  # v2 before v1
    assert (result.applied, result.duplicates, result.stale) == (2, 0, 1)
    assert (apply([e["u2v1"]]).duplicates, windows()) == (1, expected)  # and a duplicate delivery
    assert windows() == expected
    assert NotifyRelation.objects.get(user_id=u1.pk).relation_version == 2


def _relike(make_user, make_video, author):
    """A like, an unlike and a like again inside one window (v1, v2, v3). Returns (user, entries by version)."""
    make_video("nt-relike", author)
    fan = make_user()
    for state in ("LIKED", "UNLIKED", "LIKED"):
        cmd(fan, "nt-relike", state)
    publish_all()
    e = published("nt-relike")
    return fan, {v: at(e[(fan.pk, v)], 10 * v) for v in (1, 2, 3)}


def test_an_unlike_cancels_only_a_like_of_a_lower_version(window, make_user, make_video, author):
    fan, e = _relike(make_user, make_video, author)
    apply([e[1], e[3], e[2]])  # v2 arrives last (a redrive): stale, it takes nothing back
    assert windows() == {("nt-relike", S): (1, [fan.pk])}
    notifications_reset()
    apply([e[1], e[2], e[3]])  # in order: the same result
    assert windows() == {("nt-relike", S): (1, [fan.pk])}


class Unguarded(NotifyProjector):
    version_guard = False  # every event applied, whatever version the relation is at


def test_counter_example_without_the_version_guard_a_replayed_like_comes_back(window, make_user, make_video, author):
    u1, u2, e = _like_unlike_like(make_user, make_video, author)
    apply([e["u1v1"], e["u1v2"], e["u2v1"]], Unguarded())
    assert windows() == {("nt-ver", S): (1, [u2.pk])}
    apply([e["u1v1"]], Unguarded())  # a duplicate delivery of the old like
    assert windows() == {("nt-ver", S): (2, sorted([u1.pk, u2.pk]))}  # u1 unliked, yet counted: broken

    notifications_reset()
    apply([e["u1v2"], e["u1v1"]], Unguarded())  # v2 before v1
    assert windows() == {("nt-ver", S): (1, [u1.pk])}  # a like that was taken back: broken


def test_counter_example_without_the_version_guard_a_stale_unlike_cancels_a_newer_like(window, make_user,
                                                                                       make_video, author):
    _fan, e = _relike(make_user, make_video, author)
    apply([e[1], e[3], e[2]], Unguarded())
    assert windows() == {}  # the user likes the video, yet the window lost them: broken


# --- the window rule -----------------------------------------------------------------------------


def _unlikes_around_the_window_end(make_user, make_video, author):
    """In the window [S, S+W): `early` unlikes before its end, `late` exactly at it, `kept` never."""
    make_video("nt-win", author)
    early, late, kept = make_user(), make_user(), make_user()
    for u in (early, late, kept):
        cmd(u, "nt-win")
    for u in (early, late):
        cmd(u, "nt-win", "UNLIKED")
    publish_all()
    e = published("nt-win")
    batch = [at(e[(early.pk, 1)], 10), at(e[(late.pk, 1)], 20), at(e[(kept.pk, 1)], 30),
             at(e[(early.pk, 2)], W - 1), at(e[(late.pk, 2)], W)]
    return early, late, kept, batch


def test_an_unlike_inside_the_window_cancels_its_like_and_one_after_the_window_does_not(window, make_user,
                                                                                       make_video, author):
    early, late, kept, batch = _unlikes_around_the_window_end(make_user, make_video, author)
    apply(batch[:3])
    assert windows() == {("nt-win", S): (3, sorted([early.pk, late.pk, kept.pk]))}
    apply(batch[3:])
    assert windows() == {("nt-win", S): (2, sorted([late.pk, kept.pk]))}
    assert NotifyRelation.objects.get(user_id=late.pk).relation_version == 2  # applied, the window as it was
    # A like again after the window ended opens the next window; the first keeps its count.
    cmd(early, "nt-win")
    publish_all()
    apply([at(published("nt-win")[(early.pk, 3)], W + 5)])
    assert windows() == {("nt-win", S): (2, sorted([late.pk, kept.pk])),
                         ("nt-win", S + dt.timedelta(seconds=W)): (1, [early.pk])}


class CancelsAfterTheWindow(NotifyProjector):
    def cancels(self, current, item) -> bool:
        return True  # the window's end not checked


def test_counter_example_an_unlike_after_the_window_would_rewrite_a_closed_window(window, make_user, make_video,
                                                                                  author):
    _early, _late, kept, batch = _unlikes_around_the_window_end(make_user, make_video, author)
    apply(batch, CancelsAfterTheWindow())
    assert windows() == {("nt-win", S): (1, [kept.pk])}  # `late` unliked after the window closed, yet dropped


# --- privacy when read ---------------------------------------------------------------------------


def test_private_banned_and_deleted_likers_are_counted_but_never_named(one_window, make_user, make_video, author,
                                                                      api):
    make_video("nt-priv", author)
    plain, private, banned, deleted = (make_user() for _ in range(4))
    for u in (plain, private, banned, deleted):
        cmd(u, "nt-priv")
    publish_all()
    notify_pass()
    UserPrivacy.objects.create(user_id=private.pk, likes_private=True)
    AccountStatus.objects.create(user_id=banned.pk, status="banned")
    AccountStatus.objects.create(user_id=deleted.pk, status="deleted")
    [item] = listed(api, author)["items"]
    assert (item["newLikes"], item["sampleLikers"]) == (4, [plain.username])
    UserPrivacy.objects.filter(user_id=private.pk).update(likes_private=False)  # applied when read, not stored
    [item] = listed(api, author)["items"]
    assert item["sampleLikers"] == [private.username, plain.username]


# --- the list: cursor, limit ---------------------------------------------------------------------



def test_the_list_pages_newest_window_first_with_a_signed_cursor(window, make_user, make_video, author, api):
    videos = windows_of_five_videos(make_user, make_video, author)
    client, seen, cursor = api.as_user(author), [], None
    while True:
        resp = client.get(URL, {"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert resp.status_code == 200
        body = resp.json()
        seen.append([i["videoId"] for i in body["items"]])
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert seen == [videos[4:2:-1], videos[2:0:-1], videos[:1]]
    assert listed(api, author, limit=100)["items"][0]["windowStart"] == iso_utc(S + dt.timedelta(seconds=4 * W))


def test_a_tampered_or_foreign_cursor_and_a_limit_outside_1_to_100_are_refused(window, make_user, make_video, author,
                                                                              api):
    windows_of_five_videos(make_user, make_video, author)
    cursor = listed(api, author, limit=1)["nextCursor"]
    client = api.as_user(author)
    tampered = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    for bad in (tampered, "garbage", cursor + "x"):
        assert_error(client.get(URL, {"cursor": bad}), 400, "invalid_cursor")
    assert_error(api.as_user(make_user()).get(URL, {"cursor": cursor}), 400, "invalid_cursor")  # another's
    for limit in ("0", "101", "x", ""):
        assert_error(client.get(URL, {"limit": limit}), 400, "invalid_limit")
    assert api.anonymous().get(URL).status_code == 401


# --- mark read -----------------------------------------------------------------------------------


def test_mark_read_up_to_a_window_end(window, make_user, make_video, author, api):
    videos = windows_of_five_videos(make_user, make_video, author)
    client = api.as_user(author)

    def post(up_to):
        resp = client.post(f"{URL}/read", data=json.dumps({"upTo": up_to}), content_type="application/json")
        assert resp.status_code == 200, resp.content[:300]
        return resp.json()["marked"]

    third_end = iso_utc(S + dt.timedelta(seconds=3 * W))  # the windowEnd of videos[2]
    assert post(third_end) == 3
    assert {i["videoId"]: i["read"] for i in listed(api, author)["items"]} == {
        videos[0]: True, videos[1]: True, videos[2]: True, videos[3]: False, videos[4]: False}
    assert post(third_end) == 0  # already read
    assert post("2030-01-01T00:30:00+00:00") == 0  # same instant in another notation
    # A like added to a read window makes it unread again.
    late_fan = make_user()
    cmd(late_fan, videos[0])
    publish_all()
    apply([at(published_for(late_fan, videos[0]), 60)])
    items = {i["videoId"]: i for i in listed(api, author)["items"]}
    assert (items[videos[0]]["newLikes"], items[videos[0]]["read"]) == (2, False)
    assert post(iso_utc(S + dt.timedelta(days=1))) == 3


@pytest.mark.parametrize("body, code", [
    (b"", "invalid_json"),
    (b"{not json", "invalid_json"),
    (b"[]", "invalid_body"),
    (b"{}", "invalid_up_to"),
    (b'{"upTo": null}', "invalid_up_to"),
    (b'{"upTo": 1735689600}', "invalid_up_to"),
    (b'{"upTo": "yesterday"}', "invalid_up_to"),
    (b'{"upTo": "2030-01-01T00:00:00"}', "invalid_up_to"),  # no time zone
    (b'{"upTo": "2030-13-01T00:00:00Z"}', "invalid_up_to"),  # no such month
])
def test_a_bad_mark_read_body_is_400_with_a_stable_code(body, code, author, api):
    resp = api.as_user(author).post(f"{URL}/read", data=body, content_type="application/json")
    assert_error(resp, 400, code)


# --- what is skipped -----------------------------------------------------------------------------


def test_an_unknown_video_is_done_and_nothing_is_written(make_user, make_video, author):
    fan = make_user()
    make_video("nt-known", author)
    cmd(fan, "nt-known")
    [event] = envelopes(fan.pk, "nt-known")
    ghost = {**event, "videoId": "nt-ghost", "aggregateKey": f"{fan.pk}:nt-ghost"}
    [(_key, entry_id)] = streams.publish_pipeline([ghost])
    partition = streams.partition_for(ghost["aggregateKey"])

    report = tasks.project_notify_task(partition)
    assert report["status"] == "ok" and report["applied"] == 0 and report["dead"] == 0
    assert ConsumerCheckpoint.objects.get(consumer="notify", partition=partition).last_done_id == entry_id
    assert not NotifyRelation.objects.exists() and not NotifyWindow.objects.exists()
    assert not DeadLetter.objects.filter(consumer="notify").exists()


def test_an_author_liking_their_own_video_is_not_notified(one_window, make_video, author, api):
    make_video("nt-self", author)
    cmd(author, "nt-self")
    publish_all()
    assert sum(r["applied"] for r in notify_pass()) == 0
    assert not NotifyRelation.objects.exists() and not NotifyWindow.objects.exists()
    assert listed(api, author)["items"] == []


# --- DEG-1 step 2, DEG-2 -------------------------------------------------------------------------


def test_pausing_notifications_leaves_the_counts_flowing(one_window, make_user, make_video, author, api):
    assert "notify" in ConsumerSwitch.switch_key_choices()  # listed by `switch` and the console
    make_video("nt-pause", author)
    fans = [make_user() for _ in range(3)]
    for fan in fans:
        cmd(fan, "nt-pause")
    publish_all()
    actor = system_actor("test-operator")
    switch_set(kind="consumer", key="notify", paused=True, reason="backlog: counts first", actor=actor)

    assert {r["status"] for r in notify_pass()} == {"paused"}
    assert {r.status for r in project_all()} == {"ok"}
    assert bucket_sum("nt-pause") == liked_facts("nt-pause") == 3  # the counts kept flowing
    assert listed(api, author)["items"] == [] and not NotifyWindow.objects.exists()

    switch_set(kind="consumer", key="notify", paused=False, reason="", actor=actor)
    assert sum(r["applied"] for r in notify_pass()) == 3  # nothing lost: it waited at its checkpoint
    assert [i["newLikes"] for i in listed(api, author)["items"]] == [3]


def test_the_consumer_runs_on_its_own_queue_which_the_worker_consumes():
    """DEG-2: a notification backlog waits on the queue `notify`, not on the count queue."""
    from likes_project.celery import app
    from likes_project.eventlog.registry import CONSUMERS

    assert CONSUMERS["notify"].task == tasks.project_notify_task.name == "notifications.project_partition"
    for name in (tasks.project_notify_task.name, tasks.project_notify_all_task.name):
        assert app.amqp.router.route({}, name)["queue"].name == "notify"
    procfile = (Path(__file__).resolve().parents[2] / "Procfile").read_text()
    worker = next(line for line in procfile.splitlines() if line.startswith("worker:"))
    assert "notify" in worker.split("-Q", 1)[1].split()[0].split(",")


def test_the_console_shows_the_windows_read_only(window, make_user, make_video, author, admin_client):
    windows_of_five_videos(make_user, make_video, author)
    listing = admin_client.get("/admin/notifications/notifywindow/")
    assert listing.status_code == 200 and "nt-page-4" in listing.content.decode()
    pk = NotifyWindow.objects.get(video_id="nt-page-4").pk
    assert admin_client.get(f"/admin/notifications/notifywindow/{pk}/change/").status_code == 200
    assert admin_client.get("/admin/notifications/notifywindow/add/").status_code == 403
    assert admin_client.get(f"/admin/notifications/notifywindow/{pk}/delete/").status_code == 403
