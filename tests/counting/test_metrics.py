"""Observability (issue 3 §5, issue 10 §3): the store gauges on /metrics (outbox, streams, consumer lag,
dead letters, snapshot staleness, projection latency; the spec's M6, M9 and M10) as the refresh job computes
them, and how a refresh answers when Redis does not. The admin pages for the event log and the count projection are in
test_counting_admin.py; the snapshot's own behaviour (a scrape's cost, its age) in tests/test_gauges.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from counting.models import DirtyVideo
from counting.services.snapshots import display_snapshot_refresh
from likes_project import metrics
from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter
from relations.models import OutboxEvent
from tests.counting.helpers import SHARDS, dead_letter, project_everything, publish
from tests.metrics_helpers import parse, scrape_text
from tests.relations.helpers import cmd as like

# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]



# --- helpers -----------------------------------------------------------------------------------


def scrape(client) -> dict[tuple[str, frozenset], float]:
    """Refresh the stored gauges (what the beat job does), GET /metrics and parse every sample."""
    return parse(scrape_text(client))


def sample(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def family(samples, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


# --- /metrics: outbox, streams, consumer lag ---------------------------------------------------


def test_metrics_count_outbox_rows_by_status_on_each_shard(client, make_user, make_video, author):
    make_video("vid-m", author)
    u0, u1, u1b = make_user(shard="rel_00"), make_user(shard="rel_01"), make_user(shard="rel_01")
    like(u0, "vid-m")
    like(u1, "vid-m")
    like(u1b, "vid-m")
    like(u1b, "vid-m", "UNLIKED")

    samples = scrape(client)

    assert sample(samples, "likes_outbox_rows", shard="rel_00", status="NEW") == 1
    assert sample(samples, "likes_outbox_rows", shard="rel_01", status="NEW") == 3
    for shard in SHARDS:
        assert sample(samples, "likes_outbox_rows", shard=shard, status="SENT") == 0
        assert sample(samples, "likes_outbox_oldest_pending_age_seconds", shard=shard) >= 0
    assert not family(samples, "likes_metrics_scrape_errors")


def test_metrics_oldest_pending_age_follows_the_oldest_unpublished_row(client, make_user, make_video, author):
    make_video("vid-m", author)
    u0 = make_user(shard="rel_00")
    like(u0, "vid-m")
    OutboxEvent.objects.using("rel_00").update(created_at=timezone.now() - dt.timedelta(seconds=600))

    samples = scrape(client)

    assert 600 <= sample(samples, "likes_outbox_oldest_pending_age_seconds", shard="rel_00") < 700
    assert sample(samples, "likes_outbox_oldest_pending_age_seconds", shard="rel_01") == 0


def test_publishing_moves_rows_from_new_to_the_stream(client, make_user, make_video, author):
    make_video("vid-m", author)
    users = [make_user(shard="rel_00"), make_user(shard="rel_01"), make_user(shard="rel_01")]
    for user in users:
        like(user, "vid-m")
    before = scrape(client)
    assert sum(family(before, "likes_stream_length").values()) == 0
    assert len(family(before, "likes_stream_length")) == len(streams.all_partitions())

    assert publish("rel_00") == 1
    after_one = scrape(client)
    assert sample(after_one, "likes_outbox_rows", shard="rel_00", status="NEW") == 0
    assert sample(after_one, "likes_outbox_rows", shard="rel_00", status="SENT") == 1
    assert sample(after_one, "likes_outbox_rows", shard="rel_01", status="NEW") == 2
    assert sample(after_one, "likes_outbox_oldest_pending_age_seconds", shard="rel_00") == 0
    assert sum(family(after_one, "likes_stream_length").values()) == 1

    assert publish("rel_01") == 2
    after_all = scrape(client)
    assert sample(after_all, "likes_outbox_rows", shard="rel_01", status="NEW") == 0
    lengths = family(after_all, "likes_stream_length")
    assert sum(lengths.values()) == 3
    for p in streams.all_partitions():
        assert lengths[frozenset({("partition", str(p))})] == streams.length(p)


def test_consumer_lag_grows_with_published_events_and_returns_to_zero(client, make_user, make_video, author):
    make_video("vid-m", author)
    like(make_user(shard="rel_00"), "vid-m")
    publish("rel_00")
    project_everything()
    caught_up = scrape(client)
    lag_entries = family(caught_up, "likes_consumer_lag_entries")
    assert set(lag_entries) == {frozenset({("consumer", "count"), ("partition", str(p))})
                                for p in streams.all_partitions()}
    assert set(lag_entries.values()) == {0}
    assert set(family(caught_up, "likes_consumer_lag_seconds").values()) == {0}

    late = make_user(shard="rel_01")
    like(late, "vid-m")
    like(make_user(shard="rel_01"), "vid-m")
    publish("rel_01")
    behind = scrape(client)
    lagging = {dict(k)["partition"]: v for k, v in family(behind, "likes_consumer_lag_entries").items() if v}
    assert sum(lagging.values()) == 2
    assert str(streams.partition_for(f"{late.pk}:vid-m")) in lagging
    assert all(sample(behind, "likes_consumer_lag_seconds", consumer="count", partition=p) >= 0 for p in lagging)

    project_everything()
    again = scrape(client)
    assert set(family(again, "likes_consumer_lag_entries").values()) == {0}
    assert set(family(again, "likes_consumer_lag_seconds").values()) == {0}


def test_consumer_lag_seconds_is_the_age_of_the_first_unconsumed_entry(client, make_user, make_video, author):
    make_video("vid-m", author)
    user = make_user(shard="rel_00")
    like(user, "vid-m")
    publish("rel_00")
    p = streams.partition_for(f"{user.pk}:vid-m")
    # Give the entry a timestamp 90 s in the past: rewrite the stream with an explicit older id.
    (entry_id, fields), = streams.stream_redis().xrange(streams.stream_key(p))
    old_ms = streams.entry_id_key(entry_id.decode())[0] - 90_000
    streams.stream_redis().delete(streams.stream_key(p))
    streams.stream_redis().xadd(streams.stream_key(p), fields, id=f"{old_ms}-0")
    ConsumerCheckpoint.objects.create(consumer="count", partition=p, last_done_id="0-0")

    samples = scrape(client)

    assert sample(samples, "likes_consumer_lag_entries", consumer="count", partition=p) == 1
    assert 90 <= sample(samples, "likes_consumer_lag_seconds", consumer="count", partition=p) < 150


# --- /metrics: dead letters, snapshot staleness, projection latency ----------------------------


def test_dead_letters_show_in_the_gauges(client):
    before = scrape(client)
    assert not family(before, "likes_dead_letters")
    assert sample(before, "likes_dead_letter_oldest_age_seconds") == 0

    old = dead_letter("100-0")
    dead_letter("101-0")
    DeadLetter.objects.filter(pk=old.pk).update(first_failed_at=timezone.now() - dt.timedelta(seconds=300))
    resolved = dead_letter("102-0")
    DeadLetter.objects.filter(pk=resolved.pk).update(status="RESOLVED",
                                                      first_failed_at=timezone.now() - dt.timedelta(days=1))

    samples = scrape(client)
    assert sample(samples, "likes_dead_letters", consumer="count", status="NEW") == 2
    assert sample(samples, "likes_dead_letters", consumer="count", status="RESOLVED") == 1
    # The oldest NEW one, not the older RESOLVED one.
    assert 300 <= sample(samples, "likes_dead_letter_oldest_age_seconds") < 400


def test_snapshot_staleness_and_projection_latency(client, make_user, make_video, author):
    make_video("vid-m", author)
    like(make_user(shard="rel_00"), "vid-m")
    like(make_user(shard="rel_01"), "vid-m")
    assert sample(scrape(client), "likes_display_snapshot_oldest_dirty_age_seconds") == 0
    for alias in SHARDS:
        publish(alias)
    project_everything()

    dirty = scrape(client)
    assert sample(dirty, "likes_display_snapshot_oldest_dirty_age_seconds") >= 0
    assert sample(dirty, "likes_projection_lag_seconds_count") >= 2  # the in-process summary is kept

    for alias in settings.COUNT_PARTITION_ALIASES:
        DirtyVideo.objects.using(alias).update(first_dirty_at=timezone.now() - dt.timedelta(seconds=200))
    assert 200 <= sample(scrape(client), "likes_display_snapshot_oldest_dirty_age_seconds") < 300

    assert display_snapshot_refresh().videos == 1
    assert sample(scrape(client), "likes_display_snapshot_oldest_dirty_age_seconds") == 0


def test_metrics_answer_with_a_scrape_error_when_redis_is_unreachable(client, make_user, make_video, author,
                                                                      unreachable_redis):
    make_video("vid-m", author)
    like(make_user(shard="rel_00"), "vid-m")
    ConsumerCheckpoint.objects.create(consumer="count", partition=0)

    samples = scrape(client)

    assert sample(samples, "likes_metrics_scrape_errors", part="streams") == 1
    assert sample(samples, "likes_metrics_scrape_errors", part="consumer_lag") == 1
    assert not family(samples, "likes_stream_length")
    assert not family(samples, "likes_consumer_lag_entries")
    # The database-backed gauges are still there.
    assert sample(samples, "likes_outbox_rows", shard="rel_00", status="NEW") == 1
    assert sample(samples, "likes_dead_letter_oldest_age_seconds") == 0
    assert sample(samples, "likes_metrics_scrape_errors", part="outbox:rel_00") is None


def test_metrics_have_no_scrape_error_when_everything_answers(client):
    samples = scrape(client)
    assert not family(samples, "likes_metrics_scrape_errors")
    assert family(samples, "likes_stream_length")


# --- /metrics: the pipeline's lag histograms (issue 10 §2) ----------------------------------------


def test_publish_lag_and_display_snapshot_lag_are_observed(client, make_user, make_video, author):
    make_video("vid-lag", author)
    like(make_user(shard="rel_00"), "vid-lag")
    OutboxEvent.objects.using("rel_00").update(created_at=timezone.now() - dt.timedelta(seconds=30))
    published = (metrics.value("likes_outbox_publish_lag_seconds_count", shard="rel_00"),
                 metrics.value("likes_outbox_publish_lag_seconds_sum", shard="rel_00"))

    publish("rel_00")

    assert metrics.value("likes_outbox_publish_lag_seconds_count", shard="rel_00") == published[0] + 1
    assert 30 <= metrics.value("likes_outbox_publish_lag_seconds_sum", shard="rel_00") - published[1] < 90

    project_everything()
    for alias in settings.COUNT_PARTITION_ALIASES:
        DirtyVideo.objects.using(alias).update(first_dirty_at=timezone.now() - dt.timedelta(seconds=45))
    shown = (metrics.value("likes_display_snapshot_lag_seconds_count"),
             metrics.value("likes_display_snapshot_lag_seconds_sum"))

    assert display_snapshot_refresh().videos == 1

    assert metrics.value("likes_display_snapshot_lag_seconds_count") == shown[0] + 1  # one per video shown
    assert 45 <= metrics.value("likes_display_snapshot_lag_seconds_sum") - shown[1] < 105
    samples = scrape(client)
    assert sample(samples, "likes_outbox_publish_lag_seconds_bucket", shard="rel_00", le="60.0") >= 1
    assert sample(samples, "likes_display_snapshot_lag_seconds_bucket", le="+Inf") >= 1


def test_a_snapshot_that_shows_nothing_new_observes_no_lag(make_user, make_video, author):
    make_video("vid-idle", author)
    before = metrics.value("likes_display_snapshot_lag_seconds_count")

    assert display_snapshot_refresh().videos == 0

    assert metrics.value("likes_display_snapshot_lag_seconds_count") == before
