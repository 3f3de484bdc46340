"""The three check modes (REC-1 … REC-7) and a run's lifecycle: start (a CheckRun and the ops job that
runs it, in one transaction), run chunk by chunk with a resumable checkpoint, finish with a verdict.

- identity (REC-1): per (video, virtual bucket) on its routed partition, LIKED projection rows =
  the bucket's count, read in one snapshot per partition; then, per video, the display snapshot's raw
  count = Σ buckets and the count-cache view = the display count, where those layers have settled.
- coverage (REC-3, REC-4): every source relation against the projection, by version, online. A lower
  or missing projected version is waited for, then judged by its outbox evidence; a higher one passes
  only with the outbox event that proves it.
- exact (REC-5): `reconciliation.services.barrier` cuts the scope; inside the cut, per relation
  equality of state and version, and the identity, in snapshots taken while the barrier held.

A diff names the layer that disagrees (display, count_cache, buckets, projection). A run that could not
establish a barrier is REFUSED, never PASSED.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from counting import cache as count_cache
from counting import routing
from counting.risk import selectors as risk_selectors
from counting.selectors import count_cache_generations_get
from counting.services.projection import COUNT_CONSUMER
from likes_project import metrics
from likes_project.audit.services import Actor, audit_record, system_actor
from likes_project.errors import InvalidInput
from likes_project.eventlog import streams
from likes_project.eventlog.checkpoints import checkpoints_get
from reconciliation.models import CheckDiff, CheckRun, DiffLayer, RunKind, RunMode, RunStatus
from reconciliation.services import evidence
from reconciliation.services.evidence import LIKED, Rel
from relations import selectors as relation_selectors
from relations import validation

RUN_PERMISSION = "reconciliation.run_check"
DETAIL_MAX = 50  # relations kept as evidence per diff


@dataclass
class Found:
    video_id: str
    layer: str
    expected: int
    actual: int
    virtual_bucket: int | None = None
    detail: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        out = {"videoId": self.video_id, "layer": self.layer, "expected": self.expected, "actual": self.actual}
        if self.virtual_bucket is not None:
            out["virtualBucket"] = self.virtual_bucket
        return out


@dataclass
class ChunkResult:
    checked: int = 0
    found: list[Found] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)


# --- scope ------------------------------------------------------------------------------------------


def scope_normalize(*, videos: list[str] | None = None, all_videos: bool = False,
                    bucket_range: tuple[int, int] | None = None, known_only: bool = False) -> dict:
    """Exactly one of: some videos, all videos, or a virtual-bucket range (all videos, those buckets). Each video
    id is well formed (`invalid_video_id`); with `known_only` (an operator's scope: the command, the console) each
    is a video the service knows (`video_not_found`), so a typo is refused instead of recorded as a PASSED run
    over nothing."""
    given = [bool(videos), all_videos, bucket_range is not None]
    if sum(given) != 1:
        raise InvalidInput("Give exactly one scope: --video ID (repeatable), --all, or a bucket range.",
                           code="invalid_scope")
    if videos:
        clean = sorted({validation.video_id(v.strip() if isinstance(v, str) else v) for v in videos})
        unknown = sorted(set(clean) - relation_selectors.video_ids_known(clean)) if known_only else []
        if unknown:
            raise InvalidInput(f"No video {', '.join(unknown[:10])}" + (" ..." if len(unknown) > 10 else "") + ".",
                               code="video_not_found", unknown=unknown[:100])
        return {"videos": clean}
    if bucket_range is not None:
        low, high = bucket_range
        space = routing.active().space
        if not (0 <= low <= high < space.virtual_buckets):
            raise InvalidInput(f"A bucket range lies within 0..{space.virtual_buckets - 1}.", code="invalid_scope")
        return {"bucketRange": [low, high]}
    return {"all": True}


def _bucket_range(scope: dict) -> tuple[int, int] | None:
    r = scope.get("bucketRange")
    return (int(r[0]), int(r[1])) if r else None


def scope_next_videos(scope: dict, checkpoint: dict, gen: routing.GenerationRoutes, limit: int) -> list[str]:
    """The next chunk of the scope's videos after the checkpoint (empty: done)."""
    if "videos" in scope:
        # In the scope's own order (a schedule's is hottest first), resumed by position: resuming by id
        # would skip every video after the chunk's last one that sorts before it.
        done = int(checkpoint.get("videos", 0))
        return scope["videos"][done:done + limit]
    return evidence.videos_after(checkpoint.get("after", ""), limit, gen=gen)


# --- identity (REC-1) -----------------------------------------------------------------------------


def identity_chunk(gen: routing.GenerationRoutes, videos: list[str], *, bucket_range=None,
                   counts: evidence.BucketCounts | None = None, settled_layers: bool = True) -> ChunkResult:
    """REC-1 over `videos`; `counts` when the caller already read them inside its snapshot."""
    result = ChunkResult(checked=len(videos))
    counts = counts or evidence.bucket_counts(gen, videos, bucket_range)
    sums: dict[str, int] = defaultdict(int)
    for key in sorted(set(counts.projected) | set(counts.buckets)):
        projected, bucket = counts.projected.get(key, 0), counts.buckets.get(key, 0)
        sums[key[0]] += bucket
        if projected != bucket or key in counts.frozen:
            result.found.append(Found(key[0], DiffLayer.BUCKETS, projected, bucket, virtual_bucket=key[1],
                                      detail={"frozen": key in counts.frozen}))
    if settled_layers and bucket_range is None:
        result.found += _display_and_cache(gen, videos, sums, result)
    return result


def _display_and_cache(gen, videos: list[str], sums: dict[str, int], result: ChunkResult) -> list[Found]:
    """The display snapshot against the buckets and the count-cache view against the snapshot, for the
    videos with nothing pending (a dirty mark means the snapshot is due to move: skipped, not a diff)."""
    found = []
    pending = evidence.pending_display(gen, videos)
    snaps = evidence.display_rows(videos)
    adjustments = risk_selectors.display_adjustments(videos)
    risk_expected = risk_selectors.risk_hidden_counts(gen, videos)
    policy_expected = risk_selectors.policy_hidden_counts(gen, videos)
    views = {}
    try:
        views = count_cache.views_read(count_cache_generations_get().active, sorted(snaps))
    except RedisError as exc:  # the cache role is down: that layer is not judged this time
        result.skipped.append({"layer": DiffLayer.COUNT_CACHE, "reason": f"cache unreadable: {exc.__class__.__name__}"})
    for video_id in videos:
        if video_id in pending:
            result.skipped.append({"videoId": video_id, "layer": DiffLayer.DISPLAY, "reason": "refresh pending"})
            continue
        snap = snaps.get(video_id)
        raw, display_count, snapshot_id, generation = snap if snap else (0, 0, 0, gen.generation)
        if generation != gen.generation:
            result.skipped.append({"videoId": video_id, "layer": DiffLayer.DISPLAY, "reason": "older generation"})
            continue
        if raw != sums.get(video_id, 0):
            found.append(Found(video_id, DiffLayer.DISPLAY, sums.get(video_id, 0), raw,
                               detail={"snapshotId": snapshot_id}))
            continue
        # REC-2: display = raw - risk_hidden - policy_hidden, risk_hidden = the LIKED projection rows the
        # risk ledger hides (issue 14 §4), policy_hidden those of accounts banned, down-weighted or frozen: a layer
        # of its own (issue 32 §1).
        risk, policy = adjustments.get(video_id, (0, 0))
        if snap and policy != policy_expected.get(video_id, 0):
            found.append(Found(video_id, DiffLayer.POLICY_HIDDEN, policy_expected.get(video_id, 0), policy,
                               detail={"snapshotId": snapshot_id, "displayCount": display_count}))
            continue
        if snap and (risk != risk_expected.get(video_id, 0) or display_count != max(0, raw - risk - policy)):
            found.append(Found(video_id, DiffLayer.DISPLAY, max(0, raw - risk_expected.get(video_id, 0) - policy),
                               display_count, detail={"snapshotId": snapshot_id, "riskHidden": risk,
                                                      "riskHiddenExpected": risk_expected.get(video_id, 0),
                                                      "policyHidden": policy}))
            continue
        view = views.get(video_id)
        if view is not None and view[1] == snapshot_id and view[0] != display_count:
            found.append(Found(video_id, DiffLayer.COUNT_CACHE, display_count, view[0],
                               detail={"snapshotId": snapshot_id}))
    return found


# --- coverage (REC-3, REC-4) and exact relation equality (REC-5) ----------------------------------


def _liked(rels: dict[tuple[int, str], Rel], video_id: str) -> int:
    return sum(1 for (_u, v), r in rels.items() if v == video_id and r.state == LIKED)


def _verdicts_to_found(bad: dict[str, list[dict]], source, projected) -> list[Found]:
    return [Found(video_id, DiffLayer.PROJECTION, _liked(source, video_id), _liked(projected, video_id),
                  detail={"relations": rows[:DETAIL_MAX], "relationsWrong": len(rows)})
            for video_id, rows in sorted(bad.items())]


def _row(key, s: Rel | None, p: Rel | None, verdict: str) -> dict:
    return {"userId": key[0], "source": [s.state, s.version] if s else None,
            "projected": [p.state, p.version] if p else None, "verdict": verdict}


def _both_sides(gen: routing.GenerationRoutes, videos: list[str], bucket_range) -> tuple[dict, dict]:
    """The facts, then the projection, of `videos` (within the bucket range, if one is given)."""
    source = evidence.source_relations(videos)
    projected = evidence.projected_relations(gen, videos)
    for key in evidence.swept_tombstones(projected, source):  # no row in the facts is the same UNLIKED
        del projected[key]
    if bucket_range is not None:
        def inside(key):
            return bucket_range[0] <= routing.virtual_bucket(gen.space, key[1], key[0]) <= bucket_range[1]
        source = {k: r for k, r in source.items() if inside(k)}
        projected = {k: r for k, r in projected.items() if inside(k)}
    return source, projected


def coverage_chunk(gen: routing.GenerationRoutes, videos: list[str], *, bucket_range=None,
                   settle_s: float | None = None, consumed_through: dict[int, str] | None = None) -> ChunkResult:
    """REC-4 over `videos`, online: source first, then the projection (which may only be newer).
    `consumed_through`: how far `gen` has consumed each stream partition when that is not the live
    count consumer's checkpoint (a restore's generation, replayed by the restore itself)."""
    settle_s = settings.RECONCILE_COVERAGE_SETTLE_S if settle_s is None else settle_s
    result = ChunkResult()
    source, projected = _both_sides(gen, videos, bucket_range)
    result.checked = len(source)
    bad: dict[str, list[dict]] = defaultdict(list)
    behind = [k for k in set(source) | set(projected)
              if (projected.get(k).version if k in projected else 0) < (source[k].version if k in source else 0)]
    deadline = time.monotonic() + settle_s
    while behind and time.monotonic() < deadline:  # an event in flight: wait for it (bounded)
        time.sleep(0.2)  # polling the projection while the pipeline catches up; bounded by settle_s
        fresh = evidence.projected_relations(gen, sorted({k[1] for k in behind}), keys=behind)
        projected.update(fresh)
        behind = [k for k in behind if (projected[k].version if k in projected else 0) < source[k].version]
    ahead = [k for k in set(source) | set(projected)
             if (projected[k].version if k in projected else 0) > (source[k].version if k in source else 0)]
    proofs = evidence.outbox_evidence([(k[0], k[1], source[k].version) for k in behind]
                                      + [(k[0], k[1], projected[k].version) for k in ahead])
    done = (checkpoints_get(COUNT_CONSUMER) if consumed_through is None else consumed_through) if behind else {}

    def consumed(proof: dict) -> bool:
        """The count consumer is past the event: archived (every consumer had it), or its checkpoint on
        the event's partition is at or above the event's entry."""
        if proof["status"] == "ARCHIVED":
            return True
        return (proof["status"] == "SENT" and proof["partition"] is not None and bool(proof["entryId"])
                and streams.entry_id_key(done.get(proof["partition"], "0-0")) >= streams.entry_id_key(proof["entryId"]))

    for k in behind:
        s, p = source[k], projected.get(k)
        proof = proofs.get((k[0], k[1], s.version))
        if proof is None:  # T26: identity may pass, this check must not
            bad[k[1]].append(_row(k, s, p, "no outbox event for the source version (outbox gap)"))
        elif consumed(proof):
            bad[k[1]].append(_row(k, s, p, "consumed but not projected (consumption gap)"))
        else:  # in flight past the settle time: not judged now, listed (REC-7 "which were skipped")
            where = ("published, not yet consumed" if proof["status"] == "SENT"
                     else f"not yet published ({proof['status']})")
            result.skipped.append({"videoId": k[1], "userId": k[0], "reason": f"event {where}"})
    for k in ahead:
        s, p = source.get(k), projected[k]
        proof = proofs.get((k[0], k[1], p.version))
        if proof is None or proof["state"] != p.state:
            bad[k[1]].append(_row(k, s, p, "projected version above the source without outbox evidence"))
    for k in set(source) & set(projected):
        s, p = source[k], projected[k]
        if s.version == p.version and s.state != p.state:
            bad[k[1]].append(_row(k, s, p, "same version, different state"))
    result.found = _verdicts_to_found(bad, source, projected)
    return result


def exact_chunk(gen: routing.GenerationRoutes, videos: list[str], *, bucket_range=None) -> ChunkResult:
    """Inside a cut (the caller holds the snapshots): each relation's projected state and version equal
    the source's, and REC-1 holds."""
    result = ChunkResult()
    source, projected = _both_sides(gen, videos, bucket_range)
    result.checked = len(source)
    bad: dict[str, list[dict]] = defaultdict(list)
    for k in sorted(set(source) | set(projected)):
        s, p = source.get(k), projected.get(k)
        if s != p:
            bad[k[1]].append(_row(k, s, p, "differs at the cut"))
    result.found = _verdicts_to_found(bad, source, projected)
    identity = identity_chunk(gen, videos, bucket_range=bucket_range, settled_layers=False)
    result.found += identity.found
    return result


# --- runs -----------------------------------------------------------------------------------------


def check_run_create(*, mode: str, scope: dict, actor: Actor, kind: str = RunKind.MANUAL, schedule: str = "",
                     job_id: int | None = None, repair_id: int | None = None) -> CheckRun:
    """The run row (QUEUED), audited. Must run inside the caller's transaction on `default` (the ops
    job's, see `reconciliation.jobs`)."""
    if mode not in RunMode.values:
        raise InvalidInput(f"mode is one of {', '.join(RunMode.values)}", code="invalid_mode")
    run = CheckRun.objects.create(mode=mode, scope=scope, kind=kind, schedule=schedule, actor=actor.name,
                                  channel=actor.channel, job_id=job_id, repair_id=repair_id,
                                  total=len(scope["videos"]) if "videos" in scope else None)
    audit_record(actor=actor, action="reconcile.start", target_type="check_run", target_id=str(run.pk),
                 params={"mode": mode, "scope": _scope_summary(scope), "kind": kind, "schedule": schedule})
    return run


def _scope_summary(scope: dict) -> dict:
    if "videos" in scope and len(scope["videos"]) > 20:
        return {"videos": scope["videos"][:20], "videoCount": len(scope["videos"])}
    return scope


def diffs_save(run: CheckRun, found: list[Found]) -> list[CheckDiff]:
    if not found:
        return []
    saved = CheckDiff.objects.bulk_create([CheckDiff(run=run, video_id=f.video_id, virtual_bucket=f.virtual_bucket,
                                                     layer=f.layer, expected=f.expected, actual=f.actual,
                                                     detail=f.detail) for f in found])
    metrics.inc("likes_reconcile_diffs_total", len(found), mode=run.mode)
    return saved


AUTO_FIX_REASON = ("auto-fixed: the count cache's view is rewritten from the durable display snapshot (a cache "
                   "of it, not a layer of evidence: no approval needed)")


def _auto_fix(run: CheckRun, gen: routing.GenerationRoutes, saved: list[CheckDiff]) -> int:
    """A count-cache diff is fixed at once: the cache is rewritten from the durable snapshot (the display
    refresh the pipeline runs anyway). Any other layer is a repair, with its approval."""
    from counting.services import rebuild_scoped
    from likes_project.switches import switch_is_set
    from reconciliation.models import AutoRepairSwitch
    from reconciliation.services import diffs

    cache = [d for d in saved if d.layer == DiffLayer.COUNT_CACHE]
    if not cache or switch_is_set(AutoRepairSwitch):  # paused (issue 14 §3): the diffs stay NEW, recorded
        return 0
    rebuild_scoped.display_refresh_request(gen=gen, video_ids=sorted({d.video_id for d in cache}))
    for d in cache:
        diffs.diff_transition(d, to="FIXED", actor=system_actor("reconcile"), reason=AUTO_FIX_REASON)
    return len(cache)


def check_run_begin(run: CheckRun) -> routing.GenerationRoutes:
    """RUNNING, with the watermarks it is measured against (recorded once, at the first chunk)."""
    gen = routing.load_generation()
    if run.status == RunStatus.QUEUED or not run.watermarks:
        run.watermarks = evidence.watermarks(gen)
        run.status = RunStatus.RUNNING
        run.started_at = run.started_at or timezone.now()
        run.save(update_fields=["watermarks", "status", "started_at"])
    return gen


def check_run_chunk(run: CheckRun, gen: routing.GenerationRoutes) -> bool:
    """One chunk of an identity or coverage run; True when the scope is done."""
    videos = scope_next_videos(run.scope, run.checkpoint, gen, settings.RECONCILE_BATCH_VIDEOS)
    if not videos:
        return True
    bucket_range = _bucket_range(run.scope)
    if run.mode == RunMode.IDENTITY:
        chunk = identity_chunk(gen, videos, bucket_range=bucket_range)
    else:
        chunk = coverage_chunk(gen, videos, bucket_range=bucket_range)
    with transaction.atomic(using="default", durable=True):
        run.diffs_fixed += _auto_fix(run, gen, diffs_save(run, chunk.found))
        run.checked += chunk.checked
        run.diffs_found += len(chunk.found)
        run.skipped = (run.skipped + chunk.skipped)[:500]
        run.checkpoint = {"after": videos[-1], "videos": run.checkpoint.get("videos", 0) + len(videos)}
        run.save(update_fields=["checked", "diffs_found", "diffs_fixed", "skipped", "checkpoint"])
    return False


def check_run_refuse_unfinished(run: CheckRun, reason: str) -> None:
    """A run whose work broke off: REFUSED with `reason` unless it finished meanwhile (it must never stay RUNNING:
    nothing was proven, and a schedule or a retry would wait for it)."""
    run.refresh_from_db()
    if not run.finished:
        check_run_finish(run, status="REFUSED", refused_because=reason[:512])


def check_run_finish(run: CheckRun, *, status: str | None = None, refused_because: str = "",
                     actor: Actor | None = None) -> CheckRun:
    """PASSED when no diff was found, FAILED otherwise, or the given status (REFUSED), audited."""
    status = status or (RunStatus.FAILED if run.diffs_found else RunStatus.PASSED)
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        CheckRun.objects.filter(pk=run.pk).update(status=status, finished_at=now, refused_because=refused_because[:512],
                                                  barrier_held_ms=run.barrier_held_ms, watermarks=run.watermarks,
                                                  checked=run.checked, diffs_found=run.diffs_found,
                                                  diffs_fixed=run.diffs_fixed)
        audit_record(actor=actor or Actor(run.actor, run.channel), action="reconcile.finish",
                     target_type="check_run", target_id=str(run.pk), outcome=status.lower(),
                     params={"mode": run.mode, "checked": run.checked, "diffs": run.diffs_found,
                             "refusedBecause": refused_because[:512]})
    run.refresh_from_db()
    metrics.inc("likes_reconcile_runs_total", mode=run.mode, status=status)
    if run.barrier_held_ms is not None:
        metrics.observe("likes_reconcile_barrier_held_seconds", run.barrier_held_ms / 1000.0)
    return run


def check_run_report(run: CheckRun) -> dict:
    """The contract of `manage.py reconcile --json` (issue 11 §5)."""
    wm = run.watermarks or {}
    out = {
        "runId": run.pk, "mode": run.mode, "status": run.status, "checked": run.checked,
        "diffsFixed": run.diffs_fixed,
        "diffs": [{"videoId": d.video_id, "layer": d.layer, "expected": d.expected, "actual": d.actual,
                   **({"virtualBucket": d.virtual_bucket} if d.virtual_bucket is not None else {}),
                   "diffId": d.pk}
                  for d in run.diffs.order_by("id")],
        "watermarks": {"sourceShards": wm.get("sourceShards", {}), "offsetVector": wm.get("offsetVector", {}),
                       "bucketSpaceVersion": wm.get("bucketSpaceVersion"), "generation": wm.get("generation"),
                       "manifestId": wm.get("manifestId")},
        "skipped": run.skipped,
    }
    if run.barrier_held_ms is not None:
        out["barrierHeldMs"] = round(run.barrier_held_ms, 3)
    if run.status == RunStatus.REFUSED:
        out["refusedBecause"] = run.refused_because
    return out
