"""Retention of UNLIKED tombstones (issue 31 §4, PRIV-3, CMD-15).

An UNLIKED relation row is kept after the unlike so that an older version arriving late loses against it (CMD-15,
PROJ-2). Past TOMBSTONE_RETENTION_DAYS, longer than any delay that can still deliver an older version (checked by
`relations.checks.tombstone_retention_check`), it is deleted here. What the row also held is the relation's
version, and nothing downstream may see that go backwards: the count projection, the reverse index, the relation
cache and every subscriber keep the v12 they last saw and would refuse a new like at v1. So each delete raises,
in the same transaction, its slot's version floor (`RelationVersionFloor`, one row per logical slot on the shard)
to the highest version deleted, and a relation without a row starts at floor + 1 (`likes_relation_apply` v3,
`commands._apply_python`). A floor is shared by the slot's relations: a relation never acted on may start above 1,
which only comparisons ever read.

Why the version never goes backwards, with commands running:
- the batch locks its rows `FOR UPDATE SKIP LOCKED` (a command holding a row keeps it; the sweep never waits on
  the command path); a command that meets a row the sweep locked waits, finds it gone, and its next statement,
  a newer snapshot, reads the floor the same transaction committed;
- a slot a move is taking through this shard (a `relations_relationslotstate` row: CAPTURING, INCOMING, MOVED_OUT,
  read in the delete's own statement) and a slot of an unfinished move (PREPARE to VERIFY: after the switch the
  target holds no state row, and the verify compares the source's rows with the target's) keep their tombstones
  until the move is over. A delete that committed before the capture began is behind the move's wait for older
  transactions; the copy and the catch-up only ever lose a target row through a committed source delete, whose
  floor the cutover copies after the last catch-up (`slot_moves.rows.floors_copy`).

The sweep takes the oldest tombstones first through `relation_tombstone_age_idx` (relations migration 0016, partial
on state = 'UNLIKED'); `relation_user_list_idx` leads with user_id and cannot serve an age order.
"""

from __future__ import annotations

import datetime as dt

from django.db import connections, transaction

from likes_project.ledgers.model import LedgerState
from relations import routing
from relations.models import LikeRelation, RelationSlotMove, RelationSlotState, RelationState, RelationVersionFloor
from relations.services.retention import MAX_BATCH

REL = LikeRelation._meta.db_table
STATE_T = RelationSlotState._meta.db_table
FLOOR_T = RelationVersionFloor._meta.db_table
# The states in which a move's rows are in flight between its two shards (AWAITING_APPROVAL has not begun).
MOVE_IN_FLIGHT = (LedgerState.PREPARE, LedgerState.COPYING, LedgerState.CATCHING_UP, LedgerState.CUTOVER,
                  LedgerState.VERIFY)

# The batch is chosen once (MATERIALIZED, as `relations.services.retention._DELETE_SQL`, so a rescan never deletes
# more than `limit`); the floors are raised in slot order (the house's lock order), GREATEST so a floor never falls.
# `likes_slot_of` is the contract's slot in SQL (relations migration 0014), with the active contract's seed and slot
# count (they never change; a slot state row holds the same). {busy}: slots of unfinished moves.
_SWEEP_SQL = f"""
WITH batch AS MATERIALIZED (
    SELECT r.id FROM {REL} r
     WHERE r.state = 'UNLIKED' AND r.state_changed_at < %s
       AND NOT EXISTS (SELECT 1 FROM {STATE_T} ss WHERE ss.slot = likes_slot_of(r.user_id, %s, %s)){{busy}}
     ORDER BY r.state_changed_at, r.id LIMIT %s FOR UPDATE OF r SKIP LOCKED),
gone AS (
    DELETE FROM {REL} d USING batch WHERE d.id = batch.id
    RETURNING likes_slot_of(d.user_id, %s, %s) AS slot, d.relation_version),
raised AS (
    INSERT INTO {FLOOR_T} AS f (slot, floor)
    SELECT slot, max(relation_version) FROM gone GROUP BY slot ORDER BY slot
    ON CONFLICT (slot) DO UPDATE SET floor = GREATEST(f.floor, EXCLUDED.floor))
SELECT count(*) FROM gone
"""
_BUSY_SQL = " AND likes_slot_of(r.user_id, %s, %s) <> ALL(%s::integer[])"


def _slots_in_flight(alias: str) -> list[int]:
    """The slots of unfinished moves from or onto `alias` (a read of the ledger on `default`)."""
    slots: set[int] = set()
    moves = RelationSlotMove.objects.filter(state__in=MOVE_IN_FLIGHT).values_list("source_alias", "target_alias",
                                                                                  "slots")
    for source, target, moving in moves:
        if alias in (source, target):
            slots.update(moving)
    return sorted(slots)


def tombstones_batch_delete(*, alias: str, cutoff: dt.datetime, limit: int) -> int:
    """Delete up to `limit` (at most MAX_BATCH) UNLIKED relations of `alias` whose state changed before `cutoff`,
    oldest first, and raise each affected slot's version floor to the highest version deleted; returns how many.

    Transaction: one durable transaction on `alias`: the delete and the floors commit together.
    Idempotency: what is deleted is not found again; a floor only grows. LIKED rows, tombstones inside the window,
    rows a command holds and slots a move is taking are never touched."""
    contract = routing.active_contract()
    busy = _slots_in_flight(alias)
    params: list = [cutoff, contract.hash_seed, contract.logical_slots]
    if busy:
        params += [contract.hash_seed, contract.logical_slots, busy]
    params += [min(limit, MAX_BATCH), contract.hash_seed, contract.logical_slots]
    sql = _SWEEP_SQL.format(busy=_BUSY_SQL if busy else "")
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def tombstones_sweep(cutoff: dt.datetime, limit: int) -> int:
    """The retention rule's sweep: up to `limit` tombstones older than `cutoff` over every relation shard in
    turn, in batches of at most MAX_BATCH; returns how many. Fewer than `limit`: nothing more is due (on every
    shard a batch came back short).

    Transaction: one per batch (`tombstones_batch_delete`)."""
    deleted = 0
    for alias in routing.all_aliases():
        while deleted < limit:
            want = min(limit - deleted, MAX_BATCH)
            n = tombstones_batch_delete(alias=alias, cutoff=cutoff, limit=want)
            deleted += n
            if n < want:
                break
    return deleted


def tombstones_oldest() -> dt.datetime | None:
    """The retention rule's oldest: when the oldest UNLIKED relation a shard owns changed state (rows a shard
    keeps of a slot it does not own are a move's copies, deleted with the move). One index entry a shard."""
    found = []
    for alias in routing.all_aliases():
        owned, params = routing.owned_filter(alias).sql("r.user_id")
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT r.state_changed_at FROM {REL} r WHERE r.state = %s{owned} "
                           "ORDER BY r.state_changed_at LIMIT 1", [RelationState.UNLIKED, *params])
            row = cursor.fetchone()
        if row is not None:
            found.append(row[0])
    return min(found, default=None)
