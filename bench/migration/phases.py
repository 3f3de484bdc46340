"""The phases of the migration benchmark, run by the driver against the seeded data set:

throughput  nothing else running: `--burst` new relations written as like commands leave them (bench/migration/
            seed.py burst), published by the real publishers (one per relation shard) until the outbox is
            empty, then applied by `--projectors` projector processes in replay mode (each owns every n-th stream
            partition and consumes until a whole pass finds nothing): events applied / seconds to the last
            progress. `--burst-rounds` bursts, before the move (buckets on cnt_00 and cnt_01) and after it
            (cnt_02 holds the moved buckets).
big         the command load and the pipeline running (bench/reconcile's processes): a window of load alone,
            then the migration of the `--buckets` buckets cnt_00 -> cnt_02 (bench/migration/runs.py ours), then a
            window of load alone; the load stops and the pipeline drains.
series      the load and the pipeline again: `--series` migrations moving `--series-buckets` of those buckets
            back and forth between cnt_02 and cnt_00, `--series-gap` seconds apart (the write pause p50 / p99),
            then the naive stop-the-world move and the raw COPY ceiling of the big set's rows, under the same load;
            the load stops and the pipeline drains.
reverse     nothing else running: the raw COPY ceiling of the big set's rows, then the big set moved back to
            cnt_00 by the product (the same migration without the load).
With the vacuum stand-in (when the server's autovacuum is off, unless --no-vacuum) every migration is followed by
a VACUUM (ANALYZE) of the two count tables on its source and target, outside its timing, as autovacuum would do
after a bulk copy and a bulk delete."""

from __future__ import annotations

import time

from bench.common import percentile, rounded
from bench.migration import TARGET, log, runs
from bench.migration import seed as mseed
from bench.reconcile.phases import Harness, command_figures
from bench.snapshot import phases as snapshot_phases


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))  # a window of load alone (what the phase measures against)


def sampled(h: Harness, fn):
    """fn() with the resource sampler over it (the driver labelled: plan, approve and the baselines run there)."""
    import os

    labels = {**h.layout.labels(h.pool), os.getpid(): "driver"}
    h.sampler.start(time.time(), time.time() + 24 * 3600, pid_labels=labels)
    try:
        out = fn()
    finally:
        resources = h.sampler.stop()
    return out, resources


# --- throughput -------------------------------------------------------------------------------------------


def outbox_pending() -> int:
    from django.conf import settings

    from relations.models import OutboxEvent

    return sum(OutboxEvent.objects.using(a).filter(status__in=["NEW", "RETRY", "UNCERTAIN", "PUBLISHING"]).count()
               for a in settings.RELATION_SHARD_ALIASES)


def publish_all(h: Harness, timeout: float) -> dict:
    """The publishers alone until the outbox is empty."""
    now = time.time()
    times = {"t_start": now, "t_measure": now, "t_end": now + timeout, "hard_deadline": now + timeout}
    for alias, i in h.layout.publishers.items():
        h.pool.submit(i, {**times, "role": "publisher", "tag": f"pub-{alias}", "alias": alias,
                          "idle_s": h.args.publish_idle})
    left = None
    for _ in range(100_000):
        left = outbox_pending()
        if not left or time.time() - now > timeout:
            break
        time.sleep(0.2)  # poll the outbox (bounded by the timeout)
    h.pool.stop.set()
    try:
        res = h.pool.collect(list(h.layout.publishers.values()), timeout=60)
    finally:
        h.pool.stop.clear()
    return {"sent": sum(r.get("sent", 0) for r in res.values()), "left": left, "s": round(time.time() - now, 2)}


def replay(h: Harness, timeout: float) -> dict:
    """The projector processes in replay mode over the backlog in the streams."""
    t0 = time.time() + 0.5
    used = h.layout.projectors[:len(h.layout.shares)]
    for share, i in zip(h.layout.shares, used, strict=True):
        h.pool.submit(i, {"role": "projector", "tag": "burst", "variant": "ours", "mode": "replay",
                          "partitions": share, "idle_s": h.args.project_idle, "t_start": t0,
                          "hard_deadline": t0 + timeout})
    h.sampler.start(t0, t0 + timeout, pid_labels={h.pool.pid(i): "projectors" for i in used})
    try:
        res = h.pool.collect(used, timeout=timeout + 60)
    finally:
        resources = h.sampler.stop()
    applied = sum(r.get("applied", 0) for r in res.values())
    ends = [r["t_last_progress"] for r in res.values() if r.get("t_last_progress")]
    elapsed = (max(ends) - t0) if ends else None
    statuses: dict = {}
    logged: dict = {}
    for r in res.values():
        for k, v in (r.get("statuses") or {}).items():
            statuses[k] = statuses.get(k, 0) + v
        for k, v in (r.get("logged") or {}).items():
            logged[k] = logged.get(k, 0) + v
    return {"procs": len(used), "applied": applied, "dispatched": sum(r.get("dispatched", 0) for r in res.values()),
            "duplicates": sum(r.get("duplicates", 0) for r in res.values()),
            "elapsed_s": rounded(elapsed, 3), "applied_per_s": round(applied / elapsed, 1) if elapsed else None,
            "statuses": statuses, "logged": logged, "resources": resources}


_BURSTS: list[str] = []  # every backlog of the run (its tag: the videos of each are its own)


def phase_throughput(h: Harness, label: str, user_ids: list[int]) -> dict:
    from counting import routing

    args = h.args
    gen = routing.load_generation()
    layout = {alias: len(gen.buckets_on(alias)) for alias in sorted({r.partition for r in gen.routes})}
    rounds = []
    for k in range(args.burst_rounds):
        _BURSTS.append(label)
        b = mseed.burst(args.burst, f"b{len(_BURSTS):02d}", user_ids)
        pub = publish_all(h, timeout=args.drain_timeout)
        rep = replay(h, timeout=args.drain_timeout)
        rounds.append({"burst": b, "publish": pub, "replay": rep})
        log(f"  {label} round {k + 1}: {b['relations']:,} events published in {pub['s']}s, applied "
            f"{rep['applied']:,} in {rep['elapsed_s']}s = {rep['applied_per_s']} events/s by {rep['procs']} "
            f"projector processes (buckets {layout})")
    rates = sorted(r["replay"]["applied_per_s"] for r in rounds if r["replay"]["applied_per_s"])
    return {"label": label, "layout": layout, "rounds": rounds,
            "applied_per_s_median": rounded(percentile(rates, 0.5), 1),
            "applied_per_s_all": rates}


# --- sessions of load -----------------------------------------------------------------------------------


def session_start(h: Harness, videos: list[str], phase: str, budget_s: float) -> dict:
    hard = time.time() + h.args.warmup + 2 * h.args.window + budget_s + 600
    h.pipeline_start(hard)
    t_start = time.time() + 1.0
    h.commands_start(videos, phase, t_start, hard)
    t_pre0 = t_start + h.args.warmup
    _sleep_until(t_pre0 + h.args.window)
    return {"t_start": t_start, "pre": [t_pre0, time.time()], "hard": hard}


def session_stop(h: Harness) -> tuple[dict, dict]:
    return snapshot_phases.load_stop(h)


def _commands(rows, r: dict) -> dict:
    """The commands during one migration: the whole job, and the write pause (its window, ±0.5 s)."""
    out = {"during_job": command_figures(rows, r["t_start"], r["t_end"])}
    if r.get("pause_window"):
        a, b = r["pause_window"]
        out["around_pause"] = command_figures(rows, a - 0.5, b + 0.5)
    return out


def phase_big(h: Harness, videos: list[str], buckets: list[int]) -> dict:
    args = h.args
    sess = session_start(h, videos, "big", args.check_timeout)
    log(f"  load alone {sess['pre'][1] - sess['pre'][0]:.1f}s; migrating {len(buckets)} buckets cnt_00 -> {TARGET} ...")
    r, res = sampled(h, lambda: runs.ours(h, buckets, TARGET, "big"))
    r["resources"] = res
    t_post0 = time.time()
    time.sleep(args.window)  # load alone after the migration
    t_post1 = time.time()
    cmds, loops = session_stop(h)
    rows = cmds["rows"]
    r["commands"] = _commands(rows, r)
    if args.vacuum:
        r["vacuum"] = runs.vacuum(["cnt_00", TARGET])
        log(f"  vacuum stand-in on cnt_00 and {TARGET}: {r['vacuum']['s']}s")
    return {"migration": r, "pre": sess["pre"], "post": [t_post0, t_post1],
            "commands_alone": command_figures(rows, sess["pre"][0], sess["pre"][1]),
            "commands_after": command_figures(rows, t_post0, t_post1), "loops": loops,
            "session": [sess["t_start"], t_post1]}


def _home(buckets: list[int]) -> dict[str, list[int]]:
    from counting import routing

    gen = routing.load_generation()
    out: dict[str, list[int]] = {}
    for vb in buckets:
        out.setdefault(gen.routes[vb].partition, []).append(vb)
    return out


def phase_series(h: Harness, videos: list[str], series_buckets: list[int], big_buckets: list[int]) -> dict:
    args = h.args
    sess = session_start(h, videos, "series", args.series * args.check_timeout)
    log(f"  load alone {sess['pre'][1] - sess['pre'][0]:.1f}s; {args.series} migrations of {len(series_buckets)} "
        f"buckets back and forth between {TARGET} and cnt_00 ...")
    migrations = []
    stopped = None
    for k in range(args.series):
        homes = _home(series_buckets)
        if len(homes) != 1:
            log(f"  the series buckets are on {sorted(homes)}; stopping the series")
            break
        home = next(iter(homes))
        dest = "cnt_00" if home == TARGET else TARGET
        try:
            r, res = sampled(h, lambda d=dest, n=k: runs.ours(h, series_buckets, d, f"series-{n + 1}"))
        except Exception as exc:  # a plan refused (an earlier migration not finished): the series ends here
            log(f"  series-{k + 1} could not start: {exc.__class__.__name__}: {exc}")
            stopped = f"series-{k + 1}: {exc.__class__.__name__}: {exc}"[:400]
            break
        r["resources"] = res
        if args.vacuum:
            r["vacuum"] = runs.vacuum([home, dest])
        migrations.append(r)
        time.sleep(args.series_gap)  # load alone between two migrations
    baselines = {}
    homes = _home(big_buckets)
    source = max(homes, key=lambda a: len(homes[a]))
    moving = homes[source]
    dest = "cnt_00" if source == TARGET else TARGET
    if "naive" not in args.skip_set:
        log(f"  naive stop-the-world move of {len(moving)} buckets {source} -> {dest} (rolled back) ...")
        baselines["naive"], res = sampled(h, lambda: runs.naive(source, dest, moving, batch=args.naive_batch))
        baselines["naive"]["resources"] = res
        time.sleep(args.series_gap)  # load alone between two moves
    if "ceiling" not in args.skip_set:
        log(f"  raw COPY ceiling of the same rows {source} -> {dest} (rolled back) ...")
        baselines["ceiling"], res = sampled(h, lambda: runs.ceiling(source, dest, moving))
        baselines["ceiling"]["resources"] = res
    if baselines and args.vacuum:  # the baselines' rolled-back rows are dead tuples in the target's tables
        baselines["vacuum"] = runs.vacuum([dest])
    t_post0 = time.time()
    time.sleep(args.window)  # load alone after the moves
    t_post1 = time.time()
    cmds, loops = session_stop(h)
    rows = cmds["rows"]
    for r in migrations:
        r["commands"] = _commands(rows, r)
    for name in ("naive", "ceiling"):
        if name in baselines:
            baselines[name]["commands"] = {"during_job": command_figures(rows, baselines[name]["t_start"],
                                                                         baselines[name]["t_end"])}
    pauses = sorted(r["write_pause_ms"] for r in migrations if r.get("write_pause_ms") is not None)
    return {"migrations": migrations, "stopped": stopped, "baselines": baselines, "pre": sess["pre"],
            "post": [t_post0, t_post1],
            "commands_alone": command_figures(rows, sess["pre"][0], sess["pre"][1]),
            "commands_after": command_figures(rows, t_post0, t_post1), "loops": loops,
            "session": [sess["t_start"], t_post1],
            "pause_p50_ms": rounded(percentile(pauses, 0.5), 1), "pause_p99_ms": rounded(percentile(pauses, 0.99), 1),
            "pause_min_ms": rounded(pauses[0] if pauses else None, 1),
            "pause_max_ms": rounded(pauses[-1] if pauses else None, 1), "pauses_ms": pauses}


def phase_reverse(h: Harness, buckets: list[int]) -> dict:
    """With nothing else running: the raw COPY ceiling of the big set's rows (rolled back), then the big set moved
    back to cnt_00 (the bootstrap's layout again, for the last throughput measurement): the same migration and the
    same ceiling without the load."""
    homes = _home(buckets)
    source = max(homes, key=lambda a: len(homes[a]))
    moving = homes[source]
    if source == "cnt_00":
        return {"skipped": "the buckets are on cnt_00 already"}
    out: dict = {}
    if "ceiling" not in h.args.skip_set:  # the raw COPY of the same rows with nothing else running, rolled back
        out["ceiling_idle"], res = sampled(h, lambda: runs.ceiling(source, "cnt_00", moving))
        out["ceiling_idle"]["resources"] = res
        if h.args.vacuum:
            runs.vacuum(["cnt_00"])
    try:
        r, res = sampled(h, lambda: runs.ours(h, moving, "cnt_00", "reverse-idle"))
    except Exception as exc:
        log(f"  the reverse migration could not start: {exc.__class__.__name__}: {exc}")
        return {"skipped": f"{exc.__class__.__name__}: {exc}"[:400]}
    r["resources"] = res
    if h.args.vacuum:
        r["vacuum"] = runs.vacuum([source, "cnt_00"])
    return {**out, "migration": r}


def final_drain(h: Harness) -> dict:
    """The pipeline's loops alone (no commands) until nothing is pending: the backlogs' dirty marks refreshed into
    the display snapshots (the throughput measurements ran the projectors only)."""
    h.pipeline_start(time.time() + h.args.drain_timeout + 120)
    time.sleep(1.0)  # let the loops start before the first poll of what is pending
    return h.pipeline_stop()
