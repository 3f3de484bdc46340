"""The relations app's store gauges (registered with `likes_project.observability`, computed by its
refresh job): the outbox of every relation shard, by status and oldest pending age."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.db.models import Count

from likes_project.observability import Scrape, register_part
from relations.models import OutboxEvent, OutboxStatus
from relations.selectors import outbox_oldest_created_at

PENDING_OUTBOX_STATUSES = (OutboxStatus.NEW, OutboxStatus.RETRY, OutboxStatus.UNCERTAIN)


def _outbox(alias: str) -> Callable[[Scrape], None]:
    def part(scrape: Scrape) -> None:
        rows = dict(OutboxEvent.objects.using(alias).order_by().values_list("status").annotate(n=Count("id")))
        oldest = outbox_oldest_created_at(alias=alias, statuses=PENDING_OUTBOX_STATUSES)
        family = scrape.family("likes_outbox_rows", "Outbox rows by status per relation shard.")
        for status in OutboxStatus.values:
            family.add(rows.get(status, 0), shard=alias, status=status)
        scrape.family("likes_outbox_oldest_pending_age_seconds",
                      "Age of the oldest NEW/RETRY/UNCERTAIN outbox row per relation shard (0 when none)."
                      ).add_since(oldest, shard=alias)

    return part


def register() -> None:
    from likes_project.ledgers import observability as ledger_gauges
    from relations.services.slot_moves.ledger import LEDGER

    for alias in settings.RELATION_SHARD_ALIASES:
        register_part(f"outbox:{alias}", _outbox(alias))
    ledger_gauges.register(LEDGER)
