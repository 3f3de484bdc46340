"""The phases of the recovery-snapshot benchmark, run by the driver against the seeded data set:

idle     `--idle-rounds` rounds of ours / naive / ceiling (ABC, then CBA) with nothing else running: the build
         time and the artifact sizes on the seeded tables alone;
builds   with the command load and the pipeline running (bench/reconcile's processes and loops): a window of
         load alone, then `--snapshots` builds of ours, `--snapshot-gap` seconds apart (the dispatch pause of
         each, its build time, the commands during it), then `--baseline-runs` rounds of the ceiling and the
         naive build under the same load, then `--after` seconds of load whose events the restore replays;
restore  the command load stopped (its events after the snapshot stay in the stream for the replay; with
         --recover-under-load it keeps running), the pipeline running: every projection row and vbucket of one
         count partition deleted by hand (the partition's data lost), then the repair from the facts
         (`--facts-batches` repairs of `--facts-batch` videos, each requested by one operator, approved by
         another, run by the system's job; extrapolated to every video when not all are repaired), then the
         restore of the last sealed snapshot through the same request and approval flow (`--source
         snapshot:<id>`: verify, load, replay from the offset vector, identity and coverage, fenced switch,
         then the exact run of every video), then the restore's load against its two baselines
         (bench/snapshot/variants.py);
then the load stops, the pipeline drains, and bench/reconcile's final check runs.
"""

from __future__ import annotations

import os
import time
from collections import Counter

from bench.common import percentile, rounded
from bench.projection.state import pipeline_pending
from bench.reconcile import APPROVER, OPERATOR
from bench.reconcile.phases import Harness
from bench.sampler import merge_resources
from bench.snapshot import log, variants

VARIANTS = ("ours", "naive", "ceiling")


def _t(model) -> str:
    return model._meta.db_table


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))  # a window of load alone (what the phase measures against)


def sampled(h: Harness, fn):
    """fn() with the resource sampler over it, the driver labelled (the naive and ceiling builds run there)."""
    labels = {**h.layout.labels(h.pool), os.getpid(): "driver (naive / ceiling)"}
    h.sampler.start(time.time(), time.time() + 24 * 3600, pid_labels=labels)
    try:
        out = fn()
    finally:
        resources = h.sampler.stop()
    return out, resources


def build(h: Harness, variant: str, tag: str) -> dict:
    if variant == "ours":
        return variants.ours_build(h, tag)
    if variant == "naive":
        return variants.naive_build(tag)
    return variants.ceiling_build(tag)


def _ms(x) -> str:
    return "-" if x is None else f"{x:,.0f}"


def say_build(where: str, r: dict) -> None:
    extra = f", {r['status']}" + (f" ({r['failure'][:160]})" if r.get("failure") else "")
    log(f"  {where} {r['variant']} {r['tag']}: {r['rows']:,} rows, {r['bytes'] / 1e6:,.1f} MB, build "
        f"{_ms(r['build_ms'])} ms (dump {_ms(r.get('dump_ms'))} ms), dispatch paused {_ms(r['paused_ms'])} ms{extra}")


def variants_wanted(h: Harness) -> list[str]:
    return [v for v in VARIANTS if not (v == "naive" and "naive" in h.args.skip_set)]


def phase_idle(h: Harness) -> list[dict]:
    rows = []
    for rnd in range(h.args.idle_rounds):
        order = variants_wanted(h)
        if rnd % 2:
            order.reverse()
        for variant in order:
            r, res = sampled(h, lambda v=variant, n=rnd: build(h, v, f"idle-{n + 1}"))
            r.update(round=rnd, load=False, resources=res)
            rows.append(r)
            say_build("idle", r)
    return rows


# --- the command load and the pipeline, from the first build under load to the end of the restore --------------


def load_start(h: Harness, videos: list[str], *, batches: int) -> dict:
    args = h.args
    hard = (time.time() + args.warmup + args.window + args.after + 600
            + (args.snapshots + 2 * args.baseline_runs) * 600 + (batches + 2) * args.check_timeout)
    h.pipeline_start(hard)
    t_start = time.time() + 1.0
    h.commands_start(videos, "snapshot", t_start, hard)
    return {"t_start": t_start, "hard": hard}


def pending_active() -> dict:
    """pipeline_pending(), the dirty marks counted for the active generation only: a retired generation's
    marks (left by passes that projected into it before a switch) are nobody's work any more."""
    from django.conf import settings

    from counting import routing as count_routing
    from counting.models import DirtyVideo

    pending = pipeline_pending()
    if set(pending) != {"dirty"}:
        return pending
    gen = count_routing.load_generation()
    dirty = sum(DirtyVideo.objects.using(a).filter(generation=gen.generation).count()
                for a in settings.COUNT_PARTITION_ALIASES)
    return {"dirty": dirty} if dirty else {}


def load_stop(h: Harness, cmds: dict | None = None) -> tuple[dict, dict]:
    """Stop the command load (unless `cmds` says it already was), wait for the pipeline to drain (the active
    generation), stop the loops."""
    if cmds is None:
        cmds = h.commands_stop()
    t0 = time.time()
    pending: dict = {"not checked": True}
    for _ in range(100_000):
        pending = pending_active()
        if not pending or time.time() - t0 > h.args.drain_timeout:
            break
        time.sleep(0.25)  # poll the drain (bounded by --drain-timeout)
    drain_s = round(time.time() - t0, 1)
    stale = pipeline_pending().get("dirty", 0) if not pending else 0
    if stale:
        log(f"  the active generation is drained; {stale} dirty marks of the retired generation remain (nothing "
            "refreshes a retired generation; bench/projection/state.pipeline_pending still counts them)")
    saved = h.args.drain_timeout
    h.args.drain_timeout = 0.0 if stale else saved
    try:
        loops = h.pipeline_stop()
    finally:
        h.args.drain_timeout = saved
    loops.update(drained=not pending, pending=pending, drain_s=drain_s, stale_dirty_marks=stale)
    return cmds, loops


def phase_builds(h: Harness, load: dict) -> dict:
    """Builds of ours, then the baselines, under the load; then the load the restore will replay."""
    args = h.args
    t_pre0 = load["t_start"] + args.warmup
    _sleep_until(t_pre0 + args.window)
    t_pre1 = time.time()
    ours = []
    for i in range(args.snapshots):
        r, res = sampled(h, lambda n=i: variants.ours_build(h, f"load-{n + 1}"))
        r.update(load=True, resources=res)
        ours.append(r)
        say_build("load", r)
        time.sleep(args.snapshot_gap)  # load alone between two builds
    baselines = []
    for rnd in range(args.baseline_runs):
        # The ceiling first: the naive build's long stop leaves a backlog whose full passes lengthen the next pause.
        order = [v for v in ("ceiling", "naive") if v in variants_wanted(h)]
        if rnd % 2:
            order.reverse()
        for variant in order:
            r, res = sampled(h, lambda v=variant, n=rnd: build(h, v, f"load-{n + 1}"))
            r.update(load=True, resources=res, round=rnd)
            baselines.append(r)
            say_build("load", r)
            time.sleep(args.snapshot_gap)  # load alone between two builds
    sealed = [r for r in ours if r["status"] == "SEALED"]
    t_after0 = time.time()
    time.sleep(args.after)  # load after the builds: the events the restore replays from the offset vector
    return {"ours": ours, "baselines": baselines, "pre": [t_pre0, t_pre1], "after": [t_after0, time.time()],
            "sealed_id": sealed[-1]["snapshot_id"] if sealed else None}


def pause_summary(builds: list[dict]) -> dict:
    paused = sorted(r["paused_ms"] for r in builds if r.get("paused_ms") is not None)
    total = sorted(r["build_ms"] for r in builds if r.get("build_ms") is not None)
    job = sorted(r["job_s"] for r in builds if r.get("job_s") is not None)
    return {"builds": len(builds), "statuses": dict(Counter(r["status"] for r in builds)),
            "paused_p50_ms": rounded(percentile(paused, 0.5), 1), "paused_p99_ms": rounded(percentile(paused, 0.99), 1),
            "paused_max_ms": rounded(paused[-1] if paused else None, 1),
            "paused_min_ms": rounded(paused[0] if paused else None, 1),
            "build_p50_ms": rounded(percentile(total, 0.5), 0), "build_p99_ms": rounded(percentile(total, 0.99), 0),
            "job_p50_s": rounded(percentile(job, 0.5), 2),
            "resources": merge_resources([r.get("resources") or {} for r in builds])}


# --- restore against repair from the facts ---------------------------------------------------------------


def damage_partition(alias: str) -> dict:
    """By hand in SQL: every projection row and vbucket of the active generation on `alias` deleted (the
    partition's data lost; the facts, the stream and the other partitions untouched)."""
    from django.db import connections, transaction

    from counting import routing as count_routing
    from counting.models import LikeCountProjection, VideoLikeCountVbucket

    gen = count_routing.load_generation()
    t0 = time.perf_counter()
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        cur.execute(f"DELETE FROM {_t(LikeCountProjection)} WHERE generation = %s", [gen.generation])
        rows = cur.rowcount
        cur.execute(f"DELETE FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s", [gen.generation])
        buckets = cur.rowcount
    return {"partition": alias, "generation": gen.generation, "projection_rows": rows, "vbuckets": buckets,
            "s": round(time.perf_counter() - t0, 2)}


def facts_batches(videos: list[str], size: int, count: int) -> list[list[str]]:
    """`count` scopes of `size` videos spread evenly over the videos (0: every video, in scopes of `size`)."""
    if count == 0 or count * size >= len(videos):
        return [videos[i:i + size] for i in range(0, len(videos), size)]
    step = len(videos) // count
    return [videos[i * step:i * step + size] for i in range(count)]


def _approved_job(source: str, reason: str, videos: list[str] | None):
    from likes_project.audit.services import Actor
    from reconciliation.services import repair as repair_service

    request = repair_service.repair_request(actor=Actor(name=OPERATOR, channel="cli"), source=source,
                                            reason=reason, videos=videos)
    t_approve = time.time()
    approved = repair_service.repair_approve(repair_id=request.pk, actor=Actor(name=APPROVER, channel="cli"))
    return request.pk, approved.job_id, t_approve


def _verify(run_id) -> dict:
    from reconciliation.models import CheckRun

    run = CheckRun.objects.filter(pk=run_id).first() if run_id else None
    if run is None:
        return {"verify_status": None, "verify_s": None, "verify_barrier_ms": None, "verify_checked": None}
    seconds = (run.finished_at - run.started_at).total_seconds() if run.finished_at and run.started_at else None
    return {"verify_status": run.status, "verify_s": rounded(seconds, 2), "verify_barrier_ms": run.barrier_held_ms,
            "verify_checked": run.checked, "verify_refused": run.refused_because or None}


def facts_repair(h: Harness, videos: list[str], i: int) -> dict:
    from reconciliation.models import RepairRequest

    repair_id, job_id, t_approve = _approved_job("facts", f"bench: partition lost, facts batch {i + 1}", videos)
    out = h.check("opsjob", job_id=job_id, timeout=h.args.check_timeout)
    repaired = RepairRequest.objects.get(pk=repair_id)
    result = repaired.result or {}
    rebuild = result.get("rebuild") or {}
    verify = _verify(repaired.verify_run_id)
    job_s = out["t_end"] - out["t_start"]
    r = {"batch": i, "videos": len(videos), "repair_id": repair_id, "status": repaired.status,
         "error": repaired.error or None, "layers": {k: len(v) for k, v in (result.get("layers") or {}).items()},
         "t_start": t_approve, "t_end": out["t_end"], "approve_to_done_s": round(out["t_end"] - t_approve, 3),
         "job_s": round(job_s, 3),
         "repair_s": round(job_s - verify["verify_s"], 3) if verify["verify_s"] is not None else None,
         "barrier_ms": rebuild.get("barrierHeldMs"), "relations_written": rebuild.get("relationsWritten"),
         "tail_folded": rebuild.get("tailFolded"), **verify,
         "said": [(round(t - t_approve, 3), m[:160]) for t, m in out["said"]][:10], "logged": out.get("logged")}
    log(f"  facts repair {i + 1} ({len(videos)} videos): {r['status']} in {r['approve_to_done_s']:.1f} s from approval "
        f"(exact verify {verify['verify_s']} s, {verify['verify_status']}); {r['relations_written']} projection rows "
        f"written, barrier {rebuild.get('barrierHeldMs')} ms")
    return r


def _said_at(said: list[tuple[float, str]], prefix: str) -> float | None:
    return next((t for t, m in said if m.startswith(prefix)), None)


def snapshot_restore(h: Harness, snapshot_id: int) -> dict:
    from reconciliation.models import RepairRequest

    repair_id, job_id, t_approve = _approved_job(f"snapshot:{snapshot_id}", "bench: partition lost, restore", None)
    out = h.check("opsjob", job_id=job_id, timeout=h.args.check_timeout)
    repaired = RepairRequest.objects.get(pk=repair_id)
    res = repaired.result or {}
    said = [(round(t - t_approve, 3), m[:200]) for t, m in out["said"]]
    verify = _verify(repaired.verify_run_id)
    replayed = (res.get("replayed") or 0) + (res.get("finalReplayed") or 0)
    replay_ms = res.get("replayMs")
    r = {"snapshot_id": snapshot_id, "repair_id": repair_id, "status": repaired.status,
         "error": repaired.error or None, "problems": res.get("problems"), "generation": res.get("generation"),
         "previous_generation": res.get("previousGeneration"), "loaded": res.get("loaded"),
         "rows_loaded": sum((res.get("loaded") or {}).values()),
         "verify_before_s": _said_at(said, "restoring snapshot"), "load_ms": res.get("loadMs"),
         "replay_ms": replay_ms, "replayed": res.get("replayed"), "final_replayed": res.get("finalReplayed"),
         "replayed_per_s": round(replayed / (replay_ms / 1000), 1) if replay_ms else None,
         "check_ms": res.get("checkMs"), "coverage_checked": res.get("coverageChecked"),
         "identity_diffs": len(res.get("identityDiffs") or []), "coverage_diffs": len(res.get("coverageDiffs") or []),
         "fence_ms": res.get("fenceMs"), "approve_to_switch_s": _said_at(said, "switched generation"),
         "approve_to_done_s": round(out["t_end"] - t_approve, 3), "job_s": round(out["t_end"] - out["t_start"], 3),
         "t_start": t_approve, "t_end": out["t_end"], **verify, "said": said[:14], "logged": out.get("logged")}
    log(f"  restore of snapshot {snapshot_id}: {r['status']}; load {_ms(r['load_ms'])} ms, replay {replayed:,} entries "
        f"in {_ms(replay_ms)} ms, checks {_ms(r['check_ms'])} ms, fence {_ms(r['fence_ms'])} ms; approval -> switch "
        f"{r['approve_to_switch_s']} s, -> done {r['approve_to_done_s']} s (exact verify {verify['verify_s']} s, "
        f"{verify['verify_status']})" + (f"; error {r['error']}" if r["error"] else "")
        + (f"; the job's process logged {r['logged']}" if r["logged"] else ""))
    return r


def facts_extrapolated(rows: list[dict], all_videos: int) -> dict:
    """The facts repair of every video from the batches measured: linear in the number of batches (one repair
    per --facts-batch videos, as an operator would run them)."""
    done = [r for r in rows if r["status"] == "SUCCEEDED"]
    videos = sum(r["videos"] for r in done)
    if not done or not videos:
        return {"measured_videos": videos, "all_videos": all_videos, "extrapolated": None}
    per_video = sum(r["approve_to_done_s"] for r in done) / videos
    repair_only = [r for r in done if r["repair_s"] is not None]
    per_video_repair = (sum(r["repair_s"] for r in repair_only) / sum(r["videos"] for r in repair_only)
                        if repair_only else None)
    return {"measured_batches": len(done), "measured_videos": videos, "all_videos": all_videos,
            "extrapolated": videos < all_videos, "per_video_s": round(per_video, 5),
            "all_s": round(per_video * all_videos, 1),
            "all_repair_only_s": round(per_video_repair * all_videos, 1) if per_video_repair is not None else None}


def phase_restore(h: Harness, videos: list[str], snapshot_id: int, batches: list[list[str]]) -> dict:
    from django.conf import settings

    alias = h.args.damage_partition or settings.COUNT_PARTITION_ALIASES[-1]
    damaged = damage_partition(alias)
    log(f"  partition {alias} damaged by hand: {damaged['projection_rows']:,} projection rows and "
        f"{damaged['vbuckets']:,} vbuckets of generation {damaged['generation']} deleted in {damaged['s']} s")
    facts, facts_res = [], []
    for i, chunk in enumerate(batches):
        r, res = sampled(h, lambda c=chunk, n=i: facts_repair(h, c, n))
        facts.append(r)
        facts_res.append(res)
    restore, restore_res = sampled(h, lambda: snapshot_restore(h, snapshot_id))
    restore["resources"] = restore_res
    loads: dict = {"ours": {"variant": "ours", "rows": restore["rows_loaded"], "load_ms": restore["load_ms"],
                            "rows_per_s": round(restore["rows_loaded"] / (restore["load_ms"] / 1000), 1)
                            if restore["load_ms"] else None}}
    if restore.get("generation") and restore["status"] == "SUCCEEDED":
        log("  the restore's load against raw COPY FROM and an ORM bulk_create (rolled back) ...")
        loads["ceiling"] = variants.ceiling_load(restore["generation"])
        if "naive" not in h.args.skip_set:
            loads["naive"] = variants.naive_load()
        for v in ("ceiling", "naive"):
            if loads.get(v):
                log(f"  load {v}: {loads[v]['rows']:,} rows in {_ms(loads[v]['load_ms'])} ms")
    return {"damage": damaged, "facts": facts, "facts_resources": merge_resources(facts_res),
            "facts_all": facts_extrapolated(facts, len(videos)), "restore": restore, "loads": loads}
