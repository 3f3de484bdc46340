"""Build, seal, verify and expire recovery snapshots (SNAP-4 … SNAP-11, INV-16; issue 12 §1–§3, §5).

Build (one at a time, under the lease `recovery:snapshot`):

  pin: the ACTIVE generation, its bucket space and its SEALED manifest, the stream contract; route
       switching paused (`counting.services.route_switch`) until the seal
  drain: until no partition has a receipt beyond its durable checkpoint (a group that committed while
       another of its batch failed), driving the consumer's own passes, bounded
  stop dispatch: the count consumer's lease of every stream partition taken (a pass in flight ends its
       bounded batch first); from here no offset is dispatched -> the dispatch pause starts
  cut: B[p] = the durable checkpoint of every partition ("0-0" for one never consumed: it still
       appears, T17); one REPEATABLE READ snapshot opened per count partition; inside it, no receipt
       of the generation at or beyond B[p] (a dispatcher that skipped ahead fails the cut, which is
       never enlarged: T11, T12); the leases still ours (else abort: T12)
  resume: the leases released -> the dispatch pause ends (its length is recorded)
  dump: both tables of every partition from its open snapshot, the buckets the pinned manifest routes
       there (its items, not the mutable route table: ROUTE-4), streamed into artifacts
  seal: every artifact read back (rows, SHA-256), each partition's LIKED projection rows equal to what
       its vbuckets count (T18), the manifest still SEALED, complete and the generation's, the vector
       covering every partition of the same contract and below no earlier sealed cut (T17) -> SEALED
       (INV-16); anything else -> FAILED with the reason.
What may not be sealed, or no longer be used, is decided in `problems` (SNAP-9 … SNAP-11): verification adds
what may change after the seal (a stream lost and written again, an offset gone backwards, the manifest moved).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from counting import routing
from counting.models import (
    CountEventReceipt,
    CountProjectionGeneration,
    ProjectionGenerationStatus,
)
from counting.services import route_switch
from counting.services.projection import COUNT_CONSUMER
from likes_project import leases, metrics
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, NotFound
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from likes_project.eventlog.models import DeadLetter, DeadLetterStatus
from reconciliation.models import RecoverySnapshot, SnapshotStatus
from reconciliation.services.cut import CutRefused, consume_to, count_leases_take, wait_driving
from reconciliation.services.recovery import artifacts
from reconciliation.services.recovery.artifacts import (  # noqa: F401 - importable from here as they always were
    KINDS,
    PROJECTION_COLUMNS,
    VBUCKET_COLUMNS,
)
from reconciliation.services.recovery.problems import (
    seal_problems,
    snapshot_problems,
    stream_problems,
)

logger = logging.getLogger(__name__)

PERMISSION = "reconciliation.create_snapshot"
BUILD_LEASE = "recovery:snapshot"

# A test hook: called with the cut's lease grants once they are held, before the cut is read.
after_dispatch_stopped: Callable[[list[leases.LeaseGrant]], None] | None = None
# A drill hook (spec §7 drill 9): called with the snapshot and its artifact records once they are dumped, before they
# are recorded and the seal reads them back; returns the records the build goes on with (it may damage them).
after_dumped: Callable[[RecoverySnapshot, list[dict]], list[dict]] | None = None


class SnapshotNotFound(NotFound):
    code = "snapshot_not_found"
    default_message = "No such recovery snapshot."


class SnapshotBuildRunning(Conflict):
    code = "snapshot_build_running"
    default_message = "A recovery snapshot is being built; wait for it to finish."


class SnapshotAborted(Exception):
    """The cut cannot be proven (a lease that changed hands, a receipt beyond the boundary, a partition
    added or removed, a manifest that moved): the whole snapshot fails; its cut is never enlarged."""


def snapshot_get(snapshot_id) -> RecoverySnapshot:
    try:
        return RecoverySnapshot.objects.get(pk=int(snapshot_id))
    except (RecoverySnapshot.DoesNotExist, ValueError, TypeError):
        raise SnapshotNotFound(f"No recovery snapshot {snapshot_id!r}.") from None


def next_offset(through: str) -> str:
    """The first entry id after `through`: every id below it is at or before `through` (SNAP-4)."""
    ms, seq = streams.entry_id_key(through)
    return f"{ms}-{seq + 1}"


def snapshot_create(*, actor: Actor, reason: str = "", job_id: int | None = None) -> RecoverySnapshot:
    """A BUILDING snapshot row, audited. Transaction: the row and its audit record on `default` (inside
    the caller's, when the ops job that builds it is created in the same one). Refused while another
    snapshot is being built (its build holds the lease, or its job has yet to run)."""
    from likes_project.opsjobs.models import JobStatus, OpsJob

    pending = RecoverySnapshot.objects.filter(status=SnapshotStatus.BUILDING).values_list("pk", "job_id")
    for pk, job in pending:
        if leases.lease_is_held(BUILD_LEASE) or OpsJob.objects.filter(
                pk=job, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).exists():
            raise SnapshotBuildRunning(f"Snapshot {pk} is being built; wait for it to finish.")
    with transaction.atomic(using="default"):
        snap = RecoverySnapshot.objects.create(reason=(reason or "").strip()[:512], started_by=actor.name,
                                               channel=actor.channel, job_id=job_id)
        audit_record(actor=actor, action="snapshot.create", target_type="recovery_snapshot",
                     target_id=str(snap.pk), params={"reason": snap.reason})
    return snap


# --- the cut ------------------------------------------------------------------------------------------


def _receipts_beyond(cursor, generation: int, through: dict[int, str], limit: int = 20) -> list[tuple[int, str]]:
    """Receipts of `generation` on this partition at stream positions after `through[p]` (inside the
    caller's snapshot). Entry ids have a 13-digit millisecond part, so a text range on the unique
    receipt index narrows to the same millisecond and later; the exact order is then applied here."""
    out = []
    for p, last in sorted(through.items()):
        ms, seq = streams.entry_id_key(last)
        cursor.execute(
            f"SELECT source_offset FROM {CountEventReceipt._meta.db_table} WHERE generation = %s AND "
            "source_topic = %s AND source_partition = %s AND source_offset >= %s",
            [generation, streams.TOPIC, p, str(ms)],
        )
        out += [(p, off) for (off,) in cursor.fetchall() if streams.entry_id_key(off) > (ms, seq)]
        if len(out) >= limit:
            break
    return out[:limit]


def _stream_mark(p: int) -> dict:
    """What tells partition p's stream at the cut from one lost and written again since (SNAP-11): how many
    entries were ever added to it, then its last id, read in that order (every entry after `streamLast`
    was added after `streamAdded` was read, which `problems._rewritten` relies on)."""
    added = streams.retention(p).added
    return {"streamAdded": added, "streamLast": streams.last_generated_id(p)}


def _holes(aliases: list[str], generation: int) -> Callable[[], bool]:
    def none_left() -> bool:
        through = {p: checkpoints_get(COUNT_CONSUMER).get(p, "0-0") for p in streams.all_partitions()}
        for alias in aliases:
            with connections[alias].cursor() as cursor:
                if _receipts_beyond(cursor, generation, through, limit=1):
                    return False
        return True
    return none_left


@contextlib.contextmanager
def _cut_snapshots(snap: RecoverySnapshot, gen: routing.GenerationRoutes, say) -> Iterator[dict]:
    """Stop dispatch, read B[p], open the per-partition snapshots and prove the cut in them, resume
    dispatch; yield {"offsets": [...]} with the snapshots still open (the dump reads them)."""
    aliases = list(settings.COUNT_PARTITION_ALIASES)
    deadline = time.monotonic() + settings.RECONCILE_DRAIN_MAX_S
    if not wait_driving(_holes(aliases, gen.generation), deadline,
                        consume_to({p: streams.last_generated_id(p) for p in streams.all_partitions()})):
        raise SnapshotAborted(f"receipts beyond the count consumer's checkpoints did not drain within "
                              f"{settings.RECONCILE_DRAIN_MAX_S} s")
    started = time.monotonic()
    grants = count_leases_take(time.monotonic() + settings.RECONCILE_DRAIN_MAX_S, holder_prefix="snapshot")
    paused_ms = None
    with contextlib.ExitStack() as snapshots:
        try:
            if after_dispatch_stopped is not None:
                after_dispatch_stopped(grants)
            through = {p: checkpoints_get(COUNT_CONSUMER).get(p, "0-0") for p in streams.all_partitions()}
            offsets = [{"topic": streams.TOPIC, "partition": p, "through": t, "nextOffset": next_offset(t),
                        **_stream_mark(p)} for p, t in sorted(through.items())]
            beyond = []
            for alias in aliases:
                snapshots.enter_context(transaction.atomic(using=alias))
                with connections[alias].cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    # The dump of a large table outlasts the request-sized timeouts, and each partition's
                    # snapshot waits idle while the others are dumped: both lifted for this transaction only.
                    cursor.execute("SET LOCAL statement_timeout = 0")
                    cursor.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
                    beyond += [(alias, p, off) for p, off in _receipts_beyond(cursor, gen.generation, through)]
            lost = [g.resource for g in grants if not leases.lease_is_current(g)]
            if lost:
                raise SnapshotAborted(f"a lease changed hands between the stop of dispatch and the cut: "
                                      f"{', '.join(lost)}")
            if beyond:
                # SNAP-6 step 3: a transaction outside the boundary committed; B[p] is never enlarged.
                raise SnapshotAborted("receipts beyond the boundary B[p]: " + ", ".join(
                    f"{alias} partition {p} offset {off}" for alias, p, off in beyond[:5]))
        finally:
            for g in grants:
                leases.lease_release(g)
            paused_ms = round((time.monotonic() - started) * 1000.0, 3)
            RecoverySnapshot.objects.filter(pk=snap.pk).update(dispatch_paused_ms=paused_ms)
            metrics.observe("likes_snapshot_dispatch_pause_seconds", paused_ms / 1000.0)
        say(f"cut: dispatch paused {paused_ms:.1f} ms; B[p] = " + ", ".join(f"{o['partition']}:{o['through']}"
                                                                        for o in offsets))
        yield {"offsets": offsets}


# --- the dump -----------------------------------------------------------------------------------------


def _copy_chunks(alias: str, kind: str, generation: int, buckets: list[int]) -> Iterator[bytes]:
    """The rows of the buckets the pinned manifest routes to `alias` (ROUTE-4, ROUTE-6): a bucket
    migration's target copy before its cutover, or a source's read-only copy after it, is not dumped."""
    model, columns, order = KINDS[kind]
    routed = "{" + ",".join(str(int(vb)) for vb in buckets) + "}"
    sql = (f"COPY (SELECT {', '.join(columns)} FROM {model._meta.db_table} WHERE generation = {int(generation)} "
           f"AND virtual_bucket = ANY('{routed}'::int[]) ORDER BY {order}) TO STDOUT")
    buffer, limit = bytearray(), 1 << 20
    with connections[alias].cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for data in copy:
            buffer += data
            if len(buffer) >= limit:
                yield bytes(buffer)
                buffer.clear()
    if buffer:
        yield bytes(buffer)


def _dump(snap: RecoverySnapshot, gen: routing.GenerationRoutes, say) -> list[dict]:
    out = []
    for alias in settings.COUNT_PARTITION_ALIASES:
        for kind, (_model, columns, _order) in KINDS.items():
            started = time.monotonic()
            art = artifacts.artifact_write(
                name=f"snapshot-{snap.pk:06d}/{kind}-{alias}.copy.gz",
                header={"kind": kind, "partition": alias, "snapshotId": snap.pk, "generation": gen.generation,
                        "bucketSpaceVersion": gen.space.version, "manifestId": gen.manifest_id,
                        "columns": list(columns)},
                chunks=_copy_chunks(alias, kind, gen.generation, gen.buckets_on(alias)))
            out.append(art.as_dict())
            say(f"dumped {kind} of {alias}: {art.rows} rows, {art.bytes} bytes in "
                f"{time.monotonic() - started:.2f} s")
    return out


# --- the seal -----------------------------------------------------------------------------------------


def _finish(snap: RecoverySnapshot, *, status: str, failure: str = "", **fields) -> RecoverySnapshot:
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        RecoverySnapshot.objects.filter(pk=snap.pk).update(
            status=status, failure=failure[:1024], finished_at=now,
            sealed_at=now if status == SnapshotStatus.SEALED else None, **fields)
        snap.refresh_from_db()
        audit_record(actor=Actor(snap.started_by, snap.channel or "system"), action="snapshot.finish",
                     target_type="recovery_snapshot", target_id=str(snap.pk),
                     outcome=status.lower(), params={"failure": failure[:500], "offsets": snap.offsets,
                                                     "dispatchPausedMs": snap.dispatch_paused_ms})
    metrics.inc("likes_snapshots_total", status=status)
    return snap


def snapshot_build(snapshot_id: int, *, say=lambda _m: None) -> RecoverySnapshot:
    """Build the BUILDING snapshot `snapshot_id` to SEALED or FAILED (never raises for a failed cut)."""
    snap = snapshot_get(snapshot_id)
    if snap.status != SnapshotStatus.BUILDING:
        return snap
    lease = leases.lease_acquire(resource=BUILD_LEASE, holder=f"snapshot-{snap.pk}", ttl_s=3600.0)
    if lease is None:
        return _finish(snap, status=SnapshotStatus.FAILED, failure="another recovery snapshot is being built")
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        with route_switch.switching_paused(f"recovery snapshot {snap.pk}"):
            gen = routing.load_generation()
            contract = streams.active_contract()
            RecoverySnapshot.objects.filter(pk=snap.pk).update(
                generation=gen.generation, bucket_space_version=gen.space.version, manifest_id=gen.manifest_id,
                stream_contract_version=contract.version)
            snap.refresh_from_db()
            say(f"snapshot {snap.pk}: generation {gen.generation}, bucket space v{gen.space.version}, manifest "
                f"{gen.manifest_id}, {contract.partitions} stream partitions")
            with _cut_snapshots(snap, gen, say) as cut:
                timings["cutMs"] = round((time.monotonic() - t0) * 1000.0, 3)
                open_letters = list(DeadLetter.objects.filter(
                    consumer=COUNT_CONSUMER, status__in=[DeadLetterStatus.NEW, DeadLetterStatus.REQUEUED])
                    .values_list("pk", flat=True))
                RecoverySnapshot.objects.filter(pk=snap.pk).update(offsets=cut["offsets"],
                                                                    dead_letters_at_cut=open_letters)
                t1 = time.monotonic()
                dumped = _dump(snap, gen, say)
                if after_dumped is not None:
                    dumped = after_dumped(snap, dumped)
                timings["dumpMs"] = round((time.monotonic() - t1) * 1000.0, 3)
            RecoverySnapshot.objects.filter(pk=snap.pk).update(artifacts=dumped)
            snap.refresh_from_db()
            t2 = time.monotonic()
            problems = seal_problems(snap)
            pinned = CountProjectionGeneration.objects.filter(
                generation=gen.generation, status=ProjectionGenerationStatus.ACTIVE,
                active_manifest_id=gen.manifest_id).exists()
            if not pinned:
                problems.append(f"manifest_moved: generation {gen.generation} no longer routes by manifest "
                                f"{gen.manifest_id}")
            if streams.active_contract().version != contract.version:
                problems.append("offset_vector_incomplete: the stream contract changed during the build")
            timings["verifyMs"] = round((time.monotonic() - t2) * 1000.0, 3)
        timings["totalMs"] = round((time.monotonic() - t0) * 1000.0, 3)
        if problems:
            return _finish(snap, status=SnapshotStatus.FAILED, failure="; ".join(problems), timings=timings)
        say(f"snapshot {snap.pk} SEALED in {timings['totalMs'] / 1000.0:.2f} s")
        return _finish(snap, status=SnapshotStatus.SEALED, timings=timings)
    except (SnapshotAborted, CutRefused, route_switch.RouteSwitching) as exc:
        say(f"snapshot {snap.pk} aborted: {exc}")
        return _finish(snap, status=SnapshotStatus.FAILED, failure=f"aborted: {exc}", timings=timings)
    except Exception as exc:
        _finish(snap, status=SnapshotStatus.FAILED, failure=f"{exc.__class__.__name__}: {exc}", timings=timings)
        raise
    finally:
        leases.lease_release(lease)


def snapshot_report(snap: RecoverySnapshot) -> dict:
    """`manage.py snapshot_create --json`, `snapshot_list --json`: the snapshot as operators read it."""
    return {
        "snapshotId": snap.pk, "status": snap.status, "reason": snap.reason, "startedBy": snap.started_by,
        "generation": snap.generation, "bucketSpaceVersion": snap.bucket_space_version,
        "manifestId": snap.manifest_id, "streamContractVersion": snap.stream_contract_version,
        "offsetVector": snap.offsets,
        "artifacts": [{k: a.get(k) for k in ("kind", "partition", "uri", "rows", "sha256", "bytes")}
                      for a in snap.artifacts],
        "dispatchPausedMs": snap.dispatch_paused_ms, "timings": snap.timings, "failure": snap.failure or None,
        "createdAt": snap.created_at.isoformat(), "sealedAt": snap.sealed_at.isoformat() if snap.sealed_at else None,
        "testedAt": snap.tested_at.isoformat() if snap.tested_at else None, "testResult": snap.test_result or None,
    }


# --- verification (SNAP-11) and retention ---------------------------------------------------------------


def snapshot_verify(snapshot_id, *, actor: Actor) -> dict:
    """`manage.py snapshot_verify ID`: {"snapshotId", "usable", "problems"}, audited."""
    snap = snapshot_get(snapshot_id)
    problems = snapshot_problems(snap)
    with transaction.atomic(using="default", durable=True):
        audit_record(actor=actor, action="snapshot.verify", target_type="recovery_snapshot", target_id=str(snap.pk),
                     outcome="usable" if not problems else "unusable", params={"problems": problems[:20]})
    return {"snapshotId": snap.pk, "status": snap.status, "usable": not problems, "problems": problems}


def _named_by_open_repairs() -> set[int]:
    from reconciliation.models import RepairRequest, RepairStatus

    sources = RepairRequest.objects.filter(status__in=[RepairStatus.AWAITING_APPROVAL, RepairStatus.APPROVED,
                                                       RepairStatus.RUNNING], params__source__startswith="snapshot:")
    return {int(src.split(":", 1)[1]) for src in sources.values_list("params__source", flat=True)
            if src.split(":", 1)[1].isdigit()}


def snapshots_expire(*, keep: int | None = None) -> list[int]:
    """Retention: keep the newest `keep` (SNAPSHOT_KEEP) SEALED snapshots that the stream can still replay
    from, and any a repair request that is still open names; expire the others and every FAILED one older
    than a day, deleting their artifacts. Audited as the system's retention."""
    from likes_project.audit.services import system_actor

    actor = system_actor("snapshot-retention")
    keep = settings.SNAPSHOT_KEEP if keep is None else keep
    expired = []
    named = _named_by_open_repairs()
    sealed = list(RecoverySnapshot.objects.filter(status=SnapshotStatus.SEALED).order_by("-id"))
    for i, snap in enumerate(sealed):
        if snap.pk not in named and (i >= keep or stream_problems(snap.offsets)):
            expired.append(snap)
    old_failed = timezone.now() - dt.timedelta(days=1)
    expired += list(RecoverySnapshot.objects.filter(status=SnapshotStatus.FAILED, created_at__lt=old_failed)
                    .exclude(artifacts=[]))
    for snap in expired:
        for record in snap.artifacts:
            artifacts.artifact_delete(record.get("uri", ""))
        with transaction.atomic(using="default", durable=True):
            RecoverySnapshot.objects.filter(pk=snap.pk).update(
                status=SnapshotStatus.EXPIRED if snap.status == SnapshotStatus.SEALED else snap.status, artifacts=[])
            audit_record(actor=actor, action="snapshot.expire", target_type="recovery_snapshot",
                         target_id=str(snap.pk), params={"was": snap.status})
    return [s.pk for s in expired]
