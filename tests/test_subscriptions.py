"""Subscriptions (issue 31 §1): created from manage.py (the token printed once), pulled over HTTP with the exact
contract (allowed fields only, a cursor over every partition, at least once), acknowledged, and part of the log's
bookkeeping: an un-acknowledged position holds trimming back, an acknowledgement lets it pass, and a subscription
past its retention stops holding it and turns BEHIND_RETENTION. Real PostgreSQL and Redis throughout."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from likes_project.eventlog.services import streams_trim
from likes_project.subscriptions import selectors, services
from likes_project.subscriptions.models import Subscription, SubscriptionNotice
from tests.counting.helpers import consume_everything, like_storm, publish_all
from tests.relations.helpers import assert_error, body_of, cmd

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

ALL_FIELDS = "userId,videoId,state,relationVersion,stateChangedAt"


def create(name: str, *, fields: str = ALL_FIELDS, start: str = "earliest") -> dict:
    out = io.StringIO()
    call_command("subscription_create", name, "--owner", "recsys", "--purpose", "features", "--fields", fields,
                 "--from", start, "--json", stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def pull(name: str, token: str, **params):
    return APIClient().get(f"/internal/v1/subscriptions/{name}/events", params, HTTP_AUTHORIZATION=f"Bearer {token}")


def ack(name: str, token: str, cursor: str):
    return APIClient().post(f"/internal/v1/subscriptions/{name}/ack", json.dumps({"cursor": cursor}),
                            content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def read_all(name: str, token: str, *, limit: int = 7) -> tuple[list[dict], str]:
    """Every event after what it acknowledged, page by page; (events, the last cursor)."""
    events, cursor = [], None
    while True:
        page = body_of(pull(name, token, limit=limit, **({"after": cursor} if cursor else {})))
        events += page["events"]
        cursor = page["nextCursor"]
        if not page["events"]:
            return events, cursor


@pytest.fixture
def storm(make_user, make_video):
    """Likes and unlikes of 4 users on 3 videos (some flipped twice), published to the log: the facts."""
    author, users = make_user(), [make_user() for _ in range(4)]
    videos = [f"sub-v{v}" for v in range(3)]
    for video_id in videos:
        make_video(video_id, author)

    def run():
        like_storm(users, videos)
        return users

    return run


def test_create_prints_the_token_once_and_show_never_does():
    made = create("recs")
    assert set(made) == {"name", "token", "fields", "status"}
    assert (made["name"], made["fields"], made["status"]) == ("recs", ALL_FIELDS.split(","), "ACTIVE")
    out = io.StringIO()
    call_command("subscription_show", "recs", "--json", stdout=out)
    shown = json.loads(out.getvalue().strip().splitlines()[-1])
    assert made["token"] not in out.getvalue() and shown["status"] == "ACTIVE"
    assert set(shown["position"]) == {str(p) for p in streams.all_partitions()}
    sub = Subscription.objects.get(name="recs")
    assert sub.token_hash == services.token_hash(made["token"]) and made["token"] not in sub.token_hash
    record = AuditRecord.objects.get(action="subscription.create", target_id="recs")
    assert made["token"] not in json.dumps(record.params)


@pytest.mark.parametrize("args, code", [
    (["--fields", "userId,userPseudonym"], "invalid_fields"),
    (["--fields", "userId,email"], "invalid_fields"),
    (["--fields", ""], "invalid_fields"),
])
def test_create_refuses_bad_fields_with_the_envelope_and_writes_nothing(args, code):
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("subscription_create", "bad", "--owner", "t", "--purpose", "p", "--from", "latest", "--json",
                     *args, stdout=out)
    assert json.loads(out.getvalue().strip().splitlines()[-1])["code"] == code
    assert not Subscription.objects.exists()


def test_a_bad_name_and_a_taken_name_are_refused():
    create("taken")
    for name, code in (("Bad Name", "invalid_name"), ("taken", "subscription_exists")):
        out = io.StringIO()
        with pytest.raises(CommandError):
            call_command("subscription_create", name, "--owner", "t", "--purpose", "p", "--fields", "videoId",
                         "--from", "latest", "--json", stdout=out)
        assert json.loads(out.getvalue().strip().splitlines()[-1])["code"] == code


def test_a_storm_is_read_exactly_once_after_deduplication_with_the_allowed_fields_only(storm):
    made = create("recs")
    users = storm()
    events, cursor = read_all("recs", made["token"])
    by_id = {e["eventId"]: e for e in events}
    assert len(by_id) == len(events)  # no page repeated an event
    assert all(set(e) == {"eventId", "type", *ALL_FIELDS.split(",")} for e in events)
    assert {e["type"] for e in events} == {"like.relation_changed"}
    # The last version of each relation is the fact.
    final = {}
    for e in sorted(events, key=lambda e: e["relationVersion"]):
        final[(e["userId"], e["videoId"])] = e["state"]
    for i, user in enumerate(users):
        for v in range(3):
            assert final[(user.pk, f"sub-v{v}")] == ("UNLIKED" if (i + v) % 2 else "LIKED")
    # At least once: the same page again (not acknowledged) serves the same events.
    again, _ = read_all("recs", made["token"])
    assert [e["eventId"] for e in again] == [e["eventId"] for e in events]
    assert ack("recs", made["token"], cursor).status_code == 200
    assert body_of(pull("recs", made["token"]))["events"] == []


def test_a_pseudonym_subscription_never_sees_user_ids_and_its_pseudonyms_are_its_own(storm):
    one, two = create("anon-1", fields="userPseudonym,videoId,state"), create("anon-2", fields="userPseudonym")
    storm()
    first, _ = read_all("anon-1", one["token"])
    second, _ = read_all("anon-2", two["token"])
    assert all(set(e) == {"eventId", "type", "userPseudonym", "videoId", "state"} for e in first)
    assert all("userId" not in e for e in first + second)
    names_1 = {e["eventId"]: e["userPseudonym"] for e in first}
    names_2 = {e["eventId"]: e["userPseudonym"] for e in second}
    assert len(set(names_1.values())) == 4 and all(names_1[k] != names_2[k] for k in names_1)


def test_an_unacknowledged_position_holds_trimming_back_and_the_ack_lets_it_pass(storm):
    made = create("holder")
    storm()
    consume_everything()  # every internal consumer is past every entry
    held = {p: streams.length(p) for p in streams.all_partitions()}
    streams_trim(retention_s=0)
    assert {p: streams.length(p) for p in streams.all_partitions()} == held  # the subscription read nothing yet
    _events, cursor = read_all("holder", made["token"])
    assert ack("holder", made["token"], cursor).status_code == 200
    streams_trim(retention_s=0)
    assert all(streams.length(p) <= 1 for p in streams.all_partitions())  # MINID keeps from the next entry on


def test_tokens_names_cursors_and_limits_are_checked_without_saying_what_exists(storm):
    one, two = create("one"), create("two")
    storm()
    assert_error(pull("one", "not-a-token"), 401, "authentication_failed")
    assert_error(pull("nope", "not-a-token"), 401, "authentication_failed")
    assert_error(APIClient().get("/internal/v1/subscriptions/one/events"), 401, "authentication_failed")
    assert_error(pull("one", two["token"]), 403, "subscription_forbidden")
    assert_error(pull("nope", two["token"]), 403, "subscription_forbidden")
    cursor = body_of(pull("one", one["token"], limit=2))["nextCursor"]
    assert_error(pull("two", two["token"], after=cursor), 400, "invalid_cursor")  # another subscription's
    assert_error(pull("one", one["token"], after=cursor[:-2] + "xx"), 400, "invalid_cursor")
    assert_error(ack("one", one["token"], "garbage"), 400, "invalid_cursor")
    for limit in ("0", "1001", "x"):
        assert_error(pull("one", one["token"], limit=limit), 400, "invalid_limit")


def test_pause_refuses_reads_but_keeps_holding_and_retire_lets_go(storm):
    made = create("paused")
    storm()
    consume_everything()
    call_command("subscription_pause", "paused", "--reason", "downstream outage", stdout=io.StringIO())
    assert_error(pull("paused", made["token"]), 409, "subscription_paused")
    held = {p: streams.length(p) for p in streams.all_partitions()}
    streams_trim(retention_s=0)
    assert {p: streams.length(p) for p in streams.all_partitions()} == held
    call_command("subscription_resume", "paused", stdout=io.StringIO())
    assert body_of(pull("paused", made["token"]))["events"]
    call_command("subscription_retire", "paused", "--reason", "team gone", stdout=io.StringIO())
    assert_error(pull("paused", made["token"]), 401, "authentication_failed")
    streams_trim(retention_s=0)
    assert all(streams.length(p) <= 1 for p in streams.all_partitions())
    assert [r.action for r in AuditRecord.objects.filter(target_type="subscription").order_by("seq")] == [
        "subscription.create", "subscription.pause", "subscription.resume", "subscription.retire"]
    with pytest.raises(CommandError, match="subscription_state"):
        call_command("subscription_resume", "paused", stdout=io.StringIO())


def test_past_its_retention_it_turns_behind_retention_and_stops_holding_the_log(storm):
    made = create("slow")
    storm()
    consume_everything()
    assert services.subscriptions_lag_check() == services.LagReport([], [])  # within its 24 h
    Subscription.objects.filter(name="slow").update(max_lag_s=0.0)
    # Counter-example first: while it holds, nothing is trimmed.
    held = {p: streams.length(p) for p in streams.all_partitions()}
    streams_trim(retention_s=0)
    assert {p: streams.length(p) for p in streams.all_partitions()} == held
    assert services.subscriptions_lag_check().behind == ["slow"]
    sub = Subscription.objects.get(name="slow")
    assert sub.status == "BEHIND_RETENTION" and set(sub.position) == {str(p) for p in streams.all_partitions()}
    assert_error(pull("slow", made["token"]), 409, "behind_retention")
    streams_trim(retention_s=0)
    assert all(streams.length(p) <= 1 for p in streams.all_partitions())
    record = AuditRecord.objects.get(action="subscription.behind_retention", target_id="slow")
    assert record.actor == services.LAG_CHECKER


def test_the_report_shows_the_lag_of_what_it_has_not_acknowledged(storm):
    made = create("laggy")

    def lag() -> float:
        return selectors.subscription_report(Subscription.objects.get(name="laggy"))["lagSeconds"]

    assert lag() == 0  # nothing to read
    storm()
    assert lag() > 0  # the storm's events wait for it
    _events, cursor = read_all("laggy", made["token"])
    ack("laggy", made["token"], cursor)
    assert lag() == 0


def validators() -> dict:
    """The published JSON Schema of each event type (docs/events/<type>.v1.json)."""
    from pathlib import Path

    import jsonschema

    folder = Path(__file__).resolve().parents[1] / "docs" / "events"
    return {kind: jsonschema.Draft202012Validator(json.loads((folder / f"{kind}.v1.json").read_text()),
                                                  format_checker=jsonschema.FormatChecker())
            for kind in ("like.relation_changed", "account.deleted")}


@pytest.mark.parametrize("fields", [ALL_FIELDS, "userPseudonym,videoId,state,relationVersion,stateChangedAt",
                                    "videoId"])
def test_every_event_served_validates_against_its_published_schema(storm, fields):
    import jsonschema

    schemas = validators()
    made = create("schema", fields=fields)
    users = storm()
    delete_account(users[0])
    events, _ = read_all("schema", made["token"])
    assert {e["type"] for e in events} == ({"like.relation_changed", "account.deleted"} if "user" in fields
                                           else {"like.relation_changed"})
    for event in events:
        schemas[event["type"]].validate(event)
    # Counter-example: an event carrying a field the schema does not allow fails validation.
    with pytest.raises(jsonschema.ValidationError):
        schemas["like.relation_changed"].validate({**events[-1], "userId": 1, "userPseudonym": "0" * 32})


def delete_account(user) -> None:
    from relations.services.accounts import account_delete
    from tests.factories import TEST_ACTOR

    account_delete(user_id=user.pk, actor=TEST_ACTOR)
    publish_all()


def test_an_account_deletion_reaches_every_subscription_that_names_users_once(storm):
    by_id, by_name, anonymous = create("ids"), create("names", fields="userPseudonym,videoId"), create(
        "no-users", fields="videoId,state")
    users = storm()
    for name, made in (("ids", by_id), ("names", by_name), ("no-users", anonymous)):
        _events, cursor = read_all(name, made["token"])
        ack(name, made["token"], cursor)
    delete_account(users[0])
    delete_account(users[0])  # a re-run: no second notice
    ids, _ = read_all("ids", by_id["token"])
    assert [e for e in ids if e["type"] == "account.deleted"] == [
        {"eventId": ids[0]["eventId"], "type": "account.deleted", "userId": users[0].pk,
         "deletedAt": ids[0]["deletedAt"]}]
    assert ids[0]["type"] == "account.deleted"  # before the log's events of the same pull
    # Its likes are withdrawn by versioned unlikes (PRIV-5), which follow on the log.
    assert {e["state"] for e in ids[1:] if e["userId"] == users[0].pk} == {"UNLIKED"}
    names, _ = read_all("names", by_name["token"])
    [notice] = [e for e in names if e["type"] == "account.deleted"]
    sub = Subscription.objects.get(name="names")
    assert set(notice) == {"eventId", "type", "userPseudonym", "deletedAt"}
    assert notice["userPseudonym"] == services.pseudonym(sub, users[0].pk)
    unnamed, _ = read_all("no-users", anonymous["token"])
    assert not [e for e in unnamed if e["type"] == "account.deleted"]  # it holds nothing of the user


def test_an_acknowledged_notice_is_not_served_again_and_is_dropped(storm):
    made = create("acker", fields="userId,videoId")
    users = storm()
    delete_account(users[1])
    page = body_of(pull("acker", made["token"], limit=1))
    assert [e["type"] for e in page["events"]] == ["account.deleted"]
    assert ack("acker", made["token"], page["nextCursor"]).status_code == 200
    assert not SubscriptionNotice.objects.filter(subscription__name="acker").exists()
    rest, _ = read_all("acker", made["token"])
    assert rest and all(e["type"] == "like.relation_changed" for e in rest)


def test_behind_retention_it_is_replayed_from_the_archive_after_a_second_persons_approval(storm, settings):
    from likes_project.approvals import SelfApproval
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_run_inline
    from likes_project.subscriptions import replay
    from relations import routing
    from relations.services.outbox import outbox_archive_batch

    lost, witness = create("lost"), create("witness")
    storm()
    consume_everything()
    expected, cursor = read_all("witness", witness["token"])
    ack("witness", witness["token"], cursor)
    Subscription.objects.filter(name="lost").update(max_lag_s=0.0)
    assert services.subscriptions_lag_check().behind == ["lost"]
    # What it missed leaves the log: some rows into the archive, the rest still SENT in the outbox.
    settings.OUTBOX_RETENTION_HOURS = 0
    archived = sum(outbox_archive_batch(alias=alias, chunk=4) for alias in routing.all_aliases())
    streams_trim(retention_s=0)
    assert archived and all(streams.length(p) == 0 for p in streams.all_partitions())

    alice, bob = Actor("alice", "cli"), Actor("bob", "cli")
    request = replay.replay_request(name="lost", actor=alice, reason="recsys was down for a day")
    with pytest.raises(SelfApproval):
        replay.replay_approve(replay_id=request.pk, actor=alice)
    assert_error(pull("lost", lost["token"]), 409, "behind_retention")  # nothing moved before the approval
    approved = replay.replay_approve(replay_id=request.pk, actor=bob)
    assert approved.status == "APPROVED" and approved.job_id
    job_run_inline(approved.job_id)
    assert replay.replay_get(request.pk).status == "DONE"
    assert Subscription.objects.get(name="lost").status == "ACTIVE"

    # Every event it missed, once after deduplication, and then the log's new events with no gap.
    users = storm()  # the same likes again: some change, most are no-ops
    cmd(users[0], "sub-v0", "UNLIKED")
    publish_all()
    got, _ = read_all("lost", lost["token"])
    fresh, _ = read_all("witness", witness["token"])
    assert {e["eventId"] for e in got} == {e["eventId"] for e in expected + fresh}
    assert all(e["type"] == "like.relation_changed" and set(e) == {"eventId", "type", *ALL_FIELDS.split(",")}
               for e in got)
    assert [r.action for r in AuditRecord.objects.filter(target_type="subscription_replay").order_by("id")] == [
        "subscription.replay.request", "subscription.replay.approve", "subscription.replay.approve",
        "subscription.replayed"]


def test_a_replay_is_refused_for_a_subscription_that_is_not_behind_and_through_the_commands():
    create("fine")
    with pytest.raises(CommandError):
        call_command("subscription_replay", "fine", "--reason", "why not", stdout=io.StringIO(),
                     stderr=io.StringIO())
    with pytest.raises(CommandError):
        call_command("subscription_replay", "fine", stdout=io.StringIO(), stderr=io.StringIO())  # no reason
    with pytest.raises(CommandError):
        call_command("subscription_replay_approve", "999999", "--actor", "nobody", stdout=io.StringIO(),
                     stderr=io.StringIO())


def test_the_console_requests_a_replay_and_only_another_approver_approves_it():
    from likes_project.subscriptions.models import SubscriptionReplay
    from tests.factories import grant, staff_client

    create("console")
    sub = Subscription.objects.get(name="console")
    Subscription.objects.filter(pk=sub.pk).update(status="BEHIND_RETENTION")
    operator, op_client = staff_client("op")
    grant(operator, "subscriptions.manage_subscription", "subscriptions.view_subscription",
          "subscriptions.view_subscriptionreplay")
    approver, ap_client = staff_client("ap")
    grant(approver, "subscriptions.approve_subscriptionreplay", "subscriptions.view_subscriptionreplay")
    op_client.post("/admin/subscriptions/subscription/", {
        "action": "replay_request", "_selected_action": [sub.pk], "confirm": "1", "reason": "a day of downtime"})
    [row] = SubscriptionReplay.objects.all()
    assert row.requested_by == "op" and row.status == "AWAITING_APPROVAL"
    # The operator holds no approve permission: the action is not theirs (and the service would refuse them).
    op_client.post("/admin/subscriptions/subscriptionreplay/", {"action": "approve", "_selected_action": [row.pk]})
    assert SubscriptionReplay.objects.get().status == "AWAITING_APPROVAL"
    ap_client.post("/admin/subscriptions/subscriptionreplay/", {"action": "approve", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.status == "APPROVED" and row.approved_by == "ap" and row.job_id


def test_the_device_is_sent_only_when_granted_and_only_as_the_subscriptions_own_pseudonym(make_user, make_video):
    from relations.services.commands import relation_set_state

    with_device, other = create("dev-a", fields="videoId,device"), create("dev-b", fields="videoId,device")
    without = create("dev-none", fields="videoId,state")
    user = make_user()
    make_video("dev-v", make_user())
    relation_set_state(user_id=user.pk, video_id="dev-v", desired_state="LIKED", operation_id="dev-1",
                       device_id="iphone-7f3a")
    cmd(user, "dev-v", "UNLIKED")  # no device named
    publish_all()
    [a1, a2], _ = read_all("dev-a", with_device["token"])
    [b1, _b2], _ = read_all("dev-b", other["token"])
    [n1, _n2], _ = read_all("dev-none", without["token"])
    assert a1["device"] == services.device_pseudonym(Subscription.objects.get(name="dev-a"), "iphone-7f3a")
    assert a2["device"] is None and b1["device"] != a1["device"] and "device" not in n1
    assert "iphone-7f3a" not in json.dumps([a1, a2, b1])
