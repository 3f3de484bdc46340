"""What other teams read of the event log, and how long what they read is kept (issue 31): subscriptions,
creator notifications, the offline feature export, and the retention rules (PRIV-3). `base` takes these."""

from __future__ import annotations

from likes_project.settings.env import env_float, env_int

# A subscription lagging more than this stops holding the log back: BEHIND_RETENTION, an alert, and a replay
# from the outbox archive by an approved operator action.
SUBSCRIPTION_MAX_LAG_S = env_float("SUBSCRIPTION_MAX_LAG_S", 24 * 3600.0)
SUBSCRIPTION_ALERT_LAG_S = env_float("SUBSCRIPTION_ALERT_LAG_S", 3600.0)  # an alert first, past this lag
SUBSCRIPTION_PULL_MAX = env_int("SUBSCRIPTION_PULL_MAX", 1000)  # the largest `limit` of one pull
# Creator notifications coalesce the likes of an (author, video) over windows this long.
NOTIFY_WINDOW_S = env_int("NOTIFY_WINDOW_S", 600)

DOWNSTREAM_BEAT = (
    ("subscriptions-lag-check", "subscriptions.lag_check",   60.0),
    # The `notify` consumer's sweeper: publishes nudge it at once; this only guarantees progress, and notifications
    # are the lowest priority of the consumers (DEG-2), so it sweeps less often than the others' every second.
    ("project-notifications",   "notifications.project_all", 5.0),
)
