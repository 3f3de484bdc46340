"""The consumers of the event log, as their apps register them (`consumer_register` in their
AppConfig.ready): the core names none of them. Trimming, archiving and the lost-tail check count each one
on every partition, with or without a checkpoint row yet; the redrive path finds its projector here; the
publisher nudges every consumer's pass task.

Imports nothing of the event log, so that its models (the consumer switches' keys) can read it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from django.conf import settings
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


def pass_groups_problems() -> list[str]:
    """What is wrong with CONSUMER_PASS_GROUPS (the `eventlog` system check says it at startup)."""
    problems, seen = [], set()
    for group in settings.CONSUMER_PASS_GROUPS:
        for name in group:
            if name not in _CONSUMERS:
                problems.append(f"{name!r} is not a consumer (the consumers: {', '.join(_CONSUMERS)})")
            if name in seen:
                problems.append(f"{name!r} is in two groups")
            seen.add(name)
    return problems


def _group_of(consumer: str) -> tuple[str, ...]:
    """The registered consumers of `consumer`'s pass group, leader first; (consumer,) when it is in none."""
    for group in settings.CONSUMER_PASS_GROUPS:
        if consumer in group:
            members = tuple(name for name in group if name in _CONSUMERS)
            return members if consumer in members else (consumer,)
    return (consumer,)


def pass_task(consumer: str) -> str:
    """The Celery task whose run makes `consumer`'s next pass over a partition: its group leader's pass task,
    which runs the whole group with one stream read (D143), or its own. What the publisher, the sweepers and a
    full pass nudge."""
    return _CONSUMERS[_group_of(consumer)[0]].task


def pass_tasks() -> list[str]:
    """Every task that makes passes over a partition, one per pass group and one per consumer in none: what a
    publish of new entries nudges for each partition it wrote."""
    return sorted({pass_task(name) for name in _CONSUMERS})


def pass_members(consumer: str) -> tuple[str, ...]:
    """The consumers one run of `consumer`'s pass task makes a pass of, in order: its group when it leads one,
    else itself alone (a member's own task, sent by hand or by an older sweep, runs that member only)."""
    members = _group_of(consumer)
    return members if members[0] == consumer else (consumer,)


@dataclass(frozen=True)
class ArchivedEntry:
    """An event that left the log, as the log carried it: its partition, its entry id there, the event."""

    partition: int
    entry_id: str
    event: dict


# Reads what the log no longer holds (the relations app registers its outbox and outbox archive):
# `source(after, upto, state, limit) -> (entries, state, done)` gives, a bounded chunk at a time, every
# archived entry whose id lies in (after[p], upto[p]] of its partition p; `state` is its resumable cursor
# (start from {}), `done` says nothing is left. It may give an entry twice (a row moving to the archive
# between two reads): callers deduplicate by eventId.
_ARCHIVE_SOURCES: list[Callable] = []


def archive_source_register(source: Callable) -> None:
    if source not in _ARCHIVE_SOURCES:
        _ARCHIVE_SOURCES.append(source)


def archive_source() -> Callable:
    if len(_ARCHIVE_SOURCES) != 1:
        raise ImproperlyConfigured(f"expected one archive source, found {len(_ARCHIVE_SOURCES)}")
    return _ARCHIVE_SOURCES[0]
