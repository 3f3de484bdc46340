"""The offline feature export (issue 31 §3): a built-in subscription, `feature-export`, that writes the log's relation
events into one file per closed period (FEATURE_EXPORT_FILE_S, an hour) through the storage `feature_exports`.

A run, under one lease (two never overlap):
1. Erasure first: the subscription's `account.deleted` notices. Every stored file holding a deleted user's
   pseudonym is rewritten without that user's rows, under a new name, with a new manifest; each rewrite is audited
   (`features.export_rewrite`); then the notices are acknowledged (`erasure.py`).
2. Every period [start, start + FILE_S) aligned to the epoch whose end + FEATURE_EXPORT_GRACE_S has passed, after the
   subscription's acknowledged position: every partition's entries whose id (a Redis millisecond time) is below
   the period's end, merged in id order, shaped by the subscription's field policy (`shaped`), those of DELETED
   accounts left out, streamed into one gzip JSON Lines file; then its manifest; then the acknowledgement. A crash
   before the acknowledgement writes the same period again under the same names (a rewrite overwrites).

A period in which the log holds no entry at all writes no file: the manifests chain by offsets instead of by time
(each partition's `after` is the previous period's last entry there), so `feature_export_verify` proves that no
entry was skipped without an hourly file for every quiet hour. A period whose entries are all left out (another
event type, deleted accounts) writes a file of 0 rows, which carries the offsets forward.

Transactions: none of its own around storage writes (files are not transactional); the acknowledgement and each
audit record are one transaction on `default` each. Idempotency: a period is acknowledged only after both of its
files are stored, and its names are fixed, so a re-run replaces what a crash left half done."""

from __future__ import annotations

import heapq
import logging
import time
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.utils import timezone

from counting.features import erasure, files, policy, selectors
from likes_project import leases, metrics
from likes_project.audit.services import Actor, system_actor
from likes_project.cursors import iso_utc
from likes_project.errors import Conflict
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import holder_id
from likes_project.subscriptions import services as subscriptions
from likes_project.subscriptions.models import Subscription, SubscriptionStatus
from likes_project.subscriptions.selectors import shaped

logger = logging.getLogger(__name__)

LEASE = "features:export"
LEASE_TTL_S = 300.0
PAGE = 1000  # stream entries a round trip


class ExportRunning(Conflict):
    code = "feature_export_running"
    default_message = "Another feature export run holds the lease; try again when it ends."


@dataclass
class ExportReport:
    files: list[dict] = field(default_factory=list)  # each period written: file, rows, periodStart, periodEnd
    rewrites: list[dict] = field(default_factory=list)  # each erasure rewrite: file, replaces, rowsRemoved
    notices: int = 0  # account.deleted notices handled and acknowledged
    problems: list[str] = field(default_factory=list)  # files the erasure could not read (its notices wait)
    skipped: str = ""  # the subscription's status when it is not ACTIVE (nothing ran)
    more: bool = False  # stopped at its time budget with closed periods left for the next run

    def as_dict(self) -> dict:
        return asdict(self)


class Fence:
    """The run's lease, renewed as it goes: a run that lost it (stalled past its TTL) stops before writing more."""

    def __init__(self, grant: leases.LeaseGrant) -> None:
        self.grant, self._at = grant, time.monotonic()

    def check(self, *, now: bool = False) -> None:
        if now or time.monotonic() - self._at > LEASE_TTL_S / 10:
            leases.lease_renew(self.grant, ttl_s=LEASE_TTL_S)  # raises LeaseLost
            self._at = time.monotonic()


def feature_export_ensure() -> Subscription:
    """The built-in subscription, created (from the earliest entry the log holds, by the system actor) when missing.
    Its alert threshold allows for the export's own rhythm: a period is read only once it has closed and its grace
    has passed. Transaction: `subscription_create`'s. Idempotency: a second call (or a concurrent one) finds it."""
    try:
        return subscriptions.subscription_get(policy.SUBSCRIPTION)
    except subscriptions.SubscriptionNotFound:
        pass
    natural_lag = settings.FEATURE_EXPORT_FILE_S + settings.FEATURE_EXPORT_GRACE_S + settings.FEATURE_EXPORT_EVERY_S
    try:
        return subscriptions.subscription_create(
            name=policy.SUBSCRIPTION, owner=policy.OWNER, fields=list(policy.FIELDS), start_from="earliest",
            purpose="The offline feature export: hourly gzip JSON Lines files (issue 31 §3, docs/exports.md).",
            actor=system_actor(policy.ACTOR), alert_lag_s=natural_lag + settings.SUBSCRIPTION_ALERT_LAG_S).subscription
    except Conflict:  # created meanwhile by another run
        return subscriptions.subscription_get(policy.SUBSCRIPTION)


def feature_export_run(*, now: float | None = None, actor: Actor | None = None,
                       max_seconds: float | None = None) -> ExportReport:
    """One export pass: the pending erasures, then every closed period (see the module's docstring). `now` (epoch
    seconds) decides which periods are closed; `max_seconds` bounds the run (checked between periods). Raises
    ExportRunning when another run holds the lease. Transaction: see the module; Idempotency: a re-run after a crash
    writes the same periods under the same names."""
    grant = leases.lease_acquire(resource=LEASE, holder=holder_id(), ttl_s=LEASE_TTL_S)
    if grant is None:
        raise ExportRunning()
    fence, report = Fence(grant), ExportReport()
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    try:
        sub = feature_export_ensure()
        if sub.status != SubscriptionStatus.ACTIVE:
            report.skipped = sub.status
            logger.warning("%sfeature export: its subscription is %s (%s); nothing exported",
                           "ALERT " if sub.status == SubscriptionStatus.BEHIND_RETENTION else "", sub.status,
                           sub.status_reason or "no reason given")
            return report
        erasure.notices_apply(sub, actor=actor or system_actor(policy.ACTOR), report=report, fence=fence)
        _periods_export(sub, now=time.time() if now is None else now, report=report, fence=fence, deadline=deadline)
    finally:
        leases.lease_release(grant)
    return report


def _periods_export(sub: Subscription, *, now: float, report: ExportReport, fence: Fence,
                    deadline: float | None) -> None:
    file_ms = int(settings.FEATURE_EXPORT_FILE_S) * 1000
    positions = subscriptions.acked_positions(sub)
    floor = _floor_ms(positions)
    while True:
        heads = [e for p, after in positions.items() for e in streams.read_after(p, after, 1)]
        if not heads:
            return
        start = max(min(e.sort_key[0] for e in heads) // file_ms * file_ms, floor)
        if (start + file_ms) / 1000 + settings.FEATURE_EXPORT_GRACE_S > now:
            return  # the oldest unexported period is still open (or inside its grace)
        if deadline is not None and time.monotonic() > deadline:
            report.more = True
            return
        manifest = period_export(sub, start_ms=start, end_ms=start + file_ms, after=positions, fence=fence)
        fence.check(now=True)  # still ours: acknowledge (a run that lost the lease leaves it to the new holder)
        subscriptions.subscription_ack(sub=sub, positions={int(p): o["last"] for p, o in manifest["offsets"].items()
                                                           if o["last"]})
        positions = {int(p): o["last"] or o["after"] for p, o in manifest["offsets"].items()}
        floor = start + file_ms
        metrics.inc("likes_feature_export_files_total")
        metrics.inc("likes_feature_export_rows_total", manifest["rows"])
        report.files.append({k: manifest[k] for k in ("file", "rows", "periodStart", "periodEnd")})
        logger.info("feature export: %s, %d rows", manifest["file"], manifest["rows"])


def _floor_ms(positions: dict[int, str]) -> int:
    """Where the next period may start: the end of the newest period written, so an entry whose id falls in a period
    already written (Redis's clock behind this one's by more than the grace) goes in the next file instead of
    replacing that one. The newest manifest that starts where the acknowledged position is was written and never
    acknowledged (a crash): that period is written again."""
    newest = selectors.manifest_edge(newest=True)
    if newest is None:
        return 0
    afters = {int(p): o.get("after") for p, o in newest.get("offsets", {}).items()}
    if afters == positions:
        return int(newest["start"].timestamp() * 1000)
    return int(newest["end"].timestamp() * 1000)


def period_export(sub: Subscription, *, start_ms: int, end_ms: int, after: dict[int, str], fence: Fence) -> dict:
    """Write one period's file and then its manifest (replacing what an interrupted run left); returns the manifest.
    Reads every partition's entries after `after` whose id is below `end_ms`."""
    period_stem = files.stem(policy=policy.VERSION, start_ms=start_ms, file_s=int(settings.FEATURE_EXPORT_FILE_S))
    name = files.data_name(period_stem, 0)
    offsets = {p: {"after": a, "first": None, "last": None} for p, a in sorted(after.items())}
    merged = heapq.merge(*(_rows(sub, p, a, end_ms, fence) for p, a in sorted(after.items())),
                         key=lambda pair: (pair[0].sort_key, pair[0].partition))
    with files.LinesFile() as out:
        for entry, row in merged:
            at = offsets[entry.partition]
            at["first"] = at["first"] or entry.entry_id
            at["last"] = entry.entry_id
            if row is not None:
                out.write(row)
        sha, size = out.store(name)
    manifest = {"file": name, "rows": out.rows, "sha256": sha, "bytes": size, "periodStart": policy.iso_ms(start_ms),
                "periodEnd": policy.iso_ms(end_ms), "offsets": {str(p): o for p, o in offsets.items()},
                "fieldPolicy": policy.field_policy(), "keyId": policy.key_id(sub.pseudonym_key),
                "writtenAt": iso_utc(timezone.now()), "rewrites": 0}
    fence.check(now=True)
    files.put_json(files.manifest_name(period_stem), manifest)
    files.others_drop(period_stem, keep=name)  # what an earlier write of this period (and its rewrites) left
    return manifest


def _rows(sub: Subscription, partition: int, after: str, end_ms: int, fence: Fence):
    """(entry, row) for each of the partition's entries after `after` below `end_ms`, in id order; `row` is None
    for an entry the export leaves out (not a relation event, or a deleted account's)."""
    while True:
        page = streams.read_after(partition, after, PAGE)
        inside = [e for e in page if e.sort_key[0] < end_ms]
        pairs = [(e, shaped(sub, e.event)) for e in inside]
        gone = selectors.deleted_among({e.event.get("userId") for e, row in pairs if row is not None})
        for entry, row in pairs:
            yield entry, (None if row is None or entry.event.get("userId") in gone else row)
        if len(inside) < PAGE:
            return
        after = inside[-1].entry_id
        fence.check()
