"""Keeps every model family on its own alias family.

A model declares its family with a class attribute `db_family` ("relation_shard" or
"count_partition"); everything else lives on `default`. Sharded models never pick an alias
implicitly: code must say `.using(alias)` with the alias from `relations.routing` /
`counting.routing`, so a forgotten `.using()` fails loudly instead of writing to the wrong place.
"""

from __future__ import annotations

from django.apps import apps
from django.conf import settings

RELATION_SHARD = "relation_shard"
COUNT_PARTITION = "count_partition"
DEFAULT = "default"


# Models no longer in the registry whose migrations must still run on a shard family: (app_label, model) ->
# family. None since the squash of D133 (the who-liked index's models had moved from relations to counting).
MOVED_MODEL_FAMILIES: dict[tuple[str, str], str] = {}


class ShardAliasRequired(RuntimeError):
    """A sharded model was queried without an explicit alias."""


def family_of_model(model) -> str:
    return getattr(model, "db_family", DEFAULT)


def family_of_alias(alias: str) -> str:
    if alias in settings.RELATION_SHARD_ALIASES:
        return RELATION_SHARD
    if alias in settings.COUNT_PARTITION_ALIASES:
        return COUNT_PARTITION
    return DEFAULT


class AliasFamilyRouter:
    def _pick(self, model, **hints):
        family = family_of_model(model)
        if family == DEFAULT:
            return "default"
        instance = hints.get("instance")
        if instance is not None and instance._state.db:
            return instance._state.db
        raise ShardAliasRequired(f"{model.__name__} lives on {family} aliases; pass .using(alias)")

    def db_for_read(self, model, **hints):
        return self._pick(model, **hints)

    def db_for_write(self, model, **hints):
        return self._pick(model, **hints)

    def allow_relation(self, obj1, obj2, **hints):
        return obj1._state.db == obj2._state.db

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        alias_family = family_of_alias(db)
        if model_name is None:
            # RunPython / RunSQL without a model: only on the control plane unless told otherwise.
            return hints.get("family", DEFAULT) == alias_family
        try:
            model = apps.get_model(app_label, model_name)
        except LookupError:
            # A model that moved to another app, or was deleted from code: its historical migrations
            # run on the family it had (default unless listed).
            return MOVED_MODEL_FAMILIES.get((app_label, model_name.lower()), DEFAULT) == alias_family
        return family_of_model(model) == alias_family
