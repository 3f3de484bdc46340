"""Reconciliation's gauges (registered with `likes_project.observability`): the schedule's meta-alert, and
the recovery snapshots' (issue 12 §5): the age of the newest SEALED snapshot, and the verdict and age of
the last test-restore, so an unusable snapshot is found before it is needed; and the workflow the console's
front page charts (issue 14 §0): open diffs by layer, repairs awaiting approval, the last verdict of each mode."""

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


def _workflow(scrape: Scrape) -> None:
    from django.db.models import Count

    from reconciliation.models import (
        FINISHED_RUN_STATUSES,
        CheckDiff,
        CheckRun,
        DiffLayer,
        DiffStatus,
        RepairRequest,
        RepairStatus,
        RunMode,
        RunStatus,
    )

    open_by_layer = dict(CheckDiff.objects.filter(status__in=(DiffStatus.NEW, DiffStatus.FIXING)).order_by()
                         .values_list("layer").annotate(n=Count("id")))
    diffs = scrape.family("likes_reconcile_open_diffs", "Reconciliation diffs NEW or FIXING, by layer.")
    for layer in DiffLayer.values:
        diffs.add(open_by_layer.get(layer, 0), layer=layer)
    scrape.family("likes_repairs_awaiting_approval", "Repair requests waiting for a second person's approval."
                 ).add(RepairRequest.objects.filter(status=RepairStatus.AWAITING_APPROVAL).count())
    passed = scrape.family("likes_reconcile_last_run_passed",
                          "1 when the last finished run of a mode PASSED, 0 when it FAILED or was REFUSED "
                          "(absent: none yet).")
    for mode in RunMode.values:
        last = (CheckRun.objects.filter(mode=mode, status__in=FINISHED_RUN_STATUSES).order_by("-finished_at", "-id")
                .values_list("status", flat=True).first())
        if last is not None:
            passed.add(1 if last == RunStatus.PASSED else 0, mode=mode)


def register() -> None:
    register_part("reconcile:schedule", _schedule)
    register_part("reconcile:snapshots", _snapshots)
    register_part("reconcile:workflow", _workflow)
