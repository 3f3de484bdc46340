"""The counting app's store gauges (registered with `likes_project.observability`, computed by its
refresh job): how old the oldest change not yet in a display snapshot is."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Min

from counting import routing
from counting.models import DirtyVideo
from likes_project.observability import Scrape, register_part


def _snapshot_staleness(scrape: Scrape) -> None:
    # One gauge over every count partition: a partition that cannot be read would make it lie low,
    # so any failure drops the whole gauge.
    generation = routing.active().generation
    oldest = None
    for alias in settings.COUNT_PARTITION_ALIASES:
        at = (DirtyVideo.objects.using(alias).filter(generation=generation)
              .aggregate(oldest=Min("first_dirty_at"))["oldest"])
        if at is not None and (oldest is None or at < oldest):
            oldest = at
    scrape.family("likes_display_snapshot_oldest_dirty_age_seconds",
                  "Age of the oldest change not yet in a display snapshot (0 when none)."
                  ).add_since(oldest)


def register() -> None:
    from counting.services.migration.ledger import LEDGER
    from likes_project.ledgers import observability as ledger_gauges

    register_part("snapshot_staleness", _snapshot_staleness)
    ledger_gauges.register(LEDGER)


def count_partition_roles() -> dict[str, str]:
    """/readyz detail (with the token): per configured count partition, "N buckets" routed there by the
    active manifest, or "empty, no routes" (configured, not yet given buckets by a migration: not an
    error, issue 13 §1). Empty before the first generation exists."""
    try:
        gen = routing.active()
    except routing.NoActiveGeneration:
        return {}
    return {alias: (f"{len(gen.buckets_on(alias))} buckets" if gen.buckets_on(alias) else "empty, no routes")
            for alias in settings.COUNT_PARTITION_ALIASES}
