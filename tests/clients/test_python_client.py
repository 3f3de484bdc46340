"""The Python client (clients/python, `likes_client`) against the live service: retries with one Idempotency-Key,
errors, the client rules CLI-1 … CLI-4 of the spec, and the list iterators. Faults come from a transport in
front of the live server (tests/clients/conftest.py); threads meet on Events, never on sleeps.

Each client rule has a counter-example: the same test with the client's protection turned off (a private class
attribute) shows the invariant broken, so the protection is what keeps it."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from likes_client import LikesError, RateLimited, Relation

from counting.tasks import display_snapshot_task
from likes_project import l1cache
from tests.clients.conftest import WAIT, WRITE_BARRIER, is_batch, is_put
from tests.counting.helpers import drain_all

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

PROTECTION = pytest.mark.parametrize("protected", [True, False], ids=["protected", "unprotected"])
# CLIENT_TESTS_STRICT=1: every variant asserts the invariant itself, so the unprotected ones fail (a demonstration).
STRICT = os.environ.get("CLIENT_TESTS_STRICT") == "1"


def invariant(holds: bool, *, protected: bool) -> None:
    """The invariant holds with the protection on; off, the counter-example asserts it is broken."""
    assert holds is (True if STRICT else protected)


def counts_catch_up() -> None:
    """Run the asynchronous projections in-process and publish the display snapshot; drop this process's L1 of
    display counts (the live server answers from this process)."""
    drain_all()
    display_snapshot_task()
    l1cache.clear_all()


# --- retries: one Idempotency-Key per call (CMD-13) -----------------------------------------------------------


def test_a_lost_response_is_retried_with_the_same_key_and_the_server_changes_once(
        make_user, make_video, author, transport, client_for, truth):
    me = make_user()
    make_video("v-lost", author)
    transport.add(is_put("v-lost"), "drop_after")
    rel = client_for(me).set_like("v-lost", True)
    first, retry = transport.puts("v-lost")
    assert first.forwarded and retry.forwarded and first.key == retry.key
    assert (first.answer["relationVersion"], first.answer["replayed"]) == (1, False)  # committed, answer lost
    assert (retry.answer["relationVersion"], retry.answer["replayed"], retry.answer["changed"]) == (1, True, True)
    assert rel == Relation("v-lost", "LIKED", 1, replayed=True, operation_id=first.key)
    assert truth(me, "v-lost") == ("LIKED", 1)


def test_a_timeout_before_sending_then_success(make_user, make_video, author, transport, client_for, truth):
    me = make_user()
    make_video("v-t", author)
    transport.add(is_put("v-t"), "timeout_before")
    rel = client_for(me).set_like("v-t", True)
    lost, sent = transport.puts("v-t")
    assert not lost.forwarded and sent.forwarded and lost.key == sent.key
    assert (rel.state, rel.version, rel.replayed) == ("LIKED", 1, False)
    assert truth(me, "v-t") == ("LIKED", 1)


def test_a_write_barrier_then_success_with_the_same_key(make_user, make_video, author, transport, client_for, truth):
    me = make_user()
    make_video("v-wb", author)
    transport.add(is_put("v-wb"), "respond", status=503, body=WRITE_BARRIER, headers={"Retry-After": "0"})
    sleeps: list[float] = []
    rel = client_for(me, sleep=sleeps.append).set_like("v-wb", True)
    held, sent = transport.puts("v-wb")
    assert (held.status, held.forwarded, sent.forwarded) == (503, False, True)
    assert held.key == sent.key and len(sleeps) == 1
    assert (rel.state, rel.version, rel.replayed) == ("LIKED", 1, False)
    assert truth(me, "v-wb") == ("LIKED", 1)


@pytest.mark.parametrize("fault", ["timeout", "write_barrier"])
def test_retries_stop_after_max_attempts_honouring_retry_after(fault, make_user, make_video, author, transport,
                                                               client_for, truth):
    me = make_user()
    make_video("v-x", author)
    if fault == "timeout":
        transport.add(is_put("v-x"), "timeout_before", times=3)
    else:
        transport.add(is_put("v-x"), "respond", times=3, status=503, body=WRITE_BARRIER, headers={"Retry-After": "7"})
    sleeps: list[float] = []
    with pytest.raises(LikesError) as raised:
        client_for(me, max_attempts=3, sleep=sleeps.append).set_like("v-x", True)
    calls = transport.puts("v-x")
    assert len(calls) == 3 and len({c.key for c in calls}) == 1 and not any(c.forwarded for c in calls)
    assert len(sleeps) == 2
    if fault == "timeout":
        assert (raised.value.status, raised.value.code) == (None, "timeout")
    else:
        assert (raised.value.status, raised.value.code) == (503, "write_barrier")
        assert all(s >= 7 for s in sleeps)  # never sooner than the server's Retry-After
    assert truth(me, "v-x") == ("UNLIKED", 0)


# --- 4xx: raised at once ------------------------------------------------------------------------------------


def test_an_unknown_video_raises_at_once(make_user, transport, client_for):
    with pytest.raises(LikesError) as raised:
        client_for(make_user()).set_like("v-missing", True)
    assert type(raised.value) is LikesError
    assert (raised.value.status, raised.value.code, raised.value.current_relation) == (404, "video_not_found", None)
    assert raised.value.message
    assert len(transport.puts("v-missing")) == 1


def test_a_stale_base_version_carries_the_current_relation(make_user, make_video, author, transport, client_for):
    me = make_user()
    make_video("v-stale", author)
    client = client_for(me)
    client.set_like("v-stale", True)
    with pytest.raises(LikesError) as raised:
        client.set_like("v-stale", False, base_version=0)
    assert (raised.value.status, raised.value.code) == (409, "stale_base_version")
    assert raised.value.current_relation == Relation("v-stale", "LIKED", 1)
    assert len(transport.puts("v-stale")) == 2  # one per call: the 409 was not retried


def test_rate_limited_raises_with_retry_after_and_the_current_relation(make_user, make_video, author, transport,
                                                                       client_for, settings):
    settings.RATE_LIMIT_USER_BURST = 1
    settings.RATE_LIMIT_USER_RATE = 0.01
    me = make_user()
    make_video("v-429", author)
    client = client_for(me)
    client.set_like("v-429", True)
    with pytest.raises(RateLimited) as raised:
        client.set_like("v-429", False)
    assert (raised.value.status, raised.value.code) == (429, "rate_limited")
    assert raised.value.retry_after is not None and raised.value.retry_after >= 1
    assert raised.value.current_relation == Relation("v-429", "LIKED", 1)
    assert len(transport.puts("v-429")) == 2


# --- CLI-1: intents ----------------------------------------------------------------------------------------


def test_rapid_intents_keep_one_command_in_flight_per_video(make_user, make_video, author, transport, client_for,
                                                            truth):
    me = make_user()
    for video_id in ("v-hot", "v-b", "v-c"):
        make_video(video_id, author)
    client = client_for(me)
    first = transport.add(is_put("v-hot"), "hold_response")
    client.intend("v-hot", True)
    assert first.reached.wait(WAIT)  # the first command committed; its answer is held
    for i in range(1, 20):
        client.intend("v-hot", i % 2 == 0)  # ... ends on UNLIKED (i = 19)
    for i in range(5):
        client.intend("v-b", i % 2 == 0)  # ... ends on LIKED
        client.intend("v-c", i % 2 == 1)  # ... ends on UNLIKED
    # the other videos do not wait behind v-hot
    transport.wait_until(lambda: all(any(c.status for c in transport.puts(v)) for v in ("v-b", "v-c")))
    assert len(transport.puts("v-hot")) == 1
    first.release.set()
    confirmed = client.settle(timeout=WAIT)
    hot = transport.puts("v-hot")
    assert [c.body["desiredState"] for c in hot] == ["LIKED", "UNLIKED"] and hot[0].key != hot[1].key
    assert all(transport.max_in_flight[v] == 1 for v in ("v-hot", "v-b", "v-c")), transport.max_in_flight
    assert len(transport.puts("v-b")) <= 5 and len(transport.puts("v-c")) <= 5
    assert confirmed["v-hot"] == Relation("v-hot", "UNLIKED", 2, operation_id=hot[1].key)
    assert (confirmed["v-b"].state, confirmed["v-c"].state) == ("LIKED", "UNLIKED")
    assert truth(me, "v-hot") == ("UNLIKED", 2)
    assert truth(me, "v-b")[0] == "LIKED" and truth(me, "v-c")[0] == "UNLIKED"


def test_the_running_example_lost_response_then_a_quick_unlike(make_user, make_video, author, transport,
                                                               client_for, truth):
    """Spec 1.6: op-101 (LIKED) commits v1 and its answer is lost; she taps unlike meanwhile. The client first
    confirms op-101 (a retry with its key), then sends UNLIKED as a new operation: v2."""
    me = make_user()
    make_video("V9001", author)
    client = client_for(me)
    lost = transport.add(is_put("V9001"), "drop_after", hold=True)
    client.intend("V9001", True)
    assert lost.reached.wait(WAIT)
    client.intend("V9001", False)
    assert len(transport.puts("V9001")) == 1
    lost.release.set()
    confirmed = client.settle(timeout=WAIT)
    op101, retry, op102 = transport.puts("V9001")
    assert [c.body["desiredState"] for c in (op101, retry, op102)] == ["LIKED", "LIKED", "UNLIKED"]
    assert op101.key == retry.key != op102.key
    assert (retry.answer["replayed"], retry.answer["state"], retry.answer["relationVersion"]) == (True, "LIKED", 1)
    assert (op102.answer["state"], op102.answer["relationVersion"]) == ("UNLIKED", 2)
    assert confirmed == {"V9001": Relation("V9001", "UNLIKED", 2, operation_id=op102.key)}
    assert truth(me, "V9001") == ("UNLIKED", 2)


def test_settle_raises_what_a_background_command_hit(make_user, transport, client_for):
    client = client_for(make_user())
    client.intend("v-nowhere", True)
    with pytest.raises(LikesError) as raised:
        client.settle(timeout=WAIT)
    assert raised.value.code == "video_not_found"
    assert client.settle(timeout=WAIT) == {}  # raised once


def test_settle_times_out_while_a_command_is_held(make_user, make_video, author, transport, client_for):
    me = make_user()
    make_video("v-slow", author)
    client = client_for(me)
    held = transport.add(is_put("v-slow"), "hold_response")
    client.intend("v-slow", True)
    assert held.reached.wait(WAIT)
    with pytest.raises(TimeoutError):
        client.settle(timeout=0)
    held.release.set()
    assert client.settle(timeout=WAIT)["v-slow"].state == "LIKED"


@PROTECTION
def test_cli1_counter_example_unserialized_intents_end_on_the_wrong_state(protected, make_user, make_video, author,
                                                                         transport, client_for, truth):
    """Like, then unlike at once; the like's request is delayed on the way. Serialized, the unlike is sent after
    the like is confirmed and the server ends UNLIKED; sent at once, the unlike lands first and the late like
    wins (last commit wins): the server ends LIKED although the user's last intent was UNLIKED."""
    me = make_user()
    make_video("v-q", author)
    client = client_for(me)
    client._serialize_intents = protected
    delayed = transport.add(is_put("v-q", "LIKED"), "hold_request")
    client.intend("v-q", True)
    assert delayed.reached.wait(WAIT)
    client.intend("v-q", False)
    if protected:
        assert len(transport.puts("v-q")) == 1  # the unlike waits for the like's confirmation
    else:
        # both commands in flight at once: the unlike is answered while the like is still on its way
        transport.wait_until(lambda: any(c.status for c in transport.puts("v-q", "UNLIKED")))
    delayed.release.set()
    client.settle(timeout=WAIT)
    assert (transport.max_in_flight["v-q"] == 1) is protected
    invariant(truth(me, "v-q")[0] == "UNLIKED", protected=protected)  # the server ends at the last intent


@PROTECTION
def test_cli1_counter_example_a_new_key_per_attempt_applies_one_tap_twice(protected, make_user, make_video, author,
                                                                         live_server, token_of, transport,
                                                                         client_for, truth):
    """The like's answer is lost after it committed v1, and the user's other device unlikes (v2) before the
    retry. With the same key the retry is answered from op-101's verdict and the unlike stands; with a new key
    the retry is a second operation: one tap changed the relation twice and undid the later unlike (v3)."""
    me = make_user()
    make_video("v-dev", author)

    def other_device_unlikes() -> None:
        answer = httpx.put(f"{live_server.url}/v1/videos/v-dev/like-relation", json={"desiredState": "UNLIKED"},
                           headers={"Authorization": f"Token {token_of(me)}", "Idempotency-Key": "other-device-1"},
                           timeout=WAIT)
        assert (answer.status_code, answer.json()["relationVersion"]) == (200, 2)

    transport.add(is_put("v-dev"), "drop_after", then=other_device_unlikes)
    client = client_for(me)
    client._reuse_key_on_retry = protected
    rel = client.set_like("v-dev", True)
    first, retry = transport.puts("v-dev")
    assert (first.key == retry.key) is protected
    assert (rel.replayed, rel.version) == ((True, 1) if protected else (False, 3))
    invariant(truth(me, "v-dev") == ("UNLIKED", 2), protected=protected)  # one tap, one change


# --- CLI-2: versions ---------------------------------------------------------------------------------------


@PROTECTION
def test_cli2_a_late_lower_version_never_replaces_the_confirmed_one(protected, make_user, make_video, author,
                                                                   transport, client_for, truth):
    me = make_user()
    make_video("v-ooo", author)
    client = client_for(me)
    client._guard_versions = protected
    late = transport.add(is_put("v-ooo", "LIKED"), "hold_response")
    with ThreadPoolExecutor(max_workers=1) as pool:
        liking = pool.submit(client.set_like, "v-ooo", True)
        assert late.reached.wait(WAIT)  # v1 committed, its answer held back
        newer = client.set_like("v-ooo", False)  # v2, answered first
        late.release.set()
        older = liking.result(WAIT)
    assert (older.state, older.version, newer.state, newer.version) == ("LIKED", 1, "UNLIKED", 2)
    assert truth(me, "v-ooo") == ("UNLIKED", 2)
    held = client.confirmed("v-ooo")
    assert held is not None
    invariant((held.state, held.version) == ("UNLIKED", 2), protected=protected)


# --- CLI-3 / CLI-4: batch ----------------------------------------------------------------------------------


def test_batch_reads_its_writes_and_counts_catch_up(make_user, make_video, author, transport, client_for):
    me = make_user()
    make_video("v-feed", author)
    make_video("v-other", author)
    client = client_for(me)
    assert client.set_like("v-feed", True).version == 1
    page = client.batch(["v-feed", "v-other", "v-feed"])
    assert transport.batches()[-1].body == {"videoIds": ["v-feed", "v-other"], "minRelationVersions": {"v-feed": 1}}
    feed, other = page["v-feed"], page["v-other"]
    # the heart stays red although the count has not moved; the session's own like is added on top
    assert (feed.available, feed.my_state, feed.relation_version) == (True, "LIKED", 1)
    assert (feed.display_count, feed.optimistic_count) == (0, 1)
    assert (other.my_state, other.relation_version, other.display_count, other.optimistic_count) == ("UNLIKED", 0, 0, 0)

    counts_catch_up()
    feed = client.batch(["v-feed"])["v-feed"]
    assert (feed.my_state, feed.display_count, feed.optimistic_count) == ("LIKED", 1, 1)
    assert feed.count_snapshot_at is not None

    assert client.set_like("v-feed", False).version == 2
    feed = client.batch(["v-feed"])["v-feed"]
    assert transport.batches()[-1].body["minRelationVersions"] == {"v-feed": 2}
    assert (feed.my_state, feed.relation_version, feed.display_count, feed.optimistic_count) == ("UNLIKED", 2, 1, 0)


def test_batch_of_an_unavailable_video(make_user, make_video, author, client_for):
    make_video("v-private", author, visibility="private")
    state = client_for(make_user()).batch(["v-private"])["v-private"]
    assert (state.available, state.display_count, state.optimistic_count) == (False, None, None)


def lagging_replica(video_id: str):
    """Rewrite a batch answer to what a replica one version behind would say: UNLIKED v0."""

    def rewrite(answer: dict) -> dict:
        for item in answer["items"]:
            if item["videoId"] == video_id:
                item.update(myState="UNLIKED", relationVersion=0)
        return answer

    return rewrite


@PROTECTION
def test_cli3_counter_example_an_older_answer_hides_a_confirmed_like(protected, make_user, make_video, author,
                                                                    transport, client_for):
    me = make_user()
    make_video("v-lag", author)
    client = client_for(me)
    client._overlay_confirmed = protected
    client.set_like("v-lag", True)
    transport.add(is_batch, "rewrite", rewrite=lagging_replica("v-lag"))
    state = client.batch(["v-lag"])["v-lag"]
    assert transport.batches()[-1].answer["items"][0]["myState"] == "LIKED"  # the server itself had it
    # the confirmed red heart never turns back to "not liked" because an answer is older (CLI-3, CLI-4)
    invariant((state.my_state, state.relation_version) == ("LIKED", 1), protected=protected)


@pytest.mark.parametrize(("send_min", "overlay"), [(True, True), (True, False), (False, True), (False, False)],
                         ids=["both", "min-versions-only", "overlay-only", "neither"])
def test_cli3_counter_example_a_stale_relation_cache(send_min, overlay, make_user, make_video, author, transport,
                                                     client_for):
    """The service's relation cache holds an older value (UNLIKED v0). `minRelationVersions` makes the server
    bypass it, the overlay hides it on the client: either one keeps the confirmed like, neither does."""
    from relations import cache
    from relations.models import RelationCacheGeneration

    me = make_user()
    make_video("v-ryw", author)
    client = client_for(me)
    client._send_min_versions, client._overlay_confirmed = send_min, overlay
    client.set_like("v-ryw", True)
    generation = RelationCacheGeneration.objects.get(status="ACTIVE").generation
    assert cache.relation_cache_write(generation, [(me.pk, "v-ryw", "UNLIKED", 0)]) == [1]
    state = client.batch(["v-ryw"])["v-ryw"]
    sent = transport.batches()[-1]
    assert ("minRelationVersions" in sent.body) is send_min
    assert (sent.answer["items"][0]["myState"] == "LIKED") is send_min
    invariant(state.my_state == "LIKED", protected=send_min or overlay)


@pytest.mark.parametrize("rule", ["full", "no-delta", "no-rebase"])
def test_cli4_counter_example_optimistic_count(rule, make_user, make_video, author, client_for):
    """Before the projection runs, the optimistic count shows the session's like (+1); once the server's count
    moved, the server's number wins. Without the delta a red heart shows 0 likes; without taking the moved count
    as caught up, the like is counted twice."""
    me = make_user()
    make_video("v-cnt", author)
    client = client_for(me)
    client._optimistic_delta, client._rebase_counts = rule != "no-delta", rule != "no-rebase"
    client.set_like("v-cnt", True)
    before = client.batch(["v-cnt"])["v-cnt"]
    counts_catch_up()
    after = client.batch(["v-cnt"])["v-cnt"]
    assert (before.my_state, before.display_count, after.my_state, after.display_count) == ("LIKED", 0, "LIKED", 1)
    invariant(before.optimistic_count == 1 and after.optimistic_count == 1, protected=rule == "full")


# --- pages -------------------------------------------------------------------------------------------------


def test_my_likes_follows_the_cursor_over_pages(make_user, make_video, author, transport, client_for):
    me = make_user()
    client = client_for(me)
    videos = [f"v-list-{i}" for i in range(5)]
    for video_id in videos:
        make_video(video_id, author)
        client.set_like(video_id, True)
    items = list(client.my_likes(limit=2))
    assert [i.video_id for i in items] == videos[::-1]  # newest first
    assert all(i.relation_version == 1 and i.liked_at for i in items)
    pages = transport.gets("/v1/me/likes")
    assert len(pages) >= 3 and all(len(p.answer["items"]) <= 2 for p in pages)


def test_likers_follows_the_cursor_over_pages(make_user, make_video, author, transport, client_for):
    make_video("v-fans", author)
    fans = [make_user() for _ in range(5)]
    for fan in fans:
        client_for(fan).set_like("v-fans", True)
    drain_all()
    likers = list(client_for(author).likers("v-fans", limit=2))
    assert sorted((x.user_id, x.username) for x in likers) == sorted((f.pk, f.username) for f in fans)
    assert [x.liked_at for x in likers] == sorted((x.liked_at for x in likers), reverse=True)  # newest first
    pages = transport.gets("/v1/videos/v-fans/likers")
    assert len(pages) >= 3 and all(len(p.answer["items"]) <= 2 for p in pages)
