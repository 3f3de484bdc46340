"""The relation slot move protocol (issue 16 §3; docs/slot-moves.md, D94).

  PREPARE     the slots still on the source; the target's stale rows of their users deleted; target slots
              INCOMING, source slots CAPTURING; then every source transaction older than that commit has
              ended, so every later write of the slots' users is captured; the copy's end ids are read.
  COPYING     the relation and command rows of the slots' users, up to those ids, onto the target in id windows
              (relations upserted by version, commands insert-only); the cursor is in the ledger.
  CATCHING_UP passes over the captured keys: each key's current source row re-copied (or deleted when gone), the
              capture rows applied deleted; until a pass applies at most RELATION_MOVE_CUTOVER_LAG keys.
  CUTOVER     the slots' exclusive locks on the source (in-flight commands drained, new ones poll `fenced`); the
              last pass; the slots' version floors copied (`floors_copy`: a tombstone the retention sweep deleted
              on the source left no row to copy, only its floor); source slots MOVED_OUT; ONE `default`
              transaction: contract version N+1 (the slots on the target), the old one inactive, the ledger to
              VERIFY; the target's INCOMING rows removed; the locks released. The write pause is lock -> release.
  VERIFY      every source relation of the slots' users at a version the target has reached, every source
              command on the target.
  RETIRED     after RELATION_MOVE_RETENTION_S the source rows of the slots' users are deleted; its MOVED_OUT
              rows stay (a process with a stale contract is answered `moved`).

Outbox rows are not copied: the source's publisher drains its own (events carry versions). Every step is
idempotent and reads its position from the ledger, so a crash anywhere resumes.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from likes_project import metrics
from likes_project.audit.services import audit_record
from likes_project.ledgers.runner import Say, cleanup_due, save
from likes_project.opsjobs.services import TRANSIENT
from relations import routing
from relations.models import RelationShardContract, RelationShardSlot, RelationSlotMove, SlotFenceState, SlotMoveState
from relations.services import write_barrier
from relations.services.slot_moves.ledger import LEDGER, RUNNER
from relations.services.slot_moves.rows import (
    CHANGE_T,
    STATE_T,
    TABLES,
    changes_delete,
    contract_now,
    floors_copy,
    rows_write,
    slot_sql,
    slots_off_source,
    states_delete,
    states_set,
    undo_before_switch,
    users_rows_delete,
    windows,
)

__all__ = ["RUNNER", "move_run", "moves_cleanup_due"]
logger = logging.getLogger(__name__)
S = SlotMoveState
transition = LEDGER.transition  # a CAS through the kit's table, audited


def move_run(move_id: int, *, say: Say = lambda _m: None, tick=None) -> RelationSlotMove:
    """Run the protocol from the ledger's state to RETIRED (or to where it must wait), on the kit's runner: one
    runner per move (a session advisory lock), idempotent. The steps are looked up on every call."""
    steps = {S.PREPARE: _prepare, S.COPYING: _copy, S.CATCHING_UP: _catch_up, S.CUTOVER: _cutover,
             S.VERIFY: _verify, S.RETIRED: _cleanup}
    return RUNNER.run(move_id, steps, say=say, tick=tick)


def moves_cleanup_due() -> list[int]:
    """Beat: delete the source rows of moves whose retention passed."""
    return RUNNER.cleanup_due_run(_cleanup)


# --- PREPARE ------------------------------------------------------------------------------------------


def _wait_for_older_transactions(alias: str, timeout_s: float = 30.0) -> None:
    """Until every transaction on `alias` that began before now has ended: an xid taken now, then the oldest
    running xid past it. A statement that runs after this sees every commit before it (READ COMMITTED)."""
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text::bigint")
        mark = cursor.fetchone()[0]
    deadline = time.monotonic() + timeout_s
    while True:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            if cursor.fetchone()[0] > mark:
                return
        if time.monotonic() >= deadline:
            raise RUNNER.waiting(f"a transaction on {alias} older than the capture is still open")
        time.sleep(0.05)  # long transactions are bounded by the statement timeout; poll until they end


def _prepare(m: RelationSlotMove, say: Say) -> None:
    contract = contract_now(m)
    off = slots_off_source(m, contract)
    if off:
        transition(m, S.FAILED, actor=RUNNER.actor(), params={"slotsNotOnSource": off},
                   error=f"slots {off[:20]} are no longer on {m.source_alias}")
        return
    stale = users_rows_delete(m.target_alias, m.slots, contract, m)  # an aborted earlier move's copy
    states_set(m.target_alias, m, SlotFenceState.INCOMING, contract)
    changes_delete(m.source_alias, m)
    states_set(m.source_alias, m, SlotFenceState.CAPTURING, contract)
    RUNNER.hook(m, "prepare_capturing")
    _wait_for_older_transactions(m.source_alias)
    ends = {}
    for kind, (table, *_rest) in TABLES.items():
        with connections[m.source_alias].cursor() as cursor:
            cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}")
            ends[kind] = {"next": 0, "end": cursor.fetchone()[0]}
    transition(m, S.COPYING, actor=RUNNER.actor(), params={"staleTargetRowsDeleted": stale, "copyEnds": ends},
               copy_cursor=ends)
    say(f"prepare: capturing on {m.source_alias}; copy up to ids {ends}")


# --- COPYING and CATCHING_UP --------------------------------------------------------------------------


def _copy(m: RelationSlotMove, say: Say) -> None:
    contract = contract_now(m)
    cond, params = slot_sql(contract)
    cursor_state = {k: dict(v) for k, v in m.copy_cursor.items()}
    copied = m.copied_rows
    for kind, (table, cols, _types, _key) in TABLES.items():
        pos = cursor_state[kind]
        for lo, hi in windows(m.source_alias, table, pos["next"], pos["end"]):
            with connections[m.source_alias].cursor() as cursor:
                cursor.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE id > %s AND id <= %s AND {cond}",
                               [lo, hi, *params, m.slots])
                rows = cursor.fetchall()
            rows_write(m.target_alias, kind, rows)
            copied += len(rows)
            pos["next"] = hi
            save(m, copy_cursor=cursor_state, copied_rows=copied)
            RUNNER.hook(m, f"copy_{kind}")
    transition(m, S.CATCHING_UP, actor=RUNNER.actor(), params={"copiedRows": copied})
    say(f"copy: {copied} rows onto {m.target_alias}")


def _apply_captured(m: RelationSlotMove, *, limit: int | None = None) -> int:
    """One catch-up pass: the captured keys (at most `limit`, default all), each re-copied from the source's
    current row or deleted on the target when the source has none; then those capture rows deleted."""
    batch = settings.RELATION_MOVE_COPY_CHUNK
    applied = 0
    while limit is None or applied < limit:
        with connections[m.source_alias].cursor() as cursor:
            cursor.execute(f"SELECT id, kind, user_id, key FROM {CHANGE_T} WHERE move_id = %s ORDER BY id LIMIT %s",
                           [m.pk, batch])
            changes = cursor.fetchall()
        if not changes:
            break
        for kind, (table, cols, _types, key) in TABLES.items():
            keys = sorted({(u, k) for _id, kd, u, k in changes if kd == kind})
            if not keys:
                continue
            users, names = [u for u, _k in keys], [k for _u, k in keys]
            with connections[m.source_alias].cursor() as cursor:
                cursor.execute(f"SELECT {', '.join(cols)} FROM {table} t JOIN unnest(%s::bigint[], %s::text[]) "
                               f"AS k(u, n) ON t.user_id = k.u AND t.{key} = k.n", [users, names])
                rows = cursor.fetchall()
            rows_write(m.target_alias, kind, rows)
            key_at = cols.index(key)
            present = {(r[0], r[key_at]) for r in rows}
            gone = [k for k in keys if k not in present]
            if gone:
                with transaction.atomic(using=m.target_alias, durable=True), \
                        connections[m.target_alias].cursor() as cursor:
                    cursor.execute(f"DELETE FROM {table} t USING unnest(%s::bigint[], %s::text[]) AS k(u, n) "
                                   f"WHERE t.user_id = k.u AND t.{key} = k.n",
                                   [[u for u, _k in gone], [k for _u, k in gone]])
        RUNNER.hook(m, "catch_up_applied")
        with transaction.atomic(using=m.source_alias, durable=True), connections[m.source_alias].cursor() as cursor:
            cursor.execute(f"DELETE FROM {CHANGE_T} WHERE move_id = %s AND id <= %s", [m.pk, changes[-1][0]])
        applied += len(changes)
        save(m, captured_applied=m.captured_applied + len(changes))
        if len(changes) < batch:
            break
    return applied


def _catch_up(m: RelationSlotMove, say: Say) -> None:
    while True:
        applied = _apply_captured(m)
        save(m, catchup_passes=m.catchup_passes + 1)
        LEDGER.catch_up_observed(applied)
        if applied <= settings.RELATION_MOVE_CUTOVER_LAG or m.catchup_passes >= settings.RELATION_MOVE_CATCHUP_PASSES:
            break
    transition(m, S.CUTOVER, actor=RUNNER.actor(), params={"capturedApplied": m.captured_applied,
                                                     "passes": m.catchup_passes})
    say(f"catch-up: {m.captured_applied} captured changes applied in {m.catchup_passes} passes")


# --- CUTOVER ------------------------------------------------------------------------------------------


def _locks(alias: str, slots: list[int], *, take: bool) -> list[int]:
    """The slots' exclusive session locks on `alias` (take: each within RELATION_MOVE_LOCK_TIMEOUT_MS, all or
    none); returns the slots now held."""
    held: list[int] = []
    with connections[alias].cursor() as cursor:
        if not take:
            for s in slots:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [write_barrier.SLOT_NS, s])
            return []
        cursor.execute("SET lock_timeout = %s", [f"{settings.RELATION_MOVE_LOCK_TIMEOUT_MS}ms"])
        try:
            for s in slots:
                cursor.execute("SELECT pg_advisory_lock(%s, %s)", [write_barrier.SLOT_NS, s])
                held.append(s)
        except Exception:
            for s in held:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [write_barrier.SLOT_NS, s])
            raise
        finally:
            cursor.execute("RESET lock_timeout")
    return held


def _contract_switch(m: RelationSlotMove, pause_started: float) -> int:
    """ONE `default` transaction: contract version N+1 (the active one with the slots on the target), the old one
    inactive, the ledger to VERIFY. Returns the new version."""
    with transaction.atomic(using="default", durable=True):
        active = RelationShardContract.objects.select_for_update().get(is_active=True)
        slots = dict(RelationShardSlot.objects.filter(contract_version=active.version).values_list("slot", "alias"))
        off = [s for s in m.slots if slots[s] != m.source_alias]
        if off:
            raise RUNNER.waiting(f"slot move {m.pk}: slots {off[:20]} moved under the cutover")
        new = (RelationShardContract.objects.order_by("-version").values_list("version", flat=True).first() or 0) + 1
        RelationShardContract.objects.filter(pk=active.pk).update(is_active=False)
        RelationShardContract.objects.create(version=new, hash_algorithm=active.hash_algorithm,
                                             hash_seed=active.hash_seed, key_encoding=active.key_encoding,
                                             logical_slots=active.logical_slots, is_active=True)
        moving = set(m.slots)
        RelationShardSlot.objects.bulk_create(
            RelationShardSlot(contract_version=new, slot=s, alias=m.target_alias if s in moving else a)
            for s, a in sorted(slots.items()))
        pause_ms = round((time.monotonic() - pause_started) * 1000.0, 3)
        transition(m, S.VERIFY, actor=RUNNER.actor(),
                   params={"contractVersion": active.version, "newContractVersion": new, "writePauseMs": pause_ms},
                   new_contract_version=new, write_pause_ms=pause_ms, cutover_at=timezone.now(), error="")
    return new


def _cutover(m: RelationSlotMove, say: Say) -> None:
    contract = contract_now(m)
    if slots_off_source(m, contract):
        undo_before_switch(m)
        transition(m, S.FAILED, actor=RUNNER.actor(), error="the slots are no longer on the source")
        return
    RUNNER.hook(m, "cutover_locking")
    try:
        _locks(m.source_alias, m.slots, take=True)
    except TRANSIENT:
        # The lock timeout (commands in flight hold the slots, or the server hung): nothing was switched, and the
        # job tries the cutover again after LEDGER_TRANSIENT_WAIT_S (D135) rather than wait for an operator.
        save(m, error="cutover waits: commands in flight hold the slots")
        raise
    except Exception as exc:
        save(m, error=f"cutover waits: commands in flight hold the slots ({exc.__class__.__name__})")
        raise RUNNER.waiting(f"slot move {m.pk}: the slots' locks were not reached; resume") from exc
    started = time.monotonic()
    switched = False
    try:
        RUNNER.hook(m, "cutover_locked")
        _apply_captured(m)  # the last pass: no command of the slots can write now
        floors_copy(m.source_alias, m.target_alias, m.slots)  # after it: every delete it applied is in a floor
        with transaction.atomic(using=m.source_alias, durable=True), connections[m.source_alias].cursor() as cursor:
            cursor.execute(f"UPDATE {STATE_T} SET state = %s, changed_at = now() WHERE move_id = %s AND slot = ANY(%s)",
                           [SlotFenceState.MOVED_OUT, m.pk, m.slots])
        RUNNER.hook(m, "cutover_moved_out")
        new = _contract_switch(m, started)
        switched = True
        RUNNER.hook(m, "cutover_switched")
        states_delete(m.target_alias, m, SlotFenceState.INCOMING)
    finally:
        if not switched:  # before the switch the source is still the owner: its writes go on
            with transaction.atomic(using=m.source_alias, durable=True), \
                    connections[m.source_alias].cursor() as cursor:
                cursor.execute(f"UPDATE {STATE_T} SET state = %s WHERE move_id = %s AND slot = ANY(%s)",
                               [SlotFenceState.CAPTURING, m.pk, m.slots])
        _locks(m.source_alias, m.slots, take=False)
    pause_ms = round((time.monotonic() - started) * 1000.0, 3)
    save(m, write_pause_ms=pause_ms)
    routing.reset_cache()
    metrics.observe("likes_relation_slot_move_write_pause_seconds", pause_ms / 1000.0)
    say(f"cutover: contract v{new}; write pause {pause_ms:.1f} ms")


# --- VERIFY and RETIRED ------------------------------------------------------------------------------


def _verify(m: RelationSlotMove, say: Say) -> None:
    states_delete(m.target_alias, m, SlotFenceState.INCOMING)  # a crash between the switch and this
    RUNNER.hook(m, "verify")
    contract = contract_now(m)
    cond, params = slot_sql(contract)
    problems: list[dict] = []
    compared = 0
    for kind, (table, cols, _types, key) in TABLES.items():
        with connections[m.source_alias].cursor() as cursor:
            cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}")
            end = cursor.fetchone()[0]
        key_at = cols.index(key)
        for lo, hi in windows(m.source_alias, table, 0, end, m):
            with connections[m.source_alias].cursor() as cursor:
                cursor.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE id > %s AND id <= %s AND {cond}",
                               [lo, hi, *params, m.slots])
                src = cursor.fetchall()
            if not src:
                continue
            compared += len(src)
            with connections[m.target_alias].cursor() as cursor:
                cursor.execute(f"SELECT {', '.join(cols)} FROM {table} t JOIN unnest(%s::bigint[], %s::text[]) "
                               f"AS k(u, n) ON t.user_id = k.u AND t.{key} = k.n",
                               [[r[0] for r in src], [r[key_at] for r in src]])
                tgt = {(r[0], r[key_at]): r for r in cursor.fetchall()}
            for r in src:
                t = tgt.get((r[0], r[key_at]))
                ok = t is not None and (kind == "cmd" or t[3] >= r[3])
                if not ok and len(problems) < 20:
                    problems.append({"table": kind, "userId": r[0], "key": r[key_at],
                                     "source": str(r[3]) if kind == "rel" else "present",
                                     "target": None if t is None else (str(t[3]) if kind == "rel" else "present")})
    result = {"ok": not problems, "rowsCompared": compared, "problems": problems,
              "at": timezone.now().isoformat().replace("+00:00", "Z")}
    if problems:
        save(m, verify_result=result, error="verify found source rows the target lacks; resume to verify again")
        say(f"verify FAILED: {len(problems)} rows")
        return
    now = timezone.now()
    transition(m, S.RETIRED, actor=RUNNER.actor(), params={"rowsCompared": compared}, verify_result=result,
               verified_at=now, source_cleanup_after=now + dt.timedelta(seconds=settings.RELATION_MOVE_RETENTION_S))
    say(f"verify: {compared} source rows found on the target; the source rows are kept until the retention passes")


def _cleanup(m: RelationSlotMove, say: Say) -> None:
    if not cleanup_due(m):
        return
    contract = contract_now(m)
    # A slot a later move took back to the source is live there again: never delete it.
    back = [s for s in m.slots if contract.slot_aliases[s] == m.source_alias]
    gone = [s for s in m.slots if s not in back]
    deleted = users_rows_delete(m.source_alias, gone, contract, m) if gone else 0
    changes_delete(m.source_alias, m)
    with transaction.atomic(using="default", durable=True):
        save(m, source_cleaned_at=timezone.now())
        audit_record(actor=RUNNER.actor(), action="relation_slot_move.cleanup", target_type="relation_slot_move",
                     target_id=str(m.pk), params={"rowsDeleted": deleted})
    say(f"cleanup: {deleted} source rows deleted")
