"""Request latency by route (issue 10 §2): every request lands in the route histogram and counter under
its URL name (never its raw path), and the four watched endpoints in histograms of their own. Values are
this process's, read with `metrics.value`; tests/test_metrics_multiprocess.py reads them off /metrics of
a real gunicorn."""

from __future__ import annotations

import json

import pytest

from likes_project import metrics
from likes_project.http_metrics import ENDPOINT_HISTOGRAMS, REQUEST_SECONDS, REQUESTS_TOTAL
from tests.factories import put_like
from tests.metrics_helpers import parse, scrape_text

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]


def _count(name: str, **labels) -> float:
    return metrics.value(f"{name}_count", **labels)


def test_a_request_is_timed_and_counted_under_its_url_name(client):
    labels = {"route": "healthz", "method": "GET", "status_class": "2xx"}
    seconds, total = _count(REQUEST_SECONDS, **labels), metrics.value(REQUESTS_TOTAL, **labels)

    for _ in range(3):
        assert client.get("/healthz").status_code == 200

    assert _count(REQUEST_SECONDS, **labels) == seconds + 3
    assert metrics.value(REQUESTS_TOTAL, **labels) == total + 3
    assert metrics.value(f"{REQUEST_SECONDS}_sum", **labels) > 0


def test_an_unknown_path_is_one_route_whatever_the_path(client):
    labels = {"route": "unmatched", "method": "GET", "status_class": "4xx"}
    before = metrics.value(REQUESTS_TOTAL, **labels)

    for path in ("/v1/nothing-here", "/v1/nothing-here-either/123", "/whatever"):
        client.get(path)

    assert metrics.value(REQUESTS_TOTAL, **labels) == before + 3
    text = scrape_text(client, refresh=False)
    assert "nothing-here" not in text


def test_the_like_command_batch_query_my_likes_and_likers_have_histograms_of_their_own(api, make_user, make_video):
    author, user = make_user(), make_user()
    make_video("hm-1", author)
    as_user, as_author = api.as_user(user), api.as_user(author)
    names = {route: name for (route, _method), name in ENDPOINT_HISTOGRAMS.items()}
    before = {name: _count(name, status_class="2xx") for name in names.values()}

    assert put_like(as_user, "hm-1", "LIKED", "op-hm-1").status_code == 200
    assert as_user.post("/v1/like-relations/batch-query", data=json.dumps({"videoIds": ["hm-1"]}),
                        content_type="application/json").status_code == 200
    assert as_user.get("/v1/me/likes").status_code == 200
    assert as_author.get("/v1/videos/hm-1/likers").status_code == 200
    # Same URL, other method: the relation read is not the command.
    assert as_user.get("/v1/videos/hm-1/like-relation").status_code == 200

    after = {name: _count(name, status_class="2xx") for name in names.values()}
    assert {name: after[name] - before[name] for name in names.values()} == dict.fromkeys(names.values(), 1)


def test_the_histograms_are_exported_with_buckets(client):
    client.get("/healthz")

    samples = parse(scrape_text(client, refresh=False))

    buckets = {dict(labels)["le"]: v for (name, labels), v in samples.items() if name == f"{REQUEST_SECONDS}_bucket"
               and ("route", "healthz") in labels and ("method", "GET") in labels}
    assert {"0.005", "0.1", "1.0", "+Inf"} <= set(buckets)
    assert buckets["+Inf"] >= 1
