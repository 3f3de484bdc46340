"""Benchmark driver for the asynchronous count pipeline (issue #3 "Benchmark"; spec TEST-3).

Run through ./bench/projection.sh, which does the setup (bench/env.sh) and points every setting at the
bench databases. The run starts from empty tables and streams; the two workloads, `uniform` (users x many
videos) and `hot` (every like on one video), then share it (their relations are disjoint). For each:

  sustained  `--procs` processes call relations.services.commands.relation_set_state() (like/unlike mix,
             fresh operation ids) while, in the same window and in processes of their own, the pipeline
             runs as plain loops (no Celery, no broker): one publisher per relation shard
             (outbox_publish_batch with a unique holder), `--projectors` projector processes each owning
             a share of the stream partitions (consume_partition(CountProjector(), partition=p), the
             shared consumer framework with its leases and checkpoints), one display snapshot loop
             (display_snapshot_refresh every `--snapshot-interval` s), and one probe that commits a like
             or an unlike on a probe video every `--probe-interval` s and polls
             counting.selectors.display_count_get until the count shows it;
  drain      the load stops; the loops run on until the outbox has no pending row, every partition's
             `count` checkpoint is at the stream end and no video is dirty;
  exactness  for every video: sum of its vbuckets == durable display snapshot == LIKED relations in the
             shards (printed EXACT, or the mismatches; a mismatch makes the run exit non-zero).

And after both workloads:

  capacity   backlog replay: a workload's whole stream (kept when its phase ended) is loaded back into the
             emptied streams and projected again from the start, by our projector (count-partition state
             emptied first) and by the naive single-row counter below (consumer `naive-count`, its own
             checkpoints), with the same number of processes for both
             (`--replay-procs`: the pipeline's `--projectors`, and 8 = one per stream partition),
             a variant's hot and uniform replays back to back (the order alternating), so the projectors'
             own throughput is measured at saturation rather than the arrival rate of the load (which the
             sustained figures are bounded by).

Results: a table on stdout, bench/results/projection_latest.json, and the generated part of the
"Count projection pipeline" section of docs/benchmarks.md. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import multiprocessing as mp
import os
import queue
import secrets
import signal
import sys
import time
import traceback
from collections import Counter

from bench import common
from bench.command_bench import AUTHOR_NAME, HOT_VIDEO, flush_bench_redis, prepare, reset_state
from bench.common import (
    BENCH_DB_PREFIX,
    DOCS_PATH,
    RESULTS_DIR,
    ROOT,
    ResourceSampler,
    _pg_conninfo,
    log_machine,
    machine_spec,
    other_connections,
    parse_mix,
    percentile,
    print_blocks,
    run_times,
    start_driver,
    write_generated,
)

RESULT_PATH = RESULTS_DIR / "projection_latest.json"
DOC_BEGIN = "<!-- bench:projection:generated:begin -->"
DOC_END = "<!-- bench:projection:generated:end -->"
PROBE_VIDEO_PREFIX = "bench-probe-"
PROBE_USER = "bench-probe-user"
OURS_CONSUMER = "count"  # CountProjector.name
NAIVE_CONSUMER = "naive-count"
NAIVE_COUNT_TABLE = "bench_naive_count"
NAIVE_PROJECTION_TABLE = "bench_naive_projection"
LIKED, UNLIKED = "LIKED", "UNLIKED"

# Safety bounds: every loop stops at its deadline AND after this many iterations; no phase lasts longer.
MAX_LOOP_ITERATIONS = 2_000_000
MAX_PHASE_SECONDS = 300.0
IDLE_EXIT_S = 1800.0  # a worker process that gets no job for this long exits on its own
READY_TIMEOUT_S = 240.0


def _log(msg: str) -> None:
    print(f"[projection] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/projection.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=5000, help="liking users (default 5000)")
    p.add_argument("--videos", type=int, default=2000, help="videos in the uniform workload (default 2000)")
    p.add_argument("--workloads", default="uniform,hot", help="comma list of uniform,hot (default both)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the window (default 3)")
    p.add_argument("--duration", type=float, default=15.0, help="measured seconds per workload (default 15)")
    p.add_argument("--procs", type=int, default=4, help="command processes (default 4)")
    p.add_argument("--projectors", type=int, default=2,
                   help="projector processes, each owning every n-th stream partition (default 2)")
    p.add_argument("--mix", default="like=60,unlike=40",
                   help="command mix in percent, kinds like/unlike/noop/replay (default like=60,unlike=40)")
    p.add_argument("--snapshot-interval", type=float, default=0.2, help="display snapshot cadence, s (default 0.2)")
    p.add_argument("--publish-idle", type=float, default=0.01,
                   help="publisher sleep after an empty claim, s (default 0.01)")
    p.add_argument("--project-idle", type=float, default=0.01,
                   help="projector sleep when no partition it owns has new entries, s (default 0.01)")
    p.add_argument("--probe-videos", type=int, default=16, help="probe videos (default 16)")
    p.add_argument("--probe-interval", type=float, default=0.05, help="probe commit cadence, s (default 0.05)")
    p.add_argument("--probe-poll", type=float, default=0.02, help="probe poll interval, s (default 0.02)")
    p.add_argument("--probe-timeout", type=float, default=10.0,
                   help="a probe not visible after this many s is a timeout (default 10)")
    p.add_argument("--drain-timeout", type=float, default=90.0, help="bound on the drain, s (default 90)")
    p.add_argument("--replay-rounds", type=int, default=3,
                   help="backlog replays per projector variant, process count and workload, alternating which "
                        "variant goes first (default 3; 0 skips)")
    p.add_argument("--replay-procs", default="",
                   help="process counts of the backlog replay (default: --projectors, and 8 = one per partition)")
    p.add_argument("--wait-quiet", type=float, default=180.0,
                   help="seconds to wait for other clients of the likes_bench databases to go (default 180)")
    p.add_argument("--seed", type=int, default=20261130)
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = p.parse_args(argv)
    args.mix_shares = parse_mix(p, args.mix)
    args.workload_list = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not args.workload_list or any(w not in ("uniform", "hot") for w in args.workload_list):
        p.error("--workloads: uniform and/or hot")
    for name in ("users", "videos", "procs", "projectors", "probe_videos"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if not (0 < args.duration <= 120 and 0 <= args.warmup <= 30 and 1 <= args.drain_timeout <= 240
            and 0.5 <= args.probe_timeout <= 30 and 0 <= args.replay_rounds <= 5):
        p.error("out of range (duration 0-120 s, warm-up 0-30 s, drain 1-240 s, probe timeout 0.5-30 s, "
                "replay rounds 0-5)")
    for name in ("snapshot_interval", "publish_idle", "project_idle", "probe_interval", "probe_poll"):
        if not 0 < getattr(args, name) <= 5:
            p.error(f"--{name.replace('_', '-')} must be in (0, 5] s")
    procs = [int(x) for x in args.replay_procs.split(",") if x.strip()] or [args.projectors, 8]
    if any(not 1 <= n <= 16 for n in procs):
        p.error("--replay-procs: counts between 1 and 16")
    args.replay_procs_list = list(dict.fromkeys(procs))
    return args


# --- the naive baseline: a single counter row per video ------------------------------------------


class NaiveCountProjector:
    """The naive consumer the issue compares against, run by the same `consume_partition` framework.

    Same versioned absolute-state rule as ours (unknown = UNLIKED v0; a version not above the stored
    one changes nothing), kept in its own small table keyed (user_id, video_id), but the count is ONE
    row per video: every event that flips a relation runs
    `UPDATE bench_naive_count SET like_count = like_count + delta WHERE video_id = %s` in the batch's
    transaction. The updates are sorted by video id (so two consumers never deadlock) and sent with
    executemany (one pipelined round trip, as ours does); the row lock is held until the commit, so on
    a hot video the consumers of all partitions queue on that one row. No receipts, fences or dirty
    marks: less work per event than ours."""

    name = NAIVE_CONSUMER

    def __init__(self, alias: str):
        self.alias = alias

    def validate(self, entry) -> None:
        from counting.services.projection import validate_event

        validate_event(entry.event)

    def apply(self, entries, *, consumer: str, partition: int, token: int):
        from django.db import DatabaseError, connections, transaction

        from likes_project.eventlog.consumer import ApplyResult, Retryable

        result = ApplyResult()
        applied = duplicates = stale = 0
        try:
            with transaction.atomic(using=self.alias, durable=True), connections[self.alias].cursor() as cur:
                keys = sorted({(e.event["userId"], e.event["videoId"]) for e in entries})
                cur.execute(
                    f"SELECT user_id, video_id, state, version FROM {NAIVE_PROJECTION_TABLE} "
                    "WHERE (user_id, video_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[])) "
                    "ORDER BY user_id, video_id FOR UPDATE",
                    [[k[0] for k in keys], [k[1] for k in keys]],
                )
                state = {(u, v): (s, ver) for u, v, s, ver in cur.fetchall()}
                updates: list[tuple[int, str]] = []
                changed: dict[tuple[int, str], tuple[str, int]] = {}
                for e in entries:
                    ev = e.event
                    key = (ev["userId"], ev["videoId"])
                    cur_state, cur_version = state.get(key, (UNLIKED, 0))
                    if ev["relationVersion"] <= cur_version:
                        if ev["relationVersion"] == cur_version:
                            duplicates += 1
                        else:
                            stale += 1
                        continue
                    if ev["absoluteState"] != cur_state:
                        updates.append((1 if ev["absoluteState"] == LIKED else -1, ev["videoId"]))
                    state[key] = changed[key] = (ev["absoluteState"], ev["relationVersion"])
                    applied += 1
                updates.sort(key=lambda u: u[1])
                if updates:
                    cur.executemany(
                        f"UPDATE {NAIVE_COUNT_TABLE} SET like_count = like_count + %s WHERE video_id = %s", updates)
                if changed:
                    cur.executemany(
                        f"INSERT INTO {NAIVE_PROJECTION_TABLE} AS p (user_id, video_id, state, version) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT (user_id, video_id) DO UPDATE SET "
                        "state = EXCLUDED.state, version = EXCLUDED.version WHERE p.version < EXCLUDED.version",
                        [(u, v, s, ver) for (u, v), (s, ver) in sorted(changed.items())],
                    )
        except DatabaseError as exc:
            result.failed = {e.entry_id: Retryable(f"{exc.__class__.__name__}: {exc}") for e in entries}
            return result
        result.done = {e.entry_id for e in entries}
        result.applied, result.duplicates, result.stale = applied, duplicates, stale
        return result


def naive_alias() -> str:
    from django.conf import settings

    return settings.COUNT_PARTITION_ALIASES[0]


def _make_projector(variant: str):
    if variant == "ours":
        from counting.services.projection import CountProjector

        return CountProjector()
    return NaiveCountProjector(naive_alias())


# --- worker processes ----------------------------------------------------------------------------


def _alive(parent_pid: int) -> bool:
    return os.getppid() == parent_pid


def _reset_connections() -> None:
    from django.db import connections

    with contextlib.suppress(Exception):
        connections.close_all()


def _sleep_until(t: float, parent_pid: int) -> None:
    for _ in range(100_000):
        delay = t - time.time()
        if delay <= 0 or not _alive(parent_pid):
            return
        time.sleep(min(delay, 0.5))  # wait for the shared start time (pacing)


def role_commands(job: dict, stop, parent_pid: int) -> dict:
    """The command load: bench/worker.py's service-layer client (relation_set_state, bounded by t_end)."""
    from bench.worker import run_job

    return run_job(job)


def role_publisher(job: dict, stop, parent_pid: int) -> dict:
    """outbox_publish_batch on one relation shard, in a loop, under a unique holder."""
    from relations.services.outbox import outbox_publish_batch

    alias = job["alias"]
    holder = f"bench-pub:{alias}:{os.getpid()}:{secrets.token_hex(3)}"
    t_measure, t_end, hard = job["t_measure"], job["t_end"], job["hard_deadline"]
    c: Counter = Counter()
    errors: Counter = Counter()
    _sleep_until(job["t_start"], parent_pid)
    for _ in range(MAX_LOOP_ITERATIONS):
        if stop.is_set() or time.time() >= hard or not _alive(parent_pid):
            break
        try:
            rep = outbox_publish_batch(alias=alias, holder=holder)
        except Exception as exc:
            errors[exc.__class__.__name__] += 1
            _reset_connections()
            time.sleep(0.1)  # back off after a store error
            continue
        now = time.time()
        c["sent"] += rep.sent
        c["retry"] += rep.retry
        c["uncertain"] += rep.uncertain
        c["dead"] += rep.dead
        if t_measure <= now < t_end:
            c["sent_window"] += rep.sent
        if rep.claimed:
            c["batches"] += 1
        else:
            c["idle_polls"] += 1
            time.sleep(job["idle_s"])  # idle poll of the outbox (the loop measures a pipeline)
    return {**c, "errors": dict(errors)}


def _stream_heads(partitions: list[int]) -> dict[int, str | None]:
    """The last entry id of each partition's stream (one pipelined round trip)."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis

    pipe = stream_redis().pipeline(transaction=False)
    for p in partitions:
        pipe.xrevrange(streams.stream_key(p), count=1)
    heads = {}
    for p, rows in zip(partitions, pipe.execute(), strict=True):
        heads[p] = rows[0][0].decode() if rows else None
    return heads


class _LogTally(logging.Handler):
    """Counts the WARNING+ records of the projector and the consumer framework (group failures, lag over
    the target, dead letters) instead of printing them."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.counts: Counter = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        msg = str(record.msg)
        if msg.startswith("count group on") and len(record.args or ()) >= 2:
            key = f"group failed: {record.args[1]}"
        elif "exceeds the" in msg:
            key = "lag over target (warning records)"
        else:
            key = f"{record.levelname}: {msg[:60]}"
        self.counts[key] += 1


def role_projector(job: dict, stop, parent_pid: int) -> dict:
    """consume_partition(projector, partition=p) over the partitions this process owns.

    mode `sustained`: loop until told to stop; a partition is consumed when its stream's last entry id
    is beyond the checkpoint this process last saw (one XREVRANGE per pass replaces the Celery nudge).
    mode `replay`: consume every owned partition until a whole pass dispatches nothing (the static
    backlog is done); report when the last progress happened.
    The projector's warnings (a group failed and will be replayed; lag over the target) are counted and
    reported, not printed: replayed events are old by construction, and the lag is measured anyway."""
    tally = _LogTally()
    loggers = [logging.getLogger(n) for n in ("counting.services.projection", "likes_project.eventlog.consumer")]
    for lg in loggers:
        lg.addHandler(tally)
        lg.propagate = False
    try:
        return {**_projector_loop(job, stop, parent_pid), "logged": dict(tally.counts)}
    finally:
        for lg in loggers:
            lg.removeHandler(tally)
            lg.propagate = True


def _projector_loop(job: dict, stop, parent_pid: int) -> dict:
    from django.conf import settings

    from likes_project.eventlog.consumer import consume_partition

    projector = _make_projector(job["variant"])
    parts: list[int] = job["partitions"]
    sustained = job["mode"] == "sustained"
    t_measure, t_end, hard = job.get("t_measure", 0.0), job.get("t_end", 0.0), job["hard_deadline"]
    batch = settings.COUNT_PROJECTOR_BATCH
    seen: dict[int, str | None] = dict.fromkeys(parts)
    c: Counter = Counter()
    statuses: Counter = Counter()
    errors: Counter = Counter()
    t_last_progress = None
    _sleep_until(job["t_start"], parent_pid)
    t_first = time.time()
    for _ in range(MAX_LOOP_ITERATIONS):
        if stop.is_set() or time.time() >= hard or not _alive(parent_pid):
            break
        if sustained:
            try:
                heads = _stream_heads(parts)
            except Exception as exc:
                errors[exc.__class__.__name__] += 1
                time.sleep(0.1)  # back off after a Redis error
                continue
            due = [p for p in parts if heads[p] is not None and heads[p] != seen[p]]
        else:
            due = list(parts)
        progressed = held = unfinished = 0
        for p in due:
            try:
                rep = consume_partition(projector, partition=p, batch_size=batch, max_batches=10)
            except Exception as exc:
                errors[exc.__class__.__name__] += 1
                _reset_connections()
                unfinished += 1
                continue
            now = time.time()
            statuses[rep.status] += 1
            c["calls"] += 1
            c["dispatched"] += rep.dispatched
            c["applied"] += rep.applied
            c["duplicates"] += rep.duplicates
            c["stale"] += rep.stale
            c["dead_lettered"] += rep.dead_lettered
            c["held_back"] += rep.held_back
            if t_measure <= now < t_end:
                c["applied_window"] += rep.applied
            if rep.advanced_to:
                seen[p] = rep.advanced_to
            progressed += rep.dispatched
            held += rep.held_back
            if rep.status != "ok":
                unfinished += 1
        if progressed:
            t_last_progress = time.time()
        if not sustained and not progressed and not held and not unfinished:
            break  # the backlog is done
        if held or unfinished:
            time.sleep(0.05)  # a blocked head or a busy lease: back off a little
        elif not progressed:
            time.sleep(job["idle_s"])  # idle poll of the streams
    return {**c, "statuses": dict(statuses), "errors": dict(errors), "t_first": t_first,
            "t_last_progress": t_last_progress, "partitions": parts}


def role_snapshot(job: dict, stop, parent_pid: int) -> dict:
    """display_snapshot_refresh() every `interval` seconds."""
    from counting.services.snapshots import display_snapshot_refresh

    c: Counter = Counter()
    errors: Counter = Counter()
    durations: list[float] = []
    _sleep_until(job["t_start"], parent_pid)
    for _ in range(MAX_LOOP_ITERATIONS):
        if stop.is_set() or time.time() >= job["hard_deadline"] or not _alive(parent_pid):
            break
        t0 = time.perf_counter()
        try:
            rep = display_snapshot_refresh()
            c["runs"] += 1
            c["videos"] += rep.videos
            c["skipped_hot"] += rep.skipped_hot
        except Exception as exc:
            errors[exc.__class__.__name__] += 1
            _reset_connections()
        elapsed = time.perf_counter() - t0
        durations.append(elapsed * 1000)
        time.sleep(max(0.0, job["interval_s"] - elapsed))  # the snapshot loop's fixed interval (pacing)
    durations.sort()
    return {**c, "errors": dict(errors), "p50_ms": _r(percentile(durations, 0.5)),
            "p99_ms": _r(percentile(durations, 0.99))}


def role_probe(job: dict, stop, parent_pid: int) -> dict:
    """Commit-to-displayCount latency. Every `interval` s the probe user likes or unlikes one of the
    probe videos (round robin, a video only when its previous probe is resolved; one user per video, so
    its count must become exactly 1 or 0) and then polls, every `poll` s:
      display  counting.selectors.display_count(s)_get, the read path of GET .../like-count, with its
               per-process L1 in front of the Redis view and the durable snapshot;
      view     the same read without the L1 (selectors._load: Redis view, then the durable snapshot).
    A probe not visible after `timeout` s is a timeout and its video is retired (so a late value of the
    old probe cannot be taken for the next one)."""
    from counting import selectors
    from relations.services import commands

    load_uncached = getattr(selectors, "_load", None)
    videos: list[str] = job["videos"]
    user_id: int = job["user_id"]
    interval, poll, timeout = job["interval_s"], job["poll_s"], job["timeout_s"]
    t_measure, t_end, hard = job["t_measure"], job["t_end"], job["hard_deadline"]
    state = dict.fromkeys(videos, UNLIKED)  # the relations were truncated before the workload
    outstanding: dict[str, dict] = {}
    retired: set[str] = set()
    lat_display: list[float] = []
    lat_view: list[float] = []
    c: Counter = Counter()
    errors: Counter = Counter()
    seq = rr = 0
    _sleep_until(job["t_start"], parent_pid)
    next_commit = time.time()
    for _ in range(MAX_LOOP_ITERATIONS):
        now = time.time()
        if now >= hard or stop.is_set() or not _alive(parent_pid):
            break
        if now >= t_end and not outstanding:
            break
        if now < t_end and now >= next_commit:
            next_commit = max(next_commit + interval, now)
            free = [v for v in videos if v not in outstanding and v not in retired]
            if free:
                video = free[rr % len(free)]
                rr += 1
                seq += 1
                desired = LIKED if state[video] == UNLIKED else UNLIKED
                try:
                    res = commands.relation_set_state(user_id=user_id, video_id=video, desired_state=desired,
                                                      operation_id=f"{job['key_prefix']}-{seq}",
                                                      device_id="bench-probe")
                except Exception as exc:
                    errors[exc.__class__.__name__] += 1
                    _reset_connections()
                    continue
                t_commit = time.time()
                state[video] = res.current.state
                if res.changed:
                    c["commits"] += 1
                    outstanding[video] = {"expected": 1 if res.current.state == LIKED else 0, "t": t_commit,
                                          "measured": t_measure <= t_commit < t_end, "view_ms": None}
        if outstanding:
            ids = list(outstanding)
            try:
                if load_uncached is not None:
                    pending = [v for v in ids if outstanding[v]["view_ms"] is None]
                    if pending:
                        raw = load_uncached(selectors.count_cache_generations_get().active, pending)
                        t_seen = time.time()
                        for v in pending:
                            if raw[v].display_count == outstanding[v]["expected"]:
                                outstanding[v]["view_ms"] = (t_seen - outstanding[v]["t"]) * 1000
                got = selectors.display_counts_get(video_ids=ids)
            except Exception as exc:
                errors[exc.__class__.__name__] += 1
                _reset_connections()
                got = {}
            t_seen = time.time()
            for v in ids:
                o = outstanding[v]
                if v in got and got[v].display_count == o["expected"]:
                    ms = (t_seen - o["t"]) * 1000
                    if o["measured"]:
                        lat_display.append(round(ms, 1))
                        lat_view.append(round(o["view_ms"] if o["view_ms"] is not None else ms, 1))
                    del outstanding[v]
                elif t_seen - o["t"] > timeout:
                    if o["measured"]:
                        c["timeouts"] += 1
                    retired.add(v)
                    del outstanding[v]
        time.sleep(poll)  # the probe's poll interval (what it measures)
    return {**c, "errors": dict(errors), "display_ms": lat_display, "view_ms": lat_view,
            "view_path": "selectors._load" if load_uncached is not None else None, "retired": len(retired)}


ROLES = {"commands": role_commands, "publisher": role_publisher, "projector": role_projector,
         "snapshot": role_snapshot, "probe": role_probe}


def proc_main(index: int, tasks, results, stop, parent_pid: int) -> None:
    """Entry point of one spawned worker process: django.setup() once, then run jobs until told to stop
    (or the driver is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops us
    import django

    django.setup()
    results.put((index, "ready", os.getpid()))
    idle_since = time.time()
    for _ in range(MAX_LOOP_ITERATIONS):
        if not _alive(parent_pid) or time.time() - idle_since > IDLE_EXIT_S:
            break
        try:
            job = tasks.get(timeout=1.0)
        except queue.Empty:
            continue
        if job is None:
            break
        try:
            res = ROLES[job["role"]](job, stop, parent_pid)
        except Exception as exc:
            res = {"fatal": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        results.put((index, job["tag"], res))
        idle_since = time.time()
    _reset_connections()


class RolePool:
    """Spawned worker processes (one Django each), given one job at a time; one shared stop event."""

    def __init__(self, size: int):
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(size)]
        parent = os.getpid()
        self.procs = [ctx.Process(target=proc_main, args=(i, self.tasks[i], self.results, self.stop, parent),
                                  daemon=True, name=f"bench-pipeline-{i}") for i in range(size)]
        self._stash: dict[int, dict] = {}
        for p in self.procs:
            p.start()
        ready = 0
        deadline = time.time() + READY_TIMEOUT_S
        while ready < size:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise RuntimeError(f"only {ready}/{size} worker processes became ready")
            if not all(p.is_alive() for p in self.procs):
                raise RuntimeError("a worker process died while starting")
            try:
                _, tag, _ = self.results.get(timeout=min(remaining, 2.0))
            except queue.Empty:
                continue
            if tag == "ready":
                ready += 1
        _log(f"{size} worker processes ready")

    def pid(self, index: int) -> int:
        return self.procs[index].pid

    def submit(self, index: int, job: dict) -> None:
        self.tasks[index].put(job)

    def collect(self, indices: list[int], timeout: float) -> dict[int, dict]:
        want = set(indices)
        out = {i: self._stash.pop(i) for i in list(want) if i in self._stash}
        deadline = time.time() + timeout
        while len(out) < len(want):
            remaining = deadline - time.time()
            if remaining <= 0:
                raise RuntimeError(f"only {len(out)}/{len(want)} jobs reported within {timeout:.0f}s")
            dead = [i for i in want - set(out) if not self.procs[i].is_alive()]
            if dead:
                raise RuntimeError(f"worker process(es) {dead} died")
            try:
                index, _tag, res = self.results.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if index in want and index not in out:
                out[index] = res
            else:
                self._stash[index] = res
        fatal = [(i, r) for i, r in out.items() if isinstance(r, dict) and "fatal" in r]
        if fatal:
            i, r = fatal[0]
            raise RuntimeError(f"worker {i} failed: {r['fatal']}\n{r.get('traceback', '')}")
        return out

    def close(self, grace: float = 15.0) -> None:
        self.stop.set()
        for q in self.tasks:
            with contextlib.suppress(Exception):
                q.put(None)
        deadline = time.time() + grace
        for p in self.procs:
            p.join(timeout=max(0.1, deadline - time.time()))
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


# --- data preparation and resets (driver) --------------------------------------------------------


def wait_for_quiet(max_wait: float) -> float:
    """The other benchmarks (bench/run.sh, bench/read.sh) TRUNCATE the same bench tables. bench/env.sh
    serialises the scripts with a lock; as a second guard, wait until no other client is connected to a
    likes_bench* database (call before this process opens its own connections), or refuse."""
    import psycopg

    with psycopg.connect(**_pg_conninfo("default"), autocommit=True, connect_timeout=5) as conn:
        return common.wait_for_quiet(max_wait, lambda: other_connections(conn), tag="projection", log=_log, ndigits=1)


def _t(model) -> str:
    return model._meta.db_table


def prepare_pipeline(args) -> tuple[int, dict[str, list[str]]]:
    """The probe user and the probe videos (a set per workload, so the workloads' relations stay
    disjoint), and the naive baseline's tables in one count partition."""
    from django.contrib.auth import get_user_model
    from django.db import connections

    from likes_project.audit.services import Actor
    from relations.models import VideoSnapshot
    from relations.services.videos import video_snapshot_upsert

    User = get_user_model()
    author = User.objects.get(username=AUTHOR_NAME)
    probe_user, _ = User.objects.get_or_create(username=PROBE_USER, defaults={"password": "!bench"})
    probe_sets = {w: [f"{PROBE_VIDEO_PREFIX}{w[0]}{i:02d}" for i in range(args.probe_videos)]
                  for w in ("uniform", "hot")}
    probe_videos = [v for vids in probe_sets.values() for v in vids]
    have = set(VideoSnapshot.objects.filter(video_id__in=probe_videos).values_list("video_id", flat=True))
    actor = Actor(name="bench", channel="cli")
    for vid in probe_videos:
        if vid not in have:
            video_snapshot_upsert(video_id=vid, author_id=author.pk, visibility="public", status="active",
                                  version=1, actor=actor)
    with connections[naive_alias()].cursor() as cur:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {NAIVE_COUNT_TABLE} ("
                    " video_id varchar(64) PRIMARY KEY, like_count bigint NOT NULL DEFAULT 0)")
        cur.execute(f"CREATE TABLE IF NOT EXISTS {NAIVE_PROJECTION_TABLE} ("
                    " user_id bigint NOT NULL, video_id varchar(64) NOT NULL, state varchar(8) NOT NULL,"
                    " version bigint NOT NULL, PRIMARY KEY (user_id, video_id))")
    return probe_user.pk, probe_sets


def _naive_rows(videos: list[str]) -> None:
    from django.db import connections

    with connections[naive_alias()].cursor() as cur:
        cur.execute(f"INSERT INTO {NAIVE_COUNT_TABLE} (video_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                    [videos])


def reset_ours() -> None:
    """Empty the count projection's partition-side state (projection rows, vbuckets, receipts, dirty
    marks) and the `count` consumer's checkpoints and dead letters. Route and consumer fences stay (lease
    tokens only grow). Only ever the likes_bench_* databases (check_environment ran)."""
    from django.conf import settings
    from django.db import connections

    from counting.models import CountEventReceipt, DirtyVideo, LikeCountProjection, VideoLikeCountVbucket
    from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter

    tables = ", ".join(_t(m) for m in (LikeCountProjection, VideoLikeCountVbucket, CountEventReceipt, DirtyVideo))
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"TRUNCATE {tables}")
    ConsumerCheckpoint.objects.filter(consumer=OURS_CONSUMER).delete()
    DeadLetter.objects.filter(consumer=OURS_CONSUMER).delete()


def reset_naive() -> None:
    from django.db import connections

    from likes_project.eventlog.models import ConsumerCheckpoint, DeadLetter

    with connections[naive_alias()].cursor() as cur:
        cur.execute(f"TRUNCATE {NAIVE_PROJECTION_TABLE}")
        cur.execute(f"UPDATE {NAIVE_COUNT_TABLE} SET like_count = 0 WHERE like_count <> 0")
    ConsumerCheckpoint.objects.filter(consumer=NAIVE_CONSUMER).delete()
    DeadLetter.objects.filter(consumer=NAIVE_CONSUMER).delete()


def reset_workload() -> None:
    """Every workload starts from nothing: relations/commands/outbox (command_bench.reset_state), the
    count state of both consumers, the display snapshots, and the bench Redis namespace (streams, views,
    caches)."""
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import VideoDisplayCount
    from counting.selectors import display_l1, reset_generation_cache
    from likes_project.eventlog import streams

    reset_state()
    reset_ours()
    reset_naive()
    with connections["default"].cursor() as cur:
        cur.execute(f"TRUNCATE {_t(VideoDisplayCount)}")
    flush_bench_redis()
    count_routing.reset_cache()
    streams.reset_cache()
    reset_generation_cache()
    display_l1().clear()
    connections.close_all()


# --- measurements after a phase (driver) ---------------------------------------------------------


def _utc(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)


def pg_deadlocks() -> int:
    """Deadlocks PostgreSQL detected so far in the bench databases (pg_stat_database; a backend reports
    its counters within about a second)."""
    from django.db import connections

    with connections["default"].cursor() as cur:
        cur.execute("SELECT coalesce(sum(deadlocks), 0) FROM pg_stat_database WHERE datname LIKE %s",
                    [BENCH_DB_PREFIX + "%"])
        return int(cur.fetchone()[0])


def pipeline_pending() -> dict:
    """What the pipeline still has to do: outbox rows not yet SENT, partitions whose `count`
    checkpoint is behind the stream's last id, dirty videos."""
    from django.conf import settings

    from counting.models import DirtyVideo
    from likes_project.eventlog import streams
    from likes_project.eventlog.models import ConsumerCheckpoint
    from relations.models import OutboxEvent

    outbox = sum(OutboxEvent.objects.using(a).filter(status__in=["NEW", "RETRY", "UNCERTAIN", "PUBLISHING"])
                 .count() for a in settings.RELATION_SHARD_ALIASES)
    if outbox:
        return {"outbox": outbox}
    cps = dict(ConsumerCheckpoint.objects.filter(consumer=OURS_CONSUMER).values_list("partition", "last_done_id"))
    behind = [p for p in streams.all_partitions()
              if (last := streams.last_generated_id(p)) != "0-0" and cps.get(p) != last]
    if behind:
        return {"partitions_behind": behind}
    dirty = sum(DirtyVideo.objects.using(a).count() for a in settings.COUNT_PARTITION_ALIASES)
    return {"dirty": dirty} if dirty else {}


def exactness(videos: list[str], *, check_snapshots: bool, only: list[str] | None = None) -> dict:
    """For every video: sum of its vbuckets (the bucket_sum logic of tests/counting/helpers.py) and the
    durable display snapshot against the LIKED relations in the shards; also the served value
    (display_counts_get, fresh L1: the Redis view, else the snapshot) and the naive counter. With `only`
    (after a replay of one workload's stream) the expected value is the facts for those videos and 0 for
    every other one."""
    from django.conf import settings
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import VideoDisplayCount, VideoLikeCountVbucket
    from counting.selectors import display_counts_get, display_l1
    from likes_project.eventlog.models import DeadLetter
    from relations.models import LikeRelation

    facts: Counter = Counter()
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, count(*) FROM {_t(LikeRelation)} WHERE state = 'LIKED' GROUP BY video_id")
            for v, n in cur.fetchall():
                facts[v] += int(n)
    gen = count_routing.active()
    buckets: Counter = Counter()
    frozen = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, SUM(active_count), count(*) FILTER (WHERE frozen) "
                        f"FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s GROUP BY video_id", [gen.generation])
            for v, s, f in cur.fetchall():
                buckets[v] += int(s)
                frozen += int(f)
    with connections[naive_alias()].cursor() as cur:
        cur.execute(f"SELECT video_id, like_count FROM {NAIVE_COUNT_TABLE} WHERE like_count <> 0")
        naive = {v: int(n) for v, n in cur.fetchall()}
    if only is not None:
        keep = set(only)
        facts = Counter({v: n for v, n in facts.items() if v in keep})
    everything = sorted(set(videos) | set(facts) | set(buckets) | set(naive))
    out: dict = {"videos_checked": len(everything), "liked_total": sum(facts.values()),
                 "frozen_buckets": frozen,
                 "dead_letters": DeadLetter.objects.filter(consumer__in=[OURS_CONSUMER, NAIVE_CONSUMER]).count()}
    bucket_bad = [(v, facts[v], buckets[v]) for v in everything if facts[v] != buckets[v]]
    out["buckets_exact"] = not bucket_bad
    out["bucket_mismatches"] = bucket_bad[:20]
    naive_bad = [(v, facts[v], naive.get(v, 0)) for v in everything if facts[v] != naive.get(v, 0)]
    out["naive_exact"] = not naive_bad
    out["naive_mismatches"] = naive_bad[:20]
    if check_snapshots:
        snaps = dict(VideoDisplayCount.objects.values_list("video_id", "display_count"))
        snap_bad = [(v, facts[v], snaps.get(v, 0)) for v in everything if facts[v] != snaps.get(v, 0)]
        out["snapshot_exact"] = not snap_bad
        out["snapshot_mismatches"] = snap_bad[:20]
        display_l1().clear()
        served = display_counts_get(video_ids=everything)
        served_bad = [(v, facts[v], served[v].display_count) for v in everything
                      if facts[v] != served[v].display_count]
        out["served_exact"] = not served_bad
        out["served_mismatches"] = served_bad[:20]
        out["served_sources"] = dict(Counter(served[v].source for v in everything))
    connections.close_all()
    return out


def receipts_and_lags(t_measure: float, t_end: float) -> dict:
    """From the durable records, after the drain: events produced (outbox rows created in the window),
    events applied by the projector (`applied` receipts created in the window) and, for every event whose
    stateChangedAt is in the window, the publish lag (published_at - stateChangedAt) and the projection
    lag (receipt created_at - stateChangedAt), joined by event id across databases."""
    from django.conf import settings
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import CountEventReceipt
    from relations.models import OutboxEvent

    w0, w1 = _utc(t_measure), _utc(t_end)
    gen = count_routing.active()
    applied_at: dict[str, dt.datetime] = {}
    applied_window = 0
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT event_id, created_at FROM {_t(CountEventReceipt)} "
                        "WHERE generation = %s AND outcome = 'applied'", [gen.generation])
            for event_id, created in cur.fetchall():
                applied_at[event_id] = created
                applied_window += w0 <= created < w1
    produced_window = 0
    events = []
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT event_id::text, payload->>'stateChangedAt', created_at, published_at "
                        f"FROM {_t(OutboxEvent)}")
            for event_id, changed, created, published in cur.fetchall():
                produced_window += w0 <= created < w1
                changed_at = dt.datetime.fromisoformat(changed)
                if w0 <= changed_at < w1:
                    events.append((event_id, changed_at, published))
    connections.close_all()
    publish = sorted((p - c).total_seconds() * 1000 for _, c, p in events if p is not None)
    project = sorted((applied_at[e] - c).total_seconds() * 1000 for e, c, _ in events if e in applied_at)
    return {
        "events_produced_window": produced_window, "events_applied_window": applied_window,
        "events_in_window": len(events), "lag_samples": len(project),
        "lag_unapplied": sum(1 for e, _, _ in events if e not in applied_at),
        "publish_lag_p50_ms": _r(percentile(publish, 0.5)), "publish_lag_p99_ms": _r(percentile(publish, 0.99)),
        "lag_p50_ms": _r(percentile(project, 0.5)), "lag_p99_ms": _r(percentile(project, 0.99)),
        "lag_max_ms": _r(project[-1] if project else None),
    }


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


# --- phases (driver) -----------------------------------------------------------------------------


class Layout:
    """Which pool process plays which role."""

    def __init__(self, args, shards: list[str]):
        n = 0

        def take(k: int) -> list[int]:
            nonlocal n
            out = list(range(n, n + k))
            n += k
            return out

        self.commands = take(args.procs)
        self.publishers = dict(zip(shards, take(len(shards)), strict=True))
        self.projectors = take(args.projectors)
        self.snapshot = take(1)[0]
        self.probe = take(1)[0]
        # The backlog replays run while everything else is idle, on any processes: projectors first.
        extra = take(max(0, max(args.replay_procs_list, default=0) - n))
        self.replay_order = [*self.projectors, *self.commands, *self.publishers.values(), self.snapshot,
                             self.probe, *extra]
        self.size = n

    def labels(self, pool: RolePool) -> dict[int, str]:
        out = {pool.pid(i): "command clients" for i in self.commands}
        out.update({pool.pid(i): "publishers" for i in self.publishers.values()})
        out.update({pool.pid(i): "projectors" for i in self.projectors})
        out[pool.pid(self.snapshot)] = "snapshot loop"
        out[pool.pid(self.probe)] = "probe"
        return out


def _partition_shares(n_procs: int) -> list[list[int]]:
    from likes_project.eventlog import streams

    parts = streams.all_partitions()
    return [parts[i::n_procs] for i in range(n_procs) if parts[i::n_procs]]


def run_sustained(pool: RolePool, layout: Layout, sampler: ResourceSampler, args, *, workload: str,
                  users: list, videos: list[str], probe_user: int, probe_videos: list[str]) -> dict:
    run_id = secrets.token_hex(3)
    deadlocks0 = pg_deadlocks()
    t_start = time.time() + 1.0
    t_measure = t_start + args.warmup
    t_end = t_measure + args.duration
    hard = t_end + args.drain_timeout + args.probe_timeout + 30
    common = {"t_start": t_start, "t_measure": t_measure, "t_end": t_end, "hard_deadline": hard}
    n = len(layout.commands)
    for k, i in enumerate(layout.commands):
        pool.submit(i, {**common, "role": "commands", "tag": f"cmd-{workload}", "layer": "service", "naive": False,
                        "port": None, "users": users[k::n], "videos": [HOT_VIDEO] if workload == "hot" else videos,
                        "mix": args.mix_shares, "seed": args.seed * 1000 + k + (500 if workload == "hot" else 0),
                        "key_prefix": f"p{run_id}{workload[0]}{k}"})
    for alias, i in layout.publishers.items():
        pool.submit(i, {**common, "role": "publisher", "tag": f"pub-{alias}", "alias": alias,
                        "idle_s": args.publish_idle})
    shares = _partition_shares(len(layout.projectors))
    for share, i in zip(shares, layout.projectors, strict=False):
        pool.submit(i, {**common, "role": "projector", "tag": "proj", "variant": "ours", "mode": "sustained",
                        "partitions": share, "idle_s": args.project_idle})
    proj_used = layout.projectors[:len(shares)]
    pool.submit(layout.snapshot, {**common, "role": "snapshot", "tag": "snap", "interval_s": args.snapshot_interval})
    pool.submit(layout.probe, {**common, "role": "probe", "tag": "probe", "videos": probe_videos,
                               "user_id": probe_user, "interval_s": args.probe_interval, "poll_s": args.probe_poll,
                               "timeout_s": args.probe_timeout, "key_prefix": f"probe{run_id}{workload[0]}"})
    sampler.start(t_measure, t_end, pid_labels=layout.labels(pool))
    try:
        cmd = pool.collect(layout.commands, timeout=(t_end - time.time()) + 120)
    finally:
        resources = sampler.stop()
    probe = pool.collect([layout.probe], timeout=(t_end - time.time()) + args.probe_timeout + 60)[layout.probe]

    # Drain: the loops keep running until nothing is pending, then they are stopped.
    t_drain0 = time.time()
    pending = {"not checked": True}
    for _ in range(100_000):
        pending = pipeline_pending()
        if not pending or time.time() - t_drain0 > args.drain_timeout:
            break
        time.sleep(0.25)  # poll the drain (bounded by --drain-timeout)
    drain_s = time.time() - t_drain0
    pool.stop.set()
    try:
        loops = pool.collect([*layout.publishers.values(), *proj_used, layout.snapshot], timeout=60)
    finally:
        pool.stop.clear()
    if pending:
        _log(f"  {workload}: the pipeline did NOT drain within {args.drain_timeout:.0f}s: {pending}")
    pubs = [loops[i] for i in layout.publishers.values()]
    projs = [loops[i] for i in proj_used]
    snap = loops[layout.snapshot]

    ok = sum(r["ok"] for r in cmd.values())
    lat = sorted(x for r in cmd.values() for x in r["latencies_ms"])
    cmd_errors: Counter = Counter()
    for r in cmd.values():
        cmd_errors.update(r["errors"])
    durable = receipts_and_lags(t_measure, t_end)
    time.sleep(max(0.0, t_end + 1.5 - time.time()))  # let the last window close before reading receipts
    deadlocks = pg_deadlocks() - deadlocks0
    display = sorted(probe["display_ms"])
    view = sorted(probe["view_ms"])
    row = {
        "workload": workload, "duration_s": args.duration,
        "commands_per_s": round(ok / args.duration, 1), "command_p50_ms": _r(percentile(lat, 0.5), 2),
        "command_p99_ms": _r(percentile(lat, 0.99), 2), "command_errors": sum(cmd_errors.values()),
        "command_error_kinds": dict(cmd_errors.most_common(5)),
        "changed_share": round(sum(r["changed"] for r in cmd.values()) / ok, 3) if ok else None,
        "events_produced_per_s": round(durable["events_produced_window"] / args.duration, 1),
        "events_published_per_s": round(sum(p.get("sent_window", 0) for p in pubs) / args.duration, 1),
        "events_applied_per_s": round(durable["events_applied_window"] / args.duration, 1),
        "events_applied_per_s_reported": round(sum(p.get("applied_window", 0) for p in projs) / args.duration, 1),
        **{k: durable[k] for k in ("lag_p50_ms", "lag_p99_ms", "lag_max_ms", "lag_samples", "lag_unapplied",
                                   "publish_lag_p50_ms", "publish_lag_p99_ms")},
        "display_p50_ms": _r(percentile(display, 0.5)), "display_p99_ms": _r(percentile(display, 0.99)),
        "display_max_ms": _r(display[-1] if display else None), "display_samples": len(display),
        "display_timeouts": probe.get("timeouts", 0), "probe_errors": probe["errors"],
        "view_p50_ms": _r(percentile(view, 0.5)), "view_p99_ms": _r(percentile(view, 0.99)),
        "view_path": probe.get("view_path"),
        "drain_s": round(drain_s, 1), "drained": not pending, "pending_at_stop": pending, "pg_deadlocks": deadlocks,
        "publishers": pubs, "projectors": [{k: v for k, v in p.items() if k not in ("t_first", "t_last_progress")}
                                           for p in projs],
        "snapshot_loop": snap, "resources": resources,
    }
    _log(f"  {workload}: {row['commands_per_s']} cmd/s, {row['events_applied_per_s']} applied/s, lag p50/p99 "
         f"{row['lag_p50_ms']}/{row['lag_p99_ms']} ms, displayCount p50/p99 {row['display_p50_ms']}/"
         f"{row['display_p99_ms']} ms ({row['display_samples']} probes, {row['display_timeouts']} timeouts), "
         f"drained in {row['drain_s']}s")
    return row


def streams_save(after: dict[int, str]) -> tuple[dict[int, list], dict[int, str]]:
    """The entries of every partition after `after[p]` (the previous workload's last id), and the new
    last ids."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis

    client = stream_redis()
    saved: dict[int, list] = {}
    last: dict[int, str] = {}
    for p in streams.all_partitions():
        start = after.get(p, "0-0")
        entries: list = []
        for _ in range(10_000):  # bounded paging
            rows = client.xrange(streams.stream_key(p), min=f"({start}", max="+", count=5000)
            if not rows:
                break
            entries += rows
            start = rows[-1][0].decode()
        saved[p] = entries
        last[p] = start
    return saved, last


def streams_load(saved: dict[int, list]) -> None:
    """Replace the live streams by the saved entries (same entry ids, same fields)."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis

    pipe = stream_redis().pipeline(transaction=False)
    for p in streams.all_partitions():
        pipe.delete(streams.stream_key(p))
    for p, entries in saved.items():
        for entry_id, fields in entries:
            pipe.xadd(streams.stream_key(p), fields, id=entry_id)
    pipe.execute()


def run_replay(pool: RolePool, layout: Layout, sampler: ResourceSampler, *, variant: str, procs: int,
               idle_s: float) -> dict:
    """Project the whole stream again from an empty state, with `procs` processes each owning every
    procs-th partition: the projector's own throughput, not the arrival rate."""
    from likes_project.eventlog import streams

    if variant == "ours":
        reset_ours()
    else:
        reset_naive()
    from django.db import connections

    connections.close_all()
    backlog = sum(streams.length(p) for p in streams.all_partitions())
    shares = _partition_shares(procs)
    used = layout.replay_order[:len(shares)]
    t0 = time.time() + 0.5
    for share, i in zip(shares, used, strict=True):
        pool.submit(i, {"role": "projector", "tag": f"replay-{variant}", "variant": variant, "mode": "replay",
                        "partitions": share, "idle_s": idle_s, "t_start": t0, "hard_deadline": t0 + 120})
    sampler.start(t0, t0 + 120, pid_labels={pool.pid(i): f"projectors ({variant})" for i in used})
    try:
        res = pool.collect(used, timeout=180)
    finally:
        resources = sampler.stop()
    applied = sum(r.get("applied", 0) for r in res.values())
    ends = [r["t_last_progress"] for r in res.values() if r.get("t_last_progress")]
    elapsed = (max(ends) - t0) if ends else None
    errors: Counter = Counter()
    statuses: Counter = Counter()
    logged: Counter = Counter()
    for r in res.values():
        errors.update(r.get("errors", {}))
        statuses.update(r.get("statuses", {}))
        logged.update(r.get("logged", {}))
    return {"variant": variant, "group_failures": {k: v for k, v in logged.items() if k.startswith("group")},
            "logged": dict(logged), "procs": len(used), "backlog": backlog, "applied": applied,
            "dispatched": sum(r.get("dispatched", 0) for r in res.values()),
            "held_back": sum(r.get("held_back", 0) for r in res.values()),
            "elapsed_s": round(elapsed, 3) if elapsed else None,
            "applied_per_s": round(applied / elapsed, 1) if elapsed else None,
            "errors": dict(errors), "statuses": dict(statuses), "resources": resources}


def run_workload(pool, layout, sampler, args, *, workload, users, videos, probe_user, probe_videos,
                 all_videos) -> dict:
    """The sustained phase of one workload, its drain and the exactness check over every video."""
    _log(f"{workload}: sustained load {args.warmup:g}+{args.duration:g} s ...")
    row = run_sustained(pool, layout, sampler, args, workload=workload, users=users, videos=videos,
                        probe_user=probe_user, probe_videos=probe_videos)
    row["exactness"] = exactness(all_videos, check_snapshots=True)
    ex = row["exactness"]
    verdict = "EXACT" if ex["buckets_exact"] and ex["snapshot_exact"] else "MISMATCH"
    _log(f"  {workload}: {verdict} over {ex['videos_checked']} videos ({ex['liked_total']} LIKED relations): "
         f"vbuckets {'ok' if ex['buckets_exact'] else ex['bucket_mismatches']}, snapshots "
         f"{'ok' if ex['snapshot_exact'] else ex['snapshot_mismatches']}, served "
         f"{'ok' if ex['served_exact'] else ex['served_mismatches']}")
    return row


def run_capacity(pool, layout, sampler, args, *, rows: list[dict], saved: dict, own_videos: dict,
                 all_videos: list[str]) -> None:
    """The backlog replays, after every workload's sustained phase, so that the hot and the uniform
    replay of a variant run back to back (background load on a shared machine then hits both alike).
    Each replay rebuilds the live streams with the entries of one workload only (same entry ids), empties
    the variant's state and projects it from the start; the counts are then checked against that
    workload's LIKED relations (every other video must be 0)."""
    by = {r["workload"]: r for r in rows}
    for r in rows:
        r["replays"] = []
    wl = [w for w in args.workload_list if w in saved]
    previous: dict | None = None
    deadlocks = pg_deadlocks()
    for rnd in range(args.replay_rounds):
        for j, procs in enumerate(args.replay_procs_list):
            seq = [(w, "ours") for w in wl] + [(w, "naive") for w in reversed(wl)]
            if (rnd + j) % 2:
                seq.reverse()  # u-ours h-ours h-naive u-naive, then u-naive h-naive h-ours u-ours, ...
            for workload, variant in seq:
                streams_load(saved[workload])
                now_deadlocks = pg_deadlocks()  # reported after the previous replay had time to flush its stats
                if previous is not None:
                    previous["pg_deadlocks"] = now_deadlocks - deadlocks
                deadlocks = now_deadlocks
                rep = previous = run_replay(pool, layout, sampler, variant=variant, procs=procs,
                                            idle_s=args.project_idle)
                check = exactness(all_videos, check_snapshots=False, only=own_videos[workload])
                rep["exact"] = check["buckets_exact"] if variant == "ours" else check["naive_exact"]
                rep["mismatches"] = (check["bucket_mismatches"] if variant == "ours"
                                     else check["naive_mismatches"])[:5]
                rep["round"] = rnd
                by[workload]["replays"].append(rep)
                _log(f"  replay {workload} {variant} x{rep['procs']}: {rep['applied']} of {rep['backlog']} events in "
                     f"{rep['elapsed_s']}s = {rep['applied_per_s']} applied/s, held back {rep['held_back']}, "
                     f"group failures {rep['group_failures'] or 0}, {'EXACT' if rep['exact'] else 'MISMATCH'}")
    if previous is not None:
        time.sleep(1.5)  # let the previous round's backends exit
        previous["pg_deadlocks"] = pg_deadlocks() - deadlocks
    for r in rows:
        r["capacity"] = {}
        for procs in args.replay_procs_list:
            cell = {}
            for variant in ("ours", "naive"):
                mine = [x for x in r["replays"] if x["variant"] == variant and x["procs"] == procs and x["elapsed_s"]]
                applied = sum(x["applied"] for x in mine)
                seconds = sum(x["elapsed_s"] for x in mine)
                cell[variant] = {"applied_per_s": round(applied / seconds, 1) if seconds else None,
                                 "per_round": [x["applied_per_s"] for x in mine],
                                 "backlog": mine[0]["backlog"] if mine else None}
            r["capacity"][str(procs)] = cell


# --- reporting -----------------------------------------------------------------------------------


def _f(x, nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def compute_ratios(rows: list[dict], pipeline_procs: int) -> dict:
    """hot ÷ uniform: commands/s and events applied/s of the sustained window; replay applied/s per
    variant and process count (pooled over the rounds, and per round in run order)."""
    by = {r["workload"]: r for r in rows}
    out: dict = {"pipeline_procs": pipeline_procs, "capacity": {}}
    if "hot" not in by or "uniform" not in by:
        return out
    hot, uni = by["hot"], by["uniform"]

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    out["commands_hot_over_uniform"] = ratio(hot["commands_per_s"], uni["commands_per_s"])
    out["ours_sustained_hot_over_uniform"] = ratio(hot["events_applied_per_s"], uni["events_applied_per_s"])
    for procs, hcell in hot.get("capacity", {}).items():
        ucell = uni.get("capacity", {}).get(procs)
        if not ucell:
            continue
        out["capacity"][procs] = {
            variant: {"hot_over_uniform": ratio(hcell[variant]["applied_per_s"], ucell[variant]["applied_per_s"]),
                      "per_round": [round(h / u, 3) for h, u in zip(hcell[variant]["per_round"],
                                                                    ucell[variant]["per_round"], strict=False)
                                    if h and u]}
            for variant in ("ours", "naive")}
    head = out["capacity"].get(str(pipeline_procs), {})
    out["ours_capacity_hot_over_uniform"] = head.get("ours", {}).get("hot_over_uniform")
    out["naive_capacity_hot_over_uniform"] = head.get("naive", {}).get("hot_over_uniform")
    for key in ("ours_sustained_hot_over_uniform", "ours_capacity_hot_over_uniform"):
        out[key.replace("_hot_over_uniform", "_passes")] = None if out[key] is None else out[key] >= 0.9
    return out


def exact_overall(rows: list[dict]) -> bool:
    ok = True
    for r in rows:
        ex = r["exactness"]
        ok &= bool(ex["buckets_exact"] and ex["snapshot_exact"] and r["drained"])
        ok &= all(rep["exact"] for rep in r["replays"])
    return ok


def sustained_table(rows: list[dict]) -> str:
    lines = ["| workload | commands/s | events produced/s | events applied/s | projection lag p50 / p99 ms "
             "| publish lag p50 / p99 ms | commit→displayCount p50 / p99 ms (probes, timeouts) "
             "| same without L1 p50 / p99 ms | drain s | exact |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ex = r["exactness"]
        exact = "EXACT" if ex["buckets_exact"] and ex["snapshot_exact"] else "**MISMATCH**"
        lines.append(
            f"| {r['workload']} | {_f(r['commands_per_s'])} | {_f(r['events_produced_per_s'])} | "
            f"{_f(r['events_applied_per_s'])} | {_f(r['lag_p50_ms'], 0)} / {_f(r['lag_p99_ms'], 0)} | "
            f"{_f(r['publish_lag_p50_ms'], 0)} / {_f(r['publish_lag_p99_ms'], 0)} | "
            f"{_f(r['display_p50_ms'], 0)} / {_f(r['display_p99_ms'], 0)} ({r['display_samples']}, "
            f"{r['display_timeouts']}) | {_f(r['view_p50_ms'], 0)} / {_f(r['view_p99_ms'], 0)} | "
            f"{_f(r['drain_s'])} | {exact} ({ex['liked_total']:,} likes, {ex['videos_checked']:,} videos) |")
    return "\n".join(lines)


def capacity_table(rows: list[dict]) -> str:
    lines = ["| workload | processes | backlog events | ours applied/s (per round) "
             "| naive single-row applied/s (per round) | ours: groups failed and replayed / PG deadlocks "
             "| naive: same | exact after every replay |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        for procs, cell in r.get("capacity", {}).items():
            mine = [x for x in r["replays"] if str(x["procs"]) == procs]
            exact = "EXACT" if all(x["exact"] for x in mine) else "**MISMATCH**"

            def rounds(variant, cell=cell):
                return ", ".join(_f(x, 0) for x in cell[variant]["per_round"])

            def failures(variant, mine=mine):
                reps = [x for x in mine if x["variant"] == variant]
                groups = sum(sum(x.get("group_failures", {}).values()) for x in reps)
                return f"{groups} / {sum(x.get('pg_deadlocks', 0) for x in reps)}"

            lines.append(f"| {r['workload']} | {procs} | {cell['ours']['backlog'] or 0:,} | "
                         f"**{_f(cell['ours']['applied_per_s'], 0)}** ({rounds('ours')}) | "
                         f"**{_f(cell['naive']['applied_per_s'], 0)}** ({rounds('naive')}) | "
                         f"{failures('ours')} | {failures('naive')} | {exact} |")
    return "\n".join(lines)


def _verdict(x) -> str:
    return "n/a" if x is None else ("PASS (≥ 0.9)" if x >= 0.9 else "FAIL (< 0.9)")


def ratios_text(ratios: dict) -> str:
    def f(x):
        return "n/a" if x is None else f"{x:.2f}"

    def rounds(vals):
        return ", ".join(f"{v:.2f}" for v in vals or []) or "n/a"

    pp = str(ratios.get("pipeline_procs"))
    lines = [
        f"- **ours, projection throughput hot/uniform at saturation with the pipeline's {pp} projector processes "
        f"(backlog replay): {f(ratios.get('ours_capacity_hot_over_uniform'))} — "
        f"{_verdict(ratios.get('ours_capacity_hot_over_uniform'))}**",
        f"- ours, events applied/s hot/uniform under the sustained load: "
        f"**{f(ratios.get('ours_sustained_hot_over_uniform'))} — "
        f"{_verdict(ratios.get('ours_sustained_hot_over_uniform'))}** (bounded by the arrival rate; commands/s "
        f"hot/uniform {f(ratios.get('commands_hot_over_uniform'))})",
    ]
    for procs, cell in ratios.get("capacity", {}).items():
        lines.append(
            f"- {procs} processes: ours hot/uniform **{f(cell['ours']['hot_over_uniform'])}** "
            f"({_verdict(cell['ours']['hot_over_uniform'])}; paired rounds {rounds(cell['ours']['per_round'])}); "
            f"naive single-row counter hot/uniform **{f(cell['naive']['hot_over_uniform'])}** "
            f"(paired rounds {rounds(cell['naive']['per_round'])})")
    return "\n".join(lines)


def resources_table(rows: list[dict]) -> str:
    lines = ["| phase | machine busy (cores) | CPU by process (cores) "
             "| top bench-DB backend states (share of samples) |",
             "|---|---:|---|---|"]

    def line(name, res):
        if not res:
            return
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in res.get("cores_by_process", {}).items() if v >= 0.05)
        waits = ", ".join(f"{w['wait']} {w['share'] * 100:.0f}%" for w in res.get("top_waits", [])[:3])
        lines.append(f"| {name} | {res['cores_busy']:.2f} | {cpu} | {waits} |")

    for r in rows:
        line(f"{r['workload']} sustained", r.get("resources"))
        for procs in r.get("capacity", {}):
            for variant in ("ours", "naive"):
                reps = [x for x in r["replays"] if x["variant"] == variant and str(x["procs"]) == procs
                        and x.get("resources")]
                if reps:
                    line(f"{r['workload']} replay {variant} x{procs} (round {reps[0]['round'] + 1})",
                         reps[0]["resources"])
    return "\n".join(lines)


def loops_text(rows: list[dict]) -> str:
    parts = []
    for r in rows:
        pubs, projs, snap = r["publishers"], r["projectors"], r["snapshot_loop"]
        batches = sum(p.get("batches", 0) for p in pubs)
        sent = sum(p.get("sent", 0) for p in pubs)
        calls = sum(p.get("calls", 0) for p in projs)
        statuses: Counter = Counter()
        errors: Counter = Counter()
        for p in [*pubs, *projs, snap]:
            errors.update(p.get("errors", {}))
        for p in projs:
            statuses.update(p.get("statuses", {}))
        retries = sum(p.get("retry", 0) + p.get("uncertain", 0) + p.get("dead", 0) for p in pubs)
        logged: Counter = Counter()
        for p in projs:
            logged.update(p.get("logged", {}))
        logged = dict(logged)
        parts.append(
            f"- {r['workload']}: publishers sent {sent:,} events in {batches:,} batches "
            f"({sent / batches if batches else 0:.1f} per batch, {retries} retry/uncertain/dead); projectors made "
            f"{calls:,} consume_partition passes (statuses {dict(statuses)}), dead letters "
            f"{r['exactness']['dead_letters']}, frozen buckets {r['exactness']['frozen_buckets']}, logged "
            f"{logged or 0}, PG deadlocks {r.get('pg_deadlocks')}; snapshot loop "
            f"{snap.get('runs', 0)} runs, {snap.get('videos', 0):,} video refreshes ({snap.get('skipped_hot', 0)} "
            f"hot skips), p50/p99 {_f(snap.get('p50_ms'), 0)}/{_f(snap.get('p99_ms'), 0)} ms per run; command "
            f"p50/p99 {_f(r['command_p50_ms'], 1)}/{_f(r['command_p99_ms'], 1)} ms, errors {r['command_errors']}; "
            f"probe errors {r['probe_errors'] or 0}; loop errors {dict(errors) or 0}; served displayCount "
            f"{'exact' if r['exactness'].get('served_exact') else 'NOT exact'} "
            f"(sources {r['exactness'].get('served_sources')})")
    return "\n".join(parts)


def generated_section(result: dict) -> str:
    meta, spec = result["meta"], result["machine"]
    mix = ", ".join(f"{k} {v:g}%" for k, v in meta["mix"].items())
    exact = "EXACT" if result["exact"] else "MISMATCH (see bench/results/projection_latest.json)"
    return "\n".join([
        DOC_BEGIN,
        "<!-- Written by bench/projection_bench.py at the end of every run; edit the text outside these markers. -->",
        "",
        f"### Last run: {meta['finished_at']} ({meta['wall_seconds']:.0f} s wall clock for the driver)",
        "",
        "**Machine:** "
        f"{spec.get('nproc')} CPUs ({spec.get('cpu_model', 'unknown model')}), {spec.get('memory_gib')} GiB RAM, "
        f"Linux {spec.get('kernel')}; PostgreSQL {spec.get('postgresql')} (max_connections "
        f"{spec.get('pg_max_connections')}, shared_buffers {spec.get('pg_shared_buffers')}, synchronous_commit "
        f"{spec.get('pg_synchronous_commit')}, fsync {spec.get('pg_fsync')}); Redis {spec.get('redis')}; "
        f"Python {spec.get('python')}, Django {spec.get('django')}. "
        f"Load average when the run started: {spec.get('loadavg_at_start')}; when it ended: "
        f"{meta.get('loadavg_at_end')}.",
        "",
        f"**Parameters:** {meta['users']} users; uniform: {meta['videos']} videos, hot: 1 video (`{HOT_VIDEO}`) "
        f"receiving every like; command mix {mix}, fresh operation ids; {meta['procs']} command processes; "
        f"warm-up {meta['warmup_s']:g} s, then {meta['duration_s']:g} s measured per workload; pipeline "
        f"processes: {meta['publishers']} publishers (one per relation shard), {meta['projectors']} projector "
        f"processes over {meta['stream_partitions']} stream partitions (batch {meta['projector_batch']}, 10 "
        f"batches per pass), 1 snapshot loop every {meta['snapshot_interval_s']:g} s (hot videos at most every "
        f"{meta['count_hot_refresh_s']:g} s), 1 probe ({meta['probe_videos']} probe videos per workload, a "
        f"commit every {meta['probe_interval_s']:g} s, polled every {meta['probe_poll_s']:g} s, timeout "
        f"{meta['probe_timeout_s']:g} s); backlog replays with {', '.join(str(x) for x in meta['replay_procs'])} "
        f"processes, {meta['replay_rounds']} round(s) per variant and process count (a variant's hot and uniform "
        f"replays back to back, the order alternating). "
        f"Plain loops, no Celery; rate limiting and nudges off.",
        "",
        "**Sustained load with the pipeline running** (figures of the measured window):",
        "",
        sustained_table(result["rows"]),
        "",
        "**Projection capacity: the workload's whole stream projected again from an empty state** "
        "(the same process count for both variants; applied/s = events ÷ time from the common start to the "
        "last progress, pooled over the rounds):",
        "",
        capacity_table(result["rows"]),
        "",
        "**Ratios**",
        "",
        ratios_text(result["ratios"]),
        "",
        f"**Exactness:** {exact}: for every video, sum of vbuckets = durable display snapshot = LIKED relations in "
        "the shards after the drain, and after every replay (ours: vbuckets; naive: its counter row).",
        "",
        "**The loops:**",
        "",
        loops_text(result["rows"]),
        "",
        "**Where the time went** (CPU from /proc and waits of the bench databases' backends from "
        "pg_stat_activity every 0.25 s, over the measured window and over the first replay of each variant "
        "and process count):",
        "",
        resources_table(result["rows"]),
        "",
        DOC_END,
    ])


def write_docs(result: dict) -> None:
    write_generated(generated_section(result), DOC_BEGIN, DOC_END,
                    heading="## Count projection pipeline\n\nRun `./bench/projection.sh`.")


def print_report(result: dict) -> None:
    ratios = result["ratios"]
    print_blocks(sustained_table(result["rows"]), capacity_table(result["rows"]), ratios_text(ratios),
                 resources_table(result["rows"]), loops_text(result["rows"]))
    bar = "=" * 100
    print(bar)
    pp = ratios.get("pipeline_procs")

    def show(value, gate=True):
        shown = "n/a" if value is None else f"{value:.2f}"
        return shown + (f"  {_verdict(value)}" if gate and value is not None else "")

    print(f"  ours: projection throughput hot/uniform, saturated replay, {pp} processes".ljust(78)
          + show(ratios.get("ours_capacity_hot_over_uniform")))
    print("  ours: events applied/s hot/uniform, sustained load".ljust(78)
          + show(ratios.get("ours_sustained_hot_over_uniform")))
    for procs, cell in ratios.get("capacity", {}).items():
        if procs != str(pp):
            print(f"  ours: projection throughput hot/uniform, saturated replay, {procs} processes".ljust(78)
                  + show(cell["ours"]["hot_over_uniform"]))
    for procs, cell in ratios.get("capacity", {}).items():
        print(f"  naive single-row counter: hot/uniform, saturated replay, {procs} processes".ljust(78)
              + show(cell["naive"]["hot_over_uniform"], gate=False))
    print(f"  final counts vs relation facts: {'EXACT' if result['exact'] else 'MISMATCH'}")
    print(bar)
    print()


# --- main ----------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = start_driver()
    from django.conf import settings
    from django.db import connections

    from likes_project.eventlog import streams
    from relations import routing

    if settings.LIKES_NUDGE_ENABLED:
        raise SystemExit("[projection] refusing: LIKES_NUDGE_ENABLED must be false (use ./bench/projection.sh)")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    connections.close_all()
    waited = wait_for_quiet(args.wait_quiet)
    spec = machine_spec()
    log_machine(spec, _log)
    flush_bench_redis()
    users, videos = prepare(args)
    probe_user, probe_sets = prepare_pipeline(args)
    shards = routing.all_aliases()
    n_partitions = len(streams.all_partitions())
    all_videos = [*videos, HOT_VIDEO, *(v for vids in probe_sets.values() for v in vids)]
    # The relations of the two workloads are disjoint (other videos, other probe videos), so they can share
    # the run: nothing is emptied between the workloads, and each one's stream entries are kept for the
    # replays, which then run with the hot and the uniform backlog back to back.
    own_videos = {"uniform": [*videos, *probe_sets["uniform"]], "hot": [HOT_VIDEO, *probe_sets["hot"]]}
    reset_workload()
    _naive_rows(all_videos)
    connections.close_all()

    layout = Layout(args, shards)
    rows: list[dict] = []
    saved: dict[str, dict] = {}
    last_ids: dict[int, str] = {}
    pool = None
    try:
        pool = RolePool(layout.size)
        sampler = ResourceSampler(client_pids=set())
        for workload in args.workload_list:
            row = run_workload(pool, layout, sampler, args, workload=workload, users=users, videos=videos,
                               probe_user=probe_user, probe_videos=probe_sets[workload], all_videos=all_videos)
            saved[workload], last_ids = streams_save(last_ids)
            row["stream_entries"] = sum(len(e) for e in saved[workload].values())
            rows.append(row)
        if args.replay_rounds:
            _log("backlog replays ...")
            run_capacity(pool, layout, sampler, args, rows=rows, saved=saved, own_videos=own_videos,
                         all_videos=all_videos)
        else:
            for r in rows:
                r["replays"], r["capacity"] = [], {}
    finally:
        if pool is not None:
            pool.close()
    # Leave the bench databases small: the next run (of either benchmark) starts from nothing anyway.
    reset_workload()

    result = {
        "meta": {
            **run_times(wall0),
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
            "waited_for_other_benchmarks_s": waited,
            "users": args.users, "videos": args.videos, "hot_video": HOT_VIDEO, "mix": args.mix_shares,
            "warmup_s": args.warmup, "duration_s": args.duration, "procs": args.procs,
            "publishers": len(shards), "projectors": args.projectors, "stream_partitions": n_partitions,
            "projector_batch": settings.COUNT_PROJECTOR_BATCH, "snapshot_interval_s": args.snapshot_interval,
            "count_hot_refresh_s": settings.COUNT_HOT_REFRESH_S, "probe_videos": args.probe_videos,
            "probe_interval_s": args.probe_interval, "probe_poll_s": args.probe_poll,
            "probe_timeout_s": args.probe_timeout, "replay_rounds": args.replay_rounds,
            "replay_procs": args.replay_procs_list,
            "publish_idle_s": args.publish_idle, "project_idle_s": args.project_idle,
            "celery": False, "rate_limit_enabled": False, "nudges_enabled": False,
            "error_definition": (
                "commands: relation_set_state raised; publisher: outbox_publish_batch raised, or rows went "
                "RETRY/UNCERTAIN/DEAD; projector: consume_partition raised or returned other than ok, dead "
                "letters, frozen buckets; probe: the commit raised, or the count did not show it within the "
                "probe timeout; exactness: any video whose vbucket sum or display snapshot differs from its "
                "LIKED relations after the drain (or whose counts differ after a replay)."),
        },
        "machine": spec,
        "rows": rows,
        "ratios": compute_ratios(rows, args.projectors),
    }
    result["exact"] = exact_overall(rows)
    RESULT_PATH.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print_report(result)
    if not args.no_docs:
        write_docs(result)
        _log(f"wrote {DOCS_PATH.relative_to(ROOT)}")
    _log(f"wrote {RESULT_PATH.relative_to(ROOT)}; driver wall clock {result['meta']['wall_seconds']}s")
    if not result["exact"]:
        _log("MISMATCH: a count differs from the relation facts (or the pipeline did not drain)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
