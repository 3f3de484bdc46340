"""The retention rule `feature-exports` (issue 31 §4, PRIV-3): a period's files (data and manifest) go once the
period ended more than FEATURE_EXPORT_RETENTION_DAYS ago. Registered in the registry of `likes_project.retention`,
whose runner, beat job, metric and console line apply it."""

from __future__ import annotations

import datetime as dt
import logging

from counting.features import files, policy, selectors
from likes_project.retention import RetentionRule

logger = logging.getLogger(__name__)


def exports_sweep(cutoff: dt.datetime, limit: int) -> int:
    """Delete up to `limit` periods (each its data file, its manifest and any leftover of it) that ended at or
    before `cutoff`, oldest first; returns how many. No transaction (storage files). Idempotency: a period already
    deleted is not listed again; a manifest that cannot be read is left for `feature_export_verify` to report."""
    deleted = 0
    for name in files.manifests():
        if deleted >= limit:
            break
        try:
            end = policy.when(files.manifest_read(name)["periodEnd"])
        except (files.FileUnreadable, KeyError, ValueError) as exc:
            logger.warning("feature export retention: %s unreadable (%s); left in place", name, exc)
            continue
        if end > cutoff:
            break  # the manifests are walked in time order: nothing later is due
        files.period_delete(files.stem_of(name))
        deleted += 1
    return deleted


RULE = RetentionRule(name="feature-exports", setting="FEATURE_EXPORT_RETENTION_DAYS", unit="days",
                     what="offline feature export files and their manifests (per period)",
                     sweep=exports_sweep, oldest=selectors.feature_export_oldest)
