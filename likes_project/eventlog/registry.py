"""The consumers of the event log, as their apps register them (`consumer_register` in their
AppConfig.ready): the core names none of them. Trimming, archiving and the lost-tail check count each one
on every partition, with or without a checkpoint row yet; the redrive path finds its projector here; the
publisher nudges every consumer's pass task.

Imports nothing of the event log, so that its models (the consumer switches' keys) can read it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class ConsumerSpec:
    name: str
    task: str  # the Celery task that runs one pass over one partition (`consumer.consume_pass`)
    projector: Callable[[], object]  # makes the consumer's `consumer.Projector`


_CONSUMERS: dict[str, ConsumerSpec] = {}
# name -> spec, in name order whatever the order the apps registered in; read-only (register instead).
CONSUMERS: Mapping[str, ConsumerSpec] = MappingProxyType(_CONSUMERS)


def consumer_register(name: str, *, task: str, projector: Callable[[], object]) -> ConsumerSpec:
    """Make `name` a consumer of the event log, its passes run by the Celery task `task`, its projector
    made by `projector()` (whose `name` must be `name`: a pass finds its task by its projector's name)."""
    if getattr(projector, "name", name) != name:
        raise ImproperlyConfigured(f"consumer {name!r}: its projector is named {projector.name!r}")
    _CONSUMERS[name] = ConsumerSpec(name, task, projector)
    ordered = sorted(_CONSUMERS.items())
    _CONSUMERS.clear()
    _CONSUMERS.update(ordered)
    return _CONSUMERS[name]
