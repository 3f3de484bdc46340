"""Reconciliation's gauges (registered with `likes_project.observability`): the schedule's meta-alert, and
the recovery snapshots' (issue 12 §5): the age of the newest SEALED snapshot, and the verdict and age of
the last test-restore, so an unusable snapshot is found before it is needed."""

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


def _snapshots(scrape: Scrape) -> None:
    from reconciliation.models import RecoverySnapshot, SnapshotStatus

    sealed = scrape.family("likes_snapshot_last_sealed_age_seconds",
                           "Seconds since the newest SEALED recovery snapshot was sealed (absent: none yet).")
    newest = (RecoverySnapshot.objects.filter(status=SnapshotStatus.SEALED).order_by("-sealed_at")
              .values_list("sealed_at", flat=True).first())
    if newest is not None:
        sealed.add_since(newest)
    tested = (RecoverySnapshot.objects.filter(tested_at__isnull=False).order_by("-tested_at")
              .values_list("tested_at", "test_result").first())
    ok = scrape.family("likes_snapshot_test_restore_ok",
                       "1 when the last test-restore of a recovery snapshot succeeded, 0 when it failed "
                       "(absent: never).")
    age = scrape.family("likes_snapshot_test_restore_age_seconds",
                        "Seconds since the last test-restore of a recovery snapshot (absent: never).")
    if tested is not None:
        ok.add(1 if (tested[1] or {}).get("ok") else 0)
        age.add_since(tested[0])


def register() -> None:
    register_part("reconcile:schedule", _schedule)
    register_part("reconcile:snapshots", _snapshots)
