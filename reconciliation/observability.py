"""Reconciliation's gauges (registered with `likes_project.observability`): the schedule's meta-alert."""

from __future__ import annotations

from likes_project.observability import Scrape, register_part
from reconciliation import schedule


def _schedule(scrape: Scrape) -> None:
    ages = schedule.overdue()
    overdue = scrape.family("likes_reconcile_schedule_overdue",
                            "1 when a check schedule's last run finished more than three periods ago (or never).")
    age = scrape.family("likes_reconcile_schedule_age_seconds",
                        "Seconds since a check schedule's last run finished (absent: never).")
    for name, (seconds, late) in ages.items():
        overdue.add(1 if late else 0, schedule=name)
        if seconds is not None:
            age.add(seconds, schedule=name)


def register() -> None:
    register_part("reconcile:schedule", _schedule)
