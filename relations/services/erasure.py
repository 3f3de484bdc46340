"""A deleted account's user id leaves the relation shards (issue 31 §4, PRIV-4): the relations app's own step of an
account deletion. The `account.delete` job (relations.jobs) runs it after the withdrawal, once the withdrawal's events
were consumed, then runs every registered eraser (`likes_project.erasure.account_erase_everywhere`).

What the shards keep of a deleted account, and what becomes of it (per relation it still names; a relation still
LIKED, because a rule refused its withdrawal and `account.delete.withdrawn` lists it, keeps every row under the real
id: it is a live fact, hidden at read time by AccountStatus):

- its UNLIKED tombstones are DELETED, each delete raising the slot's version floor in the same transaction, as the
  tombstone sweep does (`relations.services.tombstones`), and so are the relation cache's durable floor rows of those
  relations. Deleted rather than pseudonymised, because (1) a tombstone exists so that a late, older version loses
  against it, and a deleted account sends no command: what its version guarded lives on in the slot's floor; (2) a
  tombstone moved to a pseudonym guards nothing (no event ever names the pseudonym); (3) reconciliation compares
  each fact with the count projection per (user, video) (REC-4): a pseudonymised fact would need the projections'
  rows moved to the pseudonym, i.e. to another virtual bucket (a hash of video AND user), often on another count
  partition and racing bucket migrations, and to another reverse shard. A deleted fact needs nothing moved:
  reconciliation already takes a projection's UNLIKED row with no fact, at or below the slot's floor, as agreeing
  (`reconciliation.services.evidence.swept_tombstones`), and the counting eraser then deletes those rows too
  (`counting.services.reverse.erasure`). The counts do not change: every deleted row is UNLIKED.
- its command rows, and its published outbox events with their archive, are KEPT (the commands' and the archive's
  own retention rules, PRIV-3, decide how long) with the user id replaced by the account's pseudonymous user id
  (`pseudonymous_user_id`): `user_id`, the events' `aggregate_key` and payload (`userId`, `aggregateKey`), the
  withdrawal's operation ids (`sys/account-delete/<id>/<video>`); the device id, a personal identifier (SEC-6), is
  emptied. A client's own operation ids (random Idempotency-Keys) stay.

The pseudonymous user id is a NEGATIVE bigint (real user ids are positive: it can never name a live account, and no
event validates with it) derived from the keyed `user_pseudonym` (so it cannot be recomputed from the user id without
SECRET_KEY) through a counter, the first candidate whose logical slot under the shard contract is the real id's: the
rows stay on the same shard and in the same slot, so a slot move copies and captures them with the slot, its
cleanup deletes them by slot, and the floor the tombstones raised is the slot's. Deterministic: a re-run, the
counting eraser and any later reader derive the same one (while SECRET_KEY and the contract's seed and slot count
stay; a slot move keeps both). Two accounts with one pseudonymous id (one chance in about 2**62 per pair) make
the insert fail on the (user_id, operation_id) unique constraint: the job fails loudly, nothing is merged.

When (`account_erasure_pending`): only rows whose events every internal projection has applied may lose the real id.
An event still unpublished would go out naming the user, be projected under the real id and stay there; so the
step waits until every outbox event of the user is SENT and every registered consumer of the log (count, reverse
index, relation cache, notifications...) has checkpointed past it, on every shard (a slot move leaves a user's
older events on the shard that wrote them), and until no slot move holds the user's slot (as the tombstone sweep,
it never deletes a tombstone of a slot in flight). Subscriptions are not waited for: they got the
`account.deleted` notice when the account was marked. Residual risk, as for any swept tombstone: an event of the
user delivered again after this (a dead letter redriven, a restore's replay) is applied under the real id with
nothing to lose against.

Not reached here: the relation cache's Redis entries of the account (they expire after RELATION_CACHE_TTL_S) and
the stream's entries (trimmed after every consumer read them).

Work is bounded: `account_relations_erase_chunk` takes the next ERASE_CHUNK videos of the user (from its owning
shard's tombstones and commands) and, per shard, rewrites their outbox and archive rows and deletes their cache
floors in one transaction, then on the owning shard rewrites their commands and deletes their tombstones in one
transaction. The outbox goes first, so a crash in between finds the same videos again; a re-run finds nothing.
Commands and tombstones are moved by DELETE then INSERT, never an UPDATE of the key: the slot-capture trigger
records both keys, so a slot move starting meanwhile replays the change on its target (an UPDATE would be
captured under the new key only, leaving the real id on the target)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db import connections, transaction

from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.erasure import user_pseudonym
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.eventlog.registry import CONSUMERS
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_start
from relations import routing
from relations.events import aggregate_key
from relations.models import (
    LikeCommand,
    LikeRelation,
    LikeRelationCacheProjection,
    OutboxArchive,
    OutboxEvent,
    OutboxStatus,
    RelationCacheGeneration,
    RelationSlotMove,
    RelationSlotState,
    RelationState,
    RelationVersionFloor,
)
from relations.services.accounts import ACCOUNT_DELETE_JOB, delete_operation_id
from relations.services.tombstones import MOVE_IN_FLIGHT

ERASE_CHUNK = 100  # videos per batch: each costs its few commands and events, far below a thousand rows a statement
PSEUDONYM_TRIES_PER_SLOT = 64  # candidates tried per logical slot: a miss is one chance in e**64
ERASE_AUDIT_ACTION = "account.erase"

REL, CMD, FLOOR = LikeRelation._meta.db_table, LikeCommand._meta.db_table, RelationVersionFloor._meta.db_table
OUT, ARC = OutboxEvent._meta.db_table, OutboxArchive._meta.db_table
RELCACHE = LikeRelationCacheProjection._meta.db_table
NOT_SENT = [s for s in OutboxStatus.values if s != OutboxStatus.SENT]


def pseudonymous_user_id(user_id: int) -> int:
    """The negative user id that stands for a deleted account in the rows the relation shards keep: derived from
    its keyed pseudonym, in the same logical slot as `user_id` under the active shard contract (see the module)."""
    contract = routing.active_contract()
    wanted = routing.slot_for_user(contract, user_id)
    seed = user_pseudonym(user_id)
    for counter in range(contract.logical_slots * PSEUDONYM_TRIES_PER_SLOT):
        digest = hashlib.sha256(f"{seed}/{counter}".encode("ascii")).digest()
        candidate = -1 - (int.from_bytes(digest[:8], "big") >> 2)  # in [-2**62, -1]
        if routing.slot_for_user(contract, candidate) == wanted:
            return candidate
    raise RuntimeError(f"no pseudonymous user id found in slot {wanted}")  # never: see PSEUDONYM_TRIES_PER_SLOT


# --- when: every event of the user published and applied by every internal consumer ----------------------------


@dataclass(frozen=True)
class Pending:
    """What the erasure of a user waits for. `position` is the consumers' lowest checkpoint per partition: while
    it moves, the pipeline is at work (the job keeps waiting); when nothing moves, it is stalled."""

    unpublished: int  # the user's outbox rows not yet SENT (NEW, PUBLISHING, RETRY, UNCERTAIN)
    dead: int  # DEAD rows: they go out only when an operator requeues them
    unconsumed: int  # SENT rows some registered consumer has not checkpointed past
    moving: bool  # the user's slot is in a relation slot move
    position: tuple = ()

    @property
    def ready(self) -> bool:
        return not (self.unpublished or self.dead or self.unconsumed or self.moving)

    def as_dict(self) -> dict:
        return {"unpublished": self.unpublished, "dead": self.dead, "unconsumed": self.unconsumed,
                "moving": self.moving}

    def describe(self) -> str:
        parts = [f"{n} {what}" for n, what in ((self.unpublished, "unpublished"), (self.dead, "DEAD"),
                                               (self.unconsumed, "not yet consumed")) if n]
        if self.moving:
            parts.append("its slot being moved")
        return ", ".join(parts) or "nothing"


def _consumed_through() -> dict[int, tuple[int, int]]:
    """Per stream partition, the lowest checkpoint over the registered consumers ("0-0" where one has none)."""
    lows: dict[int, tuple[int, int]] = {}
    for name in CONSUMERS:
        done = checkpoints_get(name)
        for p in streams.all_partitions():
            key = streams.entry_id_key(done.get(p, "0-0"))
            lows[p] = min(lows.get(p, key), key)
    return lows


# The user's rows are found by the key's user part among the few rows each index range yields: the rows not yet
# SENT (status index), and the SENT rows above a partition's lowest checkpoint (outbox_stream_pos_idx).
_UNSENT_SQL = (f"SELECT count(*) FILTER (WHERE status = 'DEAD'), count(*) FILTER (WHERE status <> 'DEAD') FROM {OUT} "
               "WHERE status = ANY(%s) AND split_part(aggregate_key, ':', 1) = %s")
_UNCONSUMED_SQL = (
    f"SELECT count(*) FROM {OUT} o JOIN unnest(%s::int[], %s::bigint[], %s::bigint[]) AS w(p, ms, seq) "
    "ON o.stream_partition = w.p AND o.stream_entry_ms >= w.ms WHERE o.status = 'SENT' "
    "AND (o.stream_entry_ms > w.ms OR o.stream_entry_seq > w.seq) AND split_part(o.aggregate_key, ':', 1) = %s")


def account_erasure_pending(user_id: int) -> Pending:
    """What the erasure of `user_id` waits for, read on every relation shard (the outbox) and on `default` (the
    consumers' checkpoints, the slot moves). Reads only."""
    lows = _consumed_through()
    parts = sorted(lows)
    unpublished = dead = unconsumed = 0
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute(_UNSENT_SQL, [NOT_SENT, str(user_id)])
            d, u = cursor.fetchone()
            dead, unpublished = dead + d, unpublished + u
            cursor.execute(_UNCONSUMED_SQL, [parts, [lows[p][0] for p in parts], [lows[p][1] for p in parts],
                                             str(user_id)])
            unconsumed += cursor.fetchone()[0]
    return Pending(unpublished, dead, unconsumed, _slot_moving(user_id), tuple(sorted(lows.items())))


def _slot_moving(user_id: int) -> bool:
    """The user's slot is named by an unfinished move, or a shard holds a slot state row for it (a capture, the
    target's copies before the switch, the source's kept rows after it)."""
    _alias, slot = routing.placement(user_id)
    moves = RelationSlotMove.objects.filter(state__in=MOVE_IN_FLIGHT).values_list("slots", flat=True)
    if any(slot in slots for slots in moves):
        return True
    return any(RelationSlotState.objects.using(alias).filter(slot=slot).exists() for alias in routing.all_aliases())


# --- the erasure, in bounded batches -----------------------------------------------------------------------------


@dataclass
class EraseProgress:
    """How far the erasure of one account went: videos handled and rows rewritten or deleted so far."""

    videos: int = 0
    events: int = 0  # outbox rows rewritten
    archived: int = 0  # archive rows rewritten
    commands: int = 0  # command rows rewritten
    tombstones: int = 0  # UNLIKED relations deleted (their versions kept in the slot's floor)
    cache_floors: int = 0  # relation cache floor rows deleted
    kept_liked: int = 0  # relations still LIKED, left under the real id
    finished: bool = False

    def as_state(self) -> dict:
        return {"videos": self.videos, "events": self.events, "archived": self.archived, "commands": self.commands,
                "tombstones": self.tombstones, "cacheFloors": self.cache_floors, "keptLiked": self.kept_liked}

    @classmethod
    def from_state(cls, st: dict) -> EraseProgress:
        return cls(st.get("videos", 0), st.get("events", 0), st.get("archived", 0), st.get("commands", 0),
                   st.get("tombstones", 0), st.get("cacheFloors", 0), st.get("keptLiked", 0))


def _liked_videos(alias: str, user_id: int) -> list[str]:
    return sorted(LikeRelation.objects.using(alias).filter(user_id=user_id, state=RelationState.LIKED)
                  .values_list("video_id", flat=True))


def _next_videos(alias: str, user_id: int, liked: list[str], limit: int) -> list[str]:
    """The next videos whose rows still name the user: its tombstones' and its commands' (a command may outlive
    its relation's tombstone, and its events with it). No keyset: what a batch handles no longer names the user."""
    tombstones = (LikeRelation.objects.using(alias).filter(user_id=user_id, state=RelationState.UNLIKED)
                  .order_by("video_id").values_list("video_id", flat=True)[:limit])
    commands = (LikeCommand.objects.using(alias).filter(user_id=user_id).exclude(video_id__in=liked)
                .values_list("video_id", flat=True)[:limit * 4])
    return sorted(set(tombstones) | set(commands))[:limit]


def _sys_prefixes(user_id: int, pseudo: int) -> tuple[str, str]:
    return delete_operation_id(user_id, ""), delete_operation_id(pseudo, "")


# The key's video part is everything after its first ':' (`relations.events.aggregate_key`).
_VIDEO_OF_KEY = "substr(aggregate_key, strpos(aggregate_key, ':') + 1)"
_REWRITE_EVENT = (
    f"SET aggregate_key = %(pseudo_text)s || ':' || {_VIDEO_OF_KEY}, "
    "payload = payload || jsonb_build_object('userId', %(pseudo)s::bigint, 'aggregateKey', "
    f"%(pseudo_text)s || ':' || {_VIDEO_OF_KEY}) "
    f"|| CASE WHEN payload->>'operationId' = %(sys_old)s || {_VIDEO_OF_KEY} "
    f"THEN jsonb_build_object('operationId', %(sys_new)s || {_VIDEO_OF_KEY}) ELSE '{{}}'::jsonb END "
    "|| CASE WHEN payload ? 'deviceId' THEN jsonb_build_object('deviceId', '') ELSE '{}'::jsonb END "
    "WHERE aggregate_key = ANY(%(keys)s)"
)
_OUTBOX_REWRITE_SQL = f"UPDATE {OUT} {_REWRITE_EVENT} AND status = 'SENT'"
_ARCHIVE_REWRITE_SQL = f"UPDATE {ARC} {_REWRITE_EVENT}"
_CACHE_FLOORS_DELETE_SQL = (f"DELETE FROM {RELCACHE} WHERE cache_generation = ANY(%s) AND user_id = %s "
                            "AND video_id = ANY(%s) AND state = 'UNLIKED'")
_COMMANDS_MOVE_SQL = f"""
WITH gone AS (DELETE FROM {CMD} WHERE user_id = %(user)s AND video_id = ANY(%(videos)s) RETURNING *)
INSERT INTO {CMD} (user_id, operation_id, video_id, desired_state, result_state, result_version, changed,
                   base_version, device_id, client_sequence, created_at)
SELECT %(pseudo)s, CASE WHEN operation_id = %(sys_old)s || video_id THEN %(sys_new)s || video_id ELSE operation_id END,
       video_id, desired_state, result_state, result_version, changed, base_version, '', client_sequence, created_at
  FROM gone ORDER BY id
"""
# As the tombstone sweep (`relations.services.tombstones._SWEEP_SQL`): the deleted versions raise the slot's floor.
_TOMBSTONES_DELETE_SQL = f"""
WITH gone AS (
    DELETE FROM {REL} WHERE user_id = %(user)s AND video_id = ANY(%(videos)s) AND state = 'UNLIKED'
    RETURNING relation_version),
raised AS (
    INSERT INTO {FLOOR} AS f (slot, floor) SELECT %(slot)s, max(relation_version) FROM gone HAVING count(*) > 0
    ON CONFLICT (slot) DO UPDATE SET floor = GREATEST(f.floor, EXCLUDED.floor))
SELECT count(*) FROM gone
"""


def account_relations_erase_chunk(*, user_id: int, at: EraseProgress, limit: int = ERASE_CHUNK) -> EraseProgress:
    """Erase the user id from the rows of the next `limit` videos of a deleted account whose erasure is due
    (`account_erasure_pending(...).ready`; the caller checks): see the module. `finished` when none is left.

    Transaction: per batch, one durable transaction per relation shard (its outbox, archive and cache floors),
    then one on the owning shard (its commands and tombstones, the floor raised with them).
    Idempotency: each statement selects by the real user id (or its keys); what a batch did is not found again, and
    a batch cut short by a crash is found again whole (the owning shard's rows go last)."""
    owner, slot = routing.placement(user_id)
    pseudo = pseudonymous_user_id(user_id)
    liked = _liked_videos(owner, user_id)
    out = EraseProgress.from_state(at.as_state())
    out.kept_liked = len(liked)
    videos = _next_videos(owner, user_id, liked, limit)
    if not videos:
        out.finished = True
        return out
    sys_old, sys_new = _sys_prefixes(user_id, pseudo)
    rewrite = {"pseudo": pseudo, "pseudo_text": str(pseudo), "sys_old": sys_old, "sys_new": sys_new,
               "keys": [aggregate_key(user_id, v) for v in videos]}
    cache_generations = list(RelationCacheGeneration.objects.values_list("generation", flat=True))
    for alias in routing.all_aliases():
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.execute(_OUTBOX_REWRITE_SQL, rewrite)
            out.events += cursor.rowcount
            cursor.execute(_ARCHIVE_REWRITE_SQL, rewrite)
            out.archived += cursor.rowcount
            cursor.execute(_CACHE_FLOORS_DELETE_SQL, [cache_generations, user_id, videos])
            out.cache_floors += cursor.rowcount
    with transaction.atomic(using=owner, durable=True), connections[owner].cursor() as cursor:
        cursor.execute(_COMMANDS_MOVE_SQL, {"user": user_id, "videos": videos, "pseudo": pseudo, "sys_old": sys_old,
                                            "sys_new": sys_new})
        out.commands += cursor.rowcount
        cursor.execute(_TOMBSTONES_DELETE_SQL, {"user": user_id, "videos": videos, "slot": slot})
        out.tombstones += cursor.fetchone()[0]
    out.videos += len(videos)
    return out


def relations_without_fact(*, user_id: int, video_ids: list[str]) -> set[str]:
    """Which of these relations of `user_id` have no fact on the user's shard any more (their tombstone erased here,
    or swept past its retention): what a projection may forget without disagreeing with the facts. Reads only."""
    alias = routing.alias_for_user(user_id)
    present = set(LikeRelation.objects.using(alias).filter(user_id=user_id, video_id__in=video_ids)
                  .values_list("video_id", flat=True))
    return set(video_ids) - present


def account_erasure_audit(*, user_id: int, actor: Actor, at: EraseProgress, erasers: dict[str, dict]) -> None:
    """Record the erasure ("account.erase"): what this step did on the relation shards and each registered eraser's
    report. Written after the erasers ran (the audit log's own eraser among them), so it names the account by its
    pseudonym only (target_type "user_pseudonym", as the redaction's records), never by its id.

    Transaction: one durable transaction on `default`."""
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action=ERASE_AUDIT_ACTION, target_type="user_pseudonym",
                     target_id=user_pseudonym(user_id), params={"relations": at.as_state(), "erasers": erasers},
                     outcome="partial" if at.kept_liked else "applied")


ERASE_RESUMER = "account-erasure"


def account_erasures_resume(*, limit: int = 20) -> list[int]:
    """Beat: every account deletion whose erasure was left waiting (its job ended before the pipeline applied the
    withdrawal) and that no later deletion job of the same account followed runs again, as the system: it finds
    nothing to withdraw and erases once the pipeline has caught up (else it waits again, for the next beat).
    Returns the jobs started."""
    kind, started = ACCOUNT_DELETE_JOB, []
    waiting = OpsJob.objects.filter(kind=kind, status="SUCCEEDED", result__erasure__status="waiting").order_by("id")
    for job in waiting.iterator():
        user_id = int(job.params["user_id"])
        if OpsJob.objects.filter(kind=kind, params__user_id=user_id, id__gt=job.pk).exists():
            continue
        again = job_start(kind=kind, actor=system_actor(ERASE_RESUMER), target=f"user:{user_id}",
                          params={"user_id": user_id, "username": job.params.get("username", str(user_id))})
        started.append(again.pk)
        if len(started) >= limit:
            break
    return started
