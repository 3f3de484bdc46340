"""The browser client (clients/browser/likes-client.js) on the demo feed (/demo/feed), in Chromium against the
live server (issue 30 §2). Faults are injected by intercepting the page's requests: a PUT held while taps pile
up, a response dropped after the server committed, a batch answer older than what the page was confirmed.
What the page shows is checked against the relation facts; waits are Playwright's auto-waiting."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect
from rest_framework.authtoken.models import Token

from relations import routing, selectors
from relations.models import LikeCommand

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]

VIDEOS = ("feed-1", "feed-2")
PUT = "**/v1/videos/*/like-relation"
BATCH = "**/v1/like-relations/batch-query"


@pytest.fixture
def feed(settings, make_user, make_video):
    """The demo feed on, two public videos, and a viewer with a token: (user, token)."""
    settings.DEMO_FEED_ENABLED = True
    author = make_user()
    for video_id in VIDEOS:
        make_video(video_id, author)
    user = make_user()
    return user, Token.objects.get_or_create(user=user)[0].key


def open_feed(open_page, token: str, *, page=None):
    """The feed logged in with `token` (through the form; the token stays in sessionStorage), hearts ready."""
    page = page or open_page()
    page.goto(f"/demo/feed?videos={','.join(VIDEOS)}")
    page.locator("#token").fill(token)
    page.locator("#login").click()
    for video_id in VIDEOS:
        expect(heart(page, video_id)).to_be_enabled()
    assert token not in page.url
    return page


def heart(page, video_id: str = VIDEOS[0]):
    return page.locator(f'[data-video-id="{video_id}"] button[data-role="like"]')


def count(page, video_id: str = VIDEOS[0]):
    return page.locator(f'[data-video-id="{video_id}"] [data-role="count"]')


def facts(user, video_id: str = VIDEOS[0]) -> tuple[str, int]:
    rel = selectors.relation_get(user_id=user.pk, video_id=video_id)
    return rel.state, rel.relation_version


class PutSpy:
    """Every PUT the page sends: its Idempotency-Key, how many are in flight at once; `hold_first` keeps the
    first one's answer (the server has committed) until `release()`."""

    def __init__(self, page, *, hold_first: bool = False, drop_first: bool = False):
        self.keys: list[str] = []
        self.in_flight = self.peak = 0
        self.held = None
        self.hold_first, self.drop_first = hold_first, drop_first
        page.route(PUT, self._on_request)

    def _on_request(self, route):
        if route.request.method != "PUT":
            route.continue_()
            return
        self.keys.append(route.request.headers["idempotency-key"])
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        response = route.fetch()  # the server commits here
        if len(self.keys) == 1 and self.drop_first:
            self.in_flight -= 1
            route.abort("connectionreset")  # the answer is lost on the way back
        elif len(self.keys) == 1 and self.hold_first:
            self.held = (route, response)
        else:
            self.in_flight -= 1
            route.fulfill(response=response)

    def release(self) -> None:
        route, response = self.held
        self.in_flight -= 1
        route.fulfill(response=response)


@pytest.mark.parametrize("taps", [9, 10])
def test_rapid_taps_keep_one_put_in_flight_and_the_server_ends_on_the_last_tap(open_page, feed, taps):
    """CLI-1: taps only move the final target while a command is in flight; one follow-up at most."""
    user, token = feed
    page = open_feed(open_page, token)
    spy = PutSpy(page, hold_first=True)
    button = heart(page)
    for _ in range(taps):
        button.click()
    last = "LIKED" if taps % 2 else "UNLIKED"
    expect(button).to_have_attribute("aria-pressed", str(last == "LIKED").lower())  # at once: the final target
    expect(button).to_have_attribute("data-pending", "true")
    assert len(spy.keys) == 1  # the other taps only moved the target
    spy.release()
    expect(button).to_have_attribute("data-pending", "false")
    expect(button).to_have_attribute("aria-pressed", str(last == "LIKED").lower())
    assert spy.peak == 1 and len(spy.keys) <= 2 and len(set(spy.keys)) == len(spy.keys)
    assert facts(user)[0] == last


def test_a_response_lost_after_the_commit_is_retried_with_the_same_key_and_the_server_changes_once(open_page, feed):
    """CLI-1 and the running example's op-101: the retry is the same operation (its Idempotency-Key)."""
    user, token = feed
    page = open_feed(open_page, token)
    spy = PutSpy(page, drop_first=True)
    heart(page).click()
    expect(heart(page)).to_have_attribute("data-pending", "false")
    expect(heart(page)).to_have_attribute("aria-pressed", "true")
    assert len(spy.keys) == 2 and spy.keys[0] == spy.keys[1]
    assert facts(user) == ("LIKED", 1)
    shard = routing.alias_for_user(user.pk)
    assert LikeCommand.objects.using(shard).filter(user_id=user.pk).count() == 1  # one operation, applied once


def test_the_count_stays_old_while_the_heart_stays_red_even_after_a_reload(open_page, feed):
    """CLI-4: the server's number is shown as it is; the heart does not follow it back."""
    user, token = feed
    page = open_feed(open_page, token)
    expect(count(page)).to_have_text("0")
    with page.expect_response(BATCH):  # the feed reads the counts again once the like is confirmed
        heart(page).click()
    expect(heart(page)).to_have_attribute("aria-pressed", "true")
    expect(heart(page)).to_have_attribute("data-pending", "false")
    # No projection runs in this test: the server's number is still 0, the heart red, the optimistic count 1.
    expect(count(page)).to_have_text("0")
    expect(count(page)).to_have_attribute("data-optimistic", "1")
    page.reload()
    expect(heart(page)).to_have_attribute("aria-pressed", "true")
    expect(count(page)).to_have_text("0")
    assert facts(user) == ("LIKED", 1)


def test_a_late_answer_with_a_lower_version_does_not_change_the_heart(open_page, feed):
    """CLI-2 and CLI-3: an answer older than the confirmed version neither replaces it nor shows."""
    _user, token = feed
    page = open_feed(open_page, token)
    heart(page).click()
    expect(heart(page)).to_have_attribute("data-pending", "false")
    expect(heart(page)).to_have_attribute("aria-pressed", "true")
    rewritten = []

    def older(route):
        """A lagging answer: every video as it was before the like (UNLIKED, version 0)."""
        response = route.fetch()
        body = response.json()
        for item in body["items"]:
            item.update(myState="UNLIKED", relationVersion=0)
        rewritten.append(body)
        route.fulfill(response=response, body=json.dumps(body))

    page.route(BATCH, older)
    with page.expect_response(BATCH):
        page.evaluate("window.likesClient.batch(['feed-1', 'feed-2'])")
    assert rewritten and rewritten[-1]["items"][0]["relationVersion"] == 0
    expect(heart(page)).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("window.likesClient.confirmed('feed-1').version") == 1


def test_two_tabs_of_one_user_converge_after_a_reload(open_page, feed):
    """Two devices of one user: each shows its own confirmations, and both the server's after a reload (CLI-3)."""
    user, token = feed
    tab_a, tab_b = open_feed(open_page, token), open_feed(open_page, token)
    heart(tab_a).click()
    expect(heart(tab_a)).to_have_attribute("data-pending", "false")
    expect(heart(tab_b)).to_have_attribute("aria-pressed", "false")  # tab B has not asked since
    tab_b.reload()
    expect(heart(tab_b)).to_have_attribute("aria-pressed", "true")
    heart(tab_b, VIDEOS[0]).click()  # B unlikes
    expect(heart(tab_b)).to_have_attribute("data-pending", "false")
    expect(heart(tab_b)).to_have_attribute("aria-pressed", "false")
    tab_a.reload()
    expect(heart(tab_a)).to_have_attribute("aria-pressed", "false")
    assert facts(user) == ("UNLIKED", 2)


def test_the_feed_is_off_unless_enabled_and_refuses_bad_video_ids(client, settings):
    settings.DEMO_FEED_ENABLED = False
    assert client.get("/demo/feed").status_code == 404
    settings.DEMO_FEED_ENABLED = True
    page = client.get("/demo/feed?videos=a,b")
    assert page.status_code == 200 and b"likes-client.js" in page.content
    assert client.get("/demo/feed?videos=bad%20id").status_code == 400
    assert client.get("/demo/feed?videos=" + ",".join(f"v{i}" for i in range(21))).status_code == 400
