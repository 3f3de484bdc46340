"""Runtime switches (issue 14 §3; DEG-1, DEG-2, OPS-5): pauses an operator sets without a deploy. Each is a
row on `default` of a model extending `PauseSwitch` that names its kind (`switch_kind`); the core finds them
among the installed models and names no app. The kinds:

  read-only    relations.LikesReadOnlySwitch     every like command answers 503 `likes_read_only`, writes nothing
  publisher    relations.OutboxPublisherSwitch   key: a relation shard; its outbox is not published (rows wait)
  consumer     eventlog.ConsumerSwitch           key: a consumer (`count`); its dispatch on every partition
  consumer     eventlog.ConsumerPartitionSwitch  key: consumer:partition (`count:3`); that partition only
  auto-repair  reconciliation.AutoRepairSwitch   diffs are still recorded, none is fixed automatically
  refresh      counting.CountRefreshSwitch       key: a video id; its display refreshes

Changed only through `switch_set` (or the older per-app wrappers of `pause_switch_set`), which audits every
change in its transaction. Read through a per-process cache (`switch_is_set`, `switch_keys_set`) re-read at
most every SWITCH_CACHE_S seconds: a change takes effect on every process within SWITCH_CACHE_S, at once in
the process that made it. The cache is one small query per switch model per process every few seconds, so
the read-only check on every like command costs a lock and a set lookup. `switches_set` reads `default`
directly: every switch that is set, for the console's front page and `manage.py switch list`.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import ClassVar

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, models, transaction

from likes_project.audit.services import Actor, audit_record
from likes_project.errors import InvalidInput
from likes_project.l1cache import RefreshedValue

logger = logging.getLogger(__name__)

GLOBAL_KEY = "global"  # the key of a switch that has one row only (read-only, auto-repair)


class PauseSwitch(models.Model):
    """A runtime switch keyed by its primary key. A concrete model that sets `switch_kind` is one of the
    switches `manage.py switch`, the console and the cache know; `switch_audit` is the (action prefix,
    target type) of its audit records; `switch_key_choices()` the keys it accepts (None: any key)."""

    switch_kind: ClassVar[str] = ""
    switch_audit: ClassVar[tuple[str, str]] = ("switch.", "switch")
    switch_default_key: ClassVar[str] = ""  # the key when none is given ("" : a key is required)
    switch_key_help: ClassVar[str] = "a key"
    switch_states: ClassVar[tuple[str, str]] = ("paused", "running")  # how a row names its state: set, clear

    paused = models.BooleanField(default=False)
    reason = models.CharField(max_length=256, blank=True, default="")
    updated_by = models.CharField(max_length=150, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.pk}: {self.switch_states[0 if self.paused else 1]}"

    @classmethod
    def switch_key_choices(cls) -> list[str] | None:
        return None

    @classmethod
    def switch_owns_key(cls, key: str) -> bool:
        """Whether `key` has this model's shape, when several models share a kind (a consumer, or one
        partition of it)."""
        return True

    @classmethod
    def switch_fields(cls, key: str) -> dict:
        """Columns besides the key that the key determines (the consumer and partition of `count:3`)."""
        return {}

    @classmethod
    def switch_key_clean(cls, key: str | None) -> str:
        """The key as stored, or InvalidInput `switch_key_required` / `unknown_switch_key`."""
        key = (key or "").strip() or cls.switch_default_key
        if not key:
            raise InvalidInput(f"A {cls.switch_kind} switch needs a key: {cls.switch_key_help}.",
                               code="switch_key_required", kind=cls.switch_kind)
        choices = cls.switch_key_choices()
        too_long = len(key) > cls._meta.pk.max_length
        if too_long or (choices is not None and key not in choices):
            known = f"; one of {', '.join(choices)}" if choices is not None else ""
            raise InvalidInput(f"Unknown {cls.switch_kind} switch key {key!r} ({cls.switch_key_help}{known}).",
                               code="unknown_switch_key", kind=cls.switch_kind, key=key[:200])
        return key


class GlobalPauseSwitch(PauseSwitch):
    """A switch with one row only (read-only likes, auto-repair): its key is always GLOBAL_KEY."""

    switch_default_key: ClassVar[str] = GLOBAL_KEY

    scope = models.CharField(max_length=16, primary_key=True, default=GLOBAL_KEY)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.switch_kind}: {self.switch_states[0 if self.paused else 1]}"

    @classmethod
    def switch_key_choices(cls) -> list[str]:
        return [GLOBAL_KEY]


@dataclass(frozen=True)
class SwitchState:
    """One switch as the console and `manage.py switch` show it."""

    kind: str
    key: str
    paused: bool
    reason: str
    updated_by: str
    updated_at: dt.datetime | None

    @classmethod
    def of(cls, row: PauseSwitch) -> SwitchState:
        return cls(kind=row.switch_kind, key=str(row.pk), paused=row.paused, reason=row.reason,
                   updated_by=row.updated_by, updated_at=row.updated_at)

    def as_json(self) -> dict:
        return {"kind": self.kind, "key": self.key, "paused": self.paused, "reason": self.reason,
                "updatedBy": self.updated_by, "updatedAt": self.updated_at.isoformat() if self.updated_at else None}


def switch_models() -> list[type[PauseSwitch]]:
    """Every installed switch model (a concrete PauseSwitch naming its kind)."""
    return [m for m in apps.get_models() if issubclass(m, PauseSwitch) and m.switch_kind]


def switch_kinds() -> list[str]:
    return sorted({m.switch_kind for m in switch_models()})


def switch_model(kind: str, key: str | None = None) -> type[PauseSwitch]:
    """The model holding the switch `kind` (and, for a kind split over models, the one `key` belongs to),
    or InvalidInput `unknown_switch_kind`."""
    candidates = [m for m in switch_models() if m.switch_kind == kind]
    if not candidates:
        raise InvalidInput(f"Unknown switch kind {kind!r}; one of {', '.join(switch_kinds())}.",
                           code="unknown_switch_kind", kind=str(kind)[:64])
    return next((m for m in candidates if m.switch_owns_key((key or "").strip())), candidates[0])


def switch_permission(model: type[PauseSwitch]) -> str:
    """The permission that sets or clears a switch of `model` (its model's change permission)."""
    return f"{model._meta.app_label}.change_{model._meta.model_name}"


# --- writes --------------------------------------------------------------------------------------


def pause_switch_set(model: type[PauseSwitch], *, key: str, paused: bool, reason: str, actor: Actor,
                     action_prefix: str, target_type: str, fields: dict | None = None) -> PauseSwitch:
    """Pause or resume the switch `key` of `model` (its primary key), audited as
    `<action_prefix>_pause` / `<action_prefix>_resume` (or `.pause` / `.resume` for a prefix ending in a
    dot). `fields`: other columns the key determines. Transaction: the switch row and the audit record on
    `default`. This process sees the change at once (its switch cache is dropped); others within
    SWITCH_CACHE_S."""
    verb = "pause" if paused else "resume"
    action = f"{action_prefix}{verb}" if action_prefix.endswith((".", "_")) else f"{action_prefix}_{verb}"
    try:
        with transaction.atomic(using="default", durable=True):
            switch, _ = model.objects.update_or_create(
                pk=key, defaults={"paused": paused, "reason": reason, "updated_by": actor.name, **(fields or {})})
            audit_record(actor=actor, action=action, target_type=target_type, target_id=key,
                         params={"reason": reason})
    finally:
        _paused.reset()
    return switch


def switch_set(*, kind: str, key: str | None, paused: bool, reason: str, actor: Actor) -> PauseSwitch:
    """Set (`paused`) or clear the switch `kind`/`key`; the key is checked against what the kind accepts
    (InvalidInput `unknown_switch_kind`, `switch_key_required`, `unknown_switch_key`), and setting one
    needs a reason (`reason_required`). The caller checks `switch_permission(switch_model(kind, key))`.
    Transaction: the switch row and its audit record on `default` (`pause_switch_set`); nothing is written
    for refused input. Idempotency: setting a set switch again (or clearing a clear one) rewrites the
    same row and audits the repeat. Returns the stored row (`SwitchState.of(row)` describes it)."""
    model = switch_model(kind, key)
    key = model.switch_key_clean(key)
    reason = (reason or "").strip()
    if paused and not reason:
        raise InvalidInput("Give a reason for setting a switch (it goes into the audit log).", code="reason_required")
    prefix, target_type = model.switch_audit
    return pause_switch_set(model, key=key, paused=paused, reason=reason[:256], actor=actor, action_prefix=prefix,
                            target_type=target_type, fields=model.switch_fields(key))


# --- reads ---------------------------------------------------------------------------------------


def switches_set(*, include_cleared: bool = False) -> list[SwitchState]:
    """Every switch that is set (with `include_cleared`, also those cleared again), ordered by kind and
    key, read from `default` now (not through the cache): the console's front page lists these."""
    states = []
    for model in switch_models():
        rows = model.objects.all() if include_cleared else model.objects.filter(paused=True)
        states += [SwitchState.of(row) for row in rows]
    return sorted(states, key=lambda s: (s.kind, s.key))


_last_loaded: dict[str, frozenset[str]] = {}


def _load() -> dict[str, frozenset[str]]:
    """{kind: keys that are set}. A `default` that cannot be read keeps the last answer this process
    had (nothing set, before any): a switch is an operator's tool, the like path must not fail on it."""
    global _last_loaded
    keys: dict[str, set[str]] = {}
    try:
        for model in switch_models():
            keys.setdefault(model.switch_kind, set()).update(
                str(pk) for pk in model.objects.filter(paused=True).values_list("pk", flat=True))
    except DatabaseError as exc:
        logger.warning("runtime switches not re-read (%s); keeping the last ones read", exc.__class__.__name__)
        return _last_loaded
    _last_loaded = {kind: frozenset(v) for kind, v in keys.items()}
    return _last_loaded


_paused = RefreshedValue("switches", _load, refresh_s=lambda: settings.SWITCH_CACHE_S)


def switch_keys_set(kind: str) -> frozenset[str]:
    """The keys of `kind` that are set, as this process last read them (at most SWITCH_CACHE_S ago)."""
    return _paused.get().get(kind, frozenset())


def switch_is_set(model: type[PauseSwitch], key: str | None = None) -> bool:
    """Whether the switch `key` of `model` (its default key when None) is set, read through the cache."""
    return (key if key is not None else model.switch_default_key) in switch_keys_set(model.switch_kind)


def switch_cache_reset() -> None:
    """Forget what this process read (the next check reads `default`)."""
    _paused.reset()
