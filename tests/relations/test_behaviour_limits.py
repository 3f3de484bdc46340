"""Risk control's first two layers (issue 32 §1, RISK-1, RISK-2) through HTTP: the gateway's device bucket beside
the user and IP ones (the body's `deviceId` or the `X-Device-Id` header), and the behaviour windows judged before
the transaction: a relation toggled too often, too many distinct videos in a minute, too many devices in an hour.
Each refusal is 429 with its signal and the current relation, writes nothing, lets a recorded command replay, and
leaves other users alone; Redis down fails open, counted. The clock of the windows is pinned, so a minute or an
hour that turns during a test cannot change its outcome. Real PostgreSQL and Redis."""

from __future__ import annotations

import pytest

from likes_project import metrics
from relations.services import limits
from tests.factories import put_like, redis_unreachable
from tests.relations.helpers import assert_error, body_of, shard_rows

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]

NOON = 1_800_000_000.0 + 30  # the middle of a minute, and of an hour


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch):
    monkeypatch.setattr(limits, "_now", lambda: NOON)


@pytest.fixture
def videos(make_video, author):
    for i in range(6):
        make_video(f"beh-{i}", author)
    return [f"beh-{i}" for i in range(6)]


def test_the_device_bucket_spans_accounts_and_other_devices_are_not_affected(settings, api, make_user, videos):
    settings.RATE_LIMIT_DEVICE_BURST, settings.RATE_LIMIT_DEVICE_RATE = 2, 0.001
    phone = [api.as_user(make_user()) for _ in range(3)]
    assert put_like(phone[0], videos[0], "LIKED", "d-1", deviceId="phone-1").status_code == 200
    by_header = phone[1].put(f"/v1/videos/{videos[0]}/like-relation", data='{"desiredState": "LIKED"}',
                             content_type="application/json", HTTP_IDEMPOTENCY_KEY="d-2", HTTP_X_DEVICE_ID="phone-1")
    assert by_header.status_code == 200  # the header names the device when the body does not
    refused = put_like(phone[2], videos[0], "LIKED", "d-3", deviceId="phone-1")
    data = assert_error(refused, 429, "rate_limited")
    assert data["scope"] == "device" and data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 0}
    assert put_like(phone[2], videos[0], "LIKED", "d-4", deviceId="phone-2").status_code == 200  # another device
    assert put_like(phone[2], videos[1], "LIKED", "d-5").status_code == 200  # no device named: no device bucket
    assert shard_rows()["LikeCommand"] == 4


def test_a_relation_toggled_too_often_is_refused_before_the_transaction(settings, api, user, make_user, videos):
    settings.BEHAVIOUR_TOGGLES_MAX, settings.RATE_LIMIT_RELATION_PER_MINUTE = 3, 1000
    client = api.as_user(user)
    for i, state in enumerate(("LIKED", "UNLIKED", "LIKED")):
        assert body_of(put_like(client, videos[0], state, f"t-{i}"))["changed"] is True
    before = shard_rows()
    refused_before = metrics.value("likes_commands_total", outcome="behaviour_limited", action="unlike")
    resp = put_like(client, videos[0], "UNLIKED", "t-3")
    data = assert_error(resp, 429, "behaviour_limited")
    assert (data["signal"], data["limit"]) == ("toggles", 3) and int(resp["Retry-After"]) == data["retryAfterSeconds"]
    assert data["currentRelation"] == {"state": "LIKED", "relationVersion": 3}
    assert shard_rows() == before  # nothing written: no command, no outbox event
    assert metrics.value("likes_commands_total", outcome="behaviour_limited", action="unlike") == refused_before + 1
    # A retry of a command already recorded still gets its verdict back (idempotency first).
    assert body_of(put_like(client, videos[0], "LIKED", "t-2"))["replayed"] is True
    # Another relation of the same user, and another user's same relation, are not affected.
    assert put_like(client, videos[1], "LIKED", "t-4").status_code == 200
    assert put_like(api.as_user(make_user()), videos[0], "LIKED", "t-0").status_code == 200


def test_too_many_distinct_videos_in_a_minute_are_refused(settings, api, user, videos, monkeypatch):
    settings.BEHAVIOUR_VIDEOS_PER_MINUTE_MAX = 3
    client = api.as_user(user)
    for i in range(3):
        assert put_like(client, videos[i], "LIKED", f"v-{i}").status_code == 200
    assert put_like(client, videos[0], "UNLIKED", "v-again").status_code == 200  # a video already counted
    data = assert_error(put_like(client, videos[3], "LIKED", "v-3"), 429, "behaviour_limited")
    assert (data["signal"], data["limit"]) == ("videos_per_minute", 3)
    assert shard_rows()["LikeCommand"] == 4
    monkeypatch.setattr(limits, "_now", lambda: NOON + 60)  # the next minute: a new window
    assert put_like(client, videos[4], "LIKED", "v-4").status_code == 200


def test_too_many_devices_in_an_hour_are_refused(settings, api, user, videos):
    settings.BEHAVIOUR_DEVICES_PER_HOUR_MAX = 2
    client = api.as_user(user)
    assert put_like(client, videos[0], "LIKED", "p-1", deviceId="dev-a").status_code == 200
    assert put_like(client, videos[1], "LIKED", "p-2", deviceId="dev-b").status_code == 200
    assert put_like(client, videos[2], "LIKED", "p-3", deviceId="dev-a").status_code == 200  # one already seen
    data = assert_error(put_like(client, videos[3], "LIKED", "p-4", deviceId="dev-c"), 429, "behaviour_limited")
    assert (data["signal"], data["limit"]) == ("devices_per_hour", 2)
    assert shard_rows()["LikeCommand"] == 3


def test_the_windows_fail_open_when_redis_is_down_counted(settings, user):
    settings.BEHAVIOUR_TOGGLES_MAX = 0  # anything would be refused, if Redis answered
    before = metrics.value("likes_ratelimit_fail_open_total", scope="behaviour")
    with redis_unreachable(settings, streams=False):
        verdict = limits.behaviour_check(user_id=user.pk, video_id="beh-0", device_id="x")
    assert verdict.allowed
    assert metrics.value("likes_ratelimit_fail_open_total", scope="behaviour") == before + 1
    assert not limits.behaviour_check(user_id=user.pk, video_id="beh-0").allowed  # and it answers again
