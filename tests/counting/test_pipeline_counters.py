"""The counters the spec's metric list adds (issue 32 §2): commands split like / unlike (M1), version jumps (M8) and
abnormal bucket jumps (M12) counted by the live count projector, and a snapshot's problems by kind (M7, M12). Each
with its counter-example. Real PostgreSQL, Redis and the real projector."""

from __future__ import annotations

import pytest

from likes_project import metrics
from tests.counting.helpers import drain, project_all, stream_event
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]




def test_commands_are_counted_like_and_unlike_apart(make_user, make_video):
    make_video("pc-v", make_user())
    user = make_user()

    def count(outcome, action):
        return metrics.value("likes_commands_total", outcome=outcome, action=action)

    before = {k: count(*k) for k in (("changed", "like"), ("changed", "unlike"), ("unchanged", "unlike"))}
    cmd(user, "pc-v", "LIKED")
    cmd(user, "pc-v", "UNLIKED")
    cmd(user, "pc-v", "UNLIKED")  # no change: counted as an unlike that changed nothing
    assert {k: count(*k) - v for k, v in before.items()} == {
        ("changed", "like"): 1, ("changed", "unlike"): 1, ("unchanged", "unlike"): 1}


def test_a_version_that_skips_one_is_counted_and_consecutive_ones_are_not(make_user):
    before = metrics.value("likes_version_jumps_total", consumer="count")
    stream_event(9001, "pc-jump", 1, "LIKED")
    stream_event(9001, "pc-jump", 2, "UNLIKED")  # consecutive: no jump
    project_all()
    assert metrics.value("likes_version_jumps_total", consumer="count") == before
    stream_event(9001, "pc-jump", 4, "LIKED")  # v3 is missing (late, or never): one jump
    stream_event(9002, "pc-jump", 2, "LIKED")  # a relation first seen at v2: v1 never arrived, a jump too
    project_all()
    assert metrics.value("likes_version_jumps_total", consumer="count") == before + 2


def test_a_bucket_moving_past_the_threshold_in_one_group_is_counted(make_user, make_video, settings):
    make_video("pc-bulk", make_user())
    users = [make_user() for _ in range(6)]
    settings.BUCKET_JUMP_ALERT = 10**6  # the counter-example first: nothing moves that far
    before = metrics.value("likes_bucket_jumps_total", consumer="count")
    for user in users[:3]:
        cmd(user, "pc-bulk")
    drain()
    assert metrics.value("likes_bucket_jumps_total", consumer="count") == before
    settings.BUCKET_JUMP_ALERT = 1  # every bucket that moved at all
    for user in users[3:]:
        cmd(user, "pc-bulk")
    drain()
    jumped = metrics.value("likes_bucket_jumps_total", consumer="count") - before
    assert 1 <= jumped <= 3  # one per bucket that moved (three likes, at most three buckets)


def test_command_latency_and_stale_versions_are_counted(make_user, make_video, api):
    """M2 (the command's own latency histogram) and M5 (commands carrying a stale version), each moving only when
    its event happens."""
    from tests.factories import put_like

    make_video("pc-m", make_user())
    client = api.as_user(make_user())
    timed = metrics.value("likes_command_duration_seconds_count", status_class="2xx")
    stale = metrics.value("likes_commands_total", outcome="stale_base", action="unlike")
    assert put_like(client, "pc-m", "LIKED", "m-1").status_code == 200
    assert metrics.value("likes_command_duration_seconds_count", status_class="2xx") == timed + 1
    assert metrics.value("likes_commands_total", outcome="stale_base", action="unlike") == stale
    assert put_like(client, "pc-m", "UNLIKED", "m-2", baseVersion=0).status_code == 409  # v1 is current
    assert metrics.value("likes_commands_total", outcome="stale_base", action="unlike") == stale + 1
    assert metrics.value("likes_command_duration_seconds_count", status_class="4xx") >= 1
