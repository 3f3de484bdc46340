"""The rows a relation slot move reads and writes on the shards, in SQL (issue 16 §3; docs/slot-moves.md): the
relation and command tables of the slots' users, their id windows, the slot states and the captured changes. The
protocol's steps (`protocol`) and the ledger's plan and abort (`ledger`) both use them."""

from __future__ import annotations

from django.conf import settings
from django.db import connections, transaction

from likes_project.errors import Conflict
from likes_project.ledgers.runner import beat
from relations import routing
from relations.models import (
    LikeCommand,
    LikeRelation,
    RelationSlotChange,
    RelationSlotMove,
    RelationSlotState,
    RelationVersionFloor,
)

REL, CMD = LikeRelation._meta.db_table, LikeCommand._meta.db_table
STATE_T, CHANGE_T = RelationSlotState._meta.db_table, RelationSlotChange._meta.db_table
FLOOR_T = RelationVersionFloor._meta.db_table
_REL_COLS = ("user_id", "video_id", "state", "relation_version", "last_operation_id", "state_changed_at",
             "created_at", "updated_at")
_REL_TYPES = ("bigint", "text", "text", "bigint", "text", "timestamptz", "timestamptz", "timestamptz")
_CMD_COLS = ("user_id", "operation_id", "video_id", "desired_state", "result_state", "result_version", "changed",
             "base_version", "device_id", "client_sequence", "created_at")
_CMD_TYPES = ("bigint", "text", "text", "text", "text", "bigint", "boolean", "bigint", "text", "bigint",
              "timestamptz")
TABLES = {"rel": (REL, _REL_COLS, _REL_TYPES, "video_id"), "cmd": (CMD, _CMD_COLS, _CMD_TYPES, "operation_id")}
EXACT_COUNT_ROWS = 200_000  # above this many rows a table, a plan estimates from a sample


def windows(alias: str, table: str, start: int, end: int, m: RelationSlotMove | None = None):
    """The (lo, hi] id windows of `table` on `alias` over (start, end], RELATION_MOVE_COPY_CHUNK ids wide, each one
    starting at the next id that exists: an id space thinned by deletes (or far from 0) costs no empty statements.
    Between windows the job's tick runs (its lease renewed, at most once a second)."""
    step = settings.RELATION_MOVE_COPY_CHUNK
    lo = start
    while lo < end:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT min(id) FROM {table} WHERE id > %s AND id <= %s", [lo, end])
            first = cursor.fetchone()[0]
        if first is None:
            return
        lo = first - 1
        hi = min(lo + step, end)
        yield lo, hi
        lo = hi
        if m is not None:
            beat(m)


def slot_sql(contract: routing.ShardContract) -> tuple[str, list]:
    return "likes_slot_of(user_id, %s, %s) = ANY(%s)", [contract.hash_seed, contract.logical_slots]


def contract_now(m: RelationSlotMove) -> routing.ShardContract:
    routing.reset_cache()
    return routing.active_contract()


def rows_count(alias: str, contract: routing.ShardContract, slots: list[int]) -> int:
    """Relation and command rows of the slots' users on `alias` (the plan's figure and the job's progress total).
    Exact for a table of up to EXACT_COUNT_ROWS rows; above, an estimate from a block sample of about that many
    rows (TABLESAMPLE SYSTEM), because a plan must answer within the statement timeout on a shard of any size
    (a count through `likes_slot_of` over 2,000,000 rows takes seconds). The copy counts what it really moves."""
    cond, params = slot_sql(contract)
    total = 0
    with connections[alias].cursor() as cursor:
        for table in (REL, CMD):
            cursor.execute("SELECT reltuples::bigint, pg_relation_size(oid) FROM pg_class WHERE oid = %s::regclass",
                           [table])
            tuples, size = cursor.fetchone()
            if tuples < 0:  # never analysed: its size tells (about 100 rows a page)
                tuples = size // 8192 * 100
            if tuples <= EXACT_COUNT_ROWS:
                cursor.execute(f"SELECT count(*) FROM {table} WHERE {cond}", [*params, slots])
                total += int(cursor.fetchone()[0])
                continue
            pct = max(100.0 * EXACT_COUNT_ROWS / tuples, 0.01)
            cursor.execute(f"SELECT count(*) FROM {table} TABLESAMPLE SYSTEM (%s) WHERE {cond}",
                           [pct, *params, slots])
            total += round(cursor.fetchone()[0] * 100.0 / pct)
    return total


def states_set(alias: str, m: RelationSlotMove, state: str, contract: routing.ShardContract) -> None:
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {STATE_T} (slot, state, move_id, hash_seed, logical_slots, changed_at) "
            f"SELECT s, %s, %s, %s, %s, now() FROM unnest(%s::integer[]) AS s "
            f"ON CONFLICT (slot) DO UPDATE SET state = EXCLUDED.state, move_id = EXCLUDED.move_id, "
            f"changed_at = EXCLUDED.changed_at",
            [state, m.pk, contract.hash_seed, contract.logical_slots, m.slots])


def states_delete(alias: str, m: RelationSlotMove, state: str | None = None) -> None:
    extra = " AND state = %s" if state else ""
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(f"DELETE FROM {STATE_T} WHERE move_id = %s AND slot = ANY(%s){extra}",
                       [m.pk, m.slots, *([state] if state else [])])


def users_rows_delete(alias: str, slots: list[int], contract: routing.ShardContract,
                       m: RelationSlotMove | None = None) -> int:
    """Every relation and command row of the `slots`' users on `alias`, in id windows (bounded transactions)."""
    cond, params = slot_sql(contract)
    deleted = 0
    for table in (REL, CMD):
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}")
            end = cursor.fetchone()[0]
        for lo, hi in windows(alias, table, 0, end, m):
            with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
                cursor.execute(f"DELETE FROM {table} WHERE id > %s AND id <= %s AND {cond}", [lo, hi, *params, slots])
                deleted += cursor.rowcount
    return deleted


def slots_off_source(m: RelationSlotMove, contract: routing.ShardContract) -> list[int]:
    return [s for s in m.slots if contract.slot_aliases[s] != m.source_alias]


def rows_write(alias: str, kind: str, rows: list[tuple]) -> None:
    """Relations upserted by version (never backwards), commands inserted once: idempotent."""
    if not rows:
        return
    table, cols, types, _key = TABLES[kind]
    arrays = [list(col) for col in zip(*rows, strict=True)]
    select = ", ".join(f"%s::{t}[]" for t in types)
    if kind == "rel":
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols[2:])
        conflict = (f"ON CONFLICT (user_id, video_id) DO UPDATE SET {sets} "
                    f"WHERE {table}.relation_version < EXCLUDED.relation_version")
    else:
        conflict = "ON CONFLICT (user_id, operation_id) DO NOTHING"
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT * FROM unnest({select}) {conflict}", arrays)


def floors_copy(source: str, target: str, slots: list[int]) -> int:
    """The slots' version floors (`RelationVersionFloor`) from `source` onto `target`, never lowering one there
    (GREATEST); returns how many slots had one. A relation the tombstone sweep deleted on the source has no row to
    copy, only its slot's floor: without it the target would start that relation at v1 again. Run after the last
    catch-up: the target only lacks a row whose delete committed on the source, and the floor committed with it.

    Transaction: one durable transaction on `target` (the read on the source before it).
    Idempotency: GREATEST: a copy repeated, or a floor the target already had higher, changes nothing."""
    with connections[source].cursor() as cursor:
        cursor.execute(f"SELECT slot, floor FROM {FLOOR_T} WHERE slot = ANY(%s) ORDER BY slot", [slots])
        found = cursor.fetchall()
    if not found:
        return 0
    with transaction.atomic(using=target, durable=True), connections[target].cursor() as cursor:
        cursor.execute(f"INSERT INTO {FLOOR_T} AS f (slot, floor) SELECT * FROM unnest(%s::integer[], %s::bigint[]) "
                       f"ON CONFLICT (slot) DO UPDATE SET floor = GREATEST(f.floor, EXCLUDED.floor)",
                       [[r[0] for r in found], [r[1] for r in found]])
    return len(found)


def undo_before_switch(m: RelationSlotMove) -> None:
    """Before the switch the source owns the slots: its slot states removed (writes go on, uncaptured), the
    target's copy and slot states removed, the capture rows dropped. Idempotent."""
    if m.new_contract_version:
        raise Conflict(f"slot move {m.pk} is past its switch; it cannot be undone", code="slot_move_past_switch")
    contract = contract_now(m)
    states_delete(m.source_alias, m)
    changes_delete(m.source_alias, m)
    if not slots_off_source(m, contract):
        users_rows_delete(m.target_alias, m.slots, contract)
    states_delete(m.target_alias, m)


def changes_delete(alias: str, m: RelationSlotMove) -> None:
    """The move's captured changes on `alias` (the source), all of them."""
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute(f"DELETE FROM {CHANGE_T} WHERE move_id = %s", [m.pk])
