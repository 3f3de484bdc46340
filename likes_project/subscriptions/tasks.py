"""Beat jobs of subscriptions: the lag check (every minute; settings/downstream.py)."""

from __future__ import annotations

from celery import shared_task

from likes_project.subscriptions.services import subscriptions_lag_check


@shared_task(name="subscriptions.lag_check", acks_late=True, ignore_result=True)
def lag_check_task() -> dict:
    report = subscriptions_lag_check()
    return {"alerts": report.alerts, "behind": report.behind}
