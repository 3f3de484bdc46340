"""Read-only lookups for the operations console (OPS-1, OPS-2) across the relation shards.

Never writes and never opens a transaction. The alias for a user comes only from
`relations.routing.alias_for_user`; a search without a user visits every alias from
`relations.routing.all_aliases()`, and every row found carries the alias it was read from.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model

from likes_project.errors import InvalidInput
from likes_project.generations import GenerationStatus
from relations import events, routing, validation
from relations.errors import UserNotFound
from relations.models import (
    LikeCommand,
    LikeRelation,
    LikeRelationCacheProjection,
    OutboxArchive,
    OutboxEvent,
    OutboxStatus,
    RelationCacheGeneration,
)

# Rows read per shard for one lookup; the page says when a list was cut at this bound.
PER_SHARD_LIMIT = 100


@dataclass(frozen=True)
class LookupUser:
    user_id: int
    username: str | None  # None when the id has no account on `default`


@dataclass(frozen=True)
class ShardRow:
    alias: str
    row: Any  # a LikeCommand or OutboxEvent read from `alias`


@dataclass(frozen=True)
class ShardRows:
    rows: list[ShardRow]
    truncated: bool  # some shard had more than PER_SHARD_LIMIT matches


@dataclass(frozen=True)
class RelationDetail:
    user: LookupUser
    video_id: str
    alias: str
    relation: LikeRelation | None  # None: the user never acted on the video (reads UNLIKED v0)
    commands: list[ShardRow]  # the user's commands for the video, newest first
    outbox: list[ShardRow]  # the aggregate's outbox rows, newest relation version first
    aggregate_key: str


def lookup_user_get(*, query: str) -> LookupUser:
    """A user by username, or by numeric id (digits only; the id need not have an account here)."""
    query = (query or "").strip()
    if query.isascii() and query.isdigit():
        user_id = validation.strict_int(int(query), field="user id", code="invalid_user_id", minimum=1)
        username = get_user_model().objects.filter(pk=user_id).values_list("username", flat=True).first()
        return LookupUser(user_id=user_id, username=username)
    if not query:
        raise InvalidInput("Give a username or a numeric user id.", code="invalid_user")
    user = (get_user_model().objects.filter(username=query).only("pk", "username").first()
            if validation.storable_text(query) else None)  # NUL or a lone surrogate names no user
    if user is None:
        raise UserNotFound(f"No user named {query!r}.")
    return LookupUser(user_id=user.pk, username=user.get_username())


def relation_detail_get(*, user: LookupUser, video_id: str) -> RelationDetail:
    """OPS-1: the relation row of (user, video) on the user's shard, with the user's commands for the
    video and the outbox rows of the aggregate, each capped at PER_SHARD_LIMIT."""
    alias = routing.alias_for_user(user.user_id)
    aggregate_key = f"{user.user_id}:{video_id}"
    relation = LikeRelation.objects.using(alias).filter(user_id=user.user_id, video_id=video_id).first()
    commands = [
        ShardRow(alias=alias, row=row)
        for row in LikeCommand.objects.using(alias)
        .filter(user_id=user.user_id, video_id=video_id)
        .order_by("-created_at", "-id")[:PER_SHARD_LIMIT]
    ]
    outbox = [
        ShardRow(alias=alias, row=row)
        for row in OutboxEvent.objects.using(alias)
        .filter(aggregate_key=aggregate_key)
        .order_by("-relation_version", "-id")[:PER_SHARD_LIMIT]
    ]
    return RelationDetail(user=user, video_id=video_id, alias=alias, relation=relation, commands=commands,
                          outbox=outbox, aggregate_key=aggregate_key)


def _collect(querysets_by_alias, *, sort_key) -> ShardRows:
    rows: list[ShardRow] = []
    truncated = False
    for alias, queryset in querysets_by_alias:
        found = list(queryset[: PER_SHARD_LIMIT + 1])
        truncated = truncated or len(found) > PER_SHARD_LIMIT
        rows.extend(ShardRow(alias=alias, row=r) for r in found[:PER_SHARD_LIMIT])
    rows.sort(key=sort_key, reverse=True)
    return ShardRows(rows=rows, truncated=truncated)


def command_list(*, operation_id: str, user: LookupUser | None = None) -> ShardRows:
    """Commands with this operation id: on the user's shard when a user is given, else on every
    shard (operation ids are unique per user only, so several users may share one). Without a user
    each shard is scanned, as no index leads with operation_id."""
    if user is not None:
        aliases = [routing.alias_for_user(user.user_id)]
    else:
        aliases = routing.all_aliases()
    querysets = []
    for alias in aliases:
        qs = LikeCommand.objects.using(alias).filter(operation_id=operation_id)
        if user is not None:
            qs = qs.filter(user_id=user.user_id)
        querysets.append((alias, qs.order_by("-created_at", "-id")))
    return _collect(querysets, sort_key=lambda r: (r.row.created_at, r.alias, r.row.id))


def outbox_list_by_event_id(*, event_id: uuid.UUID) -> ShardRows:
    """OPS-2: the outbox row of an event id, searched on every shard (event ids are random UUIDs)."""
    querysets = [(alias, OutboxEvent.objects.using(alias).filter(event_id=event_id).order_by("-id"))
                 for alias in routing.all_aliases()]
    return _collect(querysets, sort_key=lambda r: (r.row.created_at, r.alias, r.row.id))


def outbox_list_by_status(*, status: str) -> ShardRows:
    """Outbox rows in one status on every shard, newest first, at most PER_SHARD_LIMIT per shard
    (each shard reads its newest rows through the (status, id) index)."""
    if status not in OutboxStatus.values:
        raise InvalidInput(f"status must be one of {OutboxStatus.values}.", code="invalid_status")
    querysets = [(alias, OutboxEvent.objects.using(alias).filter(status=status).order_by("-id"))
                 for alias in routing.all_aliases()]
    return _collect(querysets, sort_key=lambda r: (r.row.created_at, r.alias, r.row.id))


def outbox_get_by_version(*, user_id: int, video_id: str, relation_version: int) -> ShardRow | None:
    """The outbox row of one relation version (the event a changing command wrote), on the user's shard."""
    alias = routing.alias_for_user(user_id)
    row = (OutboxEvent.objects.using(alias)
           .filter(aggregate_key=events.aggregate_key(user_id, video_id), relation_version=relation_version)
           .order_by("-id").first())
    return ShardRow(alias=alias, row=row) if row is not None else None


@dataclass(frozen=True)
class CacheFloor:
    """The relation cache's durable version floor of one relation in its ACTIVE generation: the cache
    keeps no per-event receipt, this row is what its projector committed before writing Redis."""

    alias: str
    generation: int
    state: str
    relation_version: int
    updated_at: Any


def relation_cache_floor_get(*, user_id: int, video_id: str) -> CacheFloor | None:
    """None when there is no ACTIVE cache generation or it holds no floor for the relation."""
    generation = (RelationCacheGeneration.objects.filter(status=GenerationStatus.ACTIVE)
                  .values_list("generation", flat=True).first())
    if generation is None:
        return None
    alias = routing.alias_for_user(user_id)
    row = LikeRelationCacheProjection.objects.using(alias).filter(
        cache_generation=generation, user_id=user_id, video_id=video_id).first()
    if row is None:
        return None
    return CacheFloor(alias=alias, generation=generation, state=row.state, relation_version=row.relation_version,
                      updated_at=row.updated_at)


def outbox_archive_get(*, event_id: uuid.UUID | None = None, user_id: int | None = None, video_id: str = "",
                       relation_version: int | None = None) -> ShardRow | None:
    """An archived outbox row (published, consumed, past retention: OUT-7), by event id on every shard, or
    by relation version on the user's shard (the archive's (aggregate, version) index)."""
    if event_id is not None:
        for alias in routing.all_aliases():
            row = OutboxArchive.objects.using(alias).filter(event_id=event_id).first()
            if row is not None:
                return ShardRow(alias=alias, row=row)
        return None
    alias = routing.alias_for_user(user_id)
    row = (OutboxArchive.objects.using(alias)
           .filter(aggregate_key=events.aggregate_key(user_id, video_id), relation_version=relation_version)
           .order_by("-id").first())
    return ShardRow(alias=alias, row=row) if row is not None else None
