"""The per-IP limit's client address (issue 10 §1): behind N trusted proxies that append to
X-Forwarded-For it is the N-th entry from the right, never the leftmost one the client wrote; with no
trusted proxy the header is ignored. Over HTTP against real PostgreSQL and Redis."""

from __future__ import annotations

import json

import pytest
from django.test import RequestFactory

from relations.api.views import client_ip

pytestmark = pytest.mark.topology_independent

PEER = "192.0.2.1"  # the nearest peer: REMOTE_ADDR


def _ip(xff: str | None, settings, *, count, trust: bool = False) -> str | None:
    settings.TRUSTED_PROXY_COUNT = count
    settings.TRUST_X_FORWARDED_FOR = trust
    extra = {"REMOTE_ADDR": PEER}
    if xff is not None:
        extra["HTTP_X_FORWARDED_FOR"] = xff
    return client_ip(RequestFactory().get("/", **extra))


@pytest.mark.parametrize(("xff", "count", "trust", "expected"), [
    # no trusted proxy: the header is whatever the client sent
    ("203.0.113.9", 0, False, PEER),
    ("203.0.113.9", 0, True, PEER),  # an explicit 0 wins over the old switch
    (None, None, False, PEER),
    ("203.0.113.9", None, False, PEER),
    # one proxy appends the address it saw: the rightmost entry; the client's own entries are ignored
    ("6.6.6.6, 203.0.113.9", 1, False, "203.0.113.9"),
    ("6.6.6.6,203.0.113.9", None, True, "203.0.113.9"),  # TRUST_X_FORWARDED_FOR=true alone means 1
    ("203.0.113.9", 1, False, "203.0.113.9"),
    # two proxies: the second from the right
    ("6.6.6.6, 203.0.113.9, 10.0.0.2", 2, False, "203.0.113.9"),
    ("2001:db8::7, 10.0.0.2", 2, False, "2001:db8::7"),
    # fewer entries than proxies, an empty header, or an entry that is no address: the peer
    ("203.0.113.9", 2, False, PEER),
    ("", 1, False, PEER),
    (" , ", 1, False, PEER),
    ("6.6.6.6, not-an-ip", 1, False, PEER),
    ("6.6.6.6, " + "1" * 5000, 1, False, PEER),
])
def test_client_ip_takes_the_nth_entry_from_the_right(xff, count, trust, expected, settings):
    assert _ip(xff, settings, count=count, trust=trust) == expected


@pytest.mark.django_db(databases="__all__")
def test_a_client_cannot_escape_the_ip_limit_by_writing_its_own_leftmost_entry(make_user, make_video, api,
                                                                                 settings):
    """The old code keyed the limit on the leftmost entry: a fresh spoofed value per request was a
    fresh bucket. Behind one proxy, every request below comes from 203.0.113.9."""
    settings.TRUSTED_PROXY_COUNT = None
    settings.TRUST_X_FORWARDED_FOR = True  # the old switch, still honoured as one proxy
    settings.RATE_LIMIT_IP_RATE = 0.001
    settings.RATE_LIMIT_IP_BURST = 2
    author = make_user()
    make_video("v-ip", author)
    statuses = []
    for i in range(3):
        resp = api.as_user(make_user()).put(
            "/v1/videos/v-ip/like-relation", data=json.dumps({"desiredState": "LIKED"}),
            content_type="application/json", HTTP_IDEMPOTENCY_KEY="op",
            HTTP_X_FORWARDED_FOR=f"198.51.100.{i}, 203.0.113.9")
        statuses.append((resp.status_code, resp.json().get("scope")))
    assert statuses == [(200, None), (200, None), (429, "ip")]
