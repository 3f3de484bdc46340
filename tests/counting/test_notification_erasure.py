"""Creator notifications forget a deleted account (issue 31 §4, PRIV-4) and keep windows only for
NOTIFICATION_RETENTION_DAYS (PRIV-3): the eraser the deletion runs, the projector's skip of deleted accounts
(with its counter-example), the retention rule and the skip of changes older than the retention."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from counting.notifications.models import NotifyRelation, NotifyWindow, NotifyWindowLiker
from counting.notifications.projector import NotifyProjector
from counting.notifications.retention import RULE
from likes_project.cursors import iso_utc
from likes_project.erasure import account_erasers
from likes_project.retention import retention_rule_get
from relations.services.accounts import account_delete
from tests.counting.helpers import publish_all
from tests.counting.notify_kit import (
    S,
    W,
    apply,
    at,
    listed,
    notify_pass,
    published,
    published_for,
    windows,
    windows_of_five_videos,
)
from tests.factories import TEST_ACTOR
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

# --- a deleted account is erased (issue 31 §4, PRIV-4) --------------------------------------------


def delete_account(user) -> dict:
    """The real deletion (AccountStatus deleted, then every like withdrawn by a versioned UNLIKED), its events
    published and consumed, then the eraser the deletion runs after its withdrawal (as registered); its report."""
    account_delete(user_id=user.pk, actor=TEST_ACTOR)
    publish_all()
    notify_pass()
    return account_erasers()["notifications"](user.pk)


def about(user) -> int:
    """Rows that still name the user, as liker or as author."""
    return (NotifyRelation.objects.filter(user_id=user.pk).count() + NotifyWindowLiker.objects.filter(
        user_id=user.pk).count() + NotifyRelation.objects.filter(author_id=user.pk).count()
        + NotifyWindow.objects.filter(author_id=user.pk).count())


def test_a_deleted_account_leaves_the_windows_it_liked_and_loses_its_own(one_window, make_user, make_video, author,
                                                                        api):
    fan, gone = make_user(), make_user()
    make_video("nt-del-both", author)
    make_video("nt-del-only", author)
    make_video("nt-del-own", gone)
    for user, video in ((fan, "nt-del-both"), (gone, "nt-del-both"), (gone, "nt-del-only"), (fan, "nt-del-own")):
        cmd(user, video)
    publish_all()
    notify_pass()
    assert {i["videoId"]: i["newLikes"] for i in listed(api, author)["items"]} == {"nt-del-both": 2, "nt-del-only": 1}

    assert delete_account(gone) == {"likes_removed": 2, "windows_emptied": 1, "notifications_deleted": 1,
                                    "relation_rows_deleted": 3}
    [item] = listed(api, author)["items"]  # the window it alone liked is gone, the other counts it no more
    assert (item["videoId"], item["newLikes"], item["sampleLikers"]) == ("nt-del-both", 1, [fan.username])
    assert about(gone) == 0 and len(windows()) == 1  # its own notifications too; new_likes = likers everywhere
    assert account_erasers()["notifications"](gone.pk) == {  # idempotent
        "likes_removed": 0, "windows_emptied": 0, "notifications_deleted": 0, "relation_rows_deleted": 0}


class KeepsDeletedAccounts(NotifyProjector):
    deleted_accounts_skipped = False


@pytest.mark.parametrize("projector, comes_back", [(NotifyProjector, False), (KeepsDeletedAccounts, True)])
def test_a_late_like_of_a_deleted_account_consumed_after_its_erasure_writes_nothing(projector, comes_back, window,
                                                                                    make_user, make_video, author):
    gone = make_user()
    make_video("nt-del-late", author)
    cmd(gone, "nt-del-late")
    publish_all()
    late_like = at(published("nt-del-late")[(gone.pk, 1)], 10)  # v1
    delete_account(gone)  # v1 and its withdrawal v2 consumed (skipped), then its rows erased
    apply([late_like], projector())  # v1 delivered again, late: the version guard went with the rows
    assert (about(gone) > 0, bool(windows())) == (comes_back, comes_back)  # without the skip: counted again


# --- retention (PRIV-3) --------------------------------------------------------------------------


def test_the_retention_sweep_deletes_the_windows_past_the_cutoff_only(window, make_user, make_video, author):
    assert retention_rule_get("notifications") is RULE
    assert (RULE.setting, RULE.unit, RULE.oldest()) == ("NOTIFICATION_RETENTION_DAYS", "days", None)
    videos = windows_of_five_videos(make_user, make_video, author)  # window i is [S + iW, S + (i+1)W)
    assert RULE.oldest() == S
    cutoff = S + dt.timedelta(seconds=2 * W + 1)  # windows 0 and 1 ended before it
    # Batches of `limit`: the two windows (their likers with them), then their two relation rows (their window
    # gone, last changed before the cutoff); fewer than `limit` means nothing more is due.
    assert [RULE.sweep(cutoff, 1) for _ in range(5)] == [1, 1, 1, 1, 0]
    assert sorted(v for v, _start in windows()) == videos[2:]
    assert sorted(NotifyRelation.objects.values_list("video_id", flat=True)) == videos[2:]
    assert NotifyWindowLiker.objects.count() == 3
    assert RULE.oldest() == S + dt.timedelta(seconds=2 * W)


def test_a_change_older_than_the_retention_is_not_notified(settings, make_user, make_video, author):
    fan = make_user()
    make_video("nt-expired", author)
    cmd(fan, "nt-expired")
    publish_all()
    entry = published_for(fan, "nt-expired")
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=settings.NOTIFICATION_RETENTION_DAYS, seconds=1)
    result = apply([dataclasses.replace(entry, event={**entry.event, "stateChangedAt": iso_utc(old)})])
    assert (result.applied, NotifyRelation.objects.exists(), NotifyWindow.objects.exists()) == (0, False, False)
