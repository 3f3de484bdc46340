"""The store gauges are computed by the beat job `observability.refresh_gauges` and stored in one row;
a scrape only reads that row (issue 10 §3, D46). Here: a scrape's cost does not grow with outbox rows
or stream entries and never touches Redis, the job is what brings new values, the snapshot's age is
exported, ages keep growing while refreshes stop, and a failing store or a missing snapshot is a scrape
error line. The gauges' values themselves are tested in tests/counting/test_metrics.py."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from likes_project import observability
from likes_project.eventlog.models import GaugeSnapshot
from likes_project.eventlog.tasks import gauges_refresh_task
from likes_project.observability import SNAPSHOT_KEY, gauges_refresh, scrape_families
from relations.models import OutboxEvent
from tests.counting.helpers import RoundTrips, publish_all
from tests.factories import redis_unreachable
from tests.metrics_helpers import parse, scrape_text
from tests.relations.helpers import cmd as like

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]


def sample(samples, name: str, **labels):
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def family(samples, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def _queries_of_one_scrape(client, monkeypatch) -> tuple[dict[str, int], int]:
    """(queries per database alias, Redis commands) of one GET /metrics; the snapshot is fresh."""
    gauges_refresh()
    trips = RoundTrips(monkeypatch)
    contexts = {alias: CaptureQueriesContext(connections[alias]) for alias in connections}
    for ctx in contexts.values():
        ctx.__enter__()
    try:
        text = scrape_text(client, refresh=False)
    finally:
        for ctx in contexts.values():
            ctx.__exit__(None, None, None)
    assert "likes_outbox_rows" in text
    monkeypatch.undo()
    return {alias: len(ctx.captured_queries) for alias, ctx in contexts.items()}, len(trips)


def test_a_scrape_reads_one_row_whatever_the_outbox_and_the_streams_hold(client, monkeypatch, make_user,
                                                                         make_video):
    author = make_user()
    for n in range(3):
        make_video(f"g-{n}", author)
    like(make_user(shard="rel_00"), "g-0")
    small, small_redis = _queries_of_one_scrape(client, monkeypatch)

    users = [make_user(shard=shard) for shard in settings.RELATION_SHARD_ALIASES for _ in range(6)]
    for user in users:
        for n in range(3):
            like(user, f"g-{n}")
    publish_all()  # stream entries the consumers have not read: the refresh reads them, a scrape does not
    for user in users[:4]:
        like(user, "g-0", "UNLIKED")  # and NEW rows again
    large, large_redis = _queries_of_one_scrape(client, monkeypatch)

    assert sum(OutboxEvent.objects.using(alias).count() for alias in settings.RELATION_SHARD_ALIASES) == 1 + 36 + 4
    assert small == large
    assert small == {alias: (1 if alias == "default" else 0) for alias in connections}
    assert small_redis == large_redis == 0


def test_a_scrape_answers_from_the_snapshot_while_redis_is_down(client, make_user, make_video):
    make_video("g-r", make_user())
    like(make_user(shard="rel_00"), "g-r")
    gauges_refresh()

    with redis_unreachable(settings):
        samples = parse(scrape_text(client, refresh=False))

    assert not family(samples, "likes_metrics_scrape_errors")
    assert family(samples, "likes_stream_length")  # computed while Redis answered
    assert sample(samples, "likes_outbox_rows", shard="rel_00", status="NEW") == 1


def test_new_values_arrive_with_the_refresh_job_not_with_the_scrape(client, make_user, make_video):
    make_video("g-j", make_user())
    like(make_user(shard="rel_00"), "g-j")
    assert gauges_refresh_task()["stored"] is True  # the task the beat entry runs
    assert sample(parse(scrape_text(client, refresh=False)), "likes_outbox_rows", shard="rel_00", status="NEW") == 1

    like(make_user(shard="rel_00"), "g-j")
    assert sample(parse(scrape_text(client, refresh=False)), "likes_outbox_rows", shard="rel_00", status="NEW") == 1

    gauges_refresh_task()
    assert sample(parse(scrape_text(client, refresh=False)), "likes_outbox_rows", shard="rel_00", status="NEW") == 2


def test_the_snapshot_age_is_exported(client):
    gauges_refresh()
    GaugeSnapshot.objects.filter(key=SNAPSHOT_KEY).update(computed_at=timezone.now() - dt.timedelta(seconds=120))

    samples = parse(scrape_text(client, refresh=False))

    assert 120 <= sample(samples, "likes_metrics_gauges_age_seconds") < 180
    assert sample(samples, "likes_metrics_gauges_refresh_duration_seconds") >= 0


def test_ages_keep_growing_while_refreshes_stop(make_user, make_video):
    make_video("g-a", make_user())
    like(make_user(shard="rel_00"), "g-a")
    OutboxEvent.objects.using("rel_00").update(created_at=timezone.now() - dt.timedelta(seconds=600))
    gauges_refresh()
    later = timezone.now() + dt.timedelta(seconds=300)  # five minutes without a refresh

    gauges = {name: samples for name, _help, samples in scrape_families(now=later)}

    oldest = dict((labels["shard"], v) for labels, v in gauges["likes_outbox_oldest_pending_age_seconds"])
    assert 900 <= oldest["rel_00"] < 1000
    assert oldest["rel_01"] == 0  # nothing pending there when it was computed
    assert 300 <= gauges["likes_metrics_gauges_age_seconds"][0][1] < 360


def test_a_failing_store_is_a_scrape_error_until_a_refresh_succeeds(client):
    with redis_unreachable(settings):
        report = gauges_refresh()
    assert report.errors == ["streams", "consumer_lag", "hotspots"]  # the hot-spot figures are on the cache Redis
    failed = parse(scrape_text(client, refresh=False))
    assert set(family(failed, "likes_metrics_scrape_errors")) == {frozenset({("part", part)}) for part in report.errors}
    assert not family(failed, "likes_stream_length")
    assert family(failed, "likes_outbox_rows")  # the other stores' gauges are there

    healed = parse(scrape_text(client))  # refreshes first

    assert not family(healed, "likes_metrics_scrape_errors")
    assert family(healed, "likes_stream_length")


def test_without_a_snapshot_the_scrape_says_so_and_still_serves_the_counters(client):
    GaugeSnapshot.objects.all().delete()
    client.get("/healthz")

    samples = parse(scrape_text(client, refresh=False))

    assert sample(samples, "likes_metrics_scrape_errors", part="gauge_snapshot") == 1
    assert not family(samples, "likes_outbox_rows")
    assert sample(samples, "likes_metrics_gauges_age_seconds") is None
    assert family(samples, "likes_http_requests_total")


def test_an_older_run_never_replaces_a_newer_snapshot():
    gauges_refresh()
    newer = timezone.now() + dt.timedelta(hours=1)
    GaugeSnapshot.objects.filter(key=SNAPSHOT_KEY).update(computed_at=newer, errors=["marker"])

    report = gauges_refresh()  # started before the stored one

    assert report.stored is False
    row = GaugeSnapshot.objects.get(key=SNAPSHOT_KEY)
    assert row.computed_at == newer and row.errors == ["marker"]


def test_the_refresh_job_is_scheduled_on_the_maintenance_queue_the_worker_consumes():
    entry = settings.CELERY_BEAT_SCHEDULE["metrics-gauges"]
    assert entry == {"task": "observability.refresh_gauges", "schedule": settings.METRICS_GAUGES_EVERY_S}
    queue = settings.CELERY_TASK_ROUTES["observability.refresh_gauges"]["queue"]
    assert queue == "maintenance"
    procfile = (Path(__file__).resolve().parent.parent / "Procfile").read_text()
    worker = next(line for line in procfile.splitlines() if line.startswith("worker:"))
    assert queue in worker.split("-Q", 1)[1].split()[0].split(",")
    assert gauges_refresh_task.name == "observability.refresh_gauges"


def test_the_scrape_families_of_a_part_are_its_own():
    # Every app's part is registered once (its AppConfig.ready), under its store's name.
    names = [name for name, _part in observability._PARTS]
    assert len(names) == len(set(names))
    assert {f"outbox:{alias}" for alias in settings.RELATION_SHARD_ALIASES} | {"snapshot_staleness"} <= set(names)
