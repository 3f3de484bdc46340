"""The outbox publisher's pause per relation shard (issue 14 §3, DEG-2): the paused shard's rows wait in
its outbox (commands keep committing there) while the other shard keeps publishing; clearing the switch
publishes the backlog, in order, each event once, and the counts converge: nothing lost."""

from __future__ import annotations

import pytest
from django.conf import settings

from likes_project.audit.services import system_actor
from likes_project.eventlog import streams
from likes_project.switches import switch_set
from relations.models import OutboxEvent
from relations.services import outbox
from relations.tasks import publish_outbox_task
from tests.counting.helpers import bucket_sum, liked_facts, project_all, publish_all
from tests.relations.helpers import cmd as like

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

ACTOR = system_actor("test-operator")
PAUSED, RUNNING = settings.RELATION_SHARD_ALIASES[0], settings.RELATION_SHARD_ALIASES[1]


def publisher(alias: str, paused: bool) -> None:
    switch_set(kind="publisher", key=alias, paused=paused, reason="shard maintenance", actor=ACTOR)


def statuses(alias: str) -> list[str]:
    return list(OutboxEvent.objects.using(alias).order_by("id").values_list("status", flat=True))


def stream_event_ids() -> list[str]:
    return [e.event["eventId"] for p in streams.all_partitions() for e in streams.read_after(p, "0-0", 1000)]


def test_a_paused_shard_keeps_its_rows_the_other_publishes_and_clearing_publishes_the_backlog(make_user, make_video):
    video = make_video("pub-sw", make_user())
    paused_users = [make_user(shard=PAUSED) for _ in range(3)]
    running_users = [make_user(shard=RUNNING) for _ in range(2)]
    for u in paused_users + running_users:
        like(u, video.video_id)
    publisher(PAUSED, True)

    assert publish_outbox_task(PAUSED) == {"status": "paused"}
    assert publish_outbox_task(RUNNING) == {"status": "ok", "sent": 2}
    report = outbox.outbox_publish_batch(alias=PAUSED, holder="another-publisher")  # every caller skips it
    assert (report.paused, report.claimed) == (True, 0)
    assert statuses(PAUSED) == ["NEW"] * 3
    assert statuses(RUNNING) == ["SENT"] * 2
    # commands still commit on the paused shard: the outbox only grows
    late = make_user(shard=PAUSED)
    like(late, video.video_id)
    publish_all()
    assert statuses(PAUSED) == ["NEW"] * 4
    project_all()
    assert bucket_sum(video.video_id) == 2  # only the running shard's likes are counted so far

    publisher(PAUSED, False)
    assert publish_outbox_task(PAUSED) == {"status": "ok", "sent": 4}
    assert statuses(PAUSED) == ["SENT"] * 4
    ids = stream_event_ids()
    outbox_ids = [str(e) for alias in settings.RELATION_SHARD_ALIASES
                  for e in OutboxEvent.objects.using(alias).values_list("event_id", flat=True)]
    assert sorted(ids) == sorted(outbox_ids) and len(set(ids)) == 6  # each event published once, none lost
    project_all()
    assert bucket_sum(video.video_id) == liked_facts(video.video_id) == 6


def test_an_unknown_shard_is_refused_and_nothing_is_paused(make_user, make_video):
    from likes_project.errors import InvalidInput
    from relations.models import OutboxPublisherSwitch

    with pytest.raises(InvalidInput) as refused:
        switch_set(kind="publisher", key="rel_99", paused=True, reason="typo", actor=ACTOR)
    assert refused.value.code == "unknown_switch_key"
    with pytest.raises(InvalidInput) as refused:
        switch_set(kind="publisher", key=None, paused=True, reason="no shard", actor=ACTOR)
    assert refused.value.code == "switch_key_required"
    assert not OutboxPublisherSwitch.objects.exists()
