"""The social edges the like rules check (SEC-2): friendships and blocks. Each change is audited and
invalidates the edge cache after its commit."""

from __future__ import annotations

import logging

from django.db import transaction
from redis.exceptions import RedisError

from likes_project import metrics
from likes_project.audit.services import Actor, audit_record
from relations import cache, validation
from relations.models import Block, Friendship

logger = logging.getLogger(__name__)


def _edge_set(model, *, key: dict, present: bool, actor: Actor, action: str, target_id: str,
              users: tuple[int, int]) -> bool:
    """Add or remove one edge row (`key` are its columns), audited; the edge cache of the pair is
    invalidated after the commit. Returns whether anything changed."""
    with transaction.atomic(using="default", durable=True):
        if present:
            _, changed = model.objects.get_or_create(**key)
        else:
            changed = model.objects.filter(**key).delete()[0] > 0
        audit_record(actor=actor, action=f"{action}.add" if present else f"{action}.remove", target_type=action,
                     target_id=target_id, params={}, outcome="applied" if changed else "unchanged")
    _edges_invalidate(*users)
    return changed


def friendship_set(*, user_a: int, user_b: int, present: bool, actor: Actor) -> bool:
    """Add or remove the friendship between two users. Returns whether anything changed.

    Transaction: one durable transaction on `default` (edge + audit). Idempotency: setting the
    current state again changes nothing. The edge cache is invalidated after commit.
    """
    if user_a == user_b:
        raise validation.InvalidInput("A user cannot be their own friend.", code="invalid_edge")
    low, high = sorted((user_a, user_b))
    return _edge_set(Friendship, key={"user_low": low, "user_high": high}, present=present, actor=actor,
                     action="friendship", target_id=f"{low}:{high}", users=(user_a, user_b))


def block_set(*, blocker_id: int, blocked_id: int, present: bool, actor: Actor) -> bool:
    """Add or remove `blocker`'s block of `blocked`. Same transaction and cache rules as friendships."""
    if blocker_id == blocked_id:
        raise validation.InvalidInput("A user cannot block themselves.", code="invalid_edge")
    return _edge_set(Block, key={"blocker_id": blocker_id, "blocked_id": blocked_id}, present=present, actor=actor,
                     action="block", target_id=f"{blocker_id}>{blocked_id}", users=(blocker_id, blocked_id))


def _edges_invalidate(a: int, b: int) -> None:
    try:
        cache.edge_cache_invalidate(a, b)
    except RedisError as exc:
        metrics.inc("likes_cache_errors_total", cache="edges_invalidate")
        logger.warning("edge cache invalidation failed: %s", exc.__class__.__name__)
