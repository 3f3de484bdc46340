"""The approved ledgers' gauges (each ledger's app registers its ledger with `likes_project.observability`):
how many are not finished, by state, and how long the oldest has been in its state, so a move that waits for a
second person or stopped between its job's restarts shows on a dashboard (and on the console's front page)."""

from __future__ import annotations

from collections.abc import Callable

from django.db.models import Count, Min

from likes_project.ledgers.model import TERMINAL
from likes_project.ledgers.service import ApprovedLedger
from likes_project.observability import Scrape, register_part


def ledger_part(ledger: ApprovedLedger) -> Callable[[Scrape], None]:
    def part(scrape: Scrape) -> None:
        rows = (ledger.model.objects.exclude(state__in=TERMINAL).order_by().values_list("state")
                .annotate(n=Count("id"), since=Min("state_changed_at")))
        unfinished = scrape.family("likes_ledgers_unfinished",
                                   "Bucket migrations and relation slot moves not finished, by ledger and state.")
        age = scrape.family("likes_ledger_state_age_seconds",
                            "Seconds the oldest unfinished ledger of a kind has been in its state.")
        for state, n, since in sorted(rows):
            unfinished.add(n, ledger=ledger.target_type, state=state)
            age.add_since(since, ledger=ledger.target_type, state=state)
    return part


def register(ledger: ApprovedLedger) -> None:
    register_part(f"ledger:{ledger.target_type}", ledger_part(ledger))
