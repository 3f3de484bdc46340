"""A consumer paused on one stream partition (issue 14 §3, DEG-2): that partition's checkpoint stays where it
is while the consumer's other partitions, and the other consumers on the same partition, keep flowing;
clearing it applies what waited, nothing lost. The whole-consumer switch (the snapshot barrier's, the
drill's) still pauses every partition."""

from __future__ import annotations

import pytest

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import system_actor
from likes_project.errors import InvalidInput
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_partition, consumer_is_paused
from likes_project.eventlog.models import ConsumerCheckpoint, ConsumerPartitionSwitch
from likes_project.eventlog.services import consumer_switch_set
from likes_project.switches import switch_set
from relations import events
from relations.services.relation_cache import RelationCacheProjector
from tests.counting.helpers import bucket_sum, liked_facts, project_all, publish_all
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

ACTOR = system_actor("test-operator")


def checkpoint(consumer: str, partition: int) -> str:
    row = ConsumerCheckpoint.objects.filter(consumer=consumer, partition=partition).first()
    return row.last_done_id if row else "0-0"


def likes_on_two_partitions(make_user, video_id: str) -> tuple[int, int]:
    """Likes of `video_id` by new users until two stream partitions hold some; returns those two."""
    seen: dict[int, int] = {}
    while len(seen) < 2 or min(seen.values()) < 2:
        user = make_user()
        cmd(user, video_id, "LIKED")
        p = streams.partition_for(events.aggregate_key(user.pk, video_id))
        if len(seen) < 2 or p in seen:
            seen[p] = seen.get(p, 0) + 1
    publish_all()
    paused, other = sorted(seen)
    return paused, other


def test_one_paused_partition_waits_while_the_others_and_other_consumers_flow(make_user, make_video):
    video = make_video("cps-v", make_user())
    paused, other = likes_on_two_partitions(make_user, video.video_id)
    row = switch_set(kind="consumer", key=f"count:{paused}", paused=True, reason="hot partition", actor=ACTOR)
    assert (row.consumer, row.partition, row.key) == ("count", paused, f"count:{paused}")

    reports = {r.partition: r for r in project_all()}
    assert reports[paused].status == "paused" and reports[paused].dispatched == 0
    assert reports[other].status == "ok" and reports[other].applied >= 2
    assert checkpoint("count", paused) == "0-0"
    assert checkpoint("count", other) != "0-0"
    assert 0 < bucket_sum(video.video_id) < liked_facts(video.video_id)
    # another consumer of the same partition is not paused
    assert consume_partition(RelationCacheProjector(), partition=paused, ignore_backoff=True).status == "ok"
    assert checkpoint("relcache", paused) != "0-0"
    # a drain of every partition (the reconciliation cut) learns the consumer is paused somewhere
    assert consumer_is_paused("count") and consumer_is_paused("count", paused)
    assert not consumer_is_paused("count", other) and not consumer_is_paused("relcache")

    switch_set(kind="consumer", key=f"count:{paused}", paused=False, reason="", actor=ACTOR)
    reports = {r.partition: r for r in project_all()}
    assert reports[paused].status == "ok" and reports[paused].applied >= 2
    assert bucket_sum(video.video_id) == liked_facts(video.video_id)  # nothing lost
    assert [r.action for r in AuditRecord.objects.filter(target_type="consumer_partition").order_by("id")] == [
        "consumer.pause", "consumer.resume"]


def test_the_whole_consumer_switch_still_pauses_every_partition(make_user, make_video):
    video = make_video("cps-all", make_user())
    likes_on_two_partitions(make_user, video.video_id)
    consumer_switch_set(consumer="count", paused=True, reason="snapshot barrier", actor=ACTOR)
    assert {r.status for r in project_all()} == {"paused"}
    assert bucket_sum(video.video_id) == 0
    consumer_switch_set(consumer="count", paused=False, reason="", actor=ACTOR)
    project_all()
    assert bucket_sum(video.video_id) == liked_facts(video.video_id)


@pytest.mark.parametrize("key, code", [
    ("count:99", "unknown_switch_key"),  # no such partition
    ("nobody:0", "unknown_switch_key"),  # no such consumer
    ("count:x", "unknown_switch_key"),
    ("nobody", "unknown_switch_key"),
    (None, "switch_key_required"),
])
def test_a_consumer_key_that_names_no_consumer_partition_is_refused_and_nothing_is_written(key, code):
    with pytest.raises(InvalidInput) as refused:
        switch_set(kind="consumer", key=key, paused=True, reason="typo", actor=ACTOR)
    assert refused.value.code == code
    assert not ConsumerPartitionSwitch.objects.exists()
    assert not AuditRecord.objects.filter(action__startswith="consumer.").exists()
