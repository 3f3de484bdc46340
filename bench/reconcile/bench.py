"""Reconciliation and repair (issue 11): `bench/run.sh reconcile`. Coverage, exact runs and repairs on the seeded data
set, against a naive COUNT(*) and the raw SQL ceiling (docs/benchmarks.md, "Reconciliation and repair")."""

from __future__ import annotations

import random
import sys
import time
from collections import Counter

from bench.harness import checks, driver
from bench.harness.load import unload
from bench.harness.phases import Session, command_figures, pooled_windows
from bench.harness.report import fmt, md_table, pair, pct, ratio, resources_table
from bench.harness.seed import named_users, prepare, rows, table
from bench.reconcile import seed
from bench.reconcile.seed import SEED_HOT_VIDEO

NAME = "reconcile"
OPERATOR, APPROVER = "bench-rec-operator", "bench-rec-approver"  # requests and approves (another person)
OPTIONS = {
    "relations": (1_000_000, "relations seeded in all, the hot video's included", 1000, 2 * 10**7),
    "hot_likes": (100_000, "LIKED relations of the hot video (at most half)", 1, 10**7),
    "per_video": (50, "relations per regular video", 2, 10_000), **driver.LOAD_OPTIONS,
    "window": (10.0, "seconds of load alone before and after the checks", 1, 120),
    "coverage_rounds": (1, "idle rounds of ours / naive / ceiling", 1, 10),
    "exact_videos": (10_000, "videos in the scope of an exact run", 1, 10**6), "exact_runs": (20, "exact runs", 1, 200),
    "exact_gap": (1.0, "seconds of load alone between two exact runs", 0, 30),
    "exact_budget": (200.0, "no exact run starts after this many seconds of the phase; 0: no bound", 0, 10**5),
    "repair_rounds": (2, "repairs of the hot video", 0, 10),
    "damage": (1000, "projection rows of the hot video removed per repair round", 1, 10**6),
    "identity_sample": (400, "videos of the identity run right after the seed", 1, 10**5),
    "drain_timeout": (90.0, "bound on the drain after a phase, s", 1, 3600),
    "check_timeout": (900.0, "bound on one check or repair, s", 10, 3600),
    "poll": (0.02, "poll interval of the served count during a repair, s", 0.001, 5),
    "skip": ("", "comma list of phases to skip: load, exact, repair"),
}
NAMES = {"ours": "ours: coverage run (REC-3/4)", "naive": "naive: COUNT(*) per video",
         "ceiling": "ceiling: one GROUP BY per database"}


def seeded_session(run) -> tuple:
    """Users, operators, every table emptied, the data set seeded and checked: (plan, data, the session)."""
    args = run.args
    users, _ = prepare(users=args.users, videos=0)
    named_users(OPERATOR, APPROVER)
    unload(seed.PREFIX)
    plan = seed.plan_for(relations=args.relations, hot=args.hot_likes, per_video=args.per_video)
    run.log(f"seeding {plan.relations:,} relations: {plan.videos:,} videos x {plan.per_video} + {plan.hot:,} ...")
    data = {"seed": seed.seed(plan)}
    rng = random.Random(args.seed)
    data["seed_check"] = seed.verify_sample(plan, rng=rng)
    session = Session.on_workers(args, users, actor=OPERATOR, checker=True)
    videos = plan.video_ids()
    sample = sorted(rng.sample(videos, min(args.identity_sample, len(videos))))
    data["identity"] = session.check("check", mode="identity", scope={"videos": [*sample, SEED_HOT_VIDEO]})
    run.log(f"seeded in {data['seed']['seconds']}s; routing sample {data['seed_check']['wrong'] or 'ok'}; identity "
            f"{data['identity']['status']} ({data['identity']['diffs']} diffs)")
    if data["identity"]["status"] != "PASSED" or not data["seed_check"]["ok"]:
        session.pool.close()
        raise SystemExit(f"[{run.name}] the seeded state is not consistent; nothing measured")
    return plan, data, session


_HASH = "hashtextextended({u}::text || '/' || {s} || '/' || {v}::text, 0)"


def naive_compare() -> dict:
    """Per chunk of videos (as a coverage run takes them), each video's LIKED count in the facts against its LIKED
    projection rows: no versions, evidence or routing; an offsetting +1/-1 passes it."""
    from django.conf import settings

    from counting import routing
    from counting.models import LikeCountProjection
    from relations.models import LikeRelation
    gen, after, relations, videos, bad = routing.load_generation(), "", 0, 0, []
    for _ in range(10_000_000):  # one chunk a pass; the keyset ends it
        chunk: set[str] = set()
        for alias in settings.RELATION_SHARD_ALIASES:
            chunk |= {r[0] for r in rows(alias, f"SELECT DISTINCT video_id FROM {table(LikeRelation)} WHERE "
                                               "video_id > %s ORDER BY video_id LIMIT %s",
                                         [after, settings.RECONCILE_BATCH_VIDEOS])}
        chunk = sorted(chunk)[:settings.RECONCILE_BATCH_VIDEOS]
        if not chunk:
            break
        facts, projected = Counter(), Counter()
        for alias in settings.RELATION_SHARD_ALIASES:
            for v, n, liked in rows(alias, f"SELECT video_id, count(*), count(*) FILTER (WHERE state = 'LIKED') "
                                           f"FROM {table(LikeRelation)} WHERE video_id = ANY(%s) GROUP BY video_id",
                                    [chunk]):
                relations, facts[v] = relations + n, facts[v] + liked
        for alias in settings.COUNT_PARTITION_ALIASES:
            projected.update(dict(rows(alias, f"SELECT video_id, count(*) FROM {table(LikeCountProjection)} WHERE "
                                              "generation = %s AND video_id = ANY(%s) AND projected_state = 'LIKED' "
                                              "GROUP BY 1", [gen.generation, chunk])))
        bad += [v for v in chunk if facts[v] != projected[v]]
        videos, after = videos + len(chunk), chunk[-1]
    return {"relations": relations, "videos": videos, "mismatched_videos": len(bad)}


def sql_ceiling() -> dict:
    """One GROUP BY video_id per database (per video the LIKED count and an XOR of a hash of every (user, state,
    version)) on the shards and the projection, compared: every row read once, the floor of any full check."""
    from django.conf import settings
    from django.db import connections, transaction

    from counting import routing
    from counting.models import LikeCountProjection
    from relations.models import LikeRelation
    gen, sides = routing.load_generation(), ({}, {})
    queries = [(a, 0, f"SELECT video_id, count(*), count(*) FILTER (WHERE state = 'LIKED'), bit_xor("
                      f"{_HASH.format(u='user_id', s='state', v='relation_version')}) FROM {table(LikeRelation)} "
                      "GROUP BY video_id", []) for a in settings.RELATION_SHARD_ALIASES]
    queries += [(a, 1, f"SELECT video_id, count(*), count(*) FILTER (WHERE projected_state = 'LIKED'), bit_xor("
                       f"{_HASH.format(u='user_id', s='projected_state', v='projected_version')}) FROM "
                       f"{table(LikeCountProjection)} WHERE generation = %s AND virtual_bucket = ANY(%s) GROUP BY 1",
                 [gen.generation, gen.buckets_on(a)]) for a in settings.COUNT_PARTITION_ALIASES]
    for alias, side, sql, params in queries:
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute(sql, params)
            for v, n, liked, digest in cur.fetchall():
                cell = sides[side].setdefault(v, [0, 0, 0])
                cell[0], cell[1], cell[2] = cell[0] + n, cell[1] + liked, cell[2] ^ int(digest)
    bad = [v for v in set(sides[0]) | set(sides[1]) if sides[0].get(v) != sides[1].get(v)]
    return {"relations": sum(c[0] for c in sides[0].values()), "videos": len(sides[0]), "mismatched_videos": len(bad)}


def run_check(s: Session, variant: str) -> dict:
    r = (s.check("check", mode="coverage", scope={"all": True}) if variant == "ours" else
         s.check(f"bench.reconcile.bench:{'naive_compare' if variant == 'naive' else 'sql_ceiling'}"))
    r["relations"] = r.get("checked", r.get("relations"))
    seconds = r["t_end"] - r["t_start"]
    r.update(variant=variant, elapsed_s=round(seconds, 3), relations_per_s=round(r["relations"] / seconds, 1))
    driver.make_log(NAME)(f"  {variant}: {r['relations']:,} relations in {seconds:.2f}s")
    return r


def phase_coverage_load(s: Session, videos: list[str]) -> dict:
    """Ours, naive and ceiling one after the other under the load: relations/s of each, commands/s inside each."""
    load = s.start_load(videos, "coverage", 3 * s.args.check_timeout)
    checks_ = []
    for variant in ("ours", "naive", "ceiling"):
        r, res = s.sampled(lambda v=variant: run_check(s, v))
        checks_.append({**r, "load": True, "resources": res})
        time.sleep(1.0)  # a gap of load alone between two checks
    t_post0 = time.time()
    time.sleep(s.args.window)  # the window of load alone after the checks
    t_post1 = time.time()
    cmds, loops = s.stop_load(active_only=False)
    for r in checks_:
        r["commands"] = command_figures(cmds["rows"], r["t_start"], r["t_end"])
    return {"checks": checks_, "loops": loops,
            "without_check": pooled_windows(cmds["rows"], [tuple(load["pre"]), (t_post0, t_post1)])}


def phase_exact(s: Session, scope: list[str]) -> dict:
    """`--exact-runs` exact runs of `scope` under a load on it (none starts after --exact-budget seconds)."""
    args = s.args
    budget = args.exact_budget or float("inf")
    s.start_load(scope, "exact", min(budget, 86400) + args.exact_runs * (args.exact_gap + 5) + 2 * args.check_timeout)
    t0, runs = time.time(), []
    for _ in range(args.exact_runs):
        if time.time() - t0 >= budget:
            break
        runs.append(s.check("check", mode="exact", scope={"videos": scope}))
        time.sleep(args.exact_gap)  # load alone between two runs
    t1 = time.time()
    cmds, loops = s.stop_load(active_only=False)
    held = [r["barrier_held_ms"] for r in runs if r["barrier_held_ms"] is not None]
    return {"videos": len(scope), "runs_done": len(runs), "runs_wanted": args.exact_runs,
            "statuses": dict(Counter(r["status"] for r in runs)), "barrier_p50_ms": pct(held, 0.5, 1),
            "barrier_p99_ms": pct(held, 0.99, 1), "barrier_max_ms": max(held, default=None),
            "result_p50_s": pct([r["elapsed_s"] for r in runs], 0.5), "relations": runs[0]["checked"] if runs else 0,
            "result_p99_s": pct([r["elapsed_s"] for r in runs], 0.99), "loops": loops,
            "commands": command_figures(cmds["rows"], t0, t1)}


def damage(video: str, n: int, salt: str) -> int:
    """By hand: `n` LIKED projection rows of `video` deleted over the partitions, their buckets decremented (events
    the projection missed: identity holds) and the video marked dirty. Returns the rows removed."""
    from django.conf import settings
    from django.db import connections, transaction
    from django.utils import timezone

    from counting import routing
    from counting.models import DirtyVideo, LikeCountProjection, VideoLikeCountVbucket
    gen, aliases, removed, now = routing.load_generation(), list(settings.COUNT_PARTITION_ALIASES), 0, timezone.now()
    for k, alias in enumerate(aliases):
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute(f"DELETE FROM {table(LikeCountProjection)} WHERE id IN (SELECT id FROM "
                        f"{table(LikeCountProjection)} WHERE generation = %s AND video_id = %s AND projected_state = "
                        "'LIKED' AND virtual_bucket = ANY(%s) ORDER BY md5(user_id::text || %s) LIMIT %s) RETURNING "
                        "virtual_bucket", [gen.generation, video, gen.buckets_on(alias), salt,
                                           n // len(aliases) + (k < n % len(aliases))])
            per_bucket = Counter(r[0] for r in cur.fetchall())
            cur.executemany(f"UPDATE {table(VideoLikeCountVbucket)} SET active_count = active_count - %s, "
                            "bucket_version = bucket_version + 1, updated_at = %s WHERE generation = %s AND video_id "
                            "= %s AND virtual_bucket = %s", [(d, now, gen.generation, video, vb)
                                                              for vb, d in sorted(per_bucket.items())])
            cur.execute(f"INSERT INTO {table(DirtyVideo)} AS d (generation, video_id, source_partition, dirty_seq, "
                        "first_dirty_at, last_dirty_at) VALUES (%s, %s, 0, 1, %s, %s) ON CONFLICT (generation, "
                        "video_id, source_partition) DO UPDATE SET dirty_seq = d.dirty_seq + 1, last_dirty_at = "
                        "EXCLUDED.last_dirty_at", [gen.generation, video, now, now])
            removed += sum(per_bucket.values())
    return removed


def wait_served(video: str, want: int, timeout: float, poll: float) -> float | None:
    """Seconds until what GET .../like-count answers (without this process's L1) is `want` (None: not in time)."""
    from counting.selectors import display_count_get, display_l1
    t0 = time.time()
    for _ in range(1_000_000):
        display_l1().clear()
        if display_count_get(video_id=video).display_count == want:
            return round(time.time() - t0, 3)
        if time.time() - t0 > timeout:
            return None
        time.sleep(poll)  # polling the read path (its resolution)
    return None


def approved_job(s: Session, source: str, reason: str, *, during=None, **target) -> dict:
    """A repair of `target` requested by OPERATOR, approved by APPROVER, run by the checker while `during()` runs."""
    from likes_project.audit.services import Actor
    from reconciliation.models import CheckRun, RepairRequest
    from reconciliation.services import repair as repair_service
    request = repair_service.repair_request(actor=Actor(name=OPERATOR, channel="cli"), source=source, reason=reason,
                                            **target)
    t_approve = time.time()
    approved = repair_service.repair_approve(repair_id=request.pk, actor=Actor(name=APPROVER, channel="cli"))
    s.check_submit("opsjob", job_id=approved.job_id)
    live = during() if during else None
    out = s.check_collect()
    repaired = RepairRequest.objects.get(pk=request.pk)
    run = CheckRun.objects.filter(pk=repaired.verify_run_id).first() if repaired.verify_run_id else None
    verify_s = (run.finished_at - run.started_at).total_seconds() if run and run.finished_at and run.started_at \
        else None
    said = [(round(t - t_approve, 3), m) for t, m in out["said"]]
    return {"status": repaired.status, "error": repaired.error or None, "result": repaired.result or {},
            "t_start": t_approve, "t_end": out["t_end"], "approve_to_done_s": round(out["t_end"] - t_approve, 3),
            "verify_s": round(verify_s, 2) if verify_s is not None else None, "repair_id": request.pk,
            "verify_status": run.status if run else None, "verify_barrier_ms": run.barrier_held_ms if run else None,
            "said": said[:14], "switch_s": next((t for t, m in said if m.startswith("switched generation")), None),
            **({"during": live} if during else {})}


def repair_round(s: Session, rnd: int) -> dict:
    args = s.args
    facts = checks.facts(SEED_HOT_VIDEO)[SEED_HOT_VIDEO]
    removed = damage(SEED_HOT_VIDEO, args.damage, salt=f"{s.run_id}-{rnd}")
    wait_served(SEED_HOT_VIDEO, facts - removed, 30, args.poll)
    found = s.check("check", mode="coverage", scope={"videos": [SEED_HOT_VIDEO]})
    job = approved_job(s, "facts", f"bench: {removed} rows removed", diff_ids=found["diff_ids"],
                       during=lambda: wait_served(SEED_HOT_VIDEO, facts, args.check_timeout, args.poll))
    rebuild = job["result"].get("rebuild", {})
    served = wait_served(SEED_HOT_VIDEO, checks.facts(SEED_HOT_VIDEO)[SEED_HOT_VIDEO], 0, args.poll) is not None
    out = {"round": rnd, "t_approve": job["t_start"], "t_job_done": job["t_end"], "facts": facts, "damaged": removed,
           "coverage": f"{found['status']} in {found['elapsed_s']:.1f} s", "status": job["status"],
           "approve_to_live_s": job["during"], "approve_to_job_done_s": job["approve_to_done_s"],
           "repair_barrier_ms": rebuild.get("barrierHeldMs"), "relations_written": rebuild.get("relationsWritten"),
           "verify_barrier_ms": job["verify_barrier_ms"], "served_exact": served}
    driver.make_log(NAME)(f"  repair {job['repair_id']}: {job['status']}; approval -> live count {job['during']} s, "
                          f"barrier {out['repair_barrier_ms']} ms, served = facts {served}")
    return out


def phase_repair(s: Session, videos: list[str]) -> dict:
    """Repairs of the hot video under a load on the others, one client probing it with no-change commands."""
    load = s.start_load(videos, "repair", s.args.repair_rounds * (4 * s.args.check_timeout + 60),
                        probe=[SEED_HOT_VIDEO])
    rounds = [repair_round(s, rnd) for rnd in range(s.args.repair_rounds)]
    t_end = time.time()
    cmds, loops = s.stop_load(active_only=False)
    for r in rounds:  # the probe's no-change commands on the repaired video, from approval to the job's end
        r["probe"] = command_figures(cmds["probe_rows"], r["t_approve"], r["t_job_done"])
    return {"rounds": rounds, "commands_before": command_figures(cmds["rows"], *load["pre"]),
            "commands_during": command_figures(cmds["rows"], load["pre"][1], t_end), "loops": loops}


def summary(result: dict) -> dict:
    idle, load = result.get("coverage_idle") or [], (result.get("coverage_load") or {}).get("checks") or []
    out: dict = {}
    for v in ("ours", "naive", "ceiling"):
        under = next((r for r in load if r["variant"] == v), {})
        out[v] = {"idle_per_s": pct([r["relations_per_s"] for r in idle if r["variant"] == v], 0.5, 1),
                  "load_per_s": under.get("relations_per_s")}
    for where in ("idle", "load"):
        out[f"ours_over_ceiling_{where}"] = ratio(out["ours"][f"{where}_per_s"], out["ceiling"][f"{where}_per_s"])
        out[f"ours_over_naive_{where}"] = ratio(out["ours"][f"{where}_per_s"], out["naive"][f"{where}_per_s"])
    return out


def seed_text(result: dict) -> str:
    s, v, i = result["seed"], result["seed_check"], result["identity"]
    return (f"**The data set:** {s['relations']:,} relations ({s['plan']['videos']:,} videos × {s['plan']['per_video']}"
            f" + a hot video's {s['plan']['hot']:,}), {s['events']:,} SENT outbox rows, {s['projected']:,} projection "
            f"rows, {s['buckets']:,} vbuckets, seeded in {s['seconds']} s; routing sample {'ok' if v['ok'] else v}; "
            f"identity on a sample {i['status']} ({i['diffs']} diffs).")


def final_text(f: dict) -> str:
    return (f"**Final state:** {'EXACT' if f['exact'] else '**MISMATCH**'} over {f['videos']:,} videos ({f['liked']:,} "
            f"LIKED): Σ routed vbuckets = display snapshot = the facts{'' if f['exact'] else ' — ' + str(f)}; "
            f"{f['acknowledged']:,} relations acknowledged by a command, {f['acknowledged_lost']} lost.")


def command_table(rows: list[tuple[str, dict]], base: float | None, *, waited: bool = True) -> str:
    """The commands of some windows against the load alone (`base` commands/s); `waited`: the barrier waits too."""
    return md_table(["commands through relation_set_state", "seconds:", "commands/s:", "÷ load alone:",
                     "p50 / p99 ms:", *(["waited at a barrier:"] if waited else []), "503:", "other errors"],
                    [[name, fmt(c.get("seconds")), f"**{fmt(c.get('commands_per_s'))}**",
                      fmt(ratio(c.get("commands_per_s"), base), 3), pair(c.get("p50_ms"), c.get("p99_ms")),
                      *([c.get("waited", "-")] if waited else []), c.get("barrier_503", 0), c.get("errors") or 0]
                     for name, c in rows if c])


def report(result: dict) -> list[str]:
    s, cov, ex, rep = result["summary"], result.get("coverage_load"), result.get("exact"), result.get("repair")
    rows = [*result.get("coverage_idle", []), *(cov or {}).get("checks", [])]
    out = [seed_text(result), "**1. Coverage throughput** (the whole data set; under load, the load's new relations "
           "too)\n\n" + md_table(["check", "when", "relations:", "seconds:", "relations/s:", "verdict"], [
               [NAMES[r["variant"]], "under the command load" if r["load"] else f"idle, round {r['round'] + 1}",
                f"{r['relations']:,}", fmt(r["elapsed_s"], 2), f"**{fmt(r['relations_per_s'], 0)}**",
                f"{r['status']}, {r['diffs']} diffs" if r["variant"] == "ours" else
                f"{r['mismatched_videos']} videos differ" + (" (events in flight)" if r["load"] and
                                                               r["mismatched_videos"] else "")] for r in rows]),
           "\n".join(f"- {w}: ours **{fmt(s['ours'][w + '_per_s'], 0)}** relations/s, naive "
                     f"{fmt(s['naive'][w + '_per_s'], 0)}, ceiling {fmt(s['ceiling'][w + '_per_s'], 0)}; "
                     f"ours ÷ ceiling **{fmt(s['ours_over_ceiling_' + w], 3)}**, "
                     f"ours ÷ naive {fmt(s['ours_over_naive_' + w], 3)}"
                     for w in ("idle", "load"))]
    if cov:
        base = cov["without_check"].get("commands_per_s")
        out.append("**What a check costs the command path:**\n\n" + command_table(
            [("no check running (the windows before and after)", cov["without_check"])]
            + [(f"while {NAMES[r['variant']]} runs", r["commands"]) for r in cov["checks"]], base))
    if ex:
        c = ex["commands"]
        out.append(f"**2. Exact mode under the command load:** {ex['runs_done']} of {ex['runs_wanted']} runs over "
                   f"{ex['videos']:,} videos ({ex['relations']:,} relations), verdicts {ex['statuses']}; barrier held "
                   f"p50 / p99 / max **{fmt(ex['barrier_p50_ms'])} / {fmt(ex['barrier_p99_ms'])}** / "
                   f"{fmt(ex['barrier_max_ms'])} ms; time to result p50 / p99 **{fmt(ex['result_p50_s'], 2)} / "
                   f"{fmt(ex['result_p99_s'], 2)} s**; commands meanwhile {c['commands']:,} ({fmt(c['commands_per_s'])}"
                   f"/s), {c['waited']} waited at the barrier (p50 / p99 / max {fmt(c['waited_p50_ms'], 0)} / "
                   f"{fmt(c['waited_p99_ms'], 0)} / {fmt(c['waited_max_ms'], 0)} ms), {c['barrier_503']} got 503, "
                   f"other errors {c['errors'] or 0}.")
    if rep:
        out += [f"**3. Repair of the hot video** (damaged by hand, found by coverage, requested by `{OPERATOR}`, "
                   f"approved by `{APPROVER}`):\n\n" + md_table(
                       ["round:", "likes (facts):", "rows removed:", "found by coverage", "approval → live count s:",
                        "approval → job done s:", "repair barrier ms:", "verify barrier ms:",
                        "probes waited / 503 / ok", "repair", "served = facts"],
                       [[r["round"] + 1, f"{r['facts']:,}", f"{r['damaged']:,}", r["coverage"],
                         f"**{fmt(r['approve_to_live_s'], 2)}**", fmt(r["approve_to_job_done_s"], 2),
                         f"**{fmt(r['repair_barrier_ms'])}**", fmt(r["verify_barrier_ms"]),
                         f"{r['probe']['waited']} / {r['probe']['barrier_503']} / {r['probe']['ok']}", r["status"],
                         r["served_exact"]] for r in rep["rounds"]]),
                   command_table([("the other videos before the repairs", rep["commands_before"]),
                                  ("the other videos during the repairs", rep["commands_during"])],
                                 rep["commands_before"].get("commands_per_s"))]
    out += [final_text(result["final"]),
            resources_table((f"{r['variant']} {'under load' if r['load'] else 'idle'}", r["resources"]) for r in rows
                            if r.get("round", 0) == 0)]
    return out + (["**Warnings:** " + "; ".join(result["warnings"])] if result["warnings"] else [])


def headline(result: dict) -> dict:
    s, ex = result["summary"], result.get("exact") or {}
    return {"goal": "coverage near the SQL ceiling; exact barrier short; repair live in seconds",
            "figure": f"coverage {fmt(s['ours']['idle_per_s'], 0)} relations/s idle (naive "
                      f"{fmt(s['naive']['idle_per_s'], 0)}); exact barrier p99 {fmt(ex.get('barrier_p99_ms'), 0)} ms",
            "ceiling": f"{fmt(s['ceiling']['idle_per_s'], 0)} relations/s",
            "ratio": fmt(s["ours_over_ceiling_idle"], 2)}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261201, wait_quiet=180.0)
    args = run.args
    skip = set(args.skip.split(","))
    plan, result, s = seeded_session(run)
    videos = plan.video_ids()
    try:
        run.log("coverage, idle ...")
        result["coverage_idle"] = []
        for rnd in range(args.coverage_rounds):
            for variant in ["ours", "naive", "ceiling"][::-1 if rnd % 2 else 1]:
                r, res = s.sampled(lambda v=variant: run_check(s, v))
                result["coverage_idle"].append({**r, "round": rnd, "load": False, "resources": res})
        if "load" not in skip:
            run.log("coverage under the command load ...")
            result["coverage_load"] = phase_coverage_load(s, videos)
        if "exact" not in skip:
            run.log(f"exact mode on {min(args.exact_videos, len(videos)):,} videos while commands flow ...")
            result["exact"] = phase_exact(s, videos[:args.exact_videos])
        if "repair" not in skip and args.repair_rounds:
            run.log(f"repair of {SEED_HOT_VIDEO}, {args.repair_rounds} round(s) ...")
            result["repair"] = phase_repair(s, videos)
        result["final"] = {**checks.counts(), **checks.acknowledged(s.acks)}
    finally:
        s.pool.close()
        unload(seed.PREFIX)  # leave the bench databases small
    result["summary"] = summary(result)
    result["warnings"] = [f"coverage under load {r['status']} ({r['diffs']} diffs): events in flight taken for damage"
                          for r in (result.get("coverage_load") or {}).get("checks", [])
                          if r["variant"] == "ours" and r["status"] != "PASSED"]
    bad = [r for r in (result.get("repair") or {}).get("rounds", []) if r["status"] != "SUCCEEDED"
           or not r["served_exact"]]
    final = result["final"]
    failure = None if final["exact"] and not final["acknowledged_lost"] and not bad else \
        "MISMATCH: a count differs from the facts, an acknowledged relation was lost, or a repair failed"
    return driver.finish(run, result, report=report, headline=headline, failure=failure)


if __name__ == "__main__":
    sys.exit(main())
