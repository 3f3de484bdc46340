"""The relation shards' slot fence, the groundwork of relation slot moves (issue 16 §3, docs/slot-moves.md):
the contract's slot in SQL, the capture trigger, the `moved` and `fenced` outcomes of the command path, and
the filter that counts a row only on the shard that owns it. Each with its counter-example."""

from __future__ import annotations

import pytest
from django.db import connection, connections
from django.utils import timezone

from relations import routing
from relations.models import (
    LikeCommand,
    LikeRelation,
    RelationShardSlot,
    RelationSlotChange,
    RelationSlotState,
)
from relations.services import write_barrier
from relations.services.commands import relation_set_state

pytestmark = [pytest.mark.topology, pytest.mark.schema, pytest.mark.django_db(databases="__all__", transaction=True)]

LIKED, UNLIKED = "LIKED", "UNLIKED"


@pytest.fixture(autouse=True, params=["function", "python"])
def write_path(request, settings):
    settings.LIKE_COMMAND_WRITE_PATH = request.param
    settings.RELATION_MOVE_MAX_PAUSE_MS = 300
    return request.param


def _fence(alias: str, slot: int, state: str, move_id: int = 1) -> None:
    contract = routing.active_contract()
    RelationSlotState.objects.using(alias).create(slot=slot, state=state, move_id=move_id,
                                                  hash_seed=contract.hash_seed,
                                                  logical_slots=contract.logical_slots, changed_at=timezone.now())


def _other(alias: str) -> str:
    from django.conf import settings

    return next(a for a in settings.RELATION_SHARD_ALIASES if a != alias)


def _user_and_video(make_user, make_video):
    """A user, a video of theirs, and where the contract places the user: (user, video id, shard, slot)."""
    user = make_user()
    video = make_video(f"v-slot-{user.pk}", user).video_id
    return (user, video, *routing.placement(user.pk))


def _user_in_another_slot(make_user, alias: str, slot: int):
    """A new user the contract places on the shard `alias`, in a slot other than `slot`."""
    return next(u for u in (make_user() for _ in range(50)) if routing.placement(u.pk)[0] == alias
                and routing.placement(u.pk)[1] != slot)


def _contract_places(slot: int, alias: str) -> None:
    """A move's switch as `default` records it: the active contract places `slot` on the shard `alias`."""
    RelationShardSlot.objects.filter(contract_version=routing.active_contract().version, slot=slot).update(alias=alias)


def test_the_slot_in_sql_is_the_contracts_slot(write_path):
    if write_path == "python":
        # The module's autouse fixture runs every test on both write paths; this one runs no command, so its
        # second parametrisation would only repeat the same SQL comparison.
        pytest.skip("no command runs here: the SQL slot function is compared once, on the function path")
    contract = routing.active_contract()
    ids = [0, 1, 2, 42, 1000, 123456789, 2**62, 2**63 - 1, *range(5000, 5400)]
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT u, likes_slot_of(u, %s, %s) FROM unnest(%s::bigint[]) AS u",
                           [contract.hash_seed, contract.logical_slots, ids])
            in_sql = dict(cursor.fetchall())
        assert in_sql == {u: routing.slot_for_user(contract, u) for u in ids}
        # counter-example: the comparison would catch another seed
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT u, likes_slot_of(u, 'another-seed', %s) FROM unnest(%s::bigint[]) AS u",
                           [contract.logical_slots, ids])
            assert dict(cursor.fetchall()) != in_sql


def test_a_shard_that_no_longer_owns_the_slot_sends_the_command_where_the_contract_points(make_user, make_video):
    user, video, source, slot = _user_and_video(make_user, make_video)
    target = _other(source)
    relation_set_state(user_id=user.pk, video_id=video, desired_state=LIKED, operation_id="op-1")
    # The switch of a move, as this process has not seen it yet: the contract in `default` points at the target,
    # the source says MOVED_OUT, and the rows are on the target (copied).
    src_rel = LikeRelation.objects.using(source).get(user_id=user.pk)
    src_cmd = LikeCommand.objects.using(source).get(user_id=user.pk)
    src_rel.pk = src_cmd.pk = None
    src_rel.save(using=target)
    src_cmd.save(using=target)
    _fence(source, slot, "MOVED_OUT")
    _contract_places(slot, target)
    assert routing.alias_for_user(user.pk) == source  # this process's contract is stale

    out = relation_set_state(user_id=user.pk, video_id=video, desired_state=UNLIKED, operation_id="op-2")
    assert out.changed and out.result.relation_version == 2
    assert routing.alias_for_user(user.pk) == target  # learnt from the `moved` answer
    assert LikeRelation.objects.using(target).get(user_id=user.pk).relation_version == 2
    assert LikeRelation.objects.using(source).get(user_id=user.pk).relation_version == 1  # nothing written there
    assert not LikeCommand.objects.using(source).filter(operation_id="op-2").exists()
    # a retry of the operation that committed on the source replays its verdict on the target
    again = relation_set_state(user_id=user.pk, video_id=video, desired_state=LIKED, operation_id="op-1")
    assert again.replayed and again.result.relation_version == 1
    assert again.current.relation_version == 2  # the relation now, read where the user lives now
    assert LikeRelation.objects.using(target).get(user_id=user.pk).relation_version == 2


def test_a_slot_nobody_owns_refuses_within_the_pause_bound_and_writes_nothing(make_user, make_video):
    """Counter-example of the one above: the shard says MOVED_OUT but the contract still points at it (a
    cutover that crashed before its switch): the command gets 503 `write_barrier` after the bound."""
    user, video, alias, slot = _user_and_video(make_user, make_video)
    _fence(alias, slot, "MOVED_OUT")
    with pytest.raises(write_barrier.WriteBarrierHeld):
        relation_set_state(user_id=user.pk, video_id=video, desired_state=LIKED, operation_id="op-1")
    assert not LikeRelation.objects.using(alias).filter(user_id=user.pk).exists()
    assert not LikeCommand.objects.using(alias).filter(user_id=user.pk).exists()


def test_a_cutovers_exclusive_slot_lock_holds_that_slot_only(make_user, make_video):
    user, video, alias, slot = _user_and_video(make_user, make_video)
    other = _user_in_another_slot(make_user, alias, slot)
    holder = connections.create_connection(alias)
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [write_barrier.SLOT_NS, slot])
        with pytest.raises(write_barrier.WriteBarrierHeld):
            relation_set_state(user_id=user.pk, video_id=video, desired_state=LIKED, operation_id="op-1")
        assert not LikeRelation.objects.using(alias).filter(user_id=user.pk).exists()
        # another slot of the same shard is not paused
        assert relation_set_state(user_id=other.pk, video_id=video, desired_state=LIKED,
                                  operation_id="op-2").changed
    finally:
        holder.close()
    assert relation_set_state(user_id=user.pk, video_id=video, desired_state=LIKED,
                              operation_id="op-1").changed


def test_capture_records_the_keys_of_capturing_slots_only(make_user, make_video):
    user, video, alias, slot = _user_and_video(make_user, make_video)
    bystander = _user_in_another_slot(make_user, alias, slot)
    _fence(alias, slot, "CAPTURING", move_id=7)
    relation_set_state(user_id=user.pk, video_id=video, desired_state=LIKED, operation_id="op-1")
    relation_set_state(user_id=bystander.pk, video_id=video, desired_state=LIKED, operation_id="op-2")
    changes = set(RelationSlotChange.objects.using(alias).values_list("move_id", "kind", "user_id", "key"))
    assert changes == {(7, "rel", user.pk, video), (7, "cmd", user.pk, "op-1")}
    LikeCommand.objects.using(alias).filter(user_id=user.pk).delete()
    assert RelationSlotChange.objects.using(alias).filter(kind="cmd").count() == 2  # a delete is captured too
    # counter-example: with no CAPTURING slot nothing is recorded
    RelationSlotState.objects.using(alias).all().delete()
    RelationSlotChange.objects.using(alias).all().delete()
    relation_set_state(user_id=user.pk, video_id=video, desired_state=UNLIKED, operation_id="op-3")
    assert not RelationSlotChange.objects.using(alias).exists()


def test_a_row_counts_only_on_the_shard_that_owns_its_user(make_user, make_video):
    user, video, source, slot = _user_and_video(make_user, make_video)
    target = _other(source)
    relation_set_state(user_id=user.pk, video_id=video, desired_state=LIKED, operation_id="op-1")
    copy = LikeRelation.objects.using(source).get(user_id=user.pk)
    copy.pk = None
    copy.save(using=target)  # a move's copy on its target, before the switch
    _fence(target, slot, "INCOMING")
    _fence(source, slot, "CAPTURING")

    def counted(alias: str) -> int:
        f = routing.owned_filter(alias)
        where, params = f.sql()
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT user_id FROM relations_likerelation WHERE user_id = %s{where}", [user.pk, *params])
            in_sql = [r[0] for r in cursor.fetchall()]
        assert len(in_sql) == int(f.owns(user.pk))  # the SQL and the Python forms agree
        return len(in_sql)

    assert (counted(source), counted(target)) == (1, 0)
    # after the switch the same rows count on the target only
    _contract_places(slot, target)
    RelationSlotState.objects.using(source).filter(slot=slot).update(state="MOVED_OUT")
    assert (counted(source), counted(target)) == (0, 1)
    # counter-example: without the shard's slot states both copies count
    for alias in (source, target):
        RelationSlotState.objects.using(alias).all().delete()
    assert counted(source) + counted(target) == 2
    assert connection.alias == "default"
