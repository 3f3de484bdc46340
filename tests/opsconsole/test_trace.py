"""The trace of a like (issue 14 §1, OPS-1, OPS-2, OBS-1): by operation id, by event id, or by user and
video, one answer with the relation, its commands, the outbox row and, per consumer, its checkpoint
against the entry, its receipt (or the evidence it keeps) and any dead letter. A like made through the
API is traced before publishing, after publishing and after consuming, over the real stores; `manage.py
trace` and the console page both answer from `opsconsole.trace`."""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from relations import routing
from relations.models import OutboxEvent
from relations.services import outbox
from tests.counting.helpers import consume_everything, publish_all
from tests.drills import service_env
from tests.factories import grant, make_staff, put_like, redis_unreachable
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
TRACE_URL = "/admin/opsconsole/trace/"
CONSUMERS = ["count", "reverse", "relcache", "notify", "risk"]  # in the order the apps register them
TOP_KEYS = {"relation", "commands", "outbox", "consumers"}
CONSUMER_KEYS = {"consumer", "partition", "checkpoint", "receipt", "deadLetter"}


def trace_json(*args: str) -> dict:
    out = io.StringIO()
    call_command("trace", *args, "--json", stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def refused(*args: str) -> tuple[str, dict]:
    """The command refused: its CommandError's message and the JSON envelope it printed."""
    out = io.StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("trace", *args, "--json", stdout=out)
    assert exc.value.returncode == 1
    return str(exc.value), json.loads(out.getvalue().strip().splitlines()[-1])


def outbox_row(user, video_id: str, version: int = 1) -> OutboxEvent:
    return OutboxEvent.objects.using(routing.alias_for_user(user.pk)).get(
        aggregate_key=f"{user.pk}:{video_id}", relation_version=version)


def by_consumer(trace: dict) -> dict[str, dict]:
    return {c["consumer"]: c for c in trace["consumers"]}


def camel_case_only(value) -> bool:
    if isinstance(value, dict):
        return all("_" not in k and camel_case_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(camel_case_only(v) for v in value)
    return True


@pytest.fixture
def liked(make_user, make_video, api):
    """A like through the API (nothing published yet), with every consumer's checkpoint row present at
    0-0 on every partition (one pass of each over the empty streams)."""
    consume_everything()
    video = make_video("trace-v", make_user())
    liker = make_user()
    resp = put_like(api.as_user(liker), video.video_id, "LIKED", "trace-op-1")
    assert resp.status_code == 200, resp.content
    return liker, video.video_id


def every_selector(liker, video_id: str) -> list[dict]:
    event_id = str(outbox_row(liker, video_id).event_id)
    return [trace_json("--operation", "trace-op-1"), trace_json("--event", event_id),
            trace_json("--user", liker.username, "--video", video_id),
            trace_json("--user", str(liker.pk), "--video", video_id)]


def test_a_like_traced_by_each_selector_before_publishing_after_publishing_and_after_consuming(liked):
    liker, video_id = liked
    row = outbox_row(liker, video_id)

    # Before publishing: the outbox row is pending, no consumer has reached it.
    before, *others = every_selector(liker, video_id)
    assert all(o == before for o in others)  # every selector names the same trace
    assert set(before) == TOP_KEYS
    assert before["relation"] | {"stateChangedAt": None, "createdAt": None, "updatedAt": None} == {
        "userId": liker.pk, "username": liker.username, "videoId": video_id, "shard": routing.alias_for_user(liker.pk),
        "state": "LIKED", "relationVersion": 1, "lastOperationId": "trace-op-1", "stateChangedAt": None,
        "createdAt": None, "updatedAt": None}
    assert [(c["operationId"], c["changed"], c["traced"]) for c in before["commands"]] == [("trace-op-1", True, True)]
    outbox = before["outbox"]
    assert (outbox["eventId"], outbox["status"], outbox["attempts"], outbox["entryId"], outbox["xactId"]) == (
        str(row.event_id), "NEW", 0, None, row.xact_id)
    partition = streams.partition_for(row.aggregate_key)
    assert [(c["consumer"], c["partition"]) for c in before["consumers"]] == [(c, partition) for c in CONSUMERS]
    for c in before["consumers"]:
        assert set(c) == CONSUMER_KEYS
        assert (c["checkpoint"]["position"], c["checkpoint"]["consumed"]) == ("0-0", False)
        assert (c["receipt"], c["deadLetter"]) == (None, None)

    # Published: the row has its stream entry; the checkpoints have not passed it.
    publish_all()
    published = trace_json("--operation", "trace-op-1")
    row.refresh_from_db()
    assert (published["outbox"]["status"], published["outbox"]["entryId"]) == ("SENT", row.stream_entry_id)
    assert published["outbox"]["streamPartition"] == partition
    for c in published["consumers"]:
        assert (c["checkpoint"]["entryId"], c["checkpoint"]["consumed"], c["receipt"]) == (
            row.stream_entry_id, False, None)

    # Consumed: every checkpoint is past the entry; the projectors' receipts name it, the relation
    # cache's version floor covers it.
    consume_everything()
    after, *others = every_selector(liker, video_id)
    assert all(o == after for o in others)
    consumers = by_consumer(after)
    for name in CONSUMERS:
        cp = consumers[name]["checkpoint"]
        assert cp["consumed"] is True
        assert streams.entry_id_key(cp["position"]) >= streams.entry_id_key(row.stream_entry_id)
        assert consumers[name]["deadLetter"] is None
    for name in ("count", "reverse"):
        receipt = consumers[name]["receipt"]
        assert (receipt["kind"], receipt["entryId"], receipt["sourcePartition"], receipt["outcome"]) == (
            "receipt", row.stream_entry_id, partition, "applied")
        assert receipt["receiptId"] is not None and (receipt["version"], receipt["covers"]) == (1, True)
    floor = consumers["relcache"]["receipt"]
    assert (floor["kind"], floor["receiptId"], floor["state"], floor["version"], floor["covers"]) == (
        "versionFloor", None, "LIKED", 1, True)
    assert "no per-event receipt" in floor["note"]
    assert camel_case_only(after)


@pytest.mark.usefixtures("liked")
def test_the_text_rendering_says_the_same():
    publish_all()
    consume_everything()
    out = io.StringIO()
    call_command("trace", "--operation", "trace-op-1", stdout=out)
    text = out.getvalue()
    assert "LIKED v1, last operation trace-op-1" in text
    assert "outbox #" in text and " SENT," in text
    for name in CONSUMERS:
        assert f"consumer {name} [partition" in text
    assert text.count(": consumed") == len(CONSUMERS) and "receipt #" in text and "no per-event receipt" in text


def test_an_unrelated_operation_or_a_no_op_does_not_show_this_event(liked, make_user, api):
    liker, video_id = liked
    mine = str(outbox_row(liker, video_id).event_id)
    other = make_user()
    assert put_like(api.as_user(other), video_id, "LIKED", "trace-op-other").status_code == 200
    publish_all()
    consume_everything()
    theirs = trace_json("--operation", "trace-op-other")
    assert theirs["outbox"]["eventId"] != mine and theirs["relation"]["userId"] == other.pk
    # Their receipts name their own stream position (entry ids repeat across partitions: the pair decides).
    assert [(c["receipt"]["sourcePartition"], c["receipt"]["entryId"]) for c in theirs["consumers"][:2]] == [
        (theirs["outbox"]["streamPartition"], theirs["outbox"]["entryId"])] * 2
    assert [c["operationId"] for c in theirs["commands"]] == ["trace-op-other"]

    # A second LIKED on the same relation changes nothing: its trace has the relation, no event.
    assert put_like(api.as_user(liker), video_id, "LIKED", "trace-op-noop").status_code == 200
    noop = trace_json("--operation", "trace-op-noop")
    assert noop["relation"]["relationVersion"] == 1
    assert (noop["outbox"], noop["consumers"]) == (None, [])
    assert [(c["operationId"], c["traced"]) for c in noop["commands"]] == [("trace-op-noop", True),
                                                                        ("trace-op-1", False)]

    # After an unlike the relation's trace follows the current version (v2), not the first event.
    assert put_like(api.as_user(liker), video_id, "UNLIKED", "trace-op-unlike").status_code == 200
    current = trace_json("--user", liker.username, "--video", video_id)
    assert (current["outbox"]["relationVersion"], current["relation"]["lastOperationId"]) == (2, "trace-op-unlike")
    assert current["outbox"]["eventId"] != mine
    # ... which is not consumed yet: the count projection's row is still at v1, so it does not cover v2.
    count = by_consumer(current)["count"]["receipt"]
    assert (count["kind"], count["version"], count["eventVersion"], count["covers"]) == ("projectedRow", 1, 2, False)


def test_a_poison_event_shows_each_consumers_dead_letter(liked, make_user, api):
    liker, video_id = liked
    row = outbox_row(liker, video_id)
    # The stored event is broken before it is published: every consumer's validation refuses it.
    OutboxEvent.objects.using(routing.alias_for_user(liker.pk)).filter(pk=row.pk).update(
        payload={**row.payload, "absoluteState": "MAYBE"})
    healthy = make_user()
    assert put_like(api.as_user(healthy), video_id, "LIKED", "trace-op-healthy").status_code == 200
    publish_all()
    consume_everything()
    row.refresh_from_db()
    poisoned = by_consumer(trace_json("--event", str(row.event_id)))
    for name in CONSUMERS:
        dead = poisoned[name]["deadLetter"]
        assert (dead["status"], dead["errorClass"], dead["entryId"], dead["attempts"]) == (
            "NEW", "NonRetryable", row.stream_entry_id, 1)
        assert "absoluteState" in dead["error"]
        assert poisoned[name]["checkpoint"]["consumed"] is True  # set aside: the partition moved on
    assert (poisoned["count"]["receipt"], poisoned["reverse"]["receipt"]) == (None, None)
    # Counter-example: the healthy like on the same video has no dead letter.
    fine = by_consumer(trace_json("--operation", "trace-op-healthy"))
    assert all(fine[name]["deadLetter"] is None for name in CONSUMERS)
    # The risk scorer keeps no per-event receipt (its verdicts are the record): every other consumer shows one.
    assert all(fine[name]["receipt"] is not None for name in CONSUMERS if name != "risk")


def test_a_publish_that_failed_shows_its_attempts_and_error_and_the_trace_needs_no_redis(liked, settings):
    liker, _video_id = liked
    with redis_unreachable(settings):  # the event log is down: the publish fails; the trace reads PostgreSQL only
        report = outbox.outbox_publish_batch(alias=routing.alias_for_user(liker.pk), holder="trace-test")
        assert report.claimed == 1 and report.sent == 0
        failed = trace_json("--operation", "trace-op-1")
    o = failed["outbox"]
    assert (o["status"], o["attempts"], o["entryId"]) == ("RETRY", 1, None)
    assert o["lastError"] and o["nextRetryAt"] is not None
    assert all(c["checkpoint"]["consumed"] is False for c in failed["consumers"])


def test_an_archived_event_is_still_traced_by_each_selector(liked, settings):
    liker, video_id = liked
    settings.OUTBOX_RETENTION_HOURS = 1
    publish_all()
    consume_everything()
    row = outbox_row(liker, video_id)
    alias = routing.alias_for_user(liker.pk)
    OutboxEvent.objects.using(alias).filter(pk=row.pk).update(published_at=timezone.now() - dt.timedelta(hours=2))
    assert outbox.outbox_archive_batch(alias=alias) == 1  # past retention and consumed by every consumer
    assert not OutboxEvent.objects.using(alias).filter(pk=row.pk).exists()
    for found in (trace_json("--event", str(row.event_id)), trace_json("--operation", "trace-op-1"),
                  trace_json("--user", liker.username, "--video", video_id)):
        o = found["outbox"]
        assert (o["status"], o["eventId"], o["entryId"], o["streamPartition"], o["attempts"], o["xactId"]) == (
            "ARCHIVED", str(row.event_id), row.stream_entry_id, row.stream_partition, None, None)
        assert o["archivedAt"] is not None
        consumers = by_consumer(found)
        assert all(consumers[name]["checkpoint"]["consumed"] for name in CONSUMERS)
        assert consumers["count"]["receipt"]["entryId"] == row.stream_entry_id


def test_not_found_is_an_empty_trace_with_the_contract_keys(make_user, make_video):
    make_video("trace-nf", make_user())
    someone = make_user()
    empty = {"relation": None, "commands": [], "outbox": None, "consumers": []}
    assert trace_json("--operation", "never-used-op") == empty
    assert trace_json("--event", "6f1d0c3e-8a5b-4c71-9d0e-2b7f1a9c4e11") == empty
    assert trace_json("--user", someone.username, "--video", "trace-nf") == empty


@pytest.mark.parametrize(("args", "code"), [
    ((), "selector_missing"),
    (("--operation", "op-x", "--event", "6f1d0c3e-8a5b-4c71-9d0e-2b7f1a9c4e11"), "selector_ambiguous"),
    (("--event", "6f1d0c3e-8a5b-4c71-9d0e-2b7f1a9c4e11", "--user", "1"), "selector_ambiguous"),
    (("--operation", "op-x", "--user", "1", "--video", "v"), "selector_ambiguous"),
    (("--user", "1"), "selector_incomplete"),
    (("--video", "v"), "selector_incomplete"),
    (("--event", "not-a-uuid"), "invalid_event_id"),
    (("--operation", "bad id!"), "invalid_operation_id"),
    (("--user", "nobody-by-this-name", "--video", "v"), "user_not_found"),
    (("--user", "1", "--video", "bad id!"), "invalid_video_id"),
])
def test_bad_selectors_are_refused_with_a_code(args, code):
    message, envelope = refused(*args)
    assert envelope["code"] == code and message.startswith(f"{code}: ")


def test_an_operation_id_several_users_used_needs_the_user(make_user, make_video):
    make_video("trace-shared", make_user())
    first, second = make_user(), make_user()
    cmd(first, "trace-shared", key="shared-op")
    cmd(second, "trace-shared", key="shared-op")
    _message, envelope = refused("--operation", "shared-op")
    assert (envelope["code"], envelope["users"]) == ("operation_ambiguous", sorted([first.pk, second.pk]))
    narrowed = trace_json("--operation", "shared-op", "--user", second.username)
    assert narrowed["relation"]["userId"] == second.pk


def test_manage_py_trace_exits_non_zero_on_a_bad_selector_and_zero_with_the_json_last(liked):
    liker, _video_id = liked

    def manage(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", "trace", *argv], cwd=ROOT, env=service_env(),
                              capture_output=True, text=True, timeout=180)

    bad = manage("--json")
    assert bad.returncode == 1 and json.loads(bad.stdout.strip().splitlines()[-1])["code"] == "selector_missing"
    assert "selector_missing" in bad.stderr and "Traceback" not in bad.stderr
    good = manage("--operation", "trace-op-1", "--user", liker.username, "--json")
    assert good.returncode == 0, good.stderr
    last = json.loads(good.stdout.strip().splitlines()[-1])
    assert set(last) == TOP_KEYS and last["outbox"]["status"] == "NEW"


# --- the console page ------------------------------------------------------------------------------


def test_the_trace_page_links_every_identifier_and_is_read_only(liked, client):
    liker, video_id = liked
    row = outbox_row(liker, video_id)
    OutboxEvent.objects.using(routing.alias_for_user(liker.pk)).filter(pk=row.pk).update(
        payload={**row.payload, "relationVersion": "one"})  # poison: every consumer dead-letters it
    publish_all()
    consume_everything()
    staff = make_staff()
    client.force_login(staff)
    assert client.get(TRACE_URL, {"operation": "trace-op-1"}).status_code == 403  # the lookup permission
    grant(staff, "opsconsole.view_relation_lookup")
    audits = AuditRecord.objects.count()
    resp = client.get(TRACE_URL, {"operation": "trace-op-1"})
    assert resp.status_code == 200
    html = resp.content.decode()
    found = resp.context["trace"]
    assert found.outbox.row.id == row.pk
    assert f'href="/admin/opsconsole/trace/?event={row.event_id}"' in html
    assert 'href="/admin/opsconsole/trace/?operation=trace-op-1&amp;user=' in html
    assert "/admin/opsconsole/auditrecord/lookup/?lookup=relation&amp;relation-user=" in html
    for c in found.consumers:
        assert f'href="/admin/eventlog/deadletter/{c.dead_letter.pk}/change/"' in html
        assert f'href="/admin/eventlog/consumercheckpoint/{c.checkpoint.pk}/change/"' in html
    assert AuditRecord.objects.count() == audits  # a trace is a lookup, not an action
    assert client.post(TRACE_URL, {"operation": "trace-op-1"}).status_code == 405
    bad = client.get(TRACE_URL, {"operation": "x", "event": "y"})
    assert bad.status_code == 200 and bad.context["trace"] is None
    assert "Give exactly one selector" in bad.content.decode()
