"""New-like rules (INV-7, SEC-2), the visibility snapshot cache (CMD-12) and abuse limits (CMD-18)."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from likes_project import metrics
from likes_project.audit.models import AuditRecord
from likes_project.errors import RateLimited
from relations import cache, selectors
from relations.errors import BlockedByAuthor, VideoFriendsOnly, VideoNotFound, VideoTakenDown
from relations.services import limits
from relations.services.commands import relation_set_state
from relations.services.social import block_set, friendship_set
from tests.factories import TEST_ACTOR, put_like, redis_unreachable
from tests.relations.helpers import nothing_written, relation_row

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]


def like(user, video_id, key="op-1", desired="LIKED"):
    return relation_set_state(user_id=user.pk, video_id=video_id, desired_state=desired, operation_id=key)


@pytest.fixture
def author(make_user):
    return make_user("author")


@pytest.fixture
def fan(make_user):
    return make_user("fan")


# --- visibility matrix --------------------------------------------------------------------------

CASES = [
    # visibility, status, how the viewer stands to the author, expected error (None = allowed)
    ("public", "active", set(), None),
    ("public", "active", {"is_author"}, None),
    ("friends", "active", {"friends"}, None),
    ("friends", "active", {"is_author"}, None),
    ("friends", "active", set(), VideoFriendsOnly),
    ("private", "active", {"friends"}, VideoNotFound),
    ("private", "active", {"is_author"}, None),
    ("public", "taken_down", set(), VideoTakenDown),
    ("private", "taken_down", set(), VideoNotFound),
    ("public", "deleted", set(), VideoNotFound),
    ("public", "deleted", {"is_author"}, VideoNotFound),
    ("public", "active", {"blocked"}, BlockedByAuthor),
    ("friends", "active", {"friends", "blocked"}, BlockedByAuthor),
]


def _case_id(case) -> str:
    visibility, status, relation, error = case
    return "-".join([visibility, status, "+".join(sorted(relation)) or "stranger",
                     error.__name__ if error else "allowed"])


@pytest.mark.parametrize(("visibility", "status", "relation", "error"), CASES, ids=[_case_id(c) for c in CASES])
def test_new_like_rules(author, fan, make_video, visibility, status, relation, error):
    make_video("v1", author, visibility=visibility, status=status)
    if "friends" in relation:
        friendship_set(user_a=author.pk, user_b=fan.pk, present=True, actor=TEST_ACTOR)
    if "blocked" in relation:
        block_set(blocker_id=author.pk, blocked_id=fan.pk, present=True, actor=TEST_ACTOR)
    viewer = author if "is_author" in relation else fan
    if error is None:
        assert like(viewer, "v1").result.state == "LIKED"
    else:
        with pytest.raises(error):
            like(viewer, "v1")
        assert nothing_written()


def test_missing_video_is_404_and_writes_nothing(fan):
    with pytest.raises(VideoNotFound):
        like(fan, "never-pushed")
    assert nothing_written()


def test_block_in_the_other_direction_does_not_stop_the_like(author, fan, make_video):
    make_video("v1", author)
    block_set(blocker_id=fan.pk, blocked_id=author.pk, present=True, actor=TEST_ACTOR)
    assert like(fan, "v1").changed


def test_unlike_is_allowed_after_takedown_but_a_new_like_is_not(author, fan, make_video):
    make_video("v1", author)
    like(fan, "v1", "op-1")
    make_video("v1", author, status="taken_down")
    unliked = like(fan, "v1", "op-2", desired="UNLIKED")
    assert (unliked.result.state, unliked.result.relation_version, unliked.changed) == ("UNLIKED", 2, True)
    with pytest.raises(VideoTakenDown):
        like(fan, "v1", "op-3")


def test_unlike_of_an_invisible_video_never_liked_is_a_harmless_no_op(author, fan, make_video):
    make_video("secret", author, visibility="private")
    result = like(fan, "secret", desired="UNLIKED")
    assert (result.result.state, result.result.relation_version, result.changed) == ("UNLIKED", 0, False)
    assert relation_row(fan.pk, "secret") is None


# --- the visibility snapshot and its cache ------------------------------------------------------


def test_a_lower_or_equal_version_push_is_ignored(author, make_video):
    make_video("v1", author, version=5)
    assert make_video("v1", author, status="deleted", version=4).status == "active"
    assert make_video("v1", author, status="deleted", version=5).status == "active"
    assert make_video("v1", author, status="deleted", version=6).status == "deleted"
    outcomes = list(AuditRecord.objects.filter(action="video.upsert").values_list("outcome", flat=True))
    assert sorted(outcomes) == ["applied", "applied", "ignored_not_newer", "ignored_not_newer"]


def test_a_push_takes_effect_at_once_even_with_a_warm_cache(author, fan, make_user, make_video):
    make_video("v1", author)
    other = make_user()
    like(other, "v1", "warm")  # the snapshot is now cached
    assert cache.visibility_cache_get("v1")["status"] == "active"
    make_video("v1", author, status="taken_down")
    with pytest.raises(VideoTakenDown):
        like(fan, "v1")


def test_friendship_and_block_changes_invalidate_the_edge_cache(author, fan, make_video):
    make_video("v1", author, visibility="friends")
    with pytest.raises(VideoFriendsOnly):
        like(fan, "v1", "op-1")  # caches "not friends"
    friendship_set(user_a=fan.pk, user_b=author.pk, present=True, actor=TEST_ACTOR)
    assert like(fan, "v1", "op-2").changed
    block_set(blocker_id=author.pk, blocked_id=fan.pk, present=True, actor=TEST_ACTOR)
    like(fan, "v1", "op-3", desired="UNLIKED")
    with pytest.raises(BlockedByAuthor):
        like(fan, "v1", "op-4")


def test_a_slow_reader_cannot_overwrite_a_newer_cached_snapshot(author, make_video):
    """Cache entries are ordered by the row's revision, which every applied push (and operator
    override, D50) grows: a reader that loaded revision 3 cannot overwrite revision 4."""
    for version in (1, 2, 3, 7):
        make_video("v1", author, version=version)
    assert cache.visibility_cache_get("v1")["revision"] == 4
    cache.visibility_cache_put("v1", 3, {"author_id": author.pk, "visibility": "public", "status": "active",
                                         "version": 3, "revision": 3})
    assert (cache.visibility_cache_get("v1")["version"], cache.visibility_cache_get("v1")["revision"]) == (7, 4)


def test_the_cached_snapshot_always_expires(author, make_video):
    from likes_project.redis_client import cache_redis

    make_video("v1", author)
    ttl_ms = cache_redis().pttl(cache.visibility_key("v1"))
    assert 0 < ttl_ms <= 1.2 * 5000 + 1


def test_snapshot_reads_fall_back_to_the_database_when_redis_is_down(author, fan, make_video, settings):
    make_video("v1", author, status="taken_down")
    with redis_unreachable(settings, streams=False):
        assert selectors.video_snapshot_get(video_id="v1").status == "taken_down"
        with pytest.raises(VideoTakenDown):
            like(fan, "v1")


# --- abuse limits -------------------------------------------------------------------------------


def test_relation_limit_refuses_the_21st_effective_transition_with_the_current_relation(author, fan, make_video):
    make_video("v1", author)
    for i in range(20):
        like(fan, "v1", f"op-{i}", desired="LIKED" if i % 2 == 0 else "UNLIKED")
    assert relation_row(fan.pk, "v1").relation_version == 20  # now UNLIKED v20
    with pytest.raises(RateLimited) as err:
        like(fan, "v1", "op-20", desired="LIKED")
    assert err.value.http_status == 429
    assert err.value.extra["currentRelation"] == {"state": "UNLIKED", "relationVersion": 20}
    assert int(err.value.headers["Retry-After"]) >= 1
    assert relation_row(fan.pk, "v1").relation_version == 20
    # Counter-example: a command that would not change anything is still answered normally.
    same = like(fan, "v1", "op-21", desired="UNLIKED")
    assert (same.result.state, same.changed) == ("UNLIKED", False)


def test_relation_limit_is_per_relation(author, fan, make_video):
    make_video("v1", author)
    make_video("v2", author)
    for i in range(20):
        like(fan, "v1", f"a-{i}", desired="LIKED" if i % 2 == 0 else "UNLIKED")
    assert like(fan, "v2", "b-0").changed


def test_user_limit_over_http_answers_429_with_retry_after_and_current_relation(author, fan, make_video, api,
                                                                                  settings):
    settings.RATE_LIMIT_USER_RATE = 1.0
    settings.RATE_LIMIT_USER_BURST = 3
    make_video("v1", author)
    client = api.as_user(fan)
    statuses = [put_like(client, "v1", "LIKED", f"op-{i}").status_code for i in range(3)]
    assert statuses == [200, 200, 200]
    refused = put_like(client, "v1", "UNLIKED", "op-x")
    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == "rate_limited"
    assert body["currentRelation"] == {"state": "LIKED", "relationVersion": 1}
    assert int(refused["Retry-After"]) >= 1
    assert relation_row(fan.pk, "v1").state == "LIKED"


def test_ip_limit_applies_across_users(author, make_user, make_video, api, settings):
    settings.RATE_LIMIT_IP_RATE = 1.0
    settings.RATE_LIMIT_IP_BURST = 2
    make_video("v1", author)
    statuses = [put_like(api.as_user(make_user()), "v1", "LIKED", "op").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_limits_fail_open_and_are_counted_when_redis_is_down(author, fan, make_video, settings):
    make_video("v1", author)
    with redis_unreachable(settings, streams=False):
        before = metrics.value("likes_ratelimit_fail_open_total", scope="user")
        verdict = limits.request_limits_check(user_id=fan.pk, client_ip="127.0.0.1")
        assert verdict.allowed
        assert metrics.value("likes_ratelimit_fail_open_total", scope="user") == before + 1
        assert like(fan, "v1").changed  # the command path itself keeps working without Redis


def test_token_bucket_state_lives_in_redis_under_the_prefix(fan):
    limits.request_limits_check(user_id=fan.pk, client_ip=None)
    from likes_project.redis_client import cache_redis

    data = cache_redis().hgetall(cache.ratelimit_user_key(fan.pk))
    assert float(data[b"tokens"]) == pytest.approx(59, abs=0.5)
    assert json.dumps(cache.ratelimit_user_key(fan.pk)).startswith(f'"{settings.LIKES_REDIS_PREFIX}:')
