"""The like command's semantics (spec §4.2, test-matrix rows T1-T4, CMD-6), each with its
counter-example, against real PostgreSQL shards."""

from __future__ import annotations

import contextlib

import pytest
from django.conf import settings
from django.db import connections
from django.db.utils import IntegrityError

from relations import routing
from relations.errors import IdempotencyKeyReused, StaleBaseVersion
from relations.models import LikeCommand, LikeRelation, OutboxEvent
from relations.services import commands
from relations.services.commands import relation_set_state
from tests.relations.helpers import command_rows, nothing_written, outbox_rows, relation_row, total

pytestmark = [pytest.mark.topology, pytest.mark.schema, pytest.mark.django_db(databases="__all__")]

LIKED, UNLIKED = "LIKED", "UNLIKED"


@pytest.fixture(autouse=True, params=["function", "python"])
def write_path(request, settings):
    """Every test here runs on both write paths (D84): the one-statement function and its Python
    reference, so the two are held to the same semantics."""
    settings.LIKE_COMMAND_WRITE_PATH = request.param
    return request.param


@pytest.fixture
def viewer(make_user):
    return make_user()


@contextlib.contextmanager
def outbox_refuses(alias: str, aggregate_key: str):
    """A fault in the running store: the shard's outbox refuses the event of one relation (a NOT VALID
    check constraint, gone with the test's transaction), so the write fails after the relation's."""
    with connections[alias].cursor() as cursor:
        cursor.execute("ALTER TABLE relations_outboxevent ADD CONSTRAINT test_outbox_fault "
                       "CHECK (aggregate_key <> %s) NOT VALID", [aggregate_key])
    yield
    with connections[alias].cursor() as cursor:
        cursor.execute("ALTER TABLE relations_outboxevent DROP CONSTRAINT test_outbox_fault")


def set_state(user, video_id, desired, key, **kw):
    return relation_set_state(user_id=user.pk, video_id=video_id, desired_state=desired, operation_id=key, **kw)


# --- T1: same operation id retried ------------------------------------------------------------


def test_t1_retry_of_one_operation_changes_once_and_returns_the_same_version(viewer, video):
    first = set_state(viewer, video.video_id, LIKED, "op-1")
    retries = [set_state(viewer, video.video_id, LIKED, "op-1") for _ in range(3)]
    assert first.changed and not first.replayed
    assert first.result.relation_version == 1
    for r in retries:
        assert r.replayed is True
        assert (r.result.state, r.result.relation_version) == (LIKED, 1)
        assert (r.current.state, r.current.relation_version) == (LIKED, 1)
    assert relation_row(viewer.pk, video.video_id).relation_version == 1
    assert len(outbox_rows(viewer.pk, video.video_id)) == 1
    assert len(command_rows(viewer.pk)) == 1


def test_t1_counter_example_a_new_operation_id_is_a_new_command(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    second = set_state(viewer, video.video_id, UNLIKED, "op-2")
    assert second.changed and not second.replayed
    assert second.result.relation_version == 2
    assert len(outbox_rows(viewer.pk, video.video_id)) == 2


# --- T2 / T3: no-change commands (INV-4, INV-5) -------------------------------------------------


def test_t2_like_when_already_liked_bumps_nothing_and_emits_nothing(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    row_before = relation_row(viewer.pk, video.video_id)
    again = set_state(viewer, video.video_id, LIKED, "op-2")
    row_after = relation_row(viewer.pk, video.video_id)
    assert again.changed is False and again.replayed is False
    assert (again.result.state, again.result.relation_version) == (LIKED, 1)
    assert row_after.relation_version == 1
    assert row_after.state_changed_at == row_before.state_changed_at  # CMD-14: no new change time
    assert len(outbox_rows(viewer.pk, video.video_id)) == 1
    # The no-change verdict is still recorded, so a retry of op-2 replays it.
    assert [c.operation_id for c in command_rows(viewer.pk)] == ["op-1", "op-2"]
    assert set_state(viewer, video.video_id, LIKED, "op-2").replayed is True


def test_t2_counter_example_like_when_unliked_is_a_change_with_one_event(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")
    relike = set_state(viewer, video.video_id, LIKED, "op-3")
    assert relike.changed is True
    assert relike.result.relation_version == 3
    assert [e.relation_version for e in outbox_rows(viewer.pk, video.video_id)] == [1, 2, 3]


def test_t3_unlike_when_never_liked_is_unliked_v0_with_no_row_and_no_event(viewer, video):
    result = set_state(viewer, video.video_id, UNLIKED, "op-1")
    assert (result.result.state, result.result.relation_version, result.changed) == (UNLIKED, 0, False)
    assert relation_row(viewer.pk, video.video_id) is None
    assert outbox_rows(viewer.pk, video.video_id) == []


def test_t3_repeated_unlike_emits_no_second_event(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    first = set_state(viewer, video.video_id, UNLIKED, "op-2")
    second = set_state(viewer, video.video_id, UNLIKED, "op-3")
    assert first.changed and not second.changed
    assert second.result.relation_version == 2
    events = outbox_rows(viewer.pk, video.video_id)
    assert [(e.payload["absoluteState"], e.relation_version) for e in events] == [(LIKED, 1), (UNLIKED, 2)]


def test_unlike_keeps_the_row_as_a_versioned_tombstone(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")
    row = relation_row(viewer.pk, video.video_id)
    assert (row.state, row.relation_version, row.last_operation_id) == (UNLIKED, 2, "op-2")


# --- T4 and CMD-6: lost responses and old operations ------------------------------------------


def test_t4_lost_response_retry_and_operation_lookup_return_the_original_result(viewer, video):
    original = set_state(viewer, video.video_id, LIKED, "op-101")
    # the response is "lost"; the client retries with the same key, then asks for the result
    retry = set_state(viewer, video.video_id, LIKED, "op-101")
    lookup = commands.operation_get(user_id=viewer.pk, operation_id="op-101")
    for r in (retry, lookup):
        assert r.result == original.result
        assert r.replayed is True
    assert total(OutboxEvent) == 1


def test_cmd6_old_operation_replays_its_verdict_and_the_current_relation_separately(viewer, video):
    # Walk the relation up to v10 (UNLIKED), so op-101 commits LIKED v11 and op-102 UNLIKED v12.
    for i in range(10):
        set_state(viewer, video.video_id, LIKED if i % 2 == 0 else UNLIKED, f"warm-{i}")
    assert relation_row(viewer.pk, video.video_id).relation_version == 10
    op101 = set_state(viewer, video.video_id, LIKED, "op-101")
    op102 = set_state(viewer, video.video_id, UNLIKED, "op-102")
    assert (op101.result.state, op101.result.relation_version) == (LIKED, 11)
    assert (op102.result.state, op102.result.relation_version) == (UNLIKED, 12)

    replay = set_state(viewer, video.video_id, LIKED, "op-101")
    body = replay.as_response()
    assert body["operationResult"] == {"state": LIKED, "relationVersion": 11}
    assert body["currentRelation"] == {"state": UNLIKED, "relationVersion": 12}
    assert (body["state"], body["relationVersion"], body["replayed"]) == (LIKED, 11, True)
    # the replay changed nothing: still v12 and exactly 12 events
    assert relation_row(viewer.pk, video.video_id).relation_version == 12
    assert len(outbox_rows(viewer.pk, video.video_id)) == 12


# --- baseVersion (CMD-3, CMD-9) ---------------------------------------------------------------


def test_stale_base_version_is_rejected_with_the_current_relation_and_writes_nothing(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")  # now UNLIKED v2
    with pytest.raises(StaleBaseVersion) as err:
        set_state(viewer, video.video_id, LIKED, "op-3", base_version=1)
    assert err.value.http_status == 409
    assert err.value.extra["currentRelation"] == {"state": UNLIKED, "relationVersion": 2}
    assert relation_row(viewer.pk, video.video_id).relation_version == 2
    assert len(outbox_rows(viewer.pk, video.video_id)) == 2
    assert "op-3" not in [c.operation_id for c in command_rows(viewer.pk)]


def test_base_version_matching_the_current_version_applies(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    result = set_state(viewer, video.video_id, UNLIKED, "op-2", base_version=1)
    assert (result.result.state, result.result.relation_version) == (UNLIKED, 2)


def test_stale_base_with_the_same_desired_state_is_an_idempotent_success(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")
    result = set_state(viewer, video.video_id, UNLIKED, "op-3", base_version=0)
    assert (result.result.state, result.result.relation_version, result.changed) == (UNLIKED, 2, False)


def test_absent_base_version_means_last_commit_wins(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")
    result = set_state(viewer, video.video_id, LIKED, "op-3")
    assert (result.result.state, result.result.relation_version) == (LIKED, 3)


def test_last_commit_wins_policy_applies_a_stale_base(viewer, video, settings):
    settings.LIKE_STALE_BASE_POLICY = "last_commit_wins"
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")
    result = set_state(viewer, video.video_id, LIKED, "op-3", base_version=1)
    assert (result.result.state, result.result.relation_version) == (LIKED, 3)


# --- key reuse (SEC-3) ----------------------------------------------------------------------


def test_key_reused_for_another_video_is_refused_and_writes_nothing(viewer, video, make_video, make_user):
    other = make_video("vid-2", make_user())
    set_state(viewer, video.video_id, LIKED, "op-1")
    with pytest.raises(IdempotencyKeyReused):
        set_state(viewer, other.video_id, LIKED, "op-1")
    assert relation_row(viewer.pk, other.video_id) is None
    assert total(OutboxEvent) == 1


def test_key_reused_for_another_desired_state_is_refused(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    with pytest.raises(IdempotencyKeyReused):
        set_state(viewer, video.video_id, UNLIKED, "op-1")
    assert relation_row(viewer.pk, video.video_id).state == LIKED


def test_the_same_key_belongs_to_each_user_separately(make_user, video):
    a, b = make_user(shard="rel_00"), make_user(shard="rel_01")
    ra = set_state(a, video.video_id, LIKED, "shared-key")
    rb = set_state(b, video.video_id, LIKED, "shared-key")
    assert ra.changed and rb.changed and not rb.replayed


# --- outbox evidence (OUT-1, OUT-2) -----------------------------------------------------------


def test_every_change_writes_one_outbox_event_with_the_absolute_state_payload(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")
    first, second = outbox_rows(viewer.pk, video.video_id)
    alias = routing.alias_for_user(viewer.pk)
    row = relation_row(viewer.pk, video.video_id)
    p = second.payload
    assert set(p) >= {"eventId", "aggregateKey", "relationVersion", "absoluteState", "userId", "videoId",
                      "sourceShard", "stateChangedAt"}
    assert p["eventId"] == str(second.event_id)
    assert p["aggregateKey"] == f"{viewer.pk}:{video.video_id}"
    assert (p["relationVersion"], p["absoluteState"], p["previousState"]) == (2, UNLIKED, LIKED)
    assert (p["userId"], p["videoId"], p["sourceShard"]) == (viewer.pk, video.video_id, alias)
    assert p["stateChangedAt"] == row.state_changed_at.isoformat().replace("+00:00", "Z")
    assert p["stateChangedAt"].endswith("Z")
    assert first.id < second.id  # the outbox id is the shard's sourceCommitSeq
    assert first.status == second.status == "NEW"


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_each_outbox_row_records_its_own_transaction_id(make_user, make_video):
    # A transactional test: every command commits on its own, as in production.
    viewer, video = make_user(), make_video("vid-x", make_user())
    set_state(viewer, video.video_id, LIKED, "op-1")
    set_state(viewer, video.video_id, UNLIKED, "op-2")
    first, second = outbox_rows(viewer.pk, video.video_id)
    assert first.xact_id > 0
    assert second.xact_id > first.xact_id  # pg_current_xact_id() of the later transaction


def test_state_changed_at_never_goes_backwards(viewer, video):
    stamps = []
    for i, desired in enumerate([LIKED, UNLIKED, LIKED, UNLIKED]):
        set_state(viewer, video.video_id, desired, f"op-{i}")
        stamps.append(relation_row(viewer.pk, video.video_id).state_changed_at)
    assert stamps == sorted(stamps)


def test_outbox_unique_key_refuses_a_second_event_for_the_same_version(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    event = outbox_rows(viewer.pk, video.video_id)[0]
    alias = routing.alias_for_user(viewer.pk)
    event.pk = None
    event.event_id = "00000000-0000-0000-0000-000000000001"
    with pytest.raises(IntegrityError):
        event.save(using=alias)


# --- shards -----------------------------------------------------------------------------------


def test_users_land_on_both_shards_and_each_fact_lives_only_on_its_users_shard(make_user, video):
    users = {alias: make_user(shard=alias) for alias in settings.RELATION_SHARD_ALIASES}
    for alias, user in users.items():
        set_state(user, video.video_id, LIKED, f"op-{alias}")
    for alias, user in users.items():
        for other in settings.RELATION_SHARD_ALIASES:
            expected = 1 if other == alias else 0
            assert LikeRelation.objects.using(other).filter(user_id=user.pk).count() == expected
            assert LikeCommand.objects.using(other).filter(user_id=user.pk).count() == expected
            assert OutboxEvent.objects.using(other).filter(payload__userId=user.pk).count() == expected
            if expected:
                assert OutboxEvent.objects.using(other).get(payload__userId=user.pk).payload["sourceShard"] == other


# --- rollback ---------------------------------------------------------------------------------


def test_a_failure_after_the_relation_update_leaves_nothing_behind(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    before = relation_row(viewer.pk, video.video_id)
    alias = routing.alias_for_user(viewer.pk)
    with outbox_refuses(alias, f"{viewer.pk}:{video.video_id}"), pytest.raises(IntegrityError):
        set_state(viewer, video.video_id, UNLIKED, "op-2")
    after = relation_row(viewer.pk, video.video_id)
    assert (after.state, after.relation_version, after.updated_at) == (before.state, before.relation_version,
                                                                       before.updated_at)
    assert [c.operation_id for c in command_rows(viewer.pk)] == ["op-1"]
    assert len(outbox_rows(viewer.pk, video.video_id)) == 1


def test_the_fault_counter_example_without_it_the_same_command_writes_all_three(viewer, video):
    set_state(viewer, video.video_id, LIKED, "op-1")
    assert set_state(viewer, video.video_id, UNLIKED, "op-2").changed
    assert relation_row(viewer.pk, video.video_id).relation_version == 2
    assert [c.operation_id for c in command_rows(viewer.pk)] == ["op-1", "op-2"]
    assert len(outbox_rows(viewer.pk, video.video_id)) == 2


def test_a_failure_on_the_first_insert_leaves_no_row_at_all(viewer, video):
    alias = routing.alias_for_user(viewer.pk)
    with outbox_refuses(alias, f"{viewer.pk}:{video.video_id}"), pytest.raises(IntegrityError):
        set_state(viewer, video.video_id, LIKED, "op-1")
    assert nothing_written()
