"""The version floor of each logical relation slot (issue 31 §4, CMD-15): what lets an UNLIKED tombstone be
deleted without a relation's version ever going backwards."""

from __future__ import annotations

from django.db import models

from likes_project.db_routers import RELATION_SHARD


class RelationVersionFloor(models.Model):
    """On a relation shard: every relation of users of logical slot `slot` that has no row on this shard had its
    last version at most `floor`. The tombstone sweep (`relations.services.tombstones`) raises it, in the
    transaction that deletes the tombstones, to the highest version it deleted; `likes_relation_apply` (v3) and
    `relations.services.commands._apply_python` give a relation without a row the version `floor + 1`, so the
    projections, the relation cache and every subscriber, which keep the v12 they last saw, accept the next like.

    No row: the floor is 0 (nothing of the slot was ever deleted here). A floor only grows; one too high costs
    nothing but larger numbers. Keyed by the logical slot, not the user: a contract's hash and slot count never
    change (a move keeps them), so a slot names the same users forever, and a slot move copies the row with the
    slot's relation rows (`relations.services.slot_moves.rows.floors_copy`)."""

    db_family = RELATION_SHARD

    slot = models.IntegerField(primary_key=True)
    floor = models.BigIntegerField()

    def __str__(self) -> str:
        return f"slot {self.slot}: versions up to {self.floor} deleted"
