"""Recovery snapshots and the restore from them (issue 12): `bench/run.sh snapshot`, builds idle and under load, a lost
partition restored against repaired from the facts (docs/benchmarks.md, "Recovery snapshots")."""

from __future__ import annotations

import sys
import time
from collections import Counter

from bench.harness import checks, driver
from bench.harness.load import unload
from bench.harness.phases import AutoVacuum, Session, command_figures, pooled_windows
from bench.harness.report import fmt, md_table, pct, ratio, resources_table
from bench.harness.sampler import merge
from bench.reconcile.bench import approved_job, command_table, final_text, seed_text, seeded_session
from bench.reconcile.seed import PREFIX
from bench.snapshot import variants

NAME = "snapshot"
OPTIONS = {
    "relations": (1_000_000, "relations seeded in all (each one projection row)", 1000, 2 * 10**7),
    "per_video": (50, "relations per video", 2, 10_000), "hot_likes": (0, "LIKED relations of a hot video", 0, 10**7),
    **driver.LOAD_OPTIONS, "window": (10.0, "seconds of load alone before the first build under load", 1, 120),
    "idle_rounds": (1, "idle rounds of ours / naive / ceiling; 0: none", 0, 5),
    "snapshots": (20, "builds of ours under the command load", 1, 200),
    "snapshot_gap": (1.0, "seconds of load alone between two builds", 0, 60),
    "baseline_runs": (1, "rounds of the ceiling and the naive build under the load", 0, 10),
    "after": (10.0, "seconds of load after the builds: the events the restore replays", 0, 600),
    "recover_under_load": (False, "keep the command load running through the repairs and the restore"),
    "damage_partition": ("", "count partition whose rows are deleted (default: the last)"),
    "facts_batch": (200, "videos per repair from the facts", 1, 10**6),
    "facts_batches": (3, "repairs from the facts measured; 0: every video (no extrapolation)", 0, 10**6),
    "autoanalyze_naptime": (60.0, "the server's autovacuum off: every this many s, ANALYZE the count tables as it "
                                  "would; 0: never", 0, 3600),
    "statement_timeout_ms": (-1, "DB_STATEMENT_TIMEOUT_MS of the run (0: none; -1: the product's)", -1, 10**7),
    "idle_tx_timeout_ms": (-1, "DB_IDLE_IN_TX_TIMEOUT_MS of the run (0: none; -1: the product's)", -1, 10**7),
    "identity_sample": (400, "videos of the identity run right after the seed", 1, 10**5),
    "drain_timeout": (120.0, "bound on the drain after the load, s", 1, 3600),
    "check_timeout": (3600.0, "bound on one build, repair or restore, s", 10, 7200),
    "skip": ("", "comma list of parts to skip: idle, naive"),
}
BUILDS = {"ours": variants.ours_build, "naive": variants.naive_build, "ceiling": variants.ceiling_build}
NAMES = {"ours": "ours: the snapshot_create ops job", "naive": "naive: stop-the-world ORM JSON dump",
         "ceiling": "ceiling: minimal cut + raw COPY to /dev/null"}


def build(s: Session, variant: str, tag: str) -> dict:
    r, res = s.sampled(lambda: BUILDS[variant](s, tag), driver="driver (naive / ceiling)")
    driver.make_log(NAME)(f"  {tag} {variant}: {r['rows']:,} rows, {r['bytes'] / 1e6:,.1f} MB, build "
                          f"{fmt(r['build_ms'], 0)} ms, dispatch paused {fmt(r['paused_ms'], 0)} ms, {r['status']}")
    return {**r, "resources": res}


def pauses(builds: list[dict]) -> dict:
    paused = [r["paused_ms"] for r in builds if r.get("paused_ms") is not None]
    built = [r["build_ms"] / 1000 for r in builds if r.get("build_ms") is not None]  # a FAILED build has none
    return {"builds": len(builds), "statuses": dict(Counter(r["status"] for r in builds)),
            "paused_p50_ms": pct(paused, 0.5, 1), "paused_p99_ms": pct(paused, 0.99, 1),
            "paused_max_ms": max(paused, default=None), "build_p50_s": pct(built, 0.5), "build_p99_s": pct(built, 0.99)}


def phase_builds(s: Session, variants_: list[str]) -> dict:
    """Builds of ours, then the baselines, under the load; then the load the restore replays."""
    args, ours, baselines = s.args, [], []
    for i in range(args.snapshots):
        ours.append(build(s, "ours", f"load-{i + 1}"))
        time.sleep(args.snapshot_gap)  # load alone between two builds
    for rnd in range(args.baseline_runs):
        # The ceiling first: the naive build's long stop leaves a backlog that lengthens the next pause.
        for variant in [v for v in ("ceiling", "naive") if v in variants_][::-1 if rnd % 2 else 1]:
            baselines.append(build(s, variant, f"load-{rnd + 1}"))
            time.sleep(args.snapshot_gap)  # load alone between two builds
    time.sleep(args.after)  # load after the builds: the events the restore replays from the offset vector
    sealed = [r["snapshot_id"] for r in ours if r["status"] == "SEALED"]
    return {"ours": ours, "baselines": baselines, "sealed_id": sealed[-1] if sealed else None}


def damage_partition(alias: str) -> dict:
    """By hand: every projection row and vbucket of the active generation on `alias` deleted (its data lost)."""
    from django.db import connections, transaction

    from counting import routing
    from counting.models import LikeCountProjection, VideoLikeCountVbucket
    gen = routing.load_generation()
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        cur.execute(f"DELETE FROM {LikeCountProjection._meta.db_table} WHERE generation = %s", [gen.generation])
        rows = cur.rowcount
        cur.execute(f"DELETE FROM {VideoLikeCountVbucket._meta.db_table} WHERE generation = %s", [gen.generation])
        buckets = cur.rowcount
    return {"partition": alias, "generation": gen.generation, "projection_rows": rows, "vbuckets": buckets}


def phase_restore(s: Session, videos: list[str], snapshot_id: int) -> dict:
    from django.conf import settings
    args = s.args
    damage = damage_partition(args.damage_partition or settings.COUNT_PARTITION_ALIASES[-1])
    step = len(videos) // args.facts_batches if args.facts_batches and args.facts_batches * args.facts_batch < \
        len(videos) else args.facts_batch
    batches = [videos[i:i + args.facts_batch] for i in range(0, len(videos), step)][:args.facts_batches or None]
    facts, facts_res = [], []
    for i, chunk in enumerate(batches):
        r, res = s.sampled(lambda c=chunk, n=i: approved_job(s, "facts", f"bench: partition lost, batch {n + 1}",
                                                             videos=c))
        r.update(videos=len(chunk), barrier_ms=r["result"].get("rebuild", {}).get("barrierHeldMs"))
        facts.append(r)
        facts_res.append(res)
    restore, restore_res = s.sampled(lambda: approved_job(s, f"snapshot:{snapshot_id}", "bench: partition lost"))
    res = restore.pop("result")
    restore.update(snapshot_id=snapshot_id, resources=restore_res, loaded=sum((res.get("loaded") or {}).values()),
                   load_ms=res.get("loadMs"), replay_ms=res.get("replayMs"), check_ms=res.get("checkMs"),
                   fence_ms=res.get("fenceMs"), generation=res.get("generation"),
                   replayed=(res.get("replayed") or 0) + (res.get("finalReplayed") or 0))
    done = [r for r in facts if r["status"] == "SUCCEEDED"]
    per_video = sum(r["approve_to_done_s"] for r in done) / max(1, sum(r["videos"] for r in done))
    loads = {"ours": {"rows": restore["loaded"], "load_ms": restore["load_ms"],
                      "rows_per_s": ratio(restore["loaded"], (restore["load_ms"] or 0) / 1000, 1)}}
    if restore["status"] == "SUCCEEDED" and restore["generation"]:
        loads["ceiling"] = variants.ceiling_load(restore["generation"])
        loads["naive"] = variants.naive_load() if "naive" not in s.args.skip else None
    return {"damage": damage, "facts": facts, "facts_resources": merge(facts_res), "restore": restore, "loads": loads,
            "facts_all_s": round(per_video * len(videos), 1) if done else None,
            "facts_measured_videos": sum(r["videos"] for r in done), "all_videos": len(videos)}


def report(result: dict) -> list[str]:
    b, cmds, rest = result["builds"], result.get("commands") or {}, result.get("restore")
    alone = (cmds.get("load_alone") or {}).get("commands_per_s")
    out = [seed_text(result), "**1. Build time and artifact size** (nothing else running; sizes are the stored files: "
           "gzip for ours and the naive dump, raw COPY text for the ceiling)\n\n" + md_table(
               ["variant", "round:", "rows:", "MB:", "build s:", "dump s:", "read-back s:", "dispatch paused ms:",
                "status"],
               [[NAMES[r["variant"]], r["round"] + 1, f"{r['rows']:,}", fmt(r["bytes"] / 1e6),
                 f"**{fmt(r['build_ms'] and r['build_ms'] / 1000, 2)}**", fmt((r.get("dump_ms") or 0) / 1000, 2),
                 fmt((r.get("verify_ms") or 0) / 1000, 2), fmt(r["paused_ms"]), r["status"]]
                for r in result.get("idle", [])])]
    rows = []
    for v in ("ours", "ceiling", "naive"):
        runs = b["ours"] if v == "ours" else [r for r in b["baselines"] if r["variant"] == v]
        if runs:
            p, during = pauses(runs), cmds.get(f"during_{v}") or {}
            rows.append([NAMES[v], p["builds"], p["statuses"], f"**{fmt(p['paused_p50_ms'])} / "
                         f"{fmt(p['paused_p99_ms'])}** / {fmt(p['paused_max_ms'])}",
                         f"{fmt(p['build_p50_s'], 2)} / {fmt(p['build_p99_s'], 2)}",
                         f"{fmt(during.get('commands_per_s'))} ({fmt(ratio(during.get('commands_per_s'), alone), 2)})"])
    out.append("**2. Dispatch pause under the command load** (ours: RecoverySnapshot.dispatch_paused_ms, from the "
               "cut's first lease request to the release; the baselines time the same span)\n\n" + md_table(
                   ["variant", "builds:", "statuses", "dispatch paused p50 / p99 / max ms:", "build p50 / p99 s:",
                    "commands/s during (÷ load alone):"], rows))
    if rest:
        r, d = rest["restore"], rest["damage"]
        out.append(f"**3. A lost count partition:** `{d['partition']}` ({d['projection_rows']:,} projection rows and "
                   f"{d['vbuckets']:,} vbuckets) deleted by hand ("
                   + ("the command load running" if result["meta"]["recover_under_load"] else "the command load "
                      "stopped after the builds, the pipeline running") + ")\n\n" + md_table(
                       ["recovery", "status", "load s:", "replayed:", "identity + coverage s:", "fence ms:",
                        "approval → repaired s:", "exact verify after s:", "approval → done s:"],
                       [[f"ours: restore of snapshot {r['snapshot_id']}", r["status"],
                         fmt((r["load_ms"] or 0) / 1000, 2),
                         f"{r['replayed']:,} in {fmt((r['replay_ms'] or 0) / 1000, 2)} s",
                         fmt((r["check_ms"] or 0) / 1000, 2), fmt(r["fence_ms"], 0), f"**{fmt(r['switch_s'])}**",
                         f"{fmt(r['verify_s'])} ({r['verify_status']})", f"**{fmt(r['approve_to_done_s'])}**"]]
                       + [[f"repair from the facts {i + 1}: {x['videos']} videos", x["status"], "-", "-", "-",
                           f"barrier {fmt(x['barrier_ms'], 0)}", "-", f"{fmt(x['verify_s'])} ({x['verify_status']})",
                           fmt(x["approve_to_done_s"])] for i, x in enumerate(rest["facts"])]
                       + [[f"repair from the facts, all {rest['all_videos']:,} videos ("
                           + (f"extrapolated from {rest['facts_measured_videos']:,}" if rest["facts_measured_videos"]
                              < rest["all_videos"] else "measured") + ")", "-", "-", "-", "-", "-", "-", "-",
                           f"**{fmt(rest['facts_all_s'], 0)}**"]]))
        loads, ceiling = rest["loads"], (rest["loads"].get("ceiling") or {}).get("rows_per_s")
        out.append("**The restore's load against its baselines** (replay, checks and switch have no counterpart)\n\n"
                   + md_table(["load", "rows:", "seconds:", "rows/s:", "÷ ceiling:"],
                              [[name, f"{x['rows']:,}", fmt(x["load_ms"] / 1000, 2) if x["load_ms"] else "-",
                                f"**{fmt(x['rows_per_s'], 0)}**", fmt(ratio(x["rows_per_s"], ceiling), 3)]
                               for name, x in (("ours: the restore's load", loads["ours"]),
                                               ("ceiling: raw COPY FROM", loads.get("ceiling")),
                                               ("naive: ORM bulk_create of the naive dump", loads.get("naive"))) if x]))
    names = {"load_alone": "load alone (the window before the builds)", "during_ours": "during the builds of ours",
             "during_ceiling": "during the ceiling's builds", "during_naive": "during the naive builds",
             "during_restore": "during the restore"}
    out.append(command_table([(name, cmds.get(key)) for key, name in names.items()], alone, waited=False))
    res = [(f"{r['variant']} idle", r["resources"]) for r in result.get("idle", []) if r["round"] == 0]
    res += [("ours under load (mean)", merge([r["resources"] for r in b["ours"]]))]
    if rest:
        res += [("repairs from the facts (mean)", rest["facts_resources"]),
                ("the restore", rest["restore"]["resources"])]
    out += [final_text(result["final"]), resources_table(res)]
    aa = result.get("autoanalyze")
    if aa:
        out.append(f"The server's autovacuum is off; its ANALYZE was stood in for every {aa['naptime_s']:g} s: "
                   f"{len(aa['runs'])} runs ({aa['by_table']}).")
    return out


def headline(result: dict) -> dict:
    load, rest = pauses(result["builds"]["ours"]), (result.get("restore") or {})
    r = rest.get("restore") or {}
    ceiling = [x for x in result["builds"]["baselines"] if x["variant"] == "ceiling"]
    return {"goal": "dispatch pause short under load; restore faster than repair from the facts",
            "figure": f"pause p50 / p99 {fmt(load['paused_p50_ms'], 0)} / {fmt(load['paused_p99_ms'], 0)} ms; restore "
                      f"{fmt(r.get('approve_to_done_s'), 0)} s",
            "ceiling": f"ceiling pause {fmt(pauses(ceiling)['paused_p50_ms'], 0)} ms; facts "
                       f"{fmt(rest.get('facts_all_s'), 0)} s" if ceiling else "-",
            "ratio": f"facts ÷ restore {fmt(ratio(rest.get('facts_all_s'), r.get('approve_to_done_s')), 1)}"}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261212, wait_quiet=180.0)
    args = run.args
    variants.storage_dir()  # refuses anything but the bench's own directory before anything is emptied
    variants.storage_reset()
    from django.conf import settings

    from reconciliation.models import RecoverySnapshot, SnapshotStatus
    # Earlier runs' snapshots: their artifacts went with the storage directory.
    RecoverySnapshot.objects.filter(status=SnapshotStatus.SEALED).update(status=SnapshotStatus.EXPIRED, artifacts=[])
    RecoverySnapshot.objects.filter(status=SnapshotStatus.BUILDING).update(status=SnapshotStatus.FAILED,
                                                                          failure="left building by an earlier run")
    plan, result, s = seeded_session(run)
    videos, variants_ = plan.video_ids(), [v for v in BUILDS if not (v == "naive" and "naive" in args.skip)]
    analyzer = None
    if run.spec["pg_autovacuum"] == "off" and args.autoanalyze_naptime:
        analyzer = AutoVacuum(args.autoanalyze_naptime, settings.COUNT_PARTITION_ALIASES,
                              ("counting_likecountprojection", "counting_videolikecountvbucket"))
        analyzer.start()
    try:
        if "idle" not in args.skip:
            result["idle"] = [{**build(s, v, f"idle-{rnd + 1}"), "round": rnd} for rnd in range(args.idle_rounds)
                              for v in variants_[::-1 if rnd % 2 else 1]]
        run.log(f"builds under the command load: {args.snapshots} of ours, then the baselines ...")
        budget = (args.snapshots + 2 * args.baseline_runs) * 600 + 3 * args.check_timeout
        load = s.start_load(videos, "snapshot", budget)
        result["builds"] = phase_builds(s, variants_)
        cmds = None if args.recover_under_load else s.commands_stop()
        if result["builds"]["sealed_id"] is not None:
            run.log(f"restore of snapshot {result['builds']['sealed_id']} against repairs from the facts ...")
            result["restore"] = phase_restore(s, videos, result["builds"]["sealed_id"])
        cmds, result["loops"] = s.stop_load(cmds)
        b, rows = result["builds"], cmds["rows"]
        result["commands"] = {"load_alone": command_figures(rows, *load["pre"]),
                              **{f"during_{v}": pooled_windows(rows, [(r["t_start"], r["t_end"]) for r in
                                                                      (b["ours"] if v == "ours" else b["baselines"])
                                                                      if r["variant"] == v]) for v in variants_}}
        if result.get("restore") and args.recover_under_load:
            r = result["restore"]["restore"]
            result["commands"]["during_restore"] = command_figures(rows, r["t_start"], r["t_end"])
        result["final"] = {**checks.counts(), **checks.acknowledged(s.acks)}
    finally:
        s.pool.close()
        if analyzer is not None:
            result["autoanalyze"] = analyzer.stop()
        unload(PREFIX)
        variants.storage_reset()
    final, rest = result["final"], result.get("restore")
    bad = [f"facts repair {x['status']}" for x in (rest or {}).get("facts", []) if x["status"] != "SUCCEEDED"]
    bad += [f"restore {rest['restore']['status']} {rest['restore']['error']}"] if rest and \
        rest["restore"]["status"] != "SUCCEEDED" else [] if rest else ["no snapshot was restored"]
    result["meta"] = {"recover_under_load": args.recover_under_load}
    failure = None if final["exact"] and not final["acknowledged_lost"] and not bad else \
        f"MISMATCH: a count, an acknowledged relation, or a repair / the restore ({'; '.join(bad) or 'counts'})"
    return driver.finish(run, result, report=report, headline=headline, failure=failure)


if __name__ == "__main__":
    sys.exit(main())
