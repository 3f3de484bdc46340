"""The like command (spec §4.2, CMD-1 … CMD-18): one durable transaction on the user's relation
shard holding the command record, the relation CAS and the outbox event."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.utils import timezone

from likes_project import logs, metrics
from likes_project.dbraw import raw_cursor
from likes_project.errors import RateLimited
from likes_project.nudge import nudge
from likes_project.switches import switch_is_set
from relations import events, routing, selectors
from relations.errors import (
    AccountFrozen,
    BehaviourLimited,
    BlockedByAuthor,
    IdempotencyKeyReused,
    LikesReadOnly,
    OperationNotFound,
    StaleBaseVersion,
    VideoFriendsOnly,
    VideoNotFound,
    VideoTakenDown,
)
from relations.models import (
    AccountRiskLevel,
    LikeCommand,
    LikeRelation,
    LikesReadOnlySwitch,
    OutboxEvent,
    RelationState,
    RelationVersionFloor,
    VideoStatus,
    VideoVisibility,
)
from relations.selectors import RelationView, privacy
from relations.services import limits, write_barrier

ACTIONS = {RelationState.LIKED: "like", RelationState.UNLIKED: "unlike"}  # M1's split of likes_commands_total
STALE_POLICY_REJECT = "reject"
STALE_POLICY_LAST_COMMIT_WINS = "last_commit_wins"


@dataclass(frozen=True)
class CommandResult:
    operation_id: str
    video_id: str
    result: RelationView  # this operation's verdict
    current: RelationView  # the relation now
    changed: bool
    replayed: bool

    def as_response(self) -> dict:
        return {
            "operationId": self.operation_id,
            "videoId": self.video_id,
            "state": self.result.state,
            "relationVersion": self.result.relation_version,
            "operationResult": self.result.as_dict(),
            "currentRelation": self.current.as_dict(),
            "changed": self.changed,
            "replayed": self.replayed,
            "countConsistency": "EVENTUAL",
        }


class _DuplicateOperation(Exception):
    """Another transaction committed this operation id first; ours must roll back and replay it."""


class _Replayed(Exception):
    """The function path found the operation id already recorded (its lookup ran first)."""

    def __init__(self, record: selectors.CommandRecord, current: RelationView):
        super().__init__(record.operation_id)
        self.record, self.current = record, current


def like_authorize(*, user_id: int, video_id: str) -> None:
    """Rules for a new like (INV-7, SEC-2). A video the caller cannot see is a 404 whatever the
    reason, so existence of private or deleted videos does not leak."""
    video, edges = selectors.video_and_edges_get(user_id=user_id, video_id=video_id)
    if video is None or video.status == VideoStatus.DELETED:
        raise VideoNotFound()
    is_author = video.author_id == user_id
    if video.visibility == VideoVisibility.PRIVATE and not is_author:
        raise VideoNotFound()
    if video.status == VideoStatus.TAKEN_DOWN:
        raise VideoTakenDown()
    if is_author:
        return
    if edges is None:  # not read with the snapshot (a video not active): the rules below need them
        edges = selectors.edges_get(author_id=video.author_id, user_id=user_id)
    if edges.blocked:
        raise BlockedByAuthor()
    if video.visibility == VideoVisibility.FRIENDS and not edges.friends:
        raise VideoFriendsOnly()


def count_command(outcome: str, desired_state: str | None) -> None:
    """`likes_commands_total{outcome, action}` (M1): each command's outcome, like and unlike apart."""
    metrics.inc("likes_commands_total", outcome=outcome, action=ACTIONS.get(desired_state, "unknown"))


def _replay(cmd: selectors.CommandRecord, *, video_id: str, desired_state: str | None,
            current: RelationView | None = None) -> CommandResult:
    """The stored verdict of `cmd` (and the relation now: `current`, or read here)."""
    if cmd.video_id != video_id or (desired_state is not None and cmd.desired_state != desired_state):
        count_command("key_reused", desired_state or cmd.desired_state)
        raise IdempotencyKeyReused(
            operationId=cmd.operation_id, boundVideoId=cmd.video_id, boundDesiredState=cmd.desired_state
        )
    if current is None:
        current = selectors.relation_get(user_id=cmd.user_id, video_id=cmd.video_id)
    return CommandResult(
        operation_id=cmd.operation_id,
        video_id=cmd.video_id,
        result=RelationView(cmd.result_state, cmd.result_version),
        current=current,
        changed=cmd.changed,
        replayed=True,
    )


_INSERT_OUTBOX_SQL = """
INSERT INTO {table} (event_id, aggregate_key, relation_version, event_type, schema_version, payload, xact_id,
                     status, retry_count, next_retry_at, claimed_by, last_error, stream_key, stream_entry_id,
                     created_at)
VALUES (%s, %s, %s, %s, %s, %s::jsonb, pg_current_xact_id()::text::bigint, 'NEW', 0, %s, '', '', '', '', %s)
"""


def outbox_event_write(*, alias: str, payload: dict, now) -> None:
    """Insert the outbox row in the caller's transaction, stamping the transaction id for the
    publisher's commit-order watermark (architecture §4). Raw SQL: this is the hot path."""
    with connections[alias].cursor() as cursor:
        cursor.execute(_INSERT_OUTBOX_SQL.format(table=OutboxEvent._meta.db_table), [
            payload["eventId"], payload["aggregateKey"], payload["relationVersion"], events.EVENT_TYPE,
            events.EVENT_SCHEMA_VERSION, json.dumps(payload), now, now,
        ])


_INSERT_COMMAND_SQL = """
INSERT INTO {table} (user_id, operation_id, video_id, desired_state, result_state, result_version,
                     changed, base_version, device_id, client_sequence, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (user_id, operation_id) DO NOTHING
RETURNING id
"""


def _command_insert(*, alias: str, user_id: int, operation_id: str, video_id: str, desired_state: str,
                    result: RelationView, changed: bool, base_version, device_id: str, client_sequence,
                    now) -> bool:
    """Record the verdict. False when a concurrent transaction already committed this operation id
    (the insert waited on the unique index until that transaction ended: consistency-techniques I4)."""
    sql = _INSERT_COMMAND_SQL.format(table=LikeCommand._meta.db_table)
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, [user_id, operation_id, video_id, desired_state, result.state,
                             result.relation_version, changed, base_version, device_id, client_sequence, now])
        return cursor.fetchone() is not None


@dataclass(frozen=True)
class _LockedRelation:
    id: int
    state: str
    relation_version: int
    state_changed_at: object


def _lock_relation(alias: str, user_id: int, video_id: str) -> _LockedRelation | None:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"SELECT id, state, relation_version, state_changed_at FROM {LikeRelation._meta.db_table} "
            "WHERE user_id = %s AND video_id = %s FOR UPDATE",
            [user_id, video_id],
        )
        row = cursor.fetchone()
    return None if row is None else _LockedRelation(*row)


def _cas_update(alias: str, rel: _LockedRelation, *, state: str, version: int, operation_id: str, changed_at,
                now) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"UPDATE {LikeRelation._meta.db_table} SET state = %s, relation_version = %s, last_operation_id = %s, "
            "state_changed_at = %s, updated_at = %s WHERE id = %s AND relation_version = %s",
            [state, version, operation_id, changed_at, now, rel.id, rel.relation_version],
        )
        return cursor.rowcount


def _slot_floor(alias: str, slot: int) -> int:
    """The slot's version floor on `alias`: every relation of the slot without a row had its last version at most
    this (its tombstone deleted by the retention sweep, `relations.services.tombstones`); 0 when none was."""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT floor FROM {RelationVersionFloor._meta.db_table} WHERE slot = %s", [slot])
        row = cursor.fetchone()
    return 0 if row is None else row[0]


def _apply_python(*, alias: str, slot: int, user_id: int, video_id: str, desired_state: str, operation_id: str,
                  base_version: int | None, device_id: str, client_sequence: int | None) -> CommandResult:
    """CMD-5 steps 2-6 inside one durable transaction on `alias`, behind the write barrier (REC-5),
    statement by statement: the readable reference of `likes_relation_apply` (its current version:
    `relations/sql/likes_relation_apply.v3.sql`), which `_apply_function` runs in one round trip (D84).

    A relation without a row reads UNLIKED v0 but may have had a tombstone the retention sweep deleted: its next
    version is its slot's floor + 1, and a base version in [0, floor] is not stale (`relations.services.tombstones`)."""
    with transaction.atomic(using=alias, durable=True):
        write_barrier.admit(alias, video_id, slot)
        for _attempt in range(2):
            rel = _lock_relation(alias, user_id, video_id)
            current = RelationView(rel.state, rel.relation_version) if rel else selectors.UNLIKED_V0
            # read after the row lock's statement: a sweep that deleted the row committed its floor with it
            floor = 0 if rel else _slot_floor(alias, slot)
            if (
                base_version is not None
                and base_version != current.relation_version
                and not (rel is None and 0 <= base_version <= floor)
                and desired_state != current.state
                and settings.LIKE_STALE_BASE_POLICY != STALE_POLICY_LAST_COMMIT_WINS
            ):
                count_command("stale_base", desired_state)  # M5: commands carrying a stale version
                # M3: a CAS conflict. The server's own CAS runs under the row lock and cannot lose; the compare
                # that can is the client's baseVersion (CMD-7's expected version) against the locked row.
                metrics.inc("likes_cas_conflicts_total")
                raise StaleBaseVersion(
                    f"baseVersion {base_version} is not the current version {current.relation_version}.",
                    currentRelation=current.as_dict(),
                )
            now = timezone.now()
            if desired_state == current.state:
                result, changed = current, False
                break
            new_version = max(current.relation_version, floor) + 1  # above every version it ever had
            if rel is None:
                try:
                    with transaction.atomic(using=alias):  # savepoint: the first insert may race
                        LikeRelation.objects.using(alias).create(
                            user_id=user_id, video_id=video_id, state=desired_state,
                            relation_version=new_version, last_operation_id=operation_id,
                            state_changed_at=now, created_at=now, updated_at=now,
                        )
                except IntegrityError:
                    metrics.inc("likes_unique_conflicts_total")  # M3: unique-key conflicts
                    continue  # another transaction inserted the row first: lock it and decide again
                changed_at = now
            else:
                # State-change times never go backwards on one relation, whatever the web node's clock.
                changed_at = max(now, rel.state_changed_at)
                updated = _cas_update(alias, rel, state=desired_state, version=new_version,
                                      operation_id=operation_id, changed_at=changed_at, now=now)
                if updated != 1:  # impossible while we hold the row lock; never write on a broken CAS
                    raise RuntimeError("relation CAS failed under row lock")
            event_id = uuid.uuid4()
            logs.bind(event_id=str(event_id))  # log lines from here on name the event (as `eventId` does)
            outbox_event_write(alias=alias, now=now, payload=events.event_payload(
                event_id=event_id, alias=alias, user_id=user_id, video_id=video_id,
                operation_id=operation_id, previous=current, new_state=desired_state,
                new_version=new_version, changed_at=changed_at, device_id=device_id,
            ))
            result, changed = RelationView(desired_state, new_version), True
            break
        else:
            raise RuntimeError("relation row vanished between unique conflict and re-read")
        if not _command_insert(alias=alias, user_id=user_id, operation_id=operation_id, video_id=video_id,
                               desired_state=desired_state, result=result, changed=changed,
                               base_version=base_version, device_id=device_id,
                               client_sequence=client_sequence, now=now):
            raise _DuplicateOperation()
    return CommandResult(operation_id, video_id, result, result, changed, replayed=False)


# The function's call. Explicit casts: the statement is prepared on the server (bound parameters),
# so each parameter's type is fixed by the text, not by the Python value.
_APPLY_FUNCTION_SQL = (
    "SELECT outcome, result_state, result_version, changed, cmd_video_id, cmd_desired_state, current_state, "
    "current_version, unique_conflicts FROM likes_relation_apply(%s::bigint, %s::text, %s::text, %s::text, "
    "%s::bigint, %s::text, %s::bigint, %s::timestamptz, %s::text, %s::uuid, %s::text, %s::text, %s::integer, "
    "%s::boolean, %s::boolean, %s::integer, %s::integer, %s::integer, %s::integer)"
)
_DUPLICATE_SQLSTATE = "LK409"  # raised by likes_relation_apply: the operation id was committed first


def _function_call(alias: str, params: list) -> tuple:
    """One execution of the function on `alias`, in a transaction of its own (autocommit), through
    psycopg directly (`likes_project.dbraw`): server-side binding and a prepared statement. Inside an
    atomic block (a test's transaction) it runs in a savepoint, so a rolled-back attempt leaves the
    outer transaction usable."""
    conn = connections[alias]
    if conn.in_atomic_block:
        with transaction.atomic(using=alias, durable=True):  # refuses an outer transaction, like _apply_python
            return _function_execute(conn, params)
    return _function_execute(conn, params)


def _function_execute(conn, params: list) -> tuple:
    try:
        with raw_cursor(conn.alias) as cursor:
            cursor.execute(_APPLY_FUNCTION_SQL, params, prepare=True)
            return cursor.fetchone()
    except DatabaseError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == _DUPLICATE_SQLSTATE:
            raise _DuplicateOperation() from exc
        raise


def _apply_function(*, alias: str, slot: int, user_id: int, video_id: str, desired_state: str, operation_id: str,
                    base_version: int | None, device_id: str, client_sequence: int | None,
                    lookup: bool = False) -> CommandResult:
    """`_apply_python` in one round trip: the shard's `likes_relation_apply`
    (`relations/sql/likes_relation_apply.v3.sql`). With `lookup` it first looks the operation id up in the
    same statement (raises _Replayed)."""
    event_id = uuid.uuid4()
    global_ns, video_ns = write_barrier.LOCK_NAMESPACES
    reject_stale = settings.LIKE_STALE_BASE_POLICY != STALE_POLICY_LAST_COMMIT_WINS
    row = None

    def try_admit() -> str:
        nonlocal row
        row = _function_call(alias, [
            user_id, video_id, desired_state, operation_id, base_version, device_id, client_sequence,
            timezone.now(), alias, event_id, events.aggregate_key(user_id, video_id), events.EVENT_TYPE,
            events.EVENT_SCHEMA_VERSION, reject_stale, lookup, global_ns, video_ns, write_barrier.SLOT_NS, slot,
        ])
        return row[0]  # "barrier" and "fenced" poll

    write_barrier.admit_polling(try_admit)
    if row[0] == "moved":
        raise write_barrier.SlotMoved()
    outcome, state, version, changed, cmd_video, cmd_desired, cur_state, cur_version, conflicts = row
    if conflicts:
        metrics.inc("likes_unique_conflicts_total", conflicts)  # M3: unique-key conflicts
    current = RelationView(cur_state, cur_version)
    if outcome == "replayed":
        raise _Replayed(selectors.CommandRecord(user_id, operation_id, cmd_video, cmd_desired, state, version,
                                                changed), current)
    if outcome == "stale":
        count_command("stale_base", desired_state)
        metrics.inc("likes_cas_conflicts_total")  # M3: a CAS conflict, as in _apply_python
        raise StaleBaseVersion(f"baseVersion {base_version} is not the current version {cur_version}.",
                               currentRelation=current.as_dict())
    result = RelationView(state, version)
    if changed:
        logs.bind(event_id=str(event_id))  # log lines from here on name the event (as `eventId` does)
    return CommandResult(operation_id, video_id, result, result, changed, replayed=False)


WRITE_PATH_PYTHON = "python"  # LIKE_COMMAND_WRITE_PATH's other value, "function", is the default


def _write_path_is_function() -> bool:
    return settings.LIKE_COMMAND_WRITE_PATH != WRITE_PATH_PYTHON


def _apply(*, user_id: int, video_id: str, desired_state: str, operation_id: str,
           base_version: int | None, device_id: str, client_sequence: int | None,
           lookup: bool = False) -> tuple[str, CommandResult]:
    """CMD-5 steps 2-6 on the user's shard by the configured write path (LIKE_COMMAND_WRITE_PATH, D84);
    returns (the shard written, the result). Raises _DuplicateOperation when a concurrent transaction
    committed the operation id first, and with `lookup` (function path only) _Replayed when it was
    recorded before. A shard that no longer owns the user's slot (a slot move switched it, issue 16 §3)
    answers `moved`: the contract is reloaded and the command goes where it points, within
    RELATION_MOVE_MAX_PAUSE_MS (then 503 `write_barrier`)."""
    def try_once() -> CommandResult | str:
        nonlocal alias
        alias, slot = routing.placement(user_id)
        kwargs = {"alias": alias, "slot": slot, "user_id": user_id, "video_id": video_id,
                  "desired_state": desired_state, "operation_id": operation_id, "base_version": base_version,
                  "device_id": device_id, "client_sequence": client_sequence}
        try:
            if _write_path_is_function():
                return _apply_function(**kwargs, lookup=lookup)
            return _apply_python(**kwargs)
        except write_barrier.SlotMoved:
            count_command("slot_moved", desired_state)
            routing.reset_cache()
            return write_barrier.FENCED  # the switch is being committed: poll, bounded like a cutover's pause

    alias, result = "", None

    def admitted() -> bool | str:
        nonlocal result
        outcome = try_once()
        if isinstance(outcome, str):
            return outcome
        result = outcome
        return True

    write_barrier.admit_polling(admitted)
    return alias, result


@logs.bound_kwargs("operation_id", "user_id")  # every line the command logs names its operation
def relation_set_state(*, user_id: int, video_id: str, desired_state: str, operation_id: str,
                       base_version: int | None = None, device_id: str = "",
                       client_sequence: int | None = None, risk_level: str | None = None) -> CommandResult:
    """Set the (user, video) relation to an absolute state (CMD-1, CMD-5).

    Transaction: one durable transaction on the user's relation shard: relation row lock/CAS,
    outbox event (only on a real change), command record. Nothing else happens inside it.
    Idempotency: (user_id, operation_id) is unique; a retry returns the stored verdict and the
    current relation (CMD-6) and changes nothing. The same key for another video or desired state
    is refused (SEC-3). While likes are read-only (`LikesReadOnlySwitch`) every command, a replay
    too, is refused with 503 `likes_read_only` and the current relation, and nothing is written.
    """
    if switch_is_set(LikesReadOnlySwitch):  # read-only likes (issue 14 §3): refused before anything is read or written
        count_command("read_only", desired_state)
        retry_after = settings.READ_ONLY_RETRY_AFTER_S
        raise LikesReadOnly(headers={"Retry-After": str(retry_after)}, retryAfterSeconds=retry_after,
                            currentRelation=selectors.relation_get(user_id=user_id, video_id=video_id).as_dict())
    if (risk_level or privacy.account_risk_level(user_id=user_id)) == AccountRiskLevel.FREEZE:
        # RISK-3: a frozen account writes nothing (`risk_level`: what the caller's authentication read already).
        count_command("account_frozen", desired_state)
        raise AccountFrozen(currentRelation=selectors.relation_get(user_id=user_id, video_id=video_id).as_dict())
    # The function path looks the operation id up inside its one statement; a refusal before it
    # (authorisation, limits) first checks for a stored verdict, which a retry always gets back.
    in_statement = _write_path_is_function()

    def replay_if_recorded() -> CommandResult | None:
        existing = selectors.command_get(user_id=user_id, operation_id=operation_id)
        if existing is None:
            return None
        count_command("replayed", desired_state)
        return _replay(existing, video_id=video_id, desired_state=desired_state)

    if not in_statement and (replayed := replay_if_recorded()) is not None:
        return replayed

    behaviour = limits.behaviour_check(user_id=user_id, video_id=video_id, device_id=device_id)
    if not behaviour.allowed:  # RISK-1 layer 2: refused before the transaction; a recorded verdict still replays
        if in_statement and (replayed := replay_if_recorded()) is not None:
            return replayed
        count_command("behaviour_limited", desired_state)
        raise BehaviourLimited(
            headers={"Retry-After": str(behaviour.retry_after_s)}, signal=behaviour.signal, limit=behaviour.limit,
            retryAfterSeconds=behaviour.retry_after_s,
            currentRelation=selectors.relation_get(user_id=user_id, video_id=video_id).as_dict())

    if desired_state == RelationState.LIKED:
        # UNLIKED needs no authorisation: withdrawing a like is always allowed (and a no-op when
        # there is nothing to withdraw).
        try:
            like_authorize(user_id=user_id, video_id=video_id)
        except Exception:  # a refusal, or a store it reads being down: a recorded verdict still replays
            if in_statement and (replayed := replay_if_recorded()) is not None:
                return replayed
            raise

    verdict = limits.relation_transition_allowed(user_id=user_id, video_id=video_id)
    if not verdict.allowed:
        if in_statement and (replayed := replay_if_recorded()) is not None:
            return replayed
        current = selectors.relation_get(user_id=user_id, video_id=video_id)
        if current.state != desired_state:
            count_command("rate_limited", desired_state)
            raise RateLimited(
                "Too many state changes on this relation; retry later.",
                headers={"Retry-After": str(verdict.retry_after_s)},
                scope=verdict.scope, retryAfterSeconds=verdict.retry_after_s,
                currentRelation=current.as_dict(),
            )

    try:
        alias, outcome = _apply(user_id=user_id, video_id=video_id, desired_state=desired_state,
                                operation_id=operation_id, base_version=base_version, device_id=device_id,
                                client_sequence=client_sequence, lookup=in_statement)
    except _Replayed as found:
        count_command("replayed", desired_state)
        return _replay(found.record, video_id=video_id, desired_state=desired_state, current=found.current)
    except _DuplicateOperation:
        count_command("concurrent_duplicate", desired_state)
        cmd = selectors.command_get(user_id=user_id, operation_id=operation_id)
        return _replay(cmd, video_id=video_id, desired_state=desired_state)

    count_command("changed" if outcome.changed else "unchanged", desired_state)
    if outcome.changed:
        limits.relation_transition_record(user_id=user_id, video_id=video_id)
        nudge("relations.publish_outbox", alias)  # after commit; latency only, beat sweeps anyway
    return outcome


def operation_get(*, user_id: int, operation_id: str) -> CommandResult:
    """The stored verdict of one of the caller's operations, plus the relation now (S5)."""
    cmd = selectors.command_get(user_id=user_id, operation_id=operation_id)
    if cmd is None:
        raise OperationNotFound()
    return _replay(cmd, video_id=cmd.video_id, desired_state=None)
