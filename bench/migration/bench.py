"""The online virtual-bucket migration of count partitions (issue 13; INV-11): `bench/run.sh migration`, on its own
databases (docs/benchmarks.md, "Virtual-bucket migration")."""

from __future__ import annotations

import sys
import time

from bench.harness import checks, driver
from bench.harness.load import unload
from bench.harness.phases import STEPS, AutoVacuum, Session, command_figures, drain_wait, drained
from bench.harness.report import fmt, md_table, pct, ratio, resources_table
from bench.harness.seed import author_id, flush_redis, named_users, prepare, reset_all, rows, snapshots_insert
from bench.migration import moves
from bench.migration import seed as mseed
from bench.projection.pipeline import receipts_and_lags
from bench.reconcile.bench import final_text

NAME = "migration"
DB_NAME, BOOTSTRAP, TARGET, LOAD_VIDEO_PREFIX = "likes_bench_mig", ("cnt_00", "cnt_01"), "cnt_02", "bench-mig-load-"
OPTIONS = {
    "scale": (1_000_000, "projection rows seeded in the buckets that move", 1000, 2 * 10**7),
    "buckets": (256, "buckets moved cnt_00 -> cnt_02: the first N the bootstrap routed to cnt_00", 1, 512),
    "per_video": (50, "seeded relations per video", 2, 10_000),
    "rest_share": (0.25, "rows a bucket seeded in every other bucket, as a share of a moving bucket's", 0, 1),
    **driver.LOAD_OPTIONS, "load_videos": (2000, "videos of the command load (their own)", 1, 99_999),
    "window": (10.0, "seconds of load alone before and after the migrations of a session", 1, 120),
    "series": (10, "migrations in the write-pause series", 0, 100),
    "series_buckets": (0, "buckets each series migration moves (0: all of the moved ones)", 0, 512),
    "series_gap": (2.0, "seconds of load alone between two migrations of the series", 0, 60),
    "burst": (20_000, "events of one throughput backlog", 1, 10**7),
    "burst_rounds": (2, "throughput backlogs before and after the move (0: none)", 0, 10),
    "retention_s": (0.0, "BUCKET_MIGRATION_RETENTION_S (0: the source copy's cleanup runs in the job)", 0, 10**6),
    "naive_batch": (1000, "rows per executemany of the naive move", 1, 10**6),
    "no_vacuum": (False, "no VACUUM (ANALYZE) stand-in after each migration when the server's autovacuum is off"),
    "job_lease_s": (-1.0, "OPS_JOB_LEASE_S of the run (-1: the product's)", -1, 10**5),
    "statement_timeout_ms": (-1, "DB_STATEMENT_TIMEOUT_MS of the run (0: none; -1: the product's)", -1, 10**7),
    "drain_timeout": (180.0, "bound on a drain and on one backlog's publish or replay, s", 10, 3600),
    "check_timeout": (3600.0, "bound on one migration, s", 10, 7200),
    "autovacuum_naptime": (60.0, "the server's autovacuum off: stand in for it every this many s; 0: never", 0, 3600),
    "skip": ("", "comma list of parts to skip: throughput, series, naive, ceiling, reverse"),
}


def home(buckets: list[int]) -> dict[str, list[int]]:
    from counting import routing
    gen, out = routing.load_generation(), {}
    for vb in buckets:
        out.setdefault(gen.routes[vb].partition, []).append(vb)
    return out


def throughput(s: Session, label: str, user_ids: list[int], n: list[int]) -> dict:
    """Backlogs published by the publishers alone, then applied by the projectors in drain mode."""
    from counting import routing
    gen, rounds = routing.load_generation(), []
    layout = {a: len(gen.buckets_on(a)) for a in sorted({r.partition for r in gen.routes})}
    for _ in range(s.args.burst_rounds):
        n[0] += 1
        relations = mseed.burst(s.args.burst, f"b{n[0]:02d}", user_ids)
        s.pipeline_start(time.time() + s.args.drain_timeout, publishers_only=True)  # the publishers alone
        drain_wait(s.args.drain_timeout, outbox_only=True)
        s.pool.stopped(list(s.layout.publishers.values()))
        res, seconds, _ = drained(s.pool, "count", len(s.layout.shares), max_s=s.args.drain_timeout,
                                  on=s.layout.projectors)
        applied = sum(r.get("applied", 0) for r in res)
        rounds.append({"relations": relations, "applied": applied, "seconds": seconds and round(seconds, 3),
                       "applied_per_s": round(applied / seconds, 1) if seconds else None})
        driver.make_log(NAME)(f"  {label}: {rounds[-1]} (buckets {layout})")
    return {"label": label, "layout": layout, "rounds": rounds,
            "median_per_s": pct([r["applied_per_s"] for r in rounds if r["applied_per_s"]], 0.5, 1)}


def during(r: dict, rows) -> None:
    """The commands and the projection lag of the load's events during one move (and around its write pause)."""
    r["commands"] = command_figures(rows, r["t_start"], r["t_end"])
    r["lag"] = {k: receipts_and_lags(r["t_start"], r["t_end"])[k] for k in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms")}
    if r.get("pause_window"):
        r["around_pause"] = command_figures(rows, r["pause_window"][0] - 0.5, r["pause_window"][1] + 0.5)


def phase_big(s: Session, videos: list[str], buckets: list[int]) -> dict:
    load = s.start_load(videos, "big", s.args.check_timeout)
    r, r["resources"] = s.sampled(lambda: moves.ours(s, buckets, TARGET, "big"), driver="driver")
    time.sleep(s.args.window)  # load alone after the migration
    cmds, loops = s.stop_load()
    during(r, cmds["rows"])
    if s.args.vacuum:
        r["vacuum_s"] = moves.vacuum(["cnt_00", TARGET])
    return {"migration": r, "alone": command_figures(cmds["rows"], *load["pre"]), "loops": loops}


def phase_series(s: Session, videos: list[str], series: list[int], big: list[int]) -> dict:
    args = s.args
    load = s.start_load(videos, "series", args.series * args.check_timeout)
    migrations, baselines = [], {}
    for k in range(args.series):
        (here,) = home(series)  # the series buckets move together
        dest = "cnt_00" if here == TARGET else TARGET
        r, r["resources"] = s.sampled(lambda d=dest, n=k: moves.ours(s, series, d, f"series-{n + 1}"), driver="driver")
        if args.vacuum:
            r["vacuum_s"] = moves.vacuum([here, dest])
        migrations.append(r)
        time.sleep(args.series_gap)  # load alone between two migrations
    source, at_source = max(home(big).items(), key=lambda kv: len(kv[1]))
    dest = "cnt_00" if source == TARGET else TARGET
    for name, fn, kw in (("naive", moves.naive, {"batch": args.naive_batch}), ("ceiling", moves.ceiling, {})):
        if name not in args.skip:
            baselines[name], baselines[name]["resources"] = s.sampled(
                lambda f=fn, kw=kw: f(source, dest, at_source, **kw), driver="driver")
            time.sleep(args.series_gap)  # load alone between two moves
    if baselines and args.vacuum:  # the baselines' rolled-back rows are dead tuples in the target's tables
        moves.vacuum([dest])
    cmds, loops = s.stop_load()
    for r in [*migrations, *baselines.values()]:
        during(r, cmds["rows"])
    paused = [r["write_pause_ms"] for r in migrations if r.get("write_pause_ms") is not None]
    return {"migrations": migrations, "baselines": baselines, "alone": command_figures(cmds["rows"], *load["pre"]),
            "loops": loops, "pause_p50_ms": pct(paused, 0.5, 1), "pause_p99_ms": pct(paused, 0.99, 1)}


def phase_reverse(s: Session, big: list[int]) -> dict:
    """With nothing else running: the raw COPY of the big set's rows, then the big set moved back to cnt_00."""
    source, at_source = max(home(big).items(), key=lambda kv: len(kv[1]))
    if source == "cnt_00":
        return {}
    out = {"ceiling_idle": moves.ceiling(source, "cnt_00", at_source)} if "ceiling" not in s.args.skip else {}
    out["migration"], out["migration"]["resources"] = s.sampled(
        lambda: moves.ours(s, at_source, "cnt_00", "reverse-idle"), driver="driver")
    return out


def final(s: Session, seeded: dict, moved: list[int]) -> dict:
    """The routed sums of the seeded videos, the load videos' counts, the acks, one writer a bucket, stale rows."""
    from django.conf import settings

    from counting import routing
    from counting.models import CountRouteFence
    from counting.services.migration import changelog
    after = checks.bucket_sums(mseed.SEED_VIDEO_PREFIX)
    out = {"seeded_exact": dict(after) == seeded, **checks.counts(exclude=mseed.SEED_VIDEO_PREFIX),
           **checks.acknowledged(s.acks)}
    gen = routing.load_generation()
    writers: dict[int, list[str]] = {vb: [] for vb in range(len(gen.routes))}
    for alias in settings.COUNT_PARTITION_ALIASES:
        for vb, epoch, state in CountRouteFence.objects.using(alias).filter(
                bucket_space_version=gen.space.version).values_list("virtual_bucket", "route_epoch", "state"):
            if state == "ACTIVE" and epoch == gen.routes[vb].epoch:
                writers[vb].append(alias)
    out["single_writer"] = all(w == [gen.routes[vb].partition] for vb, w in writers.items())
    (here,) = home(moved) if len(home(moved)) == 1 else (None,)
    out["stale_rows"] = {alias: sum(rows(alias, f"SELECT count(*) FROM {t.table} WHERE generation = %s AND "
                                         "virtual_bucket = ANY(%s)", [gen.generation, moved])[0][0]
                                    for t in changelog.TABLES)
                         for alias in settings.COUNT_PARTITION_ALIASES if here and alias != here}
    return out


def migrations(result: dict) -> list[dict]:
    return [result["big"]["migration"], *result.get("series", {}).get("migrations", []),
            *([result["reverse"]["migration"]] if result.get("reverse", {}).get("migration") else [])]


def report(result: dict) -> list[str]:
    big, series, rev = result["big"], result.get("series") or {}, result.get("reverse") or {}
    m, d = big["migration"], result["seed"]
    out = [f"**The data set:** {d['projection_rows']:,} projection rows and {d['vbuckets']:,} vbuckets seeded in "
           f"{d['seconds']} s; the {result['meta']['buckets']} moving buckets hold {d['moving']}."]
    rows = [[r["tag"], f"{'+'.join(r['sources'])} → {r['target']}", r["state"], "ok" if r["verify_ok"] else "FAILED",
             f"**{fmt(r['write_pause_ms'])}**", " / ".join(fmt(r["steps_s"].get(k), 2) for k in STEPS),
             f"{r['copied_rows']:,}", fmt(r["copy_rows_per_s"], 0), f"{r['replayed_events']:,} ({r['catchup_passes']})",
             fmt(r["job_s"]), fmt(r.get("commands", {}).get("commands_per_s")),
             f"{fmt(r.get('lag', {}).get('lag_p50_ms'), 0)} / {fmt(r.get('lag', {}).get('lag_p99_ms'), 0)}"]
            for r in migrations(result)]
    out.append(f"**1. Migrations** (the big one under the command load, {len(series.get('migrations', []))} of the "
               f"series under it, the reverse one with nothing else running): write pause of the series **p50 "
               f"{fmt(series.get('pause_p50_ms'))} ms, p99 {fmt(series.get('pause_p99_ms'))} ms**; commands/s alone "
               f"before the big one {fmt(big['alone'].get('commands_per_s'))}\n\n" + md_table(
                   ["run", "move", "state", "verify", "write pause ms:", " / ".join(STEPS) + " s",
                    "rows copied:", "copy rows/s:", "replayed (passes)", "job s:", "commands/s meanwhile:",
                    "projection lag p50 / p99 ms:"], rows))
    b, ci = series.get("baselines") or {}, rev.get("ceiling_idle")
    rows = [["ours: the big migration's copy step", f"{m['copied_rows']:,}", fmt(m["steps_s"].get("copy"), 2),
             f"**{fmt(m['copy_rows_per_s'], 0)}**", f"**{fmt(m['write_pause_ms'])}**", "counts stay live"]]
    rows += [[f"naive: stop-the-world, executemany of {x['batch']} ({x['source']} → {x['target']})", f"{x['rows']:,}",
              fmt(x["copy_s"], 2), f"**{fmt(x['rows_per_s'], 0)}**", f"**{fmt(x['write_pause_ms'])}**",
              "the whole projector stopped"] for x in [b.get("naive")] if x]
    rows += [[f"ceiling: binary COPY → COPY{label} ({x['source']} → {x['target']})", f"{x['rows']:,}",
              fmt(x["copy_s"], 2), f"**{fmt(x['rows_per_s'], 0)}**", "-", "rows only"]
             for label, x in ((" under the load", b.get("ceiling")), (", nothing else running", ci)) if x]
    c = b.get("ceiling") or {}
    out.append(f"**2. Against a naive stop-the-world move and the raw SQL ceiling** (the same rows; the baselines "
               f"write a scratch generation and roll back): our copy reaches "
               f"{fmt(ratio(m['copy_rows_per_s'], c.get('rows_per_s')), 2)} of the ceiling's rows/s; the naive move "
               f"stops the counts {fmt(ratio((b.get('naive') or {}).get('write_pause_ms'), m['write_pause_ms']), 0)}× "
               "longer\n\n" + md_table(["variant", "rows:", "copy s:", "rows/s:", "write pause ms:", "note"], rows))
    tp = [result[k] for k in ("throughput_before", "throughput_after", "throughput_after2", "throughput_before2")
          if result.get(k)]
    if tp:
        out.append("**3. Projection throughput** (a backlog published, then applied with nothing else running)\n\n" +
                   md_table(["when", "buckets per partition", "events/s per backlog", "median events/s:"],
                            [[t["label"], t["layout"], ", ".join(fmt(r["applied_per_s"], 0) for r in t["rounds"]),
                              f"**{fmt(t['median_per_s'], 0)}**"] for t in tp]))
    f = result["final"]
    out += [final_text(f) + f" Seeded videos' routed sums as the seed wrote them: {f['seeded_exact']}; one writer "
            f"a bucket: {f['single_writer']}; rows of the moved buckets left elsewhere: {f['stale_rows']}.",
            resources_table([(f"migration {x['tag']}", x.get("resources")) for x in migrations(result)]
                            + [(k, x.get("resources")) for k, x in b.items()])]
    if result["meta"]["code_changed_during_run"]:
        out.append("**Warning:** the measured code changed during the run (another engineer's edits).")
    return out + (["**Failures:** " + "; ".join(result["failures"])] if result["failures"] else [])


def headline(result: dict) -> dict:
    m, series = result["big"]["migration"], result.get("series") or {}
    c = (series.get("baselines") or {}).get("ceiling") or {}
    return {"goal": "write pause short; copy near the COPY ceiling; counts stay live",
            "figure": f"{m['buckets']} buckets in {fmt(m['job_s'], 0)} s, pause {fmt(m['write_pause_ms'], 0)} ms "
                      f"(series p99 {fmt(series.get('pause_p99_ms'), 0)} ms), copy "
                      f"{fmt(m['copy_rows_per_s'], 0)} rows/s",
            "ceiling": f"COPY {fmt(c.get('rows_per_s'), 0)} rows/s", "ratio": fmt(ratio(m["copy_rows_per_s"],
                                                                                        c.get("rows_per_s")), 2)}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261213, wait_quiet=180.0)
    args = run.args
    driver.check_environment(DB_NAME, COUNT_PARTITION_ALIASES=[*BOOTSTRAP, TARGET],
                             COUNT_BOOTSTRAP_PARTITIONS=list(BOOTSTRAP))
    from django.conf import settings

    from counting import routing
    args.vacuum = not args.no_vacuum and run.spec["pg_autovacuum"] == "off"
    flush_redis()
    users, _ = prepare(users=args.users, videos=0)
    named_users(moves.OPERATOR, moves.APPROVER)
    reset_all()
    snapshots_insert("SELECT %s || lpad(i::text, 5, '0') FROM generate_series(0, %s - 1) AS i",
                     [LOAD_VIDEO_PREFIX, args.load_videos], author_id=author_id())
    videos = [f"{LOAD_VIDEO_PREFIX}{i:05d}" for i in range(args.load_videos)]
    moved = routing.load_generation().buckets_on("cnt_00")[:args.buckets]
    result = {"seed": mseed.seed(scale=args.scale, per_video=args.per_video, rest_share=args.rest_share, moved=moved,
                                 seed=args.seed)}
    result["seed"]["moving"] = mseed.bucket_rows(moved)["cnt_00"]
    seeded, user_ids = dict(checks.bucket_sums(mseed.SEED_VIDEO_PREFIX)), [u for u, _ in users]
    s = Session.on_workers(args, users, actor=moves.OPERATOR, checker=True)
    vacuumer = AutoVacuum(args.autovacuum_naptime, settings.DATABASES) if run.spec["pg_autovacuum"] == "off" and \
        args.autovacuum_naptime else None
    code, bursts = driver.code_version(("counting", "likes_project/generations")), [0]
    tp = "throughput" not in args.skip
    try:
        if vacuumer:
            vacuumer.start()
        if tp:
            result["throughput_before"] = throughput(s, "before the move", user_ids, bursts)
        run.log(f"the migration of {len(moved)} buckets under the command load ...")
        result["big"] = phase_big(s, videos, moved)
        if tp:
            result["throughput_after"] = throughput(s, "after the move", user_ids, bursts)
        if "series" not in args.skip and args.series:
            result["series"] = phase_series(s, videos, moved[:args.series_buckets or None], moved)
            if tp and TARGET in home(moved):
                result["throughput_after2"] = throughput(s, "after, again", user_ids, bursts)
        if "reverse" not in args.skip:
            result["reverse"] = phase_reverse(s, moved)
            if tp and result["reverse"]:
                result["throughput_before2"] = throughput(s, "the bootstrap's layout, again", user_ids, bursts)
        s.pipeline_start(time.time() + args.drain_timeout + 120)  # the backlogs' dirty marks refreshed too
        time.sleep(1.0)  # let the loops start before the first look at what is pending
        result["final_drain"] = s.pipeline_stop()
        result["final"] = final(s, seeded, moved)
    finally:
        s.pool.close()
        if vacuumer:
            result["autovacuum"] = vacuumer.stop()
        unload(mseed.SEED_VIDEO_PREFIX)
    failures = [f"migration {r['migration_id']} ({r['tag']}): {r['state']}, verify {r['verify_ok']}, job "
                f"{r['job_status']} {r['error'] or ''}" for r in migrations(result)
                if r["state"] != "RETIRED" or not r["verify_ok"] or r["job_status"] != "SUCCEEDED"]
    f = result["final"]
    failures += [k for k, bad in (("seeded videos' routed sums changed", not f["seeded_exact"]),
                                  ("a load video's count differs from its facts", not f["exact"]),
                                  ("acknowledged relations lost", f["acknowledged_lost"]),
                                  ("buckets without exactly one writer", not f["single_writer"])) if bad]
    changed = code["files_sha256"] != driver.code_version(("counting", "likes_project/generations"))["files_sha256"]
    result.update(failures=failures, meta={"buckets": len(moved), "code": code, "code_changed_during_run": changed})
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"FAILED: {'; '.join(failures)}" if failures else None)


if __name__ == "__main__":
    sys.exit(main())
