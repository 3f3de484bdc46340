"""The loops of the count-pipeline benchmark's spawned processes, one role per job: the command load, an
outbox publisher per relation shard, the projectors, the display snapshot loop and the commit-to-displayCount
probe. Each loop stops at its deadline, when told to stop, when the driver is gone, and after
MAX_LOOP_ITERATIONS."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections import Counter

from bench.common import percentile, rounded, tally
from bench.projection import LIKED, MAX_LOOP_ITERATIONS, UNLIKED
from bench.projection.naive import make_projector


def driver_alive(parent_pid: int) -> bool:
    return os.getppid() == parent_pid


def reset_connections() -> None:
    from django.db import connections

    with contextlib.suppress(Exception):
        connections.close_all()


def _sleep_until(t: float, parent_pid: int) -> None:
    for _ in range(100_000):
        delay = t - time.time()
        if delay <= 0 or not driver_alive(parent_pid):
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
        if stop.is_set() or time.time() >= hard or not driver_alive(parent_pid):
            break
        try:
            rep = outbox_publish_batch(alias=alias, holder=holder)
        except Exception as exc:
            errors[exc.__class__.__name__] += 1
            reset_connections()
            time.sleep(0.1)  # back off after a store error
            continue
        now = time.time()
        tally(c, rep, ("sent", "retry", "uncertain", "dead"))
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

    projector = make_projector(job["variant"])
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
        if stop.is_set() or time.time() >= hard or not driver_alive(parent_pid):
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
                reset_connections()
                unfinished += 1
                continue
            now = time.time()
            statuses[rep.status] += 1
            c["calls"] += 1
            tally(c, rep, ("dispatched", "applied", "duplicates", "stale", "dead_lettered", "held_back"))
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
        if stop.is_set() or time.time() >= job["hard_deadline"] or not driver_alive(parent_pid):
            break
        t0 = time.perf_counter()
        try:
            rep = display_snapshot_refresh()
            c["runs"] += 1
            c["videos"] += rep.videos
            c["skipped_hot"] += rep.skipped_hot
        except Exception as exc:
            errors[exc.__class__.__name__] += 1
            reset_connections()
        elapsed = time.perf_counter() - t0
        durations.append(elapsed * 1000)
        time.sleep(max(0.0, job["interval_s"] - elapsed))  # the snapshot loop's fixed interval (pacing)
    durations.sort()
    return {**c, "errors": dict(errors), "p50_ms": rounded(percentile(durations, 0.5), 1),
            "p99_ms": rounded(percentile(durations, 0.99), 1)}


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
        if now >= hard or stop.is_set() or not driver_alive(parent_pid):
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
                    reset_connections()
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
                reset_connections()
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
