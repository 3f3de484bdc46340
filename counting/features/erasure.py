"""Erasure of deleted accounts from the export's files (issue 31 §4, PRIV-4). An account's deletion writes an
`account.deleted` notice for the built-in subscription (it names users by pseudonym); the next export run rewrites
every stored file that holds that user's pseudonym without the user's rows.

A rewrite goes under a new name (`HH.r<n>.jsonl.gz`), then its audit record, then the manifest that names it, then
the old file is deleted. A crash anywhere leaves a manifest that verifies (the old one, whose file is still there,
or the new one) and the notice unacknowledged, so the next run finds the rows again and finishes; the audit record
is written before the switch, so a rewrite is never unaudited (after a crash it may be audited twice). Every stored
file is scanned, those past their retention included (the sweep may not have run yet)."""

from __future__ import annotations

import logging
from collections import Counter

from django.db import transaction
from django.utils import timezone

from counting.features import files
from likes_project import metrics
from likes_project.audit.services import Actor, audit_record
from likes_project.cursors import iso_utc
from likes_project.subscriptions.models import Subscription, SubscriptionNotice
from likes_project.subscriptions.services import ACCOUNT_DELETED, pseudonym, subscription_ack

logger = logging.getLogger(__name__)

NOTICE_BATCH = 500  # notices erased by one scan of the files
AUDIT_ACTION = "features.export_rewrite"


def notices_apply(sub: Subscription, *, actor: Actor, report, fence) -> None:
    """Erase the users of the subscription's pending notices from every stored file, then acknowledge the notices
    (batch by batch). A file that cannot be read leaves its batch unacknowledged (an ALERT): the next run tries
    again, and the export of new periods goes on meanwhile."""
    last = sub.notices_acked
    while True:
        # The notices are the subscription app's rows; its selector serves them only mixed with log events.
        notices = list(SubscriptionNotice.objects.filter(subscription=sub, id__gt=last).order_by("id")[:NOTICE_BATCH])
        if not notices:
            return
        erased = {}
        for notice in notices:
            if notice.type == ACCOUNT_DELETED:
                erased.setdefault(pseudonym(sub, notice.user_id), []).append(str(notice.event_id))
        problems = files_erase(erased, actor=actor, report=report, fence=fence) if erased else []
        if problems:
            report.problems += problems
            logger.warning("ALERT feature export: %d account deletions wait: %d files cannot be read (%s)",
                           len(erased), len(problems), "; ".join(problems[:3]))
            return
        last = notices[-1].id
        subscription_ack(sub=sub, positions={}, notices=last)
        report.notices += len(notices)


def files_erase(erased: dict[str, list[str]], *, actor: Actor, report, fence) -> list[str]:
    """Rewrite every stored file holding a row of the pseudonyms in `erased` ({pseudonym: notice event ids});
    returns the problems (files that could not be read)."""
    problems = []
    for name in files.manifests():
        fence.check()
        try:
            manifest = files.manifest_read(name)
            found = Counter()
            with files.rows_read(manifest["file"]) as (rows, _hashing):
                for row in rows:
                    if row.get("userPseudonym") in erased:
                        found[row["userPseudonym"]] += 1
            if found:
                report.rewrites.append(_rewrite(name, manifest, erased, found, actor=actor))
        except (files.FileUnreadable, KeyError, TypeError) as exc:
            problems.append(f"{name}: {exc}")
    return problems


def _rewrite(name: str, manifest: dict, erased: dict[str, list[str]], found: Counter, *, actor: Actor) -> dict:
    period_stem = files.stem_of(name)
    rewrites = int(manifest.get("rewrites") or 0) + 1
    new = files.data_name(period_stem, rewrites)
    with files.rows_read(manifest["file"]) as (rows, hashing), files.LinesFile() as out:
        for row in rows:
            if row.get("userPseudonym") not in erased:
                out.write(row)
        verified = hashing.sha.hexdigest() == manifest.get("sha256")
        sha, size = out.store(new)
    removed = sum(found.values())
    if not verified:  # erased all the same: the erasure cannot wait for the file to be repaired
        logger.error("feature export: %s did not match its manifest's SHA-256 before its rewrite", manifest["file"])
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action=AUDIT_ACTION, target_type="feature_export", target_id=new,
                     params={"file": new, "replaces": manifest["file"], "rowsRemoved": removed, "rows": out.rows,
                             "rewrites": rewrites, "sourceVerified": verified,
                             "notices": sorted({e for p in found for e in erased[p]})})
    files.put_json(name, {**manifest, "file": new, "rows": out.rows, "sha256": sha, "bytes": size,
                          "rewrites": rewrites, "rewrittenAt": iso_utc(timezone.now())})
    files.others_drop(period_stem, keep=new)
    metrics.inc("likes_feature_export_rewrites_total")
    logger.info("feature export: %s rewritten as %s without %d rows", manifest["file"], new, removed)
    return {"file": new, "replaces": manifest["file"], "rowsRemoved": removed}
