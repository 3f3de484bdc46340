"""The relations app's system checks (Django's `manage.py check`, run before every command and at start-up)."""

from __future__ import annotations

from django.conf import settings
from django.core import checks

TOMBSTONE_WINDOW_ID = "likes.E031"  # issue 31 §4


def tombstone_retention_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """An UNLIKED tombstone is what makes an older version that arrives late lose (CMD-15): its retention must
    exceed the longest delay that can still deliver an older version, the stream's retention
    (OUTBOX_RETENTION_HOURS: the publisher's trim) plus the lag a subscription may run behind before it stops
    holding the log (SUBSCRIPTION_MAX_LAG_S). A shorter window is refused."""
    window_s = float(settings.TOMBSTONE_RETENTION_DAYS) * 86400
    delay_s = float(settings.OUTBOX_RETENTION_HOURS) * 3600 + float(settings.SUBSCRIPTION_MAX_LAG_S)
    if window_s > delay_s:
        return []
    return [checks.Error(
        f"TOMBSTONE_RETENTION_DAYS ({settings.TOMBSTONE_RETENTION_DAYS:g} days) must exceed the longest delay that "
        f"can still deliver an older version of a relation: OUTBOX_RETENTION_HOURS "
        f"({settings.OUTBOX_RETENTION_HOURS:g} h) + SUBSCRIPTION_MAX_LAG_S ({settings.SUBSCRIPTION_MAX_LAG_S:g} s) "
        f"= {delay_s / 86400:.2f} days.",
        hint="Raise TOMBSTONE_RETENTION_DAYS above that sum, or lower the stream's retention or the subscriptions' "
             "maximum lag.",
        id=TOMBSTONE_WINDOW_ID,
    )]
