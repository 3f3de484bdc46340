"""Assertions over what the relation shards hold (read straight from each shard database)."""

from __future__ import annotations

from django.conf import settings

from relations import routing
from relations.models import LikeCommand, LikeRelation, OutboxEvent


def shard_rows(model, **filters) -> dict[str, list]:
    return {alias: list(model.objects.using(alias).filter(**filters)) for alias in settings.RELATION_SHARD_ALIASES}


def total(model, **filters) -> int:
    return sum(model.objects.using(alias).filter(**filters).count() for alias in settings.RELATION_SHARD_ALIASES)


def relation_row(user_id: int, video_id: str) -> LikeRelation | None:
    alias = routing.alias_for_user(user_id)
    return LikeRelation.objects.using(alias).filter(user_id=user_id, video_id=video_id).first()


def outbox_rows(user_id: int, video_id: str) -> list[OutboxEvent]:
    return list(
        OutboxEvent.objects.using(routing.alias_for_user(user_id))
        .filter(aggregate_key=f"{user_id}:{video_id}")
        .order_by("relation_version")
    )


def command_rows(user_id: int) -> list[LikeCommand]:
    return list(LikeCommand.objects.using(routing.alias_for_user(user_id)).filter(user_id=user_id).order_by("id"))


def nothing_written() -> bool:
    return total(LikeRelation) == 0 and total(LikeCommand) == 0 and total(OutboxEvent) == 0
