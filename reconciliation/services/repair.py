"""Repairs from the facts with maker-checker approval (REPAIR-1, REPAIR-3, REPAIR-4, REPAIR-6; issue 11
§3, §4).

request (operator; scope, source, reason, the diffs that motivated it; its parameters hashed)
  -> approve (another operator; the database refuses the requester and any hash but the request's)
  -> the system runs it as an ops job: the parameters must still hash to what was approved, else VOID;
     per video the broken layer is found first (coverage, then identity) and only it is rebuilt:
       projection vs facts -> shadow rebuild: tail capture (the stream heads H), a scan of the facts,
         then under the videos' write barrier, with the outbox and the count consumer drained to it,
         the tail after H folded in by version and the projection and its buckets set to the result;
       buckets vs projection -> the buckets recounted from the projection;
       display / count cache -> the display layer refreshed from the buckets;
     then an exact check of the videos (kind after_repair), whose verdict is the repair's.
Every step is audited; the record keeps both watermark sets and each video's before / after.
"""

from __future__ import annotations

import time

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from counting import routing
from counting.services import rebuild_scoped, route_switch, snapshots
from counting.services.migration import ledger as migration_ledger
from likes_project import metrics
from likes_project.approvals import Approval, ApprovalVoid, params_hash
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import InvalidInput
from likes_project.eventlog import streams
from likes_project.opsjobs.services import TRANSIENT
from reconciliation.models import (
    CheckDiff,
    CheckRun,
    DiffLayer,
    DiffStatus,
    RepairRequest,
    RepairStatus,
    RunKind,
    RunMode,
    RunStatus,
)
from reconciliation.services import checks, diffs, evidence
from reconciliation.services.cut import CutRefused, held_cut
from reconciliation.services.evidence import LIKED

REQUEST_PERMISSION = "reconciliation.request_repair"
APPROVE_PERMISSION = "reconciliation.approve_repair"
SOURCES = ("facts", "snapshot:<id>")  # snapshot: a SEALED recovery snapshot, the whole projection (issue 12)
SNAPSHOT_SOURCE = "snapshot:"
EXECUTOR = "repair-executor"
REPAIR_JOB = "reconcile.repair"
APPROVAL = Approval(model=RepairRequest, code="repair", label="repair request", noun="repair", target_type="repair",
                    action="repair.approve", job_kind=REPAIR_JOB, executor=EXECUTOR, id_param="repairId",
                    job_target="repair")
repair_get = APPROVAL.get


def repair_request(*, actor: Actor, source: str, reason: str, videos: list[str] | None = None,
                   diff_ids: list[int] | None = None) -> RepairRequest:
    """AWAITING_APPROVAL, for the given videos and those of the given diffs (which move to FIXING).
    Transaction: the request, the diffs' transitions and the audit record on `default`."""
    source = (source or "").strip()
    if source != "facts" and not source.startswith(SNAPSHOT_SOURCE):
        raise InvalidInput(f"--source is one of {', '.join(SOURCES)}.", code="invalid_source")
    snapshot_id = _snapshot_source(source)
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("A repair needs a reason.", code="reason_required")
    if actor.channel == "cli" and actor.name.startswith("os:"):
        raise InvalidInput("A repair request names its operator: --actor USER.", code="actor_required")
    diff_ids = sorted({int(d) for d in diff_ids or []})
    with transaction.atomic(using="default", durable=True):
        found = list(CheckDiff.objects.select_for_update().filter(pk__in=diff_ids))
        missing = sorted(set(diff_ids) - {d.pk for d in found})
        if missing:
            raise InvalidInput(f"No diff {missing}.", code="diff_not_found")
        open_diffs = [d for d in found if d.status in (DiffStatus.NEW, DiffStatus.FIXING)]
        if len(open_diffs) != len(found):
            raise InvalidInput("Only NEW or FIXING diffs can motivate a repair.", code="diff_closed")
        wanted = sorted(set(videos or []) | {d.video_id for d in found})
        if snapshot_id is not None:
            if videos:
                raise InvalidInput("A restore from a snapshot replaces the whole projection; name no videos (diffs "
                                   "may still motivate it).", code="invalid_scope")
            scope = {"videos": []}  # the exact check afterwards covers every video
        else:
            scope = checks.scope_normalize(videos=wanted)
        params = {"videos": scope["videos"], "source": source, "reason": reason, "diffs": diff_ids}
        repair = RepairRequest.objects.create(params=params, params_hash=params_hash(params), reason=reason,
                                              requested_by=actor.name, requested_channel=actor.channel)
        for d in found:
            diffs.diff_link_repair(d, repair_id=repair.pk, actor=actor)
        audit_record(actor=actor, action="repair.request", target_type="repair", target_id=str(repair.pk),
                     params={"params": params, "paramsHash": repair.params_hash})
    return repair


def _snapshot_source(source: str) -> int | None:
    """The snapshot id of a `snapshot:<id>` source (it must be SEALED), None for `facts`."""
    if not source.startswith(SNAPSHOT_SOURCE):
        return None
    from reconciliation.models import RecoverySnapshot, SnapshotStatus

    raw = source[len(SNAPSHOT_SOURCE):]
    if not (raw.isascii() and raw.isdigit()):
        raise InvalidInput("--source snapshot:<id> names a snapshot by its number.", code="invalid_source")
    snap = RecoverySnapshot.objects.filter(pk=int(raw)).first()
    if snap is None:
        raise InvalidInput(f"No recovery snapshot {raw}.", code="snapshot_not_found")
    if snap.status != SnapshotStatus.SEALED:
        raise InvalidInput(f"Snapshot {raw} is {snap.status}; only a SEALED snapshot can be restored.",
                           code="snapshot_not_sealed")
    return snap.pk


def repair_approve(*, repair_id, actor: Actor) -> RepairRequest:
    """APPROVED by `actor` (never the requester: refused here and by the database), bound to the hash
    of the parameters as they stand; then the system's job is started. Parameters that no longer hash
    to the request's (edited after the request) void it."""
    with transaction.atomic(using="default", durable=True):
        repair = APPROVAL.lock_awaiting(repair_id)
        refused = APPROVAL.refuse_self(repair, actor)
        if refused is None and not APPROVAL.hash_holds(repair):
            RepairRequest.objects.filter(pk=repair.pk).update(status=RepairStatus.VOID, finished_at=timezone.now(),
                                                              error="parameters changed after the request")
            audit_record(actor=actor, action="repair.void", target_type="repair", target_id=str(repair.pk),
                         outcome="void", params={"paramsHash": repair.params_hash,
                                                 "nowHashes": params_hash(repair.params)})
            refused = ApprovalVoid("The repair's parameters changed after it was requested; request it again.")
        if refused is None:  # the database refuses the requester too (repair_not_approved_by_requester)
            refused = APPROVAL.record(repair, actor, lambda: RepairRequest.objects.filter(pk=repair.pk).update(
                status=RepairStatus.APPROVED, approved_by=actor.name, approved_hash=repair.params_hash,
                approved_at=timezone.now()), {"paramsHash": repair.params_hash})
    if refused is not None:
        raise refused
    APPROVAL.job_start(repair)
    return repair_get(repair.pk)


# --- execution (the system's job) ------------------------------------------------------------------


def _layer_values(gen: routing.GenerationRoutes, videos: list[str]) -> dict:
    """Per video: the facts' LIKED relations, the projection's, the buckets' sum, the display snapshot."""
    facts = evidence.source_relations(videos)
    projected = evidence.projected_relations(gen, videos)
    counts = evidence.bucket_counts(gen, videos)
    snaps = evidence.display_rows(videos)
    out = {}
    for v in videos:
        out[v] = {
            "facts": sum(1 for (_u, vid), r in facts.items() if vid == v and r.state == LIKED),
            "projection": sum(1 for (_u, vid), r in projected.items() if vid == v and r.state == LIKED),
            "buckets": sum(n for (vid, _vb), n in counts.buckets.items() if vid == v),
            "display": snaps[v][0] if v in snaps else None,
            "frozenBuckets": sorted(vb for (vid, vb) in counts.frozen if vid == v),
        }
    return out


def _fold_tail(facts: dict, videos: set[str], heads: dict[int, str], until: dict[str, str]) -> int:
    """Fold into `facts` the events of `videos` after the heads H up to the cut's offsets B, by version
    (the absolute-state rule). Returns how many events were folded in."""
    folded = 0
    for p, start in heads.items():
        after, end = start, streams.entry_id_key(until.get(str(p), "0-0"))
        while streams.entry_id_key(after) < end:
            entries = streams.read_after(p, after, 500)
            if not entries:
                break
            for entry in entries:
                if streams.entry_id_key(entry.entry_id) > end:
                    break
                ev = entry.event
                if ev.get("videoId") in videos:
                    key = (ev["userId"], ev["videoId"])
                    if ev["relationVersion"] > facts.get(key, ("UNLIKED", 0))[1]:
                        facts[key] = (ev["absoluteState"], ev["relationVersion"])
                        folded += 1
            after = entries[-1].entry_id
    return folded


def _rebuild_from_facts(gen: routing.GenerationRoutes, videos: list[str], say) -> dict:
    """REPAIR-3 for `videos`: tail capture, scan, then the switch under the videos' cut."""
    heads = {p: streams.last_generated_id(p) for p in streams.all_partitions()}  # tail capture starts here
    started = time.monotonic()
    facts = {k: (r.state, r.version) for k, r in evidence.source_relations(videos).items()}
    say(f"scanned {len(facts)} relations of {len(videos)} videos from the facts in {time.monotonic() - started:.2f} s")
    with held_cut(videos, take_leases=False) as (cut, _grants):
        folded = _fold_tail(facts, set(videos), heads, cut.offsets)
        report = rebuild_scoped.projection_rewrite(gen=gen, video_ids=videos, facts=facts)
    return {"barrierHeldMs": round(cut.held_ms, 3), "tailFolded": folded, "relationsWritten": report.relations_written,
            "relationsRemoved": report.relations_removed, "newerThanFacts": report.newer_than_facts[:50],
            "bucketsChanged": {v: {str(vb): list(c) for vb, c in b.items()} for v, b in report.buckets_changed.items()}}


def repair_execute(repair_id: int, *, say=lambda _m: None, wait=None) -> RepairRequest:
    """Run an approved repair (the job's one slice): refuse it (VOID) if its parameters no longer hash
    to the approval; per video rebuild the broken layer only; verify with an exact run. `wait(exc, what=)`
    (the job's `SliceContext.transient_wait`): a store refusing for a moment is waited out and a repair from
    the facts runs again, rather than failing for a new request and a second approval.

    ROUTE-7: a repair holds route switching paused while it runs (a bucket migration's cutover waits for
    it), and a repair never runs while a bucket migration copies: its writes bypass the route fences the
    migration's change-log horizon relies on. It fails then, to be requested again after the migration."""
    with route_switch.switching_paused(f"repair {repair_id}", timeout_s=10.0):
        moving = migration_ledger.migrations_in_flight()
        if moving:
            return _repair_refuse(repair_id, f"bucket migration {moving[0].pk} is {moving[0].state}; request the "
                                             "repair again once it has cut over")
        started = time.monotonic()
        repair = _repair_execute(repair_id, say=say, wait=wait)
        if repair.finished:  # M14: how long a repair took, by its outcome and source
            metrics.observe("likes_repair_duration_seconds", time.monotonic() - started, status=repair.status,
                            source=str(repair.params.get("source", "facts")).split(":", 1)[0])
        return repair


def _repair_refuse(repair_id: int, why: str) -> RepairRequest:
    with transaction.atomic(using="default", durable=True):
        updated = RepairRequest.objects.filter(pk=repair_id, status=RepairStatus.APPROVED).update(
            status=RepairStatus.FAILED, error=why, finished_at=timezone.now())
        if updated:
            audit_record(actor=system_actor(EXECUTOR), action="repair.refuse", target_type="repair",
                         target_id=str(repair_id), outcome="refused", params={"reason": why})
    return repair_get(repair_id)


def _repair_execute(repair_id: int, *, say, wait=None) -> RepairRequest:
    actor = system_actor(EXECUTOR)
    with transaction.atomic(using="default", durable=True):
        repair = RepairRequest.objects.select_for_update().get(pk=repair_id)
        if repair.status != RepairStatus.APPROVED:
            return repair
        if not (repair.approved_by and repair.approved_hash == repair.params_hash == params_hash(repair.params)):
            RepairRequest.objects.filter(pk=repair.pk).update(status=RepairStatus.VOID, finished_at=timezone.now(),
                                                              error="the parameters changed after the approval")
            audit_record(actor=actor, action="repair.void", target_type="repair", target_id=str(repair.pk),
                         outcome="void", params={"approvedHash": repair.approved_hash})
            repair.refresh_from_db()
            return repair
        RepairRequest.objects.filter(pk=repair.pk).update(status=RepairStatus.RUNNING)
    if repair.params.get("source", "").startswith(SNAPSHOT_SOURCE):
        return _restore_execute(repair, actor=actor, say=say)
    first: dict = {}  # the evidence read before the first attempt changed anything
    while True:
        try:
            result, status, error, verify, after, wm_after = _repair_from_facts(repair, first, actor=actor, say=say)
            break
        except TRANSIENT as exc:
            # A shard or partition refusing for a moment: every step is idempotent (the rebuild writes from the
            # facts under versions, the recount and the display refresh recompute, the verify run it held was
            # refused), so the whole repair goes again after the job's wait, with the same approval.
            if wait is None or not wait(exc, what=f"repair {repair.pk}"):
                raise
    before, wm_before, videos = first["before"], first["watermarks"], repair.video_ids
    with transaction.atomic(using="default", durable=True):
        RepairRequest.objects.filter(pk=repair.pk).update(
            status=status, before=before, after=after, watermarks_before=wm_before,
            watermarks_after=wm_after, result=result, error=error, finished_at=timezone.now(),
            verify_run_id=verify.pk if verify else None)
        if status == RepairStatus.SUCCEEDED:
            # Its own diffs, and every other open diff of the repaired videos: the exact run passed on them.
            reason = f"repair {repair.pk} succeeded (exact run {verify.pk} passed)"
            for d in CheckDiff.objects.filter(Q(repair_id=repair.pk) | Q(video_id__in=videos),
                                              status__in=[DiffStatus.NEW, DiffStatus.FIXING]).order_by("pk"):
                diffs.diff_transition(d, to=DiffStatus.FIXED, actor=actor, reason=reason)
        audit_record(actor=actor, action="repair.execute", target_type="repair", target_id=str(repair.pk),
                     outcome=status.lower(), params={"videos": videos[:50], "layers": result.get("layers"),
                                                     "error": error[:500]})
    return repair_get(repair.pk)


def _repair_from_facts(repair: RepairRequest, first: dict, *, actor: Actor, say) -> tuple:
    """One attempt at a repair from the facts: (result, status, error, verify run, layer values after, watermarks
    after). `first` keeps the layer values and watermarks of the first attempt that read them."""
    gen = routing.load_generation()
    videos = repair.video_ids
    if "before" not in first:
        first["before"] = _layer_values(gen, videos)
    if "watermarks" not in first:
        first["watermarks"] = evidence.watermarks(gen)
    result: dict = {"layers": {}}
    verify = None
    try:
        coverage = checks.coverage_chunk(gen, videos)
        # A projection an exact run found differing at the cut can pass online coverage on its outbox
        # evidence (REC-4): the diffs that motivated the repair say their layer too.
        motivated = CheckDiff.objects.filter(pk__in=repair.params.get("diffs", []), layer=DiffLayer.PROJECTION)
        broken_projection = sorted({f.video_id for f in coverage.found}
                                   | set(motivated.values_list("video_id", flat=True)))
        identity = checks.identity_chunk(gen, [v for v in videos if v not in broken_projection])
        broken_buckets = sorted({f.video_id for f in identity.found if f.layer == DiffLayer.BUCKETS})
        broken_display = sorted({f.video_id for f in identity.found if f.layer in (
            DiffLayer.DISPLAY, DiffLayer.COUNT_CACHE, DiffLayer.POLICY_HIDDEN)}
                                - set(broken_buckets))
        result["layers"] = {"projection": broken_projection, "buckets": broken_buckets, "display": broken_display}
        say(f"broken layers: projection {broken_projection}, buckets {broken_buckets}, display {broken_display}")
        if broken_projection:
            result["rebuild"] = _rebuild_from_facts(gen, broken_projection, say)
        if broken_buckets:
            rep = rebuild_scoped.buckets_recompute(gen=gen, video_ids=broken_buckets)
            result["recount"] = {v: {str(vb): list(c) for vb, c in b.items()} for v, b in rep.buckets_changed.items()}
        rebuild_scoped.display_refresh_request(gen=gen, video_ids=videos)
        snapshots.display_snapshot_refresh()
        verify = exact_verify(videos, repair_id=repair.pk, actor=actor)
        result["verifyRunId"] = verify.pk
        status = RepairStatus.SUCCEEDED if verify.status == RunStatus.PASSED else RepairStatus.FAILED
        why = verify.refused_because or f"{verify.diffs_found} diffs"
        error = "" if status == RepairStatus.SUCCEEDED else f"the exact check afterwards was {verify.status}: {why}"
    except CutRefused as exc:
        status, error = RepairStatus.FAILED, f"the cut was refused: {exc}"
    return result, status, error, verify, _layer_values(gen, videos), evidence.watermarks(gen)


def _restore_execute(repair: RepairRequest, *, actor: Actor, say) -> RepairRequest:
    """REPAIR-2 / REPAIR-5: restore the approved snapshot into a new generation, switch it in, then an
    exact run over every video (kind after_repair) whose verdict is the repair's."""
    from reconciliation.services.recovery import restore

    snapshot_id = int(repair.params["source"][len(SNAPSHOT_SOURCE):])
    old = routing.load_generation()
    before, wm_before = restore.generation_totals(old.generation), evidence.watermarks(old)
    result: dict = {"snapshotId": snapshot_id}
    verify = None
    try:
        result |= restore.restore_execute(snapshot_id, actor=actor, say=say)
        snapshots.display_snapshot_refresh()
        verify = exact_verify(repair.video_ids, repair_id=repair.pk, actor=actor)
        result["verifyRunId"] = verify.pk
        status = RepairStatus.SUCCEEDED if verify.status == RunStatus.PASSED else RepairStatus.FAILED
        why = verify.refused_because or f"{verify.diffs_found} diffs"
        error = "" if status == RepairStatus.SUCCEEDED else f"the exact check afterwards was {verify.status}: {why}"
    except (restore.SnapshotUnusable, restore.RestoreFailed, CutRefused) as exc:
        status, error = RepairStatus.FAILED, str(getattr(exc, "message", exc))
        result["problems"] = getattr(exc, "extra", {}).get("problems", [error])
    gen = routing.load_generation()
    with transaction.atomic(using="default", durable=True):
        RepairRequest.objects.filter(pk=repair.pk).update(
            status=status, before=before, after=restore.generation_totals(gen.generation), result=result,
            watermarks_before=wm_before, watermarks_after=evidence.watermarks(gen), error=error,
            finished_at=timezone.now(), verify_run_id=verify.pk if verify else None)
        if status == RepairStatus.SUCCEEDED:
            reason = f"repair {repair.pk} restored snapshot {snapshot_id} (exact run {verify.pk} passed)"
            # Its own diffs and every unclaimed one (the exact run over every video passed); a diff another
            # pending repair claimed stays with that repair.
            for d in CheckDiff.objects.filter(Q(repair_id=repair.pk) | Q(status=DiffStatus.NEW),
                                              status__in=[DiffStatus.NEW, DiffStatus.FIXING]).order_by("pk"):
                diffs.diff_transition(d, to=DiffStatus.FIXED, actor=actor, reason=reason)
        audit_record(actor=actor, action="repair.execute", target_type="repair", target_id=str(repair.pk),
                     outcome=status.lower(), params={"source": repair.params["source"], "error": error[:500],
                                                     "generation": result.get("generation")})
    return repair_get(repair.pk)


def exact_verify(videos: list[str], *, repair_id: int | None, actor: Actor,
                 kind: str = RunKind.AFTER_REPAIR) -> CheckRun:
    """An exact run of `videos` (none: every video) in this process (after a repair or a migration),
    recorded like any."""
    from reconciliation.services.exact import exact_run_execute

    scope = checks.scope_normalize(videos=videos) if videos else checks.scope_normalize(all_videos=True)
    with transaction.atomic(using="default", durable=True):
        run = checks.check_run_create(mode=RunMode.EXACT, scope=scope, actor=actor,
                                      kind=kind, repair_id=repair_id)
    try:
        return exact_run_execute(run)
    except Exception as exc:  # whoever retries makes a new run
        checks.check_run_refuse_unfinished(run, f"it failed: {exc.__class__.__name__}: {exc}")
        raise


def repair_report(repair: RepairRequest) -> dict:
    """The whole record (`manage.py repair_show --json`)."""
    return {
        "repairId": repair.pk, "status": repair.status, "params": repair.params, "paramsHash": repair.params_hash,
        "requestedBy": repair.requested_by, "approvedBy": repair.approved_by or None,
        "approvedAt": repair.approved_at.isoformat() if repair.approved_at else None,
        "reason": repair.reason, "before": repair.before, "after": repair.after,
        "watermarksBefore": repair.watermarks_before, "watermarksAfter": repair.watermarks_after,
        "result": repair.result, "error": repair.error or None, "jobId": repair.job_id,
        "verifyRunId": repair.verify_run_id,
        "createdAt": repair.created_at.isoformat(), "finishedAt": repair.finished_at.isoformat()
        if repair.finished_at else None,
    }


def repair_wait(repair_id: int, *, timeout_s: float = 600.0) -> RepairRequest:
    """Until the repair finished (its job runs on the workers), bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        repair = repair_get(repair_id)
        if repair.finished or time.monotonic() >= deadline:
            return repair
        time.sleep(0.5)  # following a job on the workers: poll its row, bounded by timeout_s
