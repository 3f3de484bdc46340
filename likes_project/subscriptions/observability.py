"""The subscriptions' gauges (registered with `likes_project.observability`): each live subscription's lag and
status, so an alert fires on one BEHIND_RETENTION or falling behind (issue 31 §1)."""

from __future__ import annotations

from likes_project.observability import Scrape, register_part


def _subscriptions(scrape: Scrape) -> None:
    from likes_project.subscriptions.models import Subscription, SubscriptionStatus
    from likes_project.subscriptions.services import acked_positions, lag_seconds

    lag = scrape.family("likes_subscription_lag_seconds",
                        "Age of the oldest event a subscription has not acknowledged (0: caught up).")
    behind = scrape.family("likes_subscription_behind_retention",
                           "1 when a subscription fell behind its retention (it no longer holds the log; replay it).")
    for sub in Subscription.objects.exclude(status=SubscriptionStatus.RETIRED):
        behind.add(1 if sub.status == SubscriptionStatus.BEHIND_RETENTION else 0, subscription=sub.name)
        if sub.status != SubscriptionStatus.BEHIND_RETENTION:
            lag.add(lag_seconds(acked_positions(sub)), subscription=sub.name)


def register() -> None:
    register_part("subscriptions", _subscriptions)
