"""What other teams read of the event log, and how long what they read is kept (issue 31): subscriptions,
creator notifications, the offline feature export, and the retention rules (PRIV-3). `base` takes these."""

from __future__ import annotations

import os
from pathlib import Path

from likes_project.settings.env import env_float, env_int, file_storage

# A subscription lagging more than this stops holding the log back: BEHIND_RETENTION, an alert, and a replay
# from the outbox archive by an approved operator action.
SUBSCRIPTION_MAX_LAG_S = env_float("SUBSCRIPTION_MAX_LAG_S", 24 * 3600.0)
SUBSCRIPTION_ALERT_LAG_S = env_float("SUBSCRIPTION_ALERT_LAG_S", 3600.0)  # an alert first, past this lag
SUBSCRIPTION_PULL_MAX = env_int("SUBSCRIPTION_PULL_MAX", 1000)  # the largest `limit` of one pull
# Creator notifications coalesce the likes of an (author, video) over windows this long.
NOTIFY_WINDOW_S = env_int("NOTIFY_WINDOW_S", 600)

# The offline feature export (issue 31 §3): one gzip JSON Lines file per FEATURE_EXPORT_FILE_S of the log (an
# hour), written once that period has closed, through the storage `feature_exports` (.data/exports, or S3).
FEATURE_EXPORT_FILE_S = env_int("FEATURE_EXPORT_FILE_S", 3600)
FEATURE_EXPORT_GRACE_S = env_float("FEATURE_EXPORT_GRACE_S", 60.0)  # a period is written this long after it ends
FEATURE_EXPORT_EVERY_S = env_float("FEATURE_EXPORT_EVERY_S", 60.0)  # how often the beat looks for closed periods
FEATURE_EXPORT_STORAGE_BACKEND = os.environ.get("FEATURE_EXPORT_STORAGE_BACKEND", "filesystem")  # or "s3"
_DATA = Path(__file__).resolve().parents[2] / ".data"
FEATURE_EXPORT_DIR = os.environ.get("FEATURE_EXPORT_DIR", str(_DATA / "exports"))
FEATURE_EXPORT_STORAGE = file_storage(FEATURE_EXPORT_STORAGE_BACKEND, env_prefix="FEATURE_EXPORT",
                                      s3_location="feature-exports", directory=FEATURE_EXPORT_DIR, overwrite=True)

# Retention (PRIV-3), each rule a window with a beat job, a metric and a console line (likes_project.retention).
RETENTION_EVERY_S = env_float("RETENTION_EVERY_S", 3600.0)
RETENTION_BATCH = env_int("RETENTION_BATCH", 1000)  # rows per transaction
RETENTION_MAX_BATCHES = env_int("RETENTION_MAX_BATCHES", 50)  # per rule per beat run
COMMAND_RETENTION_DAYS = env_float("COMMAND_RETENTION_DAYS", 180.0)  # command rows that changed a relation
OUTBOX_ARCHIVE_RETENTION_DAYS = env_float("OUTBOX_ARCHIVE_RETENTION_DAYS", 180.0)
FEATURE_EXPORT_RETENTION_DAYS = env_float("FEATURE_EXPORT_RETENTION_DAYS", 30.0)
NOTIFICATION_RETENTION_DAYS = env_float("NOTIFICATION_RETENTION_DAYS", 30.0)
# UNLIKED tombstones: longer than the longest delay that can still deliver an older version (the stream's
# retention plus SUBSCRIPTION_MAX_LAG_S); the settings check refuses a shorter window.
TOMBSTONE_RETENTION_DAYS = env_float("TOMBSTONE_RETENTION_DAYS", 90.0)

# An account's erasure waits for the pipeline to apply its withdrawal: it gives up after ACCOUNT_ERASE_STALL_S of no
# progress or ACCOUNT_ERASE_WAIT_MAX_S in all (the job ends, its erasure "waiting"), and the beat runs such a
# deletion again every ACCOUNT_ERASE_RESUME_EVERY_S until it erases.
ACCOUNT_ERASE_STALL_S = env_float("ACCOUNT_ERASE_STALL_S", 3.0)
ACCOUNT_ERASE_WAIT_MAX_S = env_float("ACCOUNT_ERASE_WAIT_MAX_S", 600.0)
ACCOUNT_ERASE_RESUME_EVERY_S = env_float("ACCOUNT_ERASE_RESUME_EVERY_S", 600.0)

DOWNSTREAM_BEAT = (
    ("subscriptions-lag-check", "subscriptions.lag_check",   60.0),
    # The `notify` consumer's sweeper: publishes nudge it at once; this only guarantees progress, and notifications
    # are the lowest priority of the consumers (DEG-2), so it sweeps less often than the others' every second.
    ("project-notifications",   "notifications.project_all", 5.0),
    ("project-risk-scores",     "riskscore.project_all",     5.0),  # the risk scorer's sweeper (issue 32 §1)
    ("feature-export",          "features.export",           FEATURE_EXPORT_EVERY_S),
    ("retention-sweep",         "retention.sweep",           RETENTION_EVERY_S),
    ("account-erasure-resume",  "relations.account_erasures_resume", ACCOUNT_ERASE_RESUME_EVERY_S),
)
