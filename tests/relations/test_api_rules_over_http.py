"""The new-like rules (INV-7) and the abuse limits (CMD-18) through HTTP: invisible videos are
indistinguishable 404s, takedowns, friends-only videos and blocks refuse a like (never an unlike), pushes
and blocks take effect at once through warm caches, rate limits answer 429 with Retry-After, and
everything fails open when Redis is down. Against real PostgreSQL and Redis."""

from __future__ import annotations

import pytest

from likes_project.redis_client import cache_redis
from relations import cache
from relations.services.social import block_set, friendship_set
from tests.factories import TEST_ACTOR, put_like, redis_unreachable
from tests.relations.helpers import NOTHING, assert_error, body_of, push_video, shard_rows

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]


@pytest.fixture
def client(api, user):
    """The `user` fixture's token client (in this module it stands in for pytest-django's `client`)."""
    return api.as_user(user)


# --- visibility and block rules (INV-7) through HTTP ---------------------------------------------


def test_invisible_videos_are_indistinguishable_404s(client, make_video, author):
    make_video("vid-deleted", author, status="deleted")
    make_video("vid-private", author, visibility="private")

    bodies = [
        assert_error(put_like(client, vid, "LIKED", f"op-{vid}"), 404, "video_not_found")
        for vid in ("vid-missing", "vid-deleted", "vid-private")
    ]

    assert bodies[0] == bodies[1] == bodies[2]
    assert shard_rows() == NOTHING


def test_author_may_like_their_own_private_video(api, make_video, author):
    make_video("vid-private", author, visibility="private")

    resp = put_like(api.as_user(author), "vid-private", "LIKED", "op-1")

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["changed"] is True


def test_taken_down_video_refuses_a_like_with_403(client, make_video, author):
    make_video("vid-down", author, status="taken_down")

    assert_error(put_like(client, "vid-down", "LIKED", "op-1"), 403, "video_taken_down")
    assert shard_rows() == NOTHING


def test_private_and_taken_down_video_is_still_a_404_for_others(client, make_video, author):
    make_video("vid-x", author, visibility="private", status="taken_down")

    assert_error(put_like(client, "vid-x", "LIKED", "op-1"), 404, "video_not_found")


def test_friends_only_video(api, make_user, make_video, author, client):
    friend = make_user()
    friendship_set(user_a=friend.pk, user_b=author.pk, present=True, actor=TEST_ACTOR)
    make_video("vid-friends", author, visibility="friends")

    assert_error(put_like(client, "vid-friends", "LIKED", "op-1"), 403, "video_friends_only")
    assert shard_rows() == NOTHING
    assert put_like(api.as_user(author), "vid-friends", "LIKED", "op-1").status_code == 200
    assert put_like(api.as_user(friend), "vid-friends", "LIKED", "op-1").status_code == 200
    assert shard_rows()["LikeRelation"] == 2


def test_blocked_user_cannot_like_the_authors_videos(api, make_video, make_user, author, user, client):
    make_video("vid-1", author)
    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    assert_error(put_like(client, "vid-1", "LIKED", "op-1"), 403, "blocked_by_author")
    assert shard_rows() == NOTHING
    # The block is directed: the author may still like the user's videos.
    make_video("vid-user", user)
    assert put_like(api.as_user(author), "vid-user", "LIKED", "op-1").status_code == 200


def test_block_beats_friendship(make_video, author, user, client):
    make_video("vid-f", author, visibility="friends")
    friendship_set(user_a=author.pk, user_b=user.pk, present=True, actor=TEST_ACTOR)
    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    assert_error(put_like(client, "vid-f", "LIKED", "op-1"), 403, "blocked_by_author")


def test_unlike_is_allowed_after_the_video_is_taken_down(client, service, video, author):
    assert body_of(put_like(client, "vid-1", "LIKED", "op-1"))["changed"] is True
    assert body_of(push_video(service, "vid-1", authorId=author.pk, status="taken_down", version=2))["applied"]

    assert_error(put_like(client, "vid-1", "LIKED", "op-2"), 403, "video_taken_down")
    resp = put_like(client, "vid-1", "UNLIKED", "op-3")

    assert resp.status_code == 200, resp.content
    data = body_of(resp)
    assert data["changed"] is True
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}


def test_unlike_is_allowed_after_the_video_is_deleted_or_blocked(client, service, video, author, user):
    put_like(client, "vid-1", "LIKED", "op-1")
    push_video(service, "vid-1", authorId=author.pk, status="deleted", version=2)
    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    data = body_of(put_like(client, "vid-1", "UNLIKED", "op-2"))

    assert data["changed"] is True
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}


def test_takedown_push_takes_effect_at_once_with_a_warm_cache(api, make_user, client, service, video, author):
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200
    # The first like filled the visibility cache; without active invalidation it would serve
    # "active" for the whole TTL.
    assert cache_redis().exists(cache.visibility_key("vid-1"))

    assert body_of(push_video(service, "vid-1", authorId=author.pk, status="taken_down", version=2))["applied"]

    other = api.as_user(make_user())
    assert_error(put_like(other, "vid-1", "LIKED", "op-1"), 403, "video_taken_down")


def test_push_that_creates_or_opens_a_video_takes_effect_at_once(client, service, make_video, author):
    # Negative cache: the miss is cached, the creating push must replace it.
    assert_error(put_like(client, "vid-new", "LIKED", "op-1"), 404, "video_not_found")
    assert cache_redis().exists(cache.visibility_key("vid-new"))
    push_video(service, "vid-new", authorId=author.pk, version=1)
    assert put_like(client, "vid-new", "LIKED", "op-2").status_code == 200

    make_video("vid-priv", author, visibility="private")
    assert_error(put_like(client, "vid-priv", "LIKED", "op-3"), 404, "video_not_found")
    push_video(service, "vid-priv", authorId=author.pk, visibility="public", version=2)
    assert put_like(client, "vid-priv", "LIKED", "op-4").status_code == 200


def test_block_takes_effect_at_once_with_a_warm_edge_cache(client, make_video, author, user):
    make_video("vid-a", author)
    make_video("vid-b", author)
    assert put_like(client, "vid-a", "LIKED", "op-1").status_code == 200
    assert cache_redis().exists(cache.edge_key(author.pk, user.pk))

    block_set(blocker_id=author.pk, blocked_id=user.pk, present=True, actor=TEST_ACTOR)

    assert_error(put_like(client, "vid-b", "LIKED", "op-2"), 403, "blocked_by_author")


# --- abuse limits (CMD-18) ---------------------------------------------------------------------


def test_user_rate_limit_answers_429_with_retry_after_and_current_relation(settings, client, video):
    settings.RATE_LIMIT_USER_BURST = 2
    settings.RATE_LIMIT_USER_RATE = 0.001
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200
    assert put_like(client, "vid-1", "UNLIKED", "op-2").status_code == 200

    resp = put_like(client, "vid-1", "LIKED", "op-3")

    data = assert_error(resp, 429, "rate_limited")
    assert int(resp["Retry-After"]) >= 1
    assert data["scope"] == "user"
    assert data["retryAfterSeconds"] == int(resp["Retry-After"])
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}
    assert shard_rows() == {"LikeRelation": 1, "LikeCommand": 2, "OutboxEvent": 2}
    assert_error(client.get("/v1/like-operations/op-3"), 404, "operation_not_found")


def test_rate_limit_is_per_user(settings, api, make_user, client, video):
    settings.RATE_LIMIT_USER_BURST = 1
    settings.RATE_LIMIT_USER_RATE = 0.001
    assert put_like(client, "vid-1", "LIKED", "op-1").status_code == 200
    assert put_like(client, "vid-1", "LIKED", "op-2").status_code == 429

    assert put_like(api.as_user(make_user()), "vid-1", "LIKED", "op-1").status_code == 200


def test_ip_rate_limit_spans_users(settings, api, make_user, video):
    settings.RATE_LIMIT_IP_BURST = 1
    settings.RATE_LIMIT_IP_RATE = 0.001
    assert put_like(api.as_user(make_user()), "vid-1", "LIKED", "op-1").status_code == 200

    resp = put_like(api.as_user(make_user()), "vid-1", "LIKED", "op-1")

    assert assert_error(resp, 429, "rate_limited")["scope"] == "ip"
    assert shard_rows()["LikeCommand"] == 1


def test_relation_limit_counts_only_effective_transitions(settings, client, video):
    settings.RATE_LIMIT_RELATION_PER_MINUTE = 2
    assert body_of(put_like(client, "vid-1", "LIKED", "op-1"))["changed"] is True
    assert body_of(put_like(client, "vid-1", "UNLIKED", "op-2"))["changed"] is True

    resp = put_like(client, "vid-1", "LIKED", "op-3")
    data = assert_error(resp, 429, "rate_limited")
    assert data["scope"] == "relation"
    assert int(resp["Retry-After"]) >= 1
    assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 2}

    # A command that changes nothing is not a transition and is not refused.
    same = put_like(client, "vid-1", "UNLIKED", "op-4")
    assert same.status_code == 200
    assert body_of(same)["changed"] is False
    assert shard_rows() == {"LikeRelation": 1, "LikeCommand": 3, "OutboxEvent": 2}


def test_limits_and_caches_fail_open_when_redis_is_down(settings, client, video, author, make_video):
    make_video("vid-down", author, status="taken_down")

    with redis_unreachable(settings):
        resp = put_like(client, "vid-1", "LIKED", "op-1")
        refused = put_like(client, "vid-down", "LIKED", "op-2")
        read = client.get("/v1/videos/vid-1/like-relation")

    assert resp.status_code == 200, resp.content
    assert body_of(resp)["changed"] is True
    # Without the cache the rules still come from the database.
    assert_error(refused, 403, "video_taken_down")
    assert body_of(read)["state"] == "LIKED"
    assert shard_rows() == {"LikeRelation": 1, "LikeCommand": 1, "OutboxEvent": 1}
