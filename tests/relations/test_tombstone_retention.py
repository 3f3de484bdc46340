"""Retention of UNLIKED tombstones (issue 31 §4, CMD-15; relations.services.tombstones): an old tombstone is
deleted and its slot's version floor raised in the same transaction, so the next like of that relation goes above
every version it ever had (v3 after a deleted v2, not v1 again), on both write paths; the projections accept it; a
slot move carries the floor; LIKED rows, young tombstones and slots a move is taking are never touched; a batch
deletes at most its limit."""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest
from django.conf import settings
from django.db import connections
from django.utils import timezone

from counting.selectors.likers import likers_page_list
from likes_project.migration_kit import sql_file
from likes_project.opsjobs.services import job_run_inline
from relations import routing
from relations.errors import StaleBaseVersion
from relations.models import (
    LikeRelation,
    OutboxArchive,
    OutboxEvent,
    RelationSlotMove,
    RelationSlotState,
    RelationVersionFloor,
    SlotMoveState,
)
from relations.services import tombstones
from relations.services.commands import relation_set_state
from relations.services.slot_moves import ledger, rows
from tests.counting.helpers import bucket_sum, consume_everything, projection_row, publish_all
from tests.reconciliation import helpers as live
from tests.relations.helpers import cmd, relation_row

pytestmark = [pytest.mark.topology_independent]
ALL = pytest.mark.django_db(databases="__all__")
TX = pytest.mark.django_db(databases="__all__", transaction=True)
WINDOW = dt.timedelta(days=settings.TOMBSTONE_RETENTION_DAYS)
PATHS = ["function", "python"]  # LIKE_COMMAND_WRITE_PATH: likes_relation_apply v3, and its Python reference


def cutoff() -> dt.datetime:
    return timezone.now() - WINDOW


def age(user, video_id: str, days: float) -> None:
    """Make the relation's last state change `days` old (what the clock would do)."""
    LikeRelation.objects.using(routing.alias_for_user(user.pk)).filter(user_id=user.pk, video_id=video_id).update(
        state_changed_at=timezone.now() - dt.timedelta(days=days))


def floor_of(user, alias: str | None = None) -> int | None:
    alias_now, slot = routing.placement(user.pk)
    row = RelationVersionFloor.objects.using(alias or alias_now).filter(slot=slot).first()
    return None if row is None else row.floor


def delete_without_floor(user, video_id: str) -> None:
    """The counter-example: the tombstone deleted with no floor (and its outbox events with it, as their own
    retention will: the outbox refuses a second event of one relation version)."""
    alias = routing.alias_for_user(user.pk)
    LikeRelation.objects.using(alias).filter(user_id=user.pk, video_id=video_id).delete()
    for model in (OutboxEvent, OutboxArchive):
        model.objects.using(alias).filter(aggregate_key=f"{user.pk}:{video_id}").delete()


def old_tombstone(user, video_id: str) -> None:
    """Like, unlike (an UNLIKED v2 tombstone), then the tombstone is past the window."""
    cmd(user, video_id, "LIKED")
    assert cmd(user, video_id, "UNLIKED").result.relation_version == 2
    age(user, video_id, WINDOW.days + 1)


@ALL
@pytest.mark.parametrize("path", PATHS)
def test_a_swept_tombstone_raises_its_floor_and_the_next_like_goes_above_it(make_user, make_video, author,
                                                                             settings, path):
    settings.LIKE_COMMAND_WRITE_PATH = path
    make_video("tomb-v", author)
    user = make_user()
    old_tombstone(user, "tomb-v")
    assert tombstones.tombstones_oldest() < cutoff()
    assert tombstones.tombstones_sweep(cutoff(), 100) == 1
    assert relation_row(user.pk, "tomb-v") is None  # the row is gone ...
    assert floor_of(user) >= 2  # ... its version is in the slot's floor
    assert tombstones.tombstones_oldest() is None
    again = cmd(user, "tomb-v", "LIKED")
    assert again.changed and again.result.relation_version > 2  # never back to 1
    assert again.result.relation_version == floor_of(user) + 1 == 3
    assert (relation_row(user.pk, "tomb-v").state, relation_row(user.pk, "tomb-v").relation_version) == ("LIKED", 3)

    # Counter-example: the same tombstone deleted without the floor (another slot: its floor is 0) starts at v1,
    # below the v2 every projection remembers.
    slot = routing.placement(user.pk)[1]
    other = next(u for u in (make_user() for _ in range(50)) if routing.placement(u.pk)[1] != slot)
    old_tombstone(other, "tomb-v")
    delete_without_floor(other, "tomb-v")
    assert cmd(other, "tomb-v", "LIKED").result.relation_version == 1


@ALL
@pytest.mark.parametrize("path", PATHS)
def test_a_base_version_up_to_the_floor_is_not_stale_and_one_above_it_is(make_user, make_video, author, settings,
                                                                         path):
    """The client may hold the deleted tombstone's v2, or the v0 a read of the missing row shows: neither is
    refused (the stale policy `reject`); a version the relation never reached is."""
    settings.LIKE_COMMAND_WRITE_PATH = path
    assert settings.LIKE_STALE_BASE_POLICY == "reject"
    make_video("tomb-base", author)
    holder, reader, liar = make_user(), make_user(), make_user()
    for u in (holder, reader, liar):
        old_tombstone(u, "tomb-base")
    assert tombstones.tombstones_sweep(cutoff(), 100) == 3
    key = lambda: uuid.uuid4().hex  # noqa: E731
    for u, base in ((holder, 2), (reader, 0)):
        done = relation_set_state(user_id=u.pk, video_id="tomb-base", desired_state="LIKED", operation_id=key(),
                                  base_version=base)
        assert done.changed and done.result.relation_version > 2
    with pytest.raises(StaleBaseVersion):
        relation_set_state(user_id=liar.pk, video_id="tomb-base", desired_state="LIKED", operation_id=key(),
                           base_version=floor_of(liar) + 1)
    assert relation_row(liar.pk, "tomb-base") is None


@ALL
def test_liked_rows_and_young_tombstones_stay_and_a_batch_deletes_at_most_its_limit(make_user, make_video, author):
    for v in ("tb-0", "tb-1", "tb-2", "tb-young", "tb-liked"):
        make_video(v, author)
    user = make_user()
    alias = routing.alias_for_user(user.pk)
    for i, v in enumerate(("tb-0", "tb-1", "tb-2")):
        old_tombstone(user, v)
        age(user, v, WINDOW.days + 10 - i)  # tb-0 the oldest
    cmd(user, "tb-young", "LIKED")
    cmd(user, "tb-young", "UNLIKED")
    age(user, "tb-young", WINDOW.days - 1)  # inside the window, only just
    cmd(user, "tb-liked", "LIKED")
    age(user, "tb-liked", WINDOW.days + 30)  # old, but LIKED
    left = lambda: set(LikeRelation.objects.using(alias).filter(user_id=user.pk)  # noqa: E731
                       .values_list("video_id", flat=True))
    assert tombstones.tombstones_batch_delete(alias=alias, cutoff=cutoff(), limit=2) == 2
    assert left() == {"tb-2", "tb-young", "tb-liked"}  # the two oldest went first
    assert tombstones.tombstones_sweep(cutoff(), 100) == 1
    assert tombstones.tombstones_sweep(cutoff(), 100) == 0
    assert left() == {"tb-young", "tb-liked"}
    assert floor_of(user) == 2


@ALL
def test_a_slot_a_move_is_taking_keeps_its_tombstones(make_user, make_video, author):
    """A slot with a slot state on the shard (CAPTURING, INCOMING, MOVED_OUT), or in an unfinished move's ledger
    (after the switch the target has no state row, and the verify still compares the source with it), is skipped."""
    make_video("tomb-move", author)
    user = make_user()
    alias, slot = routing.placement(user.pk)
    old_tombstone(user, "tomb-move")
    contract = routing.active_contract()
    RelationSlotState.objects.using(alias).create(slot=slot, state="CAPTURING", move_id=1, changed_at=timezone.now(),
                                                  hash_seed=contract.hash_seed, logical_slots=contract.logical_slots)
    assert tombstones.tombstones_sweep(cutoff(), 100) == 0
    RelationSlotState.objects.using(alias).all().delete()
    other = next(a for a in settings.RELATION_SHARD_ALIASES if a != alias)
    move = RelationSlotMove.objects.create(state=SlotMoveState.VERIFY, slots=[slot], source_alias=other,
                                           target_alias=alias, contract_version=contract.version, reason="t",
                                           requested_by="t")
    assert tombstones.tombstones_sweep(cutoff(), 100) == 0
    move.state = SlotMoveState.RETIRED
    move.save(update_fields=["state"])
    assert tombstones.tombstones_sweep(cutoff(), 100) == 1  # counter-example: the same row, no move


@ALL
def test_the_floor_copy_never_lowers_the_target(make_user):
    source, target = settings.RELATION_SHARD_ALIASES[:2]
    RelationVersionFloor.objects.using(source).bulk_create([RelationVersionFloor(slot=1, floor=7),
                                                            RelationVersionFloor(slot=2, floor=3),
                                                            RelationVersionFloor(slot=9, floor=50)])
    RelationVersionFloor.objects.using(target).create(slot=2, floor=11)
    assert rows.floors_copy(source, target, [1, 2, 3]) == 2
    assert dict(RelationVersionFloor.objects.using(target).values_list("slot", "floor")) == {1: 7, 2: 11}


@ALL
def test_every_shard_runs_the_current_function():
    """The installed `likes_relation_apply` is the body of the newest file (fresh and upgraded databases alike)."""
    text = sql_file("relations", "likes_relation_apply.v3.sql")
    body = re.search(r"\$fn\$(.*)\$fn\$", text, re.S).group(1)
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'likes_relation_apply'")
            assert [r[0] for r in cursor.fetchall()] == [body], alias


@TX
@pytest.mark.parametrize("path", PATHS)
def test_a_like_that_waited_for_the_sweep_reads_the_floor_it_committed(make_user, make_video, author, settings, path):
    """A command meets the tombstone the sweep has locked and deleted, waits, finds the row gone once the sweep
    commits, and reads the floor committed with the delete: v3, not v1 (nor the unique outbox version's conflict)."""
    settings.LIKE_COMMAND_WRITE_PATH = path
    make_video("tomb-race", author)
    user = make_user()
    alias = routing.alias_for_user(user.pk)
    old_tombstone(user, "tomb-race")
    contract = routing.active_contract()
    sweep = tombstones._SWEEP_SQL.format(busy="")
    params = [cutoff(), contract.hash_seed, contract.logical_slots, 10, contract.hash_seed, contract.logical_slots]
    with live.shard_transaction_holding(alias, sweep, params) as conn:  # deleted, not yet committed
        liking = live.Background(cmd, user, "tomb-race", "LIKED")
        liking.thread.join(0.5)
        assert liking.thread.is_alive()  # waiting for the row the sweep holds
        conn.commit()
        assert liking.join().result.relation_version == 3
    assert floor_of(user) == 2 and relation_row(user.pk, "tomb-race").relation_version == 3


@TX
def test_the_projections_accept_the_like_after_the_sweep(make_user, make_video, author):
    """The count projection and the reverse index remember v2 UNLIKED; the re-like at v3 is counted and listed.
    Counter-example: a tombstone deleted without a floor comes back at v1, which they refuse."""
    make_video("tomb-count", author)
    user = make_user()
    slot = routing.placement(user.pk)[1]
    lost = next(u for u in (make_user() for _ in range(50)) if routing.placement(u.pk)[1] != slot)
    for u in (user, lost):
        old_tombstone(u, "tomb-count")
    publish_all()
    consume_everything()
    assert projection_row(user.pk, "tomb-count").projected_version == 2
    delete_without_floor(lost, "tomb-count")
    assert tombstones.tombstones_sweep(cutoff(), 100) == 1
    assert cmd(user, "tomb-count", "LIKED").result.relation_version == 3
    assert cmd(lost, "tomb-count", "LIKED").result.relation_version == 1
    publish_all()
    consume_everything()
    assert projection_row(user.pk, "tomb-count").projected_version == 3
    assert projection_row(lost.pk, "tomb-count").projected_version == 2  # v1 refused: lost for the count
    assert bucket_sum("tomb-count") == 1
    page = likers_page_list(caller_id=author.pk, video_id="tomb-count", limit=10)
    assert [x.user_id for x in page.items] == [user.pk]


@TX
def test_a_slot_move_carries_the_floor(make_user, make_video, settings):
    """A tombstone swept on the source left no row to copy, only its floor: after the move, the relation's next
    like on the target still goes above the deleted version."""
    settings.RELATION_MOVE_RETENTION_S = 0
    make_video("tomb-moved", make_user())
    source, target = settings.RELATION_SHARD_ALIASES[:2]
    user = next(u for u in (make_user() for _ in range(60)) if routing.alias_for_user(u.pk) == source)
    slot = routing.placement(user.pk)[1]
    old_tombstone(user, "tomb-moved")
    assert tombstones.tombstones_sweep(cutoff(), 100) == 1
    assert floor_of(user, source) == 2 and floor_of(user, target) is None
    m = ledger.move_plan(slots=[slot], target=target, reason="test", actor=live.REQUESTER)
    m = ledger.move_approve(move_id=m.pk, actor=live.APPROVER)
    job_run_inline(m.job_id)
    m = ledger.move_get(m.pk)
    assert m.state == SlotMoveState.RETIRED, (m.state, m.error)
    routing.reset_cache()
    assert routing.alias_for_user(user.pk) == target and floor_of(user, target) == 2
    again = cmd(user, "tomb-moved", "LIKED")
    assert again.result.relation_version == 3  # counter-example: without the copied floor, 1
    assert LikeRelation.objects.using(target).get(user_id=user.pk).relation_version == 3


@ALL
def test_reconciliation_passes_after_the_sweep_and_fails_without_the_floor(make_user, make_video, author):
    """The projection keeps UNLIKED v2 where the facts have no row any more: the floor says the facts remember
    v2, so the coverage run and the exact comparison agree with it. Counter-example: with the floor gone, the
    exact comparison reports the relation."""
    from counting import routing as count_routing
    from reconciliation.services.checks import exact_chunk

    make_video("tomb-rec", author)
    user = make_user()
    old_tombstone(user, "tomb-rec")
    publish_all()
    consume_everything()
    assert tombstones.tombstones_sweep(cutoff(), 100) == 1
    run = live.run_check("coverage", videos=["tomb-rec"])
    assert (run.status, run.diffs.count()) == ("PASSED", 0), list(run.diffs.values("detail"))
    gen = count_routing.load_generation()
    assert exact_chunk(gen, ["tomb-rec"]).found == []
    RelationVersionFloor.objects.using(routing.alias_for_user(user.pk)).all().delete()
    assert [f.detail for f in exact_chunk(gen, ["tomb-rec"]).found] != []
