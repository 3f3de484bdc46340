"""The phases of the reconciliation benchmark, run by the driver against the seeded data set:

coverage (idle)   a coverage run over every video (the ops job `manage.py reconcile --mode coverage --all`
                  starts), the naive baseline and the SQL ceiling, nothing else running, in ABC / CBA order;
coverage (load)   the same three while the command load and the pipeline run, each in turn, between a
                  window of load alone before and after: relations/s of each, and commands/s with and
                  without a check running;
exact             `--exact-runs` exact runs over `--exact-videos` videos while the load runs: the barrier
                  hold (CheckRun.barrier_held_ms), the time to the verdict, and what the commands met;
repair            the hot video damaged by hand in SQL, found by coverage, a repair requested by one
                  operator and approved by another, the system's job run: approval -> the live count
                  (display_count_get) showing the facts again.
Each phase starts and stops its own loops; the drain after the load is what bench/projection's is."""

from __future__ import annotations

import secrets
import time
import zlib
from collections import Counter

from bench.common import percentile, rounded
from bench.projection.state import pipeline_pending
from bench.reconcile import APPROVER, OPERATOR, SEED_HOT_VIDEO, log
from bench.reconcile.pool import Layout, Pool

COLLECT_SLACK_S = 120.0


def _t(model) -> str:
    return model._meta.db_table


class Harness:
    """The pool, its layout, the sampler and the run's options: start and stop the loops, run one check."""

    def __init__(self, pool: Pool, layout: Layout, sampler, args, users: list):
        self.pool, self.layout, self.sampler, self.args, self.users = pool, layout, sampler, args, users
        self.run_id = secrets.token_hex(3)
        self.acks: list[list] = []  # every command phase's last acknowledged states, in phase order
        self._probing = False

    # --- loops ------------------------------------------------------------------------------------

    def pipeline_start(self, hard: float) -> None:
        now = time.time()
        times = {"t_start": now, "t_measure": now, "t_end": hard, "hard_deadline": hard}
        for alias, i in self.layout.publishers.items():
            self.pool.submit(i, {**times, "role": "publisher", "tag": f"pub-{alias}", "alias": alias,
                                 "idle_s": self.args.publish_idle})
        for share, i in zip(self.layout.shares, self.layout.projectors, strict=False):
            self.pool.submit(i, {**times, "role": "projector", "tag": "proj", "variant": "ours", "mode": "sustained",
                                 "partitions": share, "idle_s": self.args.project_idle})
        self.pool.submit(self.layout.snapshot, {**times, "role": "snapshot", "tag": "snap",
                                                "interval_s": self.args.snapshot_interval})

    def pipeline_stop(self) -> dict:
        """Keep the loops running until nothing is pending (bounded by --drain-timeout), then stop them."""
        t0 = time.time()
        pending: dict = {"not checked": True}
        for _ in range(100_000):
            pending = pipeline_pending()
            if not pending or time.time() - t0 > self.args.drain_timeout:
                break
            time.sleep(0.25)  # poll the drain (bounded by --drain-timeout)
        self.pool.stop.set()
        try:
            loops = self.pool.collect(self.layout.loops, timeout=60)
        finally:
            self.pool.stop.clear()
        if pending:
            log(f"  the pipeline did NOT drain within {self.args.drain_timeout:.0f}s: {pending}")
        pubs = [loops[i] for i in self.layout.publishers.values()]
        projs = [loops[i] for i in self.layout.projectors[:len(self.layout.shares)]]
        errors: Counter = Counter()
        for r in [*pubs, *projs, loops[self.layout.snapshot]]:
            errors.update(r.get("errors") or {})
        return {"drained": not pending, "pending": pending, "drain_s": round(time.time() - t0, 1),
                "published": sum(p.get("sent", 0) for p in pubs), "applied": sum(p.get("applied", 0) for p in projs),
                "projector_statuses": dict(sum((Counter(p.get("statuses", {})) for p in projs), Counter())),
                "snapshot_runs": loops[self.layout.snapshot].get("runs", 0),
                "snapshot_p50_ms": loops[self.layout.snapshot].get("p50_ms"),
                "snapshot_p99_ms": loops[self.layout.snapshot].get("p99_ms"),
                "projector_logged": dict(sum((Counter(p.get("logged", {})) for p in projs), Counter())),
                "loop_errors": dict(errors)}

    def commands_start(self, videos: list[str], phase: str, t_start: float, hard: float,
                       probe: list[str] | None = None) -> None:
        """The load on `videos`; with `probe`, the first client instead sends only no-change commands (UNLIKED
        on relations that do not exist) on the `probe` videos: they pass the write barrier like any command
        but leave the facts as they are."""
        self.pool.cmd_stop.clear()
        n = len(self.layout.commands)
        for k, i in enumerate(self.layout.commands):
            seed = self.args.seed * 1000 + k + zlib.crc32(phase.encode()) % 997
            probing = probe is not None and k == 0
            self.pool.submit(i, {"role": "commands", "tag": f"cmd-{phase}", "users": self.users[k::n],
                                 "videos": probe if probing else videos,
                                 "mix": {"noop": 100.0} if probing else self.args.mix_shares, "seed": seed,
                                 "key_prefix": f"rc{self.run_id}{phase[:3]}{k}", "t_start": t_start,
                                 "hard_deadline": hard, "probe": probing})
        self._probing = probe is not None

    def commands_stop(self) -> dict:
        """Stop the load; every command of every client, merged in completion order (the probe's apart)."""
        self.pool.cmd_stop.set()
        res = self.pool.collect(self.layout.commands, timeout=COLLECT_SLACK_S)

        def merged(results) -> list[tuple]:
            return sorted((t, lat, out, w) for r in results for t, lat, out, w in
                          zip(r["t_done"], r["latency_ms"], r["outcome"], r["waited"], strict=True))

        probe_index = self.layout.commands[0] if self._probing else None
        self.acks.append([a for r in res.values() for a in r["last_ack"]])
        return {"rows": merged(r for i, r in res.items() if i != probe_index),
                "probe_rows": merged([res[probe_index]]) if probe_index is not None else []}

    def check(self, what: str, *, timeout: float, **params) -> dict:
        self.pool.submit(self.layout.checker, {"role": "checker", "tag": f"check-{what}", "what": what, **params})
        return self.pool.collect([self.layout.checker], timeout=timeout)[self.layout.checker]

    def check_submit(self, what: str, **params) -> None:
        self.pool.submit(self.layout.checker, {"role": "checker", "tag": f"check-{what}", "what": what, **params})

    def check_collect(self, timeout: float) -> dict:
        return self.pool.collect([self.layout.checker], timeout=timeout)[self.layout.checker]

    def sampled(self, fn):
        """fn() with the resource sampler running over it; (its result, the resources)."""
        self.sampler.start(time.time(), time.time() + 24 * 3600, pid_labels=self.layout.labels(self.pool))
        try:
            out = fn()
        finally:
            resources = self.sampler.stop()
        return out, resources


# --- the commands' figures --------------------------------------------------------------------------


def command_figures(rows: list[tuple], t0: float, t1: float) -> dict:
    """The commands that completed in [t0, t1): count, commands/s (acknowledged), latency, outcomes, waits."""
    inside = [r for r in rows if t0 <= r[0] < t1]
    ok = [r for r in inside if r[2] == "ok"]
    lat = sorted(r[1] for r in ok)
    waited = sorted(r[1] for r in inside if r[3])
    seconds = max(t1 - t0, 1e-9)
    outcomes = Counter(r[2] for r in inside)
    return {"seconds": round(seconds, 2), "commands": len(inside), "ok": len(ok),
            "commands_per_s": round(len(ok) / seconds, 1),
            "p50_ms": rounded(percentile(lat, 0.5), 1), "p99_ms": rounded(percentile(lat, 0.99), 1),
            "waited": len(waited), "waited_p50_ms": rounded(percentile(waited, 0.5), 1),
            "waited_p99_ms": rounded(percentile(waited, 0.99), 1),
            "waited_max_ms": rounded(waited[-1] if waited else None, 1),
            "barrier_503": outcomes.get("503 write_barrier", 0),
            "errors": {k: v for k, v in outcomes.items() if k not in ("ok", "503 write_barrier")}}


def _pooled_windows(rows, windows: list[tuple[float, float]]) -> dict:
    """command_figures over several windows, pooled."""
    parts = [command_figures(rows, a, b) for a, b in windows if b > a]
    if not parts:
        return {}
    seconds = sum(p["seconds"] for p in parts)
    inside = [r for r in rows if any(a <= r[0] < b for a, b in windows)]
    lat = sorted(r[1] for r in inside if r[2] == "ok")
    ok = sum(p["ok"] for p in parts)
    return {"seconds": round(seconds, 2), "commands": sum(p["commands"] for p in parts), "ok": ok,
            "commands_per_s": round(ok / seconds, 1) if seconds else None,
            "p50_ms": rounded(percentile(lat, 0.5), 1), "p99_ms": rounded(percentile(lat, 0.99), 1),
            "barrier_503": sum(p["barrier_503"] for p in parts),
            "errors": dict(sum((Counter(p["errors"]) for p in parts), Counter()))}


# --- coverage -----------------------------------------------------------------------------------------


def _relations_per_s(out: dict) -> dict:
    checked = out.get("checked", out.get("relations"))
    out["relations"] = checked
    out["relations_per_s"] = round(checked / out["elapsed_s"], 1) if checked and out.get("elapsed_s") else None
    return out


def run_one(h: Harness, variant: str) -> dict:
    timeout = h.args.check_timeout
    if variant == "ours":
        out = h.check("check", mode="coverage", scope={"all": True}, timeout=timeout)
    else:
        out = h.check(variant, timeout=timeout)
    out["variant"] = variant
    return _relations_per_s(out)


def _say(tag: str, r: dict) -> None:
    extra = (f", {r['status']}, {r['diffs']} diffs, {r['skipped']} skipped" if r["variant"] == "ours"
             else f", {r['mismatched_videos']} videos differ")
    log(f"  {tag} {r['variant']}: {r['relations']:,} relations in {r['elapsed_s']:.2f}s = "
        f"{r['relations_per_s']:,.0f} relations/s{extra}")


def phase_coverage_idle(h: Harness) -> list[dict]:
    """Ours, the naive baseline and the ceiling with nothing else running; rounds in ABC, CBA order."""
    rows = []
    for rnd in range(h.args.coverage_rounds):
        order = ["ours", "naive", "ceiling"]
        if rnd % 2:
            order.reverse()
        for variant in order:
            r, res = h.sampled(lambda v=variant: run_one(h, v))
            r.update(round=rnd, load=False, resources=res)
            rows.append(r)
            _say("idle", r)
    return rows


def phase_coverage_load(h: Harness, videos: list[str]) -> dict:
    """The load and the pipeline, a window of load alone, then ours, the naive baseline and the ceiling one
    after the other, then a window of load alone; relations/s of each and commands/s inside each."""
    args = h.args
    hard = time.time() + args.warmup + 2 * args.window + 3 * args.check_timeout + 60
    h.pipeline_start(hard)
    t_start = time.time() + 1.0
    h.commands_start(videos, "coverage", t_start, hard)
    t_pre0 = t_start + args.warmup
    time.sleep(max(0.0, t_pre0 + args.window - time.time()))  # the load-alone window before the checks
    t_pre1 = time.time()
    checks = []
    for variant in ("ours", "naive", "ceiling"):
        r, res = h.sampled(lambda v=variant: run_one(h, v))
        r.update(load=True, resources=res)
        checks.append(r)
        _say("load", r)
        time.sleep(1.0)  # a gap of load alone between two checks
    t_post0 = time.time()
    time.sleep(args.window)  # the load-alone window after the checks
    t_post1 = time.time()
    cmds = h.commands_stop()
    loops = h.pipeline_stop()
    rows = cmds["rows"]
    baseline = _pooled_windows(rows, [(t_pre0, t_pre1), (t_post0, t_post1)])
    for r in checks:
        r["commands"] = command_figures(rows, r["t_start"], r["t_end"])
    log(f"  load alone: {baseline.get('commands_per_s')} commands/s; during ours "
        f"{checks[0]['commands']['commands_per_s']}, naive {checks[1]['commands']['commands_per_s']}, ceiling "
        f"{checks[2]['commands']['commands_per_s']} commands/s; pipeline drained in {loops['drain_s']}s")
    return {"checks": checks, "without_check": baseline, "loops": loops,
            "windows": {"pre": [t_pre0, t_pre1], "post": [t_post0, t_post1]}}


# --- exact ---------------------------------------------------------------------------------------------


def phase_exact(h: Harness, scope_videos: list[str]) -> dict:
    """`--exact-runs` exact runs of `scope_videos` while the load runs on those videos (a run starts when
    the previous one is done and --exact-gap has passed; none starts after --exact-budget seconds)."""
    args = h.args
    budget = args.exact_budget if args.exact_budget > 0 else float("inf")
    hard = time.time() + args.warmup + min(budget, 24 * 3600) + args.exact_runs * (args.exact_gap + 5) \
        + 2 * args.check_timeout + 60
    h.pipeline_start(hard)
    t_start = time.time() + 1.0
    h.commands_start(scope_videos, "exact", t_start, hard)
    time.sleep(max(0.0, t_start + args.warmup - time.time()))  # warm-up of the load
    t0 = time.time()
    runs = []
    for i in range(args.exact_runs):
        if time.time() - t0 >= budget:
            log(f"  exact: the budget of {args.exact_budget:g}s is spent after {i} runs")
            break
        r = h.check("check", mode="exact", scope={"videos": scope_videos}, timeout=args.check_timeout)
        runs.append(r)
        log(f"  exact run {i + 1}: {r['status']}, barrier held {fmt_ms(r['barrier_held_ms'])} ms, result after "
            f"{r['elapsed_s']:.1f}s, {r['checked']:,} relations, {r['diffs']} diffs"
            + (f", refused: {r['refused_because']}" if r["refused_because"] else ""))
        time.sleep(args.exact_gap)  # load alone between two runs
    t1 = time.time()
    cmds = h.commands_stop()
    loops = h.pipeline_stop()
    held = sorted(r["barrier_held_ms"] for r in runs if r["barrier_held_ms"] is not None)
    result_s = sorted(r["elapsed_s"] for r in runs)
    return {
        "videos": len(scope_videos), "runs": runs, "runs_done": len(runs), "runs_wanted": args.exact_runs,
        "statuses": dict(Counter(r["status"] for r in runs)),
        "barrier_p50_ms": rounded(percentile(held, 0.5), 1), "barrier_p99_ms": rounded(percentile(held, 0.99), 1),
        "barrier_max_ms": rounded(held[-1] if held else None, 1),
        "result_p50_s": rounded(percentile(result_s, 0.5), 2), "result_p99_s": rounded(percentile(result_s, 0.99), 2),
        "relations_checked": runs[0]["checked"] if runs else None,
        "commands": command_figures(cmds["rows"], t0, t1), "loops": loops,
    }


def fmt_ms(x) -> str:
    return "-" if x is None else f"{x:.1f}"


# --- repair --------------------------------------------------------------------------------------------


def facts_liked(video: str) -> int:
    from django.conf import settings
    from django.db import connections

    from relations.models import LikeRelation

    total = 0
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {_t(LikeRelation)} WHERE video_id = %s AND state = 'LIKED'", [video])
            total += int(cur.fetchone()[0])
    return total


def damage(video: str, n: int, salt: str) -> int:
    """By hand in SQL, on each count partition: `n` (split over the partitions) LIKED projection rows of `video`
    deleted and their buckets decremented (a projection that missed those events: identity still holds, the
    display follows), and a dirty mark so the snapshot job carries it up to the display. Returns rows removed."""
    from django.conf import settings
    from django.db import connections, transaction
    from django.utils import timezone

    from counting import routing as count_routing
    from counting.models import DirtyVideo, LikeCountProjection, VideoLikeCountVbucket

    gen = count_routing.load_generation()
    aliases = list(settings.COUNT_PARTITION_ALIASES)
    removed = 0
    now = timezone.now()
    for k, alias in enumerate(aliases):
        share = n // len(aliases) + (1 if k < n % len(aliases) else 0)
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute(
                f"DELETE FROM {_t(LikeCountProjection)} WHERE id IN (SELECT id FROM {_t(LikeCountProjection)} "
                "WHERE generation = %s AND video_id = %s AND projected_state = 'LIKED' AND virtual_bucket = ANY(%s) "
                "ORDER BY md5(user_id::text || %s) LIMIT %s) RETURNING virtual_bucket",
                [gen.generation, video, gen.buckets_on(alias), salt, share])
            per_bucket = Counter(r[0] for r in cur.fetchall())
            cur.executemany(
                f"UPDATE {_t(VideoLikeCountVbucket)} SET active_count = active_count - %s, "
                "bucket_version = bucket_version + 1, updated_at = %s WHERE generation = %s AND video_id = %s "
                "AND virtual_bucket = %s",
                [(d, now, gen.generation, video, vb) for vb, d in sorted(per_bucket.items())])
            cur.execute(
                f"INSERT INTO {_t(DirtyVideo)} AS d (generation, video_id, source_partition, dirty_seq, "
                "first_dirty_at, last_dirty_at) VALUES (%s, %s, 0, 1, %s, %s) ON CONFLICT (generation, video_id, "
                "source_partition) DO UPDATE SET dirty_seq = d.dirty_seq + 1, last_dirty_at = EXCLUDED.last_dirty_at",
                [gen.generation, video, now, now])
            removed += sum(per_bucket.values())
    return removed


def served_count(video: str) -> tuple[int, str]:
    """What GET .../like-count answers now, without this process's L1 (the Redis view, else the snapshot)."""
    from counting.selectors import display_count_get, display_l1

    display_l1().clear()
    got = display_count_get(video_id=video)
    return got.display_count, got.source


def wait_served(video: str, want: int, timeout: float, poll: float) -> float | None:
    """Seconds until the served count is `want` (None: not within `timeout`)."""
    t0 = time.time()
    for _ in range(1_000_000):
        if served_count(video)[0] == want:
            return time.time() - t0
        if time.time() - t0 > timeout:
            return None
        time.sleep(poll)  # polling the read path (its resolution)
    return None


def repair_round(h: Harness, rnd: int) -> dict:
    from likes_project.audit.services import Actor
    from reconciliation.models import CheckRun, RepairRequest
    from reconciliation.services import repair as repair_service

    args, video = h.args, SEED_HOT_VIDEO
    facts = facts_liked(video)
    removed = damage(video, args.damage, salt=f"{h.run_id}-{rnd}")
    shown = wait_served(video, facts - removed, timeout=30, poll=args.poll)
    log(f"  repair round {rnd + 1}: {removed:,} projection rows of {video} removed by hand; the served count showed "
        f"{facts - removed:,} after {fmt_s(shown)} s")
    found = h.check("check", mode="coverage", scope={"videos": [video]}, timeout=args.check_timeout)
    log(f"  coverage of {video}: {found['status']}, diffs {found['diff_layers']} in {found['elapsed_s']:.1f}s")
    reason = f"bench: {removed} projection rows removed by hand (round {rnd + 1})"
    request = repair_service.repair_request(actor=Actor(name=OPERATOR, channel="cli"), source="facts", reason=reason,
                                            diff_ids=found["diff_ids"])
    t_approve = time.time()
    approved = repair_service.repair_approve(repair_id=request.pk, actor=Actor(name=APPROVER, channel="cli"))
    t_approved = time.time()
    h.check_submit("opsjob", job_id=approved.job_id)
    live = wait_served(video, facts, timeout=args.check_timeout, poll=args.poll)
    t_live = time.time() if live is not None else None
    job = h.check_collect(timeout=args.check_timeout)
    repaired = RepairRequest.objects.get(pk=request.pk)
    verify = CheckRun.objects.filter(pk=repaired.verify_run_id).first()
    rebuild = (repaired.result or {}).get("rebuild", {})
    said = [(round(t - t_approve, 3), m) for t, m in job.get("said", [])]
    detected = next((t for t, m in said if m.startswith("broken layers")), None)
    out = {
        "round": rnd, "t_approve": t_approve, "t_job_done": job["t_end"], "facts": facts, "damaged": removed,
        "damage_shown_s": rounded(shown, 2),
        "coverage_status": found["status"], "coverage_diffs": found["diff_layers"],
        "coverage_s": found["elapsed_s"], "repair_id": request.pk, "status": repaired.status,
        "error": repaired.error, "layers": (repaired.result or {}).get("layers"),
        "approve_call_ms": round((t_approved - t_approve) * 1000, 1), "layers_found_after_s": detected,
        "approve_to_live_s": rounded(t_live - t_approve, 3) if t_live else None,
        "approve_to_job_done_s": round(job["t_end"] - t_approve, 3),
        "job_s": round(job["t_end"] - job["t_start"], 3), "job_status": job["job_status"],
        "repair_barrier_ms": rebuild.get("barrierHeldMs"), "tail_folded": rebuild.get("tailFolded"),
        "relations_written": rebuild.get("relationsWritten"),
        "newer_than_facts": len(rebuild.get("newerThanFacts", [])),
        "verify_status": verify.status if verify else None,
        "verify_barrier_ms": rounded(verify.barrier_held_ms, 1) if verify and verify.barrier_held_ms else None,
        "served_after": served_count(video)[0], "facts_after": facts_liked(video), "said": said,
    }
    log(f"  repair {request.pk}: {repaired.status}; approval -> live count {out['approve_to_live_s']} s (job done "
        f"after {out['approve_to_job_done_s']} s); repair barrier {rebuild.get('barrierHeldMs')} ms, verify barrier "
        f"{out['verify_barrier_ms']} ms; served {out['served_after']:,} = facts {out['facts_after']:,}")
    return out


def fmt_s(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def phase_repair(h: Harness, load_videos: list[str]) -> dict:
    """`--repair-rounds` repairs of the hot video with the pipeline and a load on the other videos running, and
    one client probing the hot video with no-change commands (what a like on it meets during the repair)."""
    args = h.args
    hard = time.time() + args.warmup + args.repair_rounds * (4 * args.check_timeout + 60) + 120
    h.pipeline_start(hard)
    t_start = time.time() + 1.0
    h.commands_start(load_videos, "repair", t_start, hard, probe=[SEED_HOT_VIDEO])
    time.sleep(max(0.0, t_start + args.warmup + args.window - time.time()))  # the load-alone window before
    t_pre0, t_pre1 = t_start + args.warmup, time.time()
    rounds = [repair_round(h, rnd) for rnd in range(args.repair_rounds)]
    t_rep1 = time.time()
    cmds = h.commands_stop()
    loops = h.pipeline_stop()
    for r in rounds:  # the probe's no-change commands on the repaired video, from approval to the job's end
        r["probe"] = command_figures(cmds["probe_rows"], r["t_approve"], r["t_job_done"])
    return {"rounds": rounds, "commands_before": command_figures(cmds["rows"], t_pre0, t_pre1),
            "commands_during": command_figures(cmds["rows"], t_pre1, t_rep1),
            "probe_before": command_figures(cmds["probe_rows"], t_pre0, t_pre1), "loops": loops}


# --- after all phases -----------------------------------------------------------------------------------


def final_state(acks: list[list]) -> dict:
    """For every video: LIKED relations in the shards = Σ of its routed vbuckets = its display snapshot; and
    every relation a command acknowledged is in that state in the facts (later phases win)."""
    from django.conf import settings
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import VideoDisplayCount, VideoLikeCountVbucket
    from relations import routing as relation_routing
    from relations.models import LikeRelation

    gen = count_routing.load_generation()
    facts: Counter = Counter()
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, count(*) FROM {_t(LikeRelation)} WHERE state = 'LIKED' GROUP BY 1")
            for v, n in cur.fetchall():
                facts[v] += int(n)
    buckets: Counter = Counter()
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, sum(active_count) FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s "
                        "AND virtual_bucket = ANY(%s) GROUP BY 1", [gen.generation, gen.buckets_on(alias)])
            for v, n in cur.fetchall():
                buckets[v] += int(n)
    snaps = dict(VideoDisplayCount.objects.values_list("video_id", "display_count"))
    videos = set(facts) | set(buckets) | {v for v, n in snaps.items() if n}
    bucket_bad = sorted((v, facts[v], buckets[v]) for v in videos if facts[v] != buckets[v])
    snap_bad = sorted((v, facts[v], snaps.get(v, 0)) for v in videos if facts[v] != snaps.get(v, 0))
    last: dict[tuple[int, str], str] = {}
    for phase in acks:
        for u, v, s in phase:
            last[(u, v)] = s
    by_alias: dict[str, list] = {}
    for (u, v), s in last.items():
        by_alias.setdefault(relation_routing.alias_for_user(u), []).append((u, v, s))
    lost = []
    for alias, items in by_alias.items():
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT user_id, video_id, state FROM {_t(LikeRelation)} WHERE (user_id, video_id) IN "
                        "(SELECT * FROM unnest(%s::bigint[], %s::text[]))",
                        [[u for u, _, _ in items], [v for _, v, _ in items]])
            stored = {(u, v): s for u, v, s in cur.fetchall()}
        lost += [(u, v, s, stored.get((u, v), "UNLIKED")) for u, v, s in items if stored.get((u, v), "UNLIKED") != s]
    connections.close_all()
    return {"videos": len(videos), "liked": sum(facts.values()), "buckets_exact": not bucket_bad,
            "bucket_mismatches": bucket_bad[:10], "snapshots_exact": not snap_bad, "snapshot_mismatches": snap_bad[:10],
            "acknowledged": len(last), "acknowledged_lost": len(lost), "lost_examples": lost[:10]}
