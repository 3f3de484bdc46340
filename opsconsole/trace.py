"""The trace of one like through the pipeline (OPS-1, OPS-2, OBS-1): the console's trace page and
`manage.py trace` both call `trace_query_parse` and `trace_get` here.

Selected by an operation id (with its user when several users used the id), by an event id, or by a
user and a video, a trace is: the relation (state, version, last operation), the relation's command
rows, the outbox row of the traced event (status, attempts, last error, stream entry, xact id), and per
consumer of the event log (count, reverse, relation cache) the checkpoint on the event's stream
partition against the entry (consumed when `last_done_id >= entry id`), the consumer's evidence of the
event and any dead letter it wrote for it. The traced event is the one the operation wrote (a command
that changed nothing wrote none), the one named, or the relation's current version's. An outbox row
moved to the archive past its retention (OUT-7) is still found there (status ARCHIVED).

Evidence per consumer: the count and reverse projectors write a receipt per consumed stream position
(`counting.selectors.trace`); the relation cache keeps no per-event receipt, so its evidence is its
durable version floor, which covers the event when its version is not below the event's; the notifications
consumer keeps none either, and shows the version it applied for the relation. Rows a rebuild
wrote have no receipt: the projected row's version is shown instead, and the trace says which it is.

Read-only: selectors only, nothing is written, so a trace is a lookup, not an action, and is not audited
(like the relation lookup). It reads PostgreSQL only (never Redis), so it works while Redis is down.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from counting.selectors import trace as projector_reads
from likes_project.errors import InvalidInput
from likes_project.eventlog import selectors as eventlog
from likes_project.eventlog import streams
from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter
from likes_project.eventlog.registry import CONSUMERS
from relations import validation
from relations.selectors import lookup as lookup

# The order a trace lists the consumers in: the count chain first, then the reverse index, the relation
# cache; a consumer added later follows (with no evidence reader until it gets one).
CONSUMER_ORDER = ("count", "reverse", "relcache", "notify")

SELECTOR_HELP = "an operation id (with its user when several users used it), an event id, or a user and a video"


@dataclass(frozen=True)
class TraceQuery:
    kind: str  # operation | event | relation
    operation_id: str = ""
    event_id: uuid.UUID | None = None
    user: lookup.LookupUser | None = None
    video_id: str = ""


ARCHIVED = "ARCHIVED"


@dataclass(frozen=True)
class OutboxView:
    """The traced event's outbox row, live or archived (OUT-7: an archived row keeps its event and its
    stream position; its publishing state went with it, so its status reads ARCHIVED)."""

    id: int
    event_id: uuid.UUID
    aggregate_key: str
    relation_version: int
    event_type: str
    schema_version: int
    payload: dict
    status: str
    retry_count: int | None
    last_error: str
    next_retry_at: dt.datetime | None
    stream_key: str
    stream_partition: int | None
    stream_entry_id: str
    xact_id: int | None
    created_at: dt.datetime
    published_at: dt.datetime | None
    archived_at: dt.datetime | None


def _outbox_view(item: lookup.ShardRow | None) -> lookup.ShardRow | None:
    if item is None:
        return None
    r = item.row
    archived_at = getattr(r, "archived_at", None)
    if archived_at is None:
        view = OutboxView(r.id, r.event_id, r.aggregate_key, r.relation_version, r.event_type, r.schema_version,
                          r.payload, r.status, r.retry_count, r.last_error, r.next_retry_at, r.stream_key,
                          r.stream_partition, r.stream_entry_id, r.xact_id, r.created_at, r.published_at, None)
    else:
        view = OutboxView(r.id, r.event_id, r.aggregate_key, r.relation_version, r.event_type, r.schema_version,
                          r.payload, ARCHIVED, None, "", None, r.stream_key,
                          streams.partition_of(r.stream_key) if r.stream_key else None, r.stream_entry_id, None,
                          r.created_at, r.published_at, archived_at)
    return lookup.ShardRow(alias=item.alias, row=view)


def _outbox_of_version(user_id: int, video_id: str, version: int) -> lookup.ShardRow | None:
    return _outbox_view(lookup.outbox_get_by_version(user_id=user_id, video_id=video_id, relation_version=version)
                        or lookup.outbox_archive_get(user_id=user_id, video_id=video_id, relation_version=version))


@dataclass(frozen=True)
class Evidence:
    """What one consumer holds about the event: its receipt, or the projected row / version floor it
    keeps instead, with the version it has seen for the relation."""

    kind: str  # receipt | projectedRow | versionFloor
    store: str
    generation: int
    receipt: projector_reads.Receipt | None
    table: str
    state: str | None
    version: int | None
    event_version: int
    note: str

    @property
    def covers(self) -> bool:
        """The consumer has seen the event's version or a later one of the relation."""
        return self.version is not None and self.version >= self.event_version


@dataclass(frozen=True)
class ConsumerTrace:
    consumer: str
    partition: int
    checkpoint: ConsumerCheckpoint | None  # None: the consumer never ran on this partition
    consumed: bool
    evidence: Evidence | None  # None: the consumer holds nothing about this relation yet
    dead_letter: DeadLetter | None  # the newest one for this event


@dataclass(frozen=True)
class Trace:
    query: TraceQuery
    user: lookup.LookupUser | None
    video_id: str
    alias: str  # the user's relation shard ("" when nothing was found)
    relation: object | None  # a LikeRelation
    operation_id: str  # the traced operation ("" when unknown)
    commands: list[lookup.ShardRow]
    outbox: lookup.ShardRow | None  # its row is an OutboxView
    other_events: list[lookup.ShardRow]  # the relation's other outbox rows, newest version first
    consumers: list[ConsumerTrace]

    @property
    def found(self) -> bool:
        return bool(self.commands or self.relation is not None or self.outbox is not None)


def _text(value) -> str:
    return "" if value is None else str(value).strip()


def trace_query_parse(*, operation=None, event=None, user=None, video=None) -> TraceQuery:
    """Check the selectors as given (the command's options, the page's fields): exactly one of an
    operation id (a user may narrow it), an event id, or a user and a video. Raises InvalidInput with a
    stable code (`selector_missing`, `selector_ambiguous`, `selector_incomplete`, `invalid_event_id`,
    `invalid_operation_id`, `invalid_video_id`, `invalid_user`) or UserNotFound (`user_not_found`)."""
    operation, event, user, video = (_text(v) for v in (operation, event, user, video))
    if not (operation or event or user or video):
        raise InvalidInput(f"Give one selector: {SELECTOR_HELP}.", code="selector_missing")
    if (event and (operation or user or video)) or (operation and video):
        raise InvalidInput(f"Give exactly one selector: {SELECTOR_HELP}.", code="selector_ambiguous")
    if not (operation or event) and not (user and video):
        raise InvalidInput("A relation is named by a user and a video: give both.", code="selector_incomplete")
    if event:
        try:
            return TraceQuery(kind="event", event_id=uuid.UUID(event))
        except ValueError:
            raise InvalidInput(f"{event!r} is not an event id (a UUID).", code="invalid_event_id") from None
    found_user = lookup.lookup_user_get(query=user) if user else None
    if operation:
        try:
            operation = validation.operation_id(operation, field="Operation id")
        except InvalidInput as exc:
            raise InvalidInput(exc.message, code="invalid_operation_id") from None
        return TraceQuery(kind="operation", operation_id=operation, user=found_user)
    return TraceQuery(kind="relation", user=found_user, video_id=validation.video_id(video))


def _user_of(user_id: int) -> lookup.LookupUser:
    return lookup.lookup_user_get(query=str(user_id))


def trace_get(*, query: TraceQuery) -> Trace:
    """The trace of what `query` names; an empty trace (no relation, no rows) when nothing matches.
    Raises InvalidInput `operation_ambiguous` (with `users`) when an operation id without a user names
    commands of several users."""
    outbox = None
    operation_id = ""
    if query.kind == "event":
        rows = lookup.outbox_list_by_event_id(event_id=query.event_id).rows
        outbox = _outbox_view(rows[0] if rows else lookup.outbox_archive_get(event_id=query.event_id))
        if outbox is None:
            return _empty(query)
        user_id, _, video_id = outbox.row.aggregate_key.partition(":")  # user ids are digits; video ids may hold ":"
        user = _user_of(int(user_id))
        operation_id = str((outbox.row.payload or {}).get("operationId") or "")
    elif query.kind == "operation":
        commands_found = lookup.command_list(operation_id=query.operation_id, user=query.user).rows
        if not commands_found:
            return _empty(query)
        users = sorted({c.row.user_id for c in commands_found})
        if len(users) > 1:
            raise InvalidInput(f"Operation id {query.operation_id!r} was used by users {users}: give the user too.",
                               code="operation_ambiguous", users=users)
        command = commands_found[0].row
        user, video_id, operation_id = query.user or _user_of(command.user_id), command.video_id, command.operation_id
        if command.changed:  # a command that changed nothing wrote no event
            outbox = _outbox_of_version(command.user_id, command.video_id, command.result_version)
    else:
        user, video_id = query.user, query.video_id
    detail = lookup.relation_detail_get(user=user, video_id=video_id)
    commands = detail.commands
    if query.kind == "operation" and all(c.row.pk != command.pk for c in commands):
        commands = [*commands, commands_found[0]]  # older than the newest PER_SHARD_LIMIT: shown all the same
    if query.kind == "relation" and detail.relation is not None:
        operation_id = detail.relation.last_operation_id
        outbox = _outbox_of_version(user.user_id, video_id, detail.relation.relation_version)
    return Trace(
        query=query, user=user, video_id=video_id, alias=detail.alias, relation=detail.relation,
        operation_id=operation_id, commands=commands, outbox=outbox,
        other_events=[r for r in detail.outbox if outbox is None or r.row.pk != outbox.row.id],
        consumers=_consumers(user.user_id, video_id, outbox.row) if outbox is not None else [],
    )


def _empty(query: TraceQuery) -> Trace:
    return Trace(query=query, user=query.user, video_id=query.video_id, alias="", relation=None, operation_id="",
                 commands=[], outbox=None, other_events=[], consumers=[])


def _consumers(user_id: int, video_id: str, row) -> list[ConsumerTrace]:
    # A row not published yet has no partition of its own: it goes where its aggregate hashes to.
    partition = row.stream_partition if row.stream_partition is not None else streams.partition_for(row.aggregate_key)
    names = [c for c in CONSUMER_ORDER if c in CONSUMERS] + [c for c in CONSUMERS if c not in CONSUMER_ORDER]
    out = []
    for consumer in names:
        checkpoint = eventlog.checkpoint_get(consumer=consumer, partition=partition)
        dead = eventlog.dead_letter_list_for_event(consumer=consumer, event_id=str(row.event_id), user_id=user_id,
                                                   stream_key=row.stream_key, entry_id=row.stream_entry_id)
        consumed = eventlog.entry_consumed(checkpoint=checkpoint, entry_id=row.stream_entry_id)
        out.append(ConsumerTrace(
            consumer=consumer, partition=partition, checkpoint=checkpoint, consumed=consumed,
            evidence=_evidence(consumer, user_id, video_id, row, partition, consumed=consumed),
            dead_letter=dead[0] if dead else None))
    return out


def _evidence(consumer: str, user_id: int, video_id: str, row, partition: int, *, consumed: bool
              ) -> Evidence | None:
    version = row.relation_version
    if consumer == "relcache":
        floor = lookup.relation_cache_floor_get(user_id=user_id, video_id=video_id)
        if floor is None:
            return None
        return Evidence(kind="versionFloor", store=floor.alias, generation=floor.generation, receipt=None,
                        table="relation cache floor", state=floor.state, version=floor.relation_version,
                        event_version=version,
                        note="The relation cache keeps no per-event receipt: its evidence is the durable version "
                             f"floor it writes Redis from, at v{floor.relation_version} for the event's v{version}.")
    if consumer == "count":
        found = projector_reads.count_evidence_get(user_id=user_id, video_id=video_id, event_id=str(row.event_id),
                                                   stream_partition=partition, entry_id=row.stream_entry_id)
    elif consumer == "reverse":
        found = projector_reads.reverse_evidence_get(user_id=user_id, video_id=video_id, stream_partition=partition,
                                                     entry_id=row.stream_entry_id)
    elif consumer == "notify":
        found = projector_reads.notify_evidence_get(user_id=user_id, video_id=video_id)
    else:
        return None
    if found.receipt is None and found.row is None:
        return None
    seen = found.row.version if found.row else None
    if found.receipt is not None:
        note = (f"Receipt of stream entry {found.receipt.source_offset} ({found.receipt.outcome}); the projected "
                f"row is at v{seen}." if seen is not None else
                f"Receipt of stream entry {found.receipt.source_offset} ({found.receipt.outcome}).")
    elif consumer == "notify":
        note = (f"Notifications keep no per-event receipt: the version they applied for the relation is v{seen}, for "
                f"the event's v{version}.")
    elif consumed:
        note = (f"No receipt for this event: the projected row is at v{seen} for the event's v{version} (rows a "
                "rebuild or a restore wrote carry no receipt, nor does a dead-lettered event).")
    else:
        note = f"Not consumed yet: the projected row is at v{seen}, from an earlier event or a rebuild."
    return Evidence(kind="receipt" if found.receipt else "projectedRow", store=found.store,
                    generation=found.generation, receipt=found.receipt, table=found.row.table if found.row else "",
                    state=found.row.state if found.row else None, version=seen, event_version=version, note=note)


# --- the JSON and text renderings (manage.py trace) ------------------------------------------------


def _iso(value) -> str | None:
    return value.isoformat() if isinstance(value, dt.datetime) else None


def _relation_dict(trace: Trace) -> dict | None:
    r = trace.relation
    if r is None:
        return None
    return {"userId": trace.user.user_id, "username": trace.user.username, "videoId": trace.video_id,
            "shard": trace.alias, "state": r.state, "relationVersion": r.relation_version,
            "lastOperationId": r.last_operation_id, "stateChangedAt": _iso(r.state_changed_at),
            "createdAt": _iso(r.created_at), "updatedAt": _iso(r.updated_at)}


def _command_dict(item: lookup.ShardRow, trace: Trace) -> dict:
    c = item.row
    return {"shard": item.alias, "operationId": c.operation_id, "userId": c.user_id, "videoId": c.video_id,
            "desiredState": c.desired_state, "resultState": c.result_state, "resultVersion": c.result_version,
            "changed": c.changed, "baseVersion": c.base_version, "deviceId": c.device_id,
            "clientSequence": c.client_sequence, "createdAt": _iso(c.created_at),
            "traced": c.operation_id == trace.operation_id}


def _outbox_dict(item: lookup.ShardRow | None) -> dict | None:
    if item is None:
        return None
    o = item.row
    return {"shard": item.alias, "id": o.id, "eventId": str(o.event_id), "aggregateKey": o.aggregate_key,
            "relationVersion": o.relation_version, "eventType": o.event_type, "schemaVersion": o.schema_version,
            "operationId": (o.payload or {}).get("operationId"), "status": o.status, "attempts": o.retry_count,
            "lastError": o.last_error, "nextRetryAt": _iso(o.next_retry_at), "streamKey": o.stream_key or None,
            "streamPartition": o.stream_partition, "entryId": o.stream_entry_id or None, "xactId": o.xact_id,
            "createdAt": _iso(o.created_at), "publishedAt": _iso(o.published_at),
            "archivedAt": _iso(o.archived_at)}


def _checkpoint_dict(c: ConsumerTrace, entry_id: str) -> dict | None:
    cp = c.checkpoint
    if cp is None:
        return None
    return {"id": cp.pk, "position": cp.last_done_id, "entryId": entry_id or None, "consumed": c.consumed,
            "blockedEntryId": cp.blocked_entry_id or None, "blockedAttempts": cp.blocked_attempts,
            "blockedReason": cp.blocked_reason or None, "blockedError": cp.blocked_error or None,
            "retryAt": _iso(cp.retry_at), "appliedTotal": cp.applied_total, "updatedAt": _iso(cp.updated_at)}


def _evidence_dict(e: Evidence | None) -> dict | None:
    if e is None:
        return None
    r = e.receipt
    return {"kind": e.kind, "store": e.store, "generation": e.generation, "receiptId": r.id if r else None,
            "sourcePartition": r.source_partition if r else None, "entryId": r.source_offset if r else None,
            "outcome": r.outcome if r else None, "createdAt": _iso(r.created_at) if r else None,
            "table": e.table or None, "state": e.state, "version": e.version, "eventVersion": e.event_version,
            "covers": e.covers, "note": e.note}


def _dead_letter_dict(d: DeadLetter | None) -> dict | None:
    if d is None:
        return None
    return {"id": d.pk, "status": d.status, "errorClass": d.error_class, "error": d.error, "attempts": d.attempts,
            "streamKey": d.stream_key, "entryId": d.entry_id, "firstFailedAt": _iso(d.first_failed_at),
            "lastFailedAt": _iso(d.last_failed_at), "resolver": d.resolver or None, "reason": d.reason or None,
            "resolvedAt": _iso(d.resolved_at)}


def trace_as_dict(trace: Trace) -> dict:
    """The JSON of a trace: exactly {"relation", "commands", "outbox", "consumers"} at the top."""
    entry_id = trace.outbox.row.stream_entry_id if trace.outbox is not None else ""
    return {
        "relation": _relation_dict(trace),
        "commands": [_command_dict(c, trace) for c in trace.commands],
        "outbox": _outbox_dict(trace.outbox),
        "consumers": [{"consumer": c.consumer, "partition": c.partition,
                       "checkpoint": _checkpoint_dict(c, entry_id), "receipt": _evidence_dict(c.evidence),
                       "deadLetter": _dead_letter_dict(c.dead_letter)} for c in trace.consumers],
    }


def trace_text(trace: Trace) -> str:
    """The readable rendering of `trace_as_dict` (one block per part)."""
    data = trace_as_dict(trace)
    if not trace.found:
        return "nothing found: no relation, command or outbox row matches"
    lines = []
    r = data["relation"]
    user = trace.user
    who = f"user {user.user_id}" + (f" ({user.username})" if user.username else "")
    if r is None:
        lines.append(f"relation {who} / {trace.video_id}: no relation row (reads UNLIKED v0)")
    else:
        lines.append(f"relation {who} / {r['videoId']} on {r['shard']}: {r['state']} v{r['relationVersion']}, "
                     f"last operation {r['lastOperationId']}")
    lines.append(f"commands ({len(data['commands'])}):")
    for c in data["commands"]:
        lines.append(f"  {'*' if c['traced'] else ' '} {c['operationId']} {c['desiredState']} -> {c['resultState']} "
                     f"v{c['resultVersion']} {'changed' if c['changed'] else 'no change'} at {c['createdAt']}")
    o = data["outbox"]
    if o is None:
        lines.append("outbox: no event (the traced command changed nothing, or the relation has none)")
    else:
        state = (f"archived at {o['archivedAt']}" if o["archivedAt"] else
                 f"attempts {o['attempts']}, xact {o['xactId']}")
        lines.append(f"outbox #{o['id']} on {o['shard']}: event {o['eventId']} v{o['relationVersion']} {o['status']}, "
                     f"{state}, "
                     + (f"stream {o['streamKey']} entry {o['entryId']}" if o["entryId"] else "not published yet")
                     + (f"; last error: {o['lastError']}" if o["lastError"] else ""))
    for c in data["consumers"]:
        cp = c["checkpoint"]
        where = (f"checkpoint {cp['position']}: {'consumed' if cp['consumed'] else 'not consumed'}"
                 + (f"; blocked at {cp['blockedEntryId']} x{cp['blockedAttempts']} ({cp['blockedReason']})"
                    if cp["blockedEntryId"] else "")) if cp else "no checkpoint (never ran on this partition)"
        lines.append(f"consumer {c['consumer']} [partition {c['partition']}]: {where}")
        e = c["receipt"]
        lines.append(f"    evidence: {e['kind']} on {e['store']} g{e['generation']}"
                     + (f" receipt #{e['receiptId']} {e['outcome']}" if e["receiptId"] else "")
                     + f"; {e['note']}" if e else "    evidence: none")
        d = c["deadLetter"]
        if d:
            lines.append(f"    dead letter #{d['id']} {d['status']}: {d['errorClass']} x{d['attempts']}")
    return "\n".join(lines)


def trace_find(*, operation=None, event=None, user=None, video=None) -> Trace:
    """Parse the selectors and trace them (the command's one call)."""
    return trace_get(query=trace_query_parse(operation=operation, event=event, user=user, video=video))
