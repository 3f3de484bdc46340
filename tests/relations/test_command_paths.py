"""The one-statement write path and its Python reference are equivalent (issue 15 §1, D84).

Hypothesis draws a sequence of commands (new and reused operation ids, both desired states, base
versions current and stale, a video the caller may not like) and runs it twice against the real
shards: once on `python` (relations.services.commands._apply_python, statement by statement) and once on
`function` (the shard's likes_relation_apply), each for users of its own on the same shards. The verdicts,
the relation rows, the command records and the outbox events must be the same."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from likes_project.errors import DomainError
from relations import events
from relations.models import LikeCommand, LikeRelation, OutboxEvent
from relations.services import commands

pytestmark = [pytest.mark.topology, pytest.mark.schema, pytest.mark.django_db(databases="__all__")]

LIKED, UNLIKED = "LIKED", "UNLIKED"
VIDEOS = ("paths-a", "paths-b", "paths-down")  # the last one is taken down: a LIKED is refused

step = st.tuples(
    st.integers(0, 1),  # which user (one per shard)
    st.integers(0, len(VIDEOS) - 1),
    st.sampled_from([LIKED, UNLIKED]),
    st.one_of(st.none(), st.integers(0, 30)),  # None: a new operation id; k: reuse the k-th one (if any)
    st.one_of(st.none(), st.integers(0, 3)),  # baseVersion
)


@pytest.fixture
def world(make_user, make_video):
    author = make_user()
    make_video(VIDEOS[0], author)
    make_video(VIDEOS[1], author)
    make_video(VIDEOS[2], author, status="taken_down")
    return make_user


def _run(settings, path: str, users: list, steps: list) -> list:
    settings.LIKE_COMMAND_WRITE_PATH = path
    ops: list[str] = []
    out = []
    for i, (who, vid, desired, reuse, base) in enumerate(steps):
        op = ops[reuse % len(ops)] if reuse is not None and ops else f"op-{i}"
        ops.append(op)
        try:
            r = commands.relation_set_state(user_id=users[who].pk, video_id=VIDEOS[vid], desired_state=desired,
                                            operation_id=op, base_version=base)
            out.append(("ok", r.result, r.current, r.changed, r.replayed))
        except DomainError as exc:
            out.append(("refused", type(exc).__name__, exc.code, _without_message(exc.as_dict())))
    return out


def _without_message(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("message",)}


def _rows(users: list) -> dict:
    """Everything the commands wrote for `users`, with user ids replaced by their slot."""
    slot = {u.pk: i for i, u in enumerate(users)}
    rel, cmd, box = [], [], []
    for i, user in enumerate(users):
        alias = commands.routing.alias_for_user(user.pk)
        for r in LikeRelation.objects.using(alias).filter(user_id=user.pk).order_by("video_id"):
            rel.append((i, r.video_id, r.state, r.relation_version, r.last_operation_id))
        for c in LikeCommand.objects.using(alias).filter(user_id=user.pk).order_by("id"):
            cmd.append((i, c.operation_id, c.video_id, c.desired_state, c.result_state, c.result_version, c.changed,
                        c.base_version, c.device_id, c.client_sequence))
        for e in OutboxEvent.objects.using(alias).filter(payload__userId=user.pk).order_by("id"):
            payload = dict(e.payload)
            assert payload.pop("eventId") == str(e.event_id)
            assert payload.pop("userId") == user.pk
            assert payload.pop("aggregateKey") == e.aggregate_key == events.aggregate_key(user.pk, e.payload["videoId"])
            assert parse_datetime(payload.pop("stateChangedAt")) is not None
            assert e.xact_id > 0
            box.append((slot[user.pk], e.relation_version, e.event_type, e.schema_version, e.status, e.retry_count,
                        sorted(payload.items())))
    return {"relations": rel, "commands": cmd, "outbox": box}


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=14))
def test_the_function_and_the_python_reference_write_the_same_rows_and_verdicts(world, settings, steps):
    make_user = world
    reference = [make_user(shard="rel_00"), make_user(shard="rel_01")]
    candidate = [make_user(shard="rel_00"), make_user(shard="rel_01")]
    assert _run(settings, "python", reference, steps) == _run(settings, "function", candidate, steps)
    assert _rows(reference) == _rows(candidate)


def test_the_equivalence_check_can_fail_a_path_that_drops_the_outbox_row(world, settings, monkeypatch):
    """Counter-example: a function path that forgot the event is caught by the same comparison."""
    make_user = world
    steps = [(0, 0, LIKED, None, None)]
    reference, candidate = [make_user(shard="rel_00")], [make_user(shard="rel_00")]
    _run(settings, "python", reference, steps)
    _run(settings, "function", candidate, steps)
    alias = commands.routing.alias_for_user(candidate[0].pk)
    OutboxEvent.objects.using(alias).filter(payload__userId=candidate[0].pk).delete()
    assert _rows(reference) != _rows(candidate)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(when=st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2200, 1, 1),
                         timezones=st.just(dt.UTC)),
       whole_second=st.booleans())
def test_the_function_formats_state_changed_at_as_the_python_payload_does(world, settings, monkeypatch, when,
                                                                         whole_second):
    make_user = world
    if whole_second:
        when = when.replace(microsecond=0)  # isoformat() then prints no fraction at all
    user = make_user()
    settings.LIKE_COMMAND_WRITE_PATH = "function"
    monkeypatch.setattr(timezone, "now", lambda: when)
    commands.relation_set_state(user_id=user.pk, video_id=VIDEOS[0], desired_state=LIKED, operation_id="fmt")
    (event,) = OutboxEvent.objects.using(commands.routing.alias_for_user(user.pk)).filter(payload__userId=user.pk)
    expected = events.event_payload(event_id=event.event_id, alias="x", user_id=user.pk, video_id=VIDEOS[0],
                                    operation_id="fmt", previous=commands.selectors.UNLIKED_V0, new_state=LIKED,
                                    new_version=1, changed_at=when)["stateChangedAt"]
    assert event.payload["stateChangedAt"] == expected
