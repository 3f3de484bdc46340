"""The loops the pool's processes run, one role a job (fn(job, ctl)). Every loop stops at its deadline, when its stop
event is set, when the driver is gone, and after a bounded count."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import random
import secrets
import time
from collections import Counter

from bench.harness.report import pct, tally

MAX_LOOP = 2_000_000
KINDS = ("like", "unlike", "noop", "replay")
LIKED, UNLIKED = "LIKED", "UNLIKED"


def reset_connections() -> None:
    from django.db import connections
    with contextlib.suppress(Exception):
        connections.close_all()


class CommandMix:
    """The next command of the mix (TEST-4); a client owns its users, so what it knows of their relations is exact."""

    def __init__(self, *, rng: random.Random, users: list, videos: list[str], mix: dict, key_prefix: str):
        self.rng, self.users, self.videos, self.key_prefix = rng, users, videos, key_prefix
        total, acc, self.thresholds = sum(mix.values()), 0.0, []
        for kind in KINDS:
            acc += mix.get(kind, 0) / total
            self.thresholds.append((acc, kind))
        self.seq, self.prev, self.liked, self.liked_pos = 0, None, [], {}

    def _pair(self) -> tuple[int, str]:
        for _ in range(8):
            if (pair := (self.rng.randrange(len(self.users)), self.rng.choice(self.videos))) not in self.liked_pos:
                break
        return pair

    def next(self) -> tuple[str, int, str, str, str]:
        """(kind, user index, video id, desired state, idempotency key)."""
        r = self.rng.random()
        kind = next((k for t, k in self.thresholds if r < t), "like")
        if kind == "replay" and self.prev is not None:
            return ("replay", *self.prev)
        if kind == "unlike" and self.liked:
            return self._remember("unlike", *self.rng.choice(self.liked), UNLIKED)
        if kind == "noop":
            if self.liked and self.rng.random() < 0.5:
                return self._remember("noop", *self.rng.choice(self.liked), LIKED)
            return self._remember("noop", *self._pair(), UNLIKED)
        return self._remember("like", *self._pair(), LIKED)

    def _remember(self, kind: str, ui: int, vid: str, desired: str):
        self.seq += 1
        self.prev = (ui, vid, desired, f"{self.key_prefix}-{self.seq}")
        return (kind, *self.prev)

    def observe(self, ui: int, vid: str, state: str) -> None:
        """Record the relation state the server reported."""
        pair = (ui, vid)
        if state == LIKED and pair not in self.liked_pos:
            self.liked_pos[pair] = len(self.liked)
            self.liked.append(pair)
        elif state != LIKED and pair in self.liked_pos:
            pos, last = self.liked_pos.pop(pair), self.liked.pop()
            if last != pair:
                self.liked[pos], self.liked_pos[last] = last, pos


HTTP_TIMEOUT_S = 10.0


class HttpStatusError(Exception):
    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}: {body[:200]!r}")
        self.status = status


def http_exchange(conn, method: str, path: str, *, body: str, headers: dict, sizes: Counter | None = None) -> bytes:
    """One request on a keep-alive connection; the body, or HttpStatusError (a connection error closes it)."""
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException):
        conn.close()
        raise
    if sizes is not None:
        sizes.update(request=len(body), response=len(data), n=1)
    if resp.status != 200:
        raise HttpStatusError(resp.status, data)
    return data


def error_kind(exc: Exception) -> str:
    return exc.__class__.__name__ + (f":{exc.status}" if isinstance(exc, HttpStatusError) else "")


def _sender(job: dict, sizes: Counter):
    if job["layer"] == "service":
        from relations.services import commands
        def send(user_id, token, video_id, desired, key):
            res = commands.relation_set_state(user_id=user_id, video_id=video_id, desired_state=desired,
                                              operation_id=key, device_id=f"bench-{user_id}")
            return res.current.state, res.changed, res.replayed

        return send, None
    conn = http.client.HTTPConnection("127.0.0.1", job["port"], timeout=HTTP_TIMEOUT_S)

    def send(user_id, token, video_id, desired, key):
        data = http_exchange(conn, "PUT", f"/v1/videos/{video_id}/like-relation",
                             body=json.dumps({"desiredState": desired, "deviceId": f"bench-{user_id}"}), sizes=sizes,
                             headers={"Authorization": f"Token {token}", "Idempotency-Key": key,
                                      "Content-Type": "application/json", "Connection": "keep-alive"})
        doc = json.loads(data)
        return doc["currentRelation"]["state"], doc["changed"], doc["replayed"]

    return send, conn


def window(job: dict, ctl) -> dict:
    """One client's commands over [t_start, t_end], measured from t_measure; `rate_per_s`: open loop (None: closed)."""
    gen = CommandMix(rng=random.Random(job["seed"]), users=job["users"], videos=job["videos"], mix=job["mix"],
                     key_prefix=job["key_prefix"])
    sizes: Counter = Counter()  # HTTP body bytes (message size, TEST-3)
    send, conn = _sender(job, sizes)
    t_measure, t_end, rate = job["t_measure"], min(job["t_end"], time.time() + 300), job.get("rate_per_s")
    ctl.sleep_until(job["t_start"])
    latencies, errors, kinds, c = [], Counter(), Counter(), Counter(sent=0, ok=0, changed=0, replayed=0)
    t_first = time.time()
    try:
        while c["sent"] < MAX_LOOP:
            if rate and (delay := min(t_first + c["sent"] / rate, t_end) - time.time()) > 0:
                time.sleep(delay)  # the open loop's pacing
            w0 = time.time()
            if w0 >= t_end:
                break
            kind, ui, vid, desired, key = gen.next()
            c["sent"] += 1
            t0 = time.perf_counter()
            try:
                state, changed, replayed = send(*gen.users[ui], vid, desired, key)
                err = None
            except Exception as exc:
                err = error_kind(exc)
            ms = (time.perf_counter() - t0) * 1000.0
            if err is None:
                gen.observe(ui, vid, state)
            if w0 < t_measure or time.time() > t_end:
                continue  # warm-up, or finished after the window closed
            kinds[kind] += 1
            if err is not None:
                errors[err] += 1
                continue
            latencies.append(round(ms, 3))
            c.update(ok=1, changed=bool(changed), replayed=bool(replayed))
    finally:
        if conn is not None:
            conn.close()
    return {**c, "errors": dict(errors), "kinds": dict(kinds), "latencies_ms": latencies, "sizes": dict(sizes)}


class BarrierMetrics:
    """Stands in for `metrics` inside relations.services.write_barrier: counts this process's barrier waits."""

    def __init__(self, real):
        self.real, self.waits = real, 0

    def inc(self, name: str, *args, **kwargs):
        self.waits += name == "likes_write_barrier_waits_total"
        return self.real.inc(name, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


def tracked(job: dict, ctl) -> dict:
    """relation_set_state until stopped, each command as [start, ms, user id, video, state, outcome ("ok", "503
    write_barrier", an error), waited at a barrier]; mix "flip": a random pair of the client's flipped each time."""
    from relations.services import commands, write_barrier
    from relations.services.write_barrier import WriteBarrierHeld
    if not isinstance(write_barrier.metrics, BarrierMetrics):
        write_barrier.metrics = BarrierMetrics(write_barrier.metrics)
    counter = write_barrier.metrics
    rng = random.Random(job["seed"])
    users = job["users"]
    flip = job["mix"] == "flip"
    mix = None if flip else CommandMix(rng=rng, users=users, videos=job["videos"], mix=job["mix"],
                                       key_prefix=job["key_prefix"])
    state: dict = {}
    samples = []
    ctl.sleep_until(job["t_start"])
    for _ in range(MAX_LOOP * 5):
        if not ctl.go(job["hard_deadline"]):
            break
        if flip:
            ui, vid = rng.randrange(len(users)), rng.choice(job["videos"])
            desired, key = (UNLIKED if state.get((ui, vid)) == LIKED else LIKED), secrets.token_hex(12)
        else:
            _kind, ui, vid, desired, key = mix.next()
        waits0, t0, m0 = counter.waits, time.time(), time.perf_counter()
        try:
            res = commands.relation_set_state(user_id=users[ui][0], video_id=vid, desired_state=desired,
                                              operation_id=key, device_id=f"bench-{users[ui][0]}")
            state[(ui, vid)] = res.current.state
            if mix:
                mix.observe(ui, vid, res.current.state)
            outcome = "ok"
        except WriteBarrierHeld:
            outcome = "503 write_barrier"
        except Exception as exc:
            outcome = error_kind(exc)
            reset_connections()
        samples.append([round(t0, 4), round((time.perf_counter() - m0) * 1000, 3), users[ui][0], vid,
                        state.get((ui, vid), desired) if outcome == "ok" else desired, outcome,
                        counter.waits > waits0])
    return {"samples": samples}


def publisher(job: dict, ctl) -> dict:
    """outbox_publish_batch on one relation shard, in a loop, under a unique holder."""
    from relations.services.outbox import outbox_publish_batch
    holder = f"bench-pub:{job['alias']}:{os.getpid()}:{secrets.token_hex(3)}"
    c, errors = Counter(), Counter()
    ctl.sleep_until(job["t_start"])
    for _ in range(MAX_LOOP):
        if not ctl.go(job["hard_deadline"]):
            break
        try:
            rep = outbox_publish_batch(alias=job["alias"], holder=holder)
        except Exception as exc:
            errors[exc.__class__.__name__] += 1
            reset_connections()
            time.sleep(0.1)  # back off after a store error
            continue
        tally(c, rep, ("sent", "retry", "uncertain", "dead"))
        if job.get("t_measure", 0) <= time.time() < job.get("t_end", 0):
            c["sent_window"] += rep.sent
        c["batches" if rep.claimed else "idle_polls"] += 1
        if not rep.claimed:
            time.sleep(job["idle_s"])  # idle poll of the outbox (a pipeline's own cadence)
    return {**c, "errors": dict(errors)}


class LogTally(logging.Handler):
    """Counts the projector's and consumers' WARNING+ records instead of printing them (replayed events are old)."""

    LOGGERS = ("counting.services.projection", "likes_project.eventlog.consumer")

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.counts: Counter = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        msg = str(record.msg)
        if msg.startswith("count group on") and len(record.args or ()) >= 2:
            self.counts[f"group failed: {record.args[1]}"] += 1
        else:
            lag = "exceeds the" in msg
            self.counts["lag over target (warnings)" if lag else f"{record.levelname}: {msg[:60]}"] += 1

    def __enter__(self):
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
            logging.getLogger(name).propagate = False
        return self

    def __exit__(self, *exc):
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)
            logging.getLogger(name).propagate = True


def make_projector(variant: str):
    """A registered consumer by name ("count", "reverse"), or a factory "module:function"."""
    from bench.harness.pool import role
    from likes_project.eventlog.consumer import projector_get
    return role(variant)() if ":" in variant else projector_get(variant)


def _heads(partitions: list[int]) -> dict[int, str | None]:
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis
    pipe = stream_redis().pipeline(transaction=False)
    for p in partitions:
        pipe.xrevrange(streams.stream_key(p), count=1)
    return {p: rows[0][0].decode() if rows else None for p, rows in zip(partitions, pipe.execute(), strict=True)}


def projector(job: dict, ctl) -> dict:
    """consume_partition over the partitions this process owns. mode `sustained`: until stopped, a partition whose
    stream head moved (one XREVRANGE a pass stands in for the nudge); `drain`: until a pass dispatches nothing."""
    from django.conf import settings

    from likes_project.eventlog.consumer import consume_partition
    proj = make_projector(job.get("variant", "count"))
    parts, sustained = job["partitions"], job["mode"] == "sustained"
    batch = job.get("batch_size") or settings.COUNT_PROJECTOR_BATCH
    seen: dict = dict.fromkeys(parts)
    c, statuses, errors = Counter(), Counter(), Counter()
    undrained: list[int] = []
    ctl.sleep_until(job["t_start"])
    t_first = t_last = time.time()
    with LogTally() as logged:
        for _ in range(MAX_LOOP):
            if not ctl.go(job["hard_deadline"]):
                undrained = [] if sustained else parts
                break
            if sustained:
                try:
                    heads = _heads(parts)
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
                    rep = consume_partition(proj, partition=p, batch_size=batch, max_batches=10)
                except Exception as exc:
                    errors[exc.__class__.__name__] += 1
                    reset_connections()
                    unfinished += 1
                    continue
                statuses[rep.status] += 1
                c["calls"] += 1
                tally(c, rep, ("dispatched", "applied", "duplicates", "stale", "dead_lettered", "held_back"))
                if job.get("t_measure", 0) <= time.time() < job.get("t_end", 0):
                    c["applied_window"] += rep.applied
                seen[p] = rep.advanced_to or seen[p]
                progressed, held = progressed + rep.dispatched, held + rep.held_back
                unfinished += rep.status != "ok"
            if progressed:
                t_last = time.time()
            if not sustained and not progressed and not held and not unfinished:
                break  # the backlog is done
            if held or unfinished:
                time.sleep(0.05)  # a blocked head or a busy lease: back off a little
            elif not progressed:
                time.sleep(job["idle_s"])  # idle poll of the streams
    return {**c, "statuses": dict(statuses), "errors": dict(errors), "logged": dict(logged.counts),
            "t_first": t_first, "t_last_progress": t_last if c["dispatched"] else None, "t_end": time.time(),
            "undrained": undrained, "partitions": parts}


def snapshot(job: dict, ctl) -> dict:
    """display_snapshot_refresh() every `interval_s`."""
    from counting.services.snapshots import display_snapshot_refresh
    c, errors, durations = Counter(), Counter(), []
    ctl.sleep_until(job["t_start"])
    for _ in range(MAX_LOOP):
        if not ctl.go(job["hard_deadline"]):
            break
        t0 = time.perf_counter()
        try:
            rep = display_snapshot_refresh()
            c.update(runs=1, videos=rep.videos, skipped_hot=rep.skipped_hot)
        except Exception as exc:
            errors[exc.__class__.__name__] += 1
            reset_connections()
        durations.append((time.perf_counter() - t0) * 1000)
        time.sleep(max(0.0, job["interval_s"] - durations[-1] / 1000))  # the snapshot job's cadence
    return {**c, "errors": dict(errors), "p50_ms": pct(durations, 0.5, 1), "p99_ms": pct(durations, 0.99, 1)}


def probe(job: dict, ctl) -> dict:
    """Commit -> displayCount: every `interval_s` the probe user flips a probe video (its count must become 1 or 0),
    polled every `poll_s` with the GET's read path (display) and without its L1 (view); `timeout_s`: retired."""
    from counting import selectors
    from relations.services import commands
    load_uncached = getattr(selectors, "_load", None)
    videos, t_measure, t_end, hard = job["videos"], job["t_measure"], job["t_end"], job["hard_deadline"]
    state = dict.fromkeys(videos, UNLIKED)  # the relations were emptied before the workload
    outstanding: dict[str, dict] = {}
    retired: set[str] = set()
    display, view, c, errors = [], [], Counter(), Counter()
    rr = 0
    ctl.sleep_until(job["t_start"])
    next_commit = time.time()
    for _ in range(MAX_LOOP):
        now = time.time()
        if not ctl.go(hard) or (now >= t_end and not outstanding):
            break
        free = [v for v in videos if v not in outstanding and v not in retired]
        if now < t_end and now >= next_commit and free:
            next_commit = max(next_commit + job["interval_s"], now)
            video, rr = free[rr % len(free)], rr + 1
            try:
                res = commands.relation_set_state(user_id=job["user_id"], video_id=video, device_id="bench-probe",
                                                  desired_state=LIKED if state[video] == UNLIKED else UNLIKED,
                                                  operation_id=f"{job['key_prefix']}-{rr}")
            except Exception as exc:
                errors[exc.__class__.__name__] += 1
                reset_connections()
                continue
            state[video] = res.current.state
            if res.changed:
                c["commits"] += 1
                outstanding[video] = {"expected": int(res.current.state == LIKED), "t": time.time(), "view_ms": None,
                                      "measured": t_measure <= time.time() < t_end}
        if outstanding:
            ids = list(outstanding)
            try:
                pending = [v for v in ids if outstanding[v]["view_ms"] is None]
                if load_uncached is not None and pending:
                    raw = load_uncached(selectors.count_cache_generations_get().active, pending)
                    for v in pending:
                        if raw[v].display_count == outstanding[v]["expected"]:
                            outstanding[v]["view_ms"] = (time.time() - outstanding[v]["t"]) * 1000
                got = selectors.display_counts_get(video_ids=ids)
            except Exception as exc:
                errors[exc.__class__.__name__] += 1
                reset_connections()
                got = {}
            t_seen = time.time()
            for v in ids:
                o = outstanding[v]
                if v in got and got[v].display_count == o["expected"]:
                    if o["measured"]:
                        display.append(round((t_seen - o["t"]) * 1000, 1))
                        view.append(round(o["view_ms"] if o["view_ms"] is not None else display[-1], 1))
                    del outstanding[v]
                elif t_seen - o["t"] > job["timeout_s"]:
                    c["timeouts"] += o["measured"]
                    retired.add(v)
                    del outstanding[v]
        time.sleep(job["poll_s"])  # the probe's poll interval (what it measures)
    return {**c, "errors": dict(errors), "display_ms": display, "view_ms": view, "retired": len(retired)}
