"""Benchmark client processes: command generation and the two ways of sending a command.

Each process is started with the `spawn` method, calls `django.setup()` once, and then runs jobs sent by
the driver (bench/command_bench.py; bench/projection/roles.py runs the same job as its command load) until it
is told to stop. A job is one workload at one layer:

* `service`: calls `relations.services.commands.relation_set_state(...)` directly, in this process;
* `http`: PUT /v1/videos/<id>/like-relation against the bench gunicorn on 127.0.0.1.

Every loop here is bounded by a deadline and by a command count.
"""

from __future__ import annotations

import http.client
import json
import random
import time
from collections import Counter

from bench.procs import HTTP_TIMEOUT_S, client_setup, error_kind, http_exchange, serve_jobs, wait_until

# Safety bounds: a job never runs longer than this, nor sends more commands than this per client.
MAX_JOB_SECONDS = 300.0
MAX_COMMANDS_PER_JOB = 2_000_000

KINDS = ("like", "unlike", "noop", "replay")
UNLIKED, LIKED = "UNLIKED", "LIKED"


class CommandMix:
    """What the next command is (TEST-4: realistic shares of unlikes, no-change targets and retries).

    like   - LIKED on a pair this client does not know to be liked (a real transition, mostly);
    unlike - UNLIKED on a pair this client liked earlier in the job (a real transition);
    noop   - a no-change target: LIKED again on a liked pair, or UNLIKED on a pair never liked (new key);
    replay - the client's previous command re-sent with the same Idempotency-Key (a retried click).
    Each client owns a disjoint slice of the users, so what it knows about "its" relations is exact.
    """

    def __init__(self, *, rng: random.Random, users: list, videos: list[str], mix: dict, key_prefix: str):
        self.rng = rng
        self.users = users  # [(user_id, token), ...]
        self.videos = videos
        total = sum(mix.values())
        self.thresholds = []
        acc = 0.0
        for kind in KINDS:
            acc += mix.get(kind, 0) / total
            self.thresholds.append((acc, kind))
        self.key_prefix = key_prefix
        self.seq = 0
        self.liked: list[tuple[int, str]] = []
        self.liked_pos: dict[tuple[int, str], int] = {}
        self.prev = None

    def _random_pair(self) -> tuple[int, str]:
        return self.rng.randrange(len(self.users)), self.rng.choice(self.videos)

    def _fresh_key(self) -> str:
        self.seq += 1
        return f"{self.key_prefix}-{self.seq}"

    def _kind(self) -> str:
        r = self.rng.random()
        for threshold, kind in self.thresholds:
            if r < threshold:
                return kind
        return "like"

    def next(self) -> tuple[str, int, str, str, str]:
        """(kind, user index, video id, desired state, idempotency key)."""
        kind = self._kind()
        if kind == "replay" and self.prev is not None:
            return ("replay", *self.prev)
        if kind == "unlike" and self.liked:
            ui, vid = self.rng.choice(self.liked)
            return self._remember("unlike", ui, vid, UNLIKED)
        if kind == "noop":
            if self.liked and self.rng.random() < 0.5:
                ui, vid = self.rng.choice(self.liked)
                return self._remember("noop", ui, vid, LIKED)
            for _ in range(8):
                ui, vid = self._random_pair()
                if (ui, vid) not in self.liked_pos:
                    break
            return self._remember("noop", ui, vid, UNLIKED)
        for _ in range(8):
            ui, vid = self._random_pair()
            if (ui, vid) not in self.liked_pos:
                break
        return self._remember("like", ui, vid, LIKED)

    def _remember(self, kind: str, ui: int, vid: str, desired: str):
        cmd = (ui, vid, desired, self._fresh_key())
        self.prev = cmd
        return (kind, *cmd)

    def observe(self, ui: int, vid: str, state: str) -> None:
        """Record the relation state the server reported."""
        pair = (ui, vid)
        if state == LIKED and pair not in self.liked_pos:
            self.liked_pos[pair] = len(self.liked)
            self.liked.append(pair)
        elif state != LIKED and pair in self.liked_pos:
            pos = self.liked_pos.pop(pair)
            last = self.liked.pop()
            if last != pair:
                self.liked[pos] = last
                self.liked_pos[last] = pos


def _service_sender():
    from relations.services import commands

    def send(user_id: int, token: str, video_id: str, desired: str, key: str):
        res = commands.relation_set_state(user_id=user_id, video_id=video_id, desired_state=desired,
                                          operation_id=key, device_id="bench")
        return res.current.state, res.changed, res.replayed

    return send, None


def _http_sender(port: int, sizes: Counter):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)

    def send(user_id: int, token: str, video_id: str, desired: str, key: str):
        body = json.dumps({"desiredState": desired, "deviceId": "bench"})
        headers = {"Authorization": f"Token {token}", "Idempotency-Key": key,
                   "Content-Type": "application/json", "Connection": "keep-alive"}
        data = http_exchange(conn, "PUT", f"/v1/videos/{video_id}/like-relation", body=body, headers=headers,
                             sizes=sizes)
        doc = json.loads(data)
        return doc["currentRelation"]["state"], doc["changed"], doc["replayed"]

    return send, conn


def run_job(job: dict) -> dict:
    """Run one workload for this client, with the job's settings overrides (a lever of bench/levers.py)
    applied for its duration; returns the measurements of the measured window."""
    from bench.common import settings_overridden

    with settings_overridden(job.get("settings")):
        return _run_job(job)


def _run_job(job: dict) -> dict:
    from bench import naive

    naive.set_enabled(job["naive"])
    rng = random.Random(job["seed"])
    gen = CommandMix(rng=rng, users=job["users"], videos=job["videos"], mix=job["mix"], key_prefix=job["key_prefix"])
    sizes: Counter = Counter()  # HTTP body bytes (message size, TEST-3)
    if job["layer"] == "service":
        send, conn = _service_sender()
    else:
        send, conn = _http_sender(job["port"], sizes)

    measure_start, t_end = job["t_measure"], min(job["t_end"], time.time() + MAX_JOB_SECONDS)
    wait_until(job["t_start"])

    latencies: list[float] = []
    errors: Counter = Counter()
    kinds: Counter = Counter()
    ok = changed = replayed = sent = 0
    try:
        rate = job.get("rate_per_s")  # open loop: commands at this rate (None: closed loop, one in flight)
        t_first = time.time()
        while sent < MAX_COMMANDS_PER_JOB:
            if rate:
                now = time.time()
                delay = min(t_first + sent / rate, t_end) - now
                if delay > 0:
                    time.sleep(delay)  # the open loop's pacing
            w0 = time.time()
            if w0 >= t_end:
                break
            kind, ui, vid, desired, key = gen.next()
            user_id, token = gen.users[ui]
            sent += 1
            t0 = time.perf_counter()
            try:
                state, was_changed, was_replayed = send(user_id, token, vid, desired, key)
                err = None
            except Exception as exc:
                err = error_kind(exc)
            elapsed_ms = (time.perf_counter() - t0) * 1000.0
            if err is None:
                gen.observe(ui, vid, state)
            if w0 < measure_start or time.time() > t_end:
                continue  # warm-up, or finished after the window closed
            kinds[kind] += 1
            if err is not None:
                errors[err] += 1
                continue
            ok += 1
            latencies.append(round(elapsed_ms, 3))
            changed += bool(was_changed)
            replayed += bool(was_replayed)
    finally:
        if conn is not None:
            conn.close()
        # Database connections stay open for the next job (the driver's TRUNCATE between windows only
        # needs them idle); worker_main closes them when the process stops.
    return {"ok": ok, "errors": dict(errors), "changed": changed, "replayed": replayed, "kinds": dict(kinds),
            "latencies_ms": latencies, "sent_total": sent, "sizes": dict(sizes)}


def run_probe(job: dict) -> dict:
    """One client, no concurrency: what a single command costs in round trips and app CPU.

    SQL statements are counted with Django's execute_wrapper (so the implicit BEGIN and the COMMIT of
    each transaction come on top); Redis calls by wrapping redis.Redis.execute_command."""
    import contextlib

    import psycopg
    import redis
    from django.db import connections

    from bench import naive

    naive.set_enabled(False)
    rng = random.Random(job["seed"])
    gen = CommandMix(rng=rng, users=job["users"], videos=job["videos"], mix=job["mix"], key_prefix=job["key_prefix"])
    send, _ = _service_sender()
    counts: Counter = Counter()

    def one() -> None:
        kind, ui, vid, desired, key = gen.next()
        user_id, token = gen.users[ui]
        state, _changed, _replayed = send(user_id, token, vid, desired, key)
        gen.observe(ui, vid, state)
        counts[f"kind:{kind}"] += 1

    def counter(alias: str):
        def wrapper(execute, sql, params, many, context):
            counts[f"sql:{alias}"] += 1
            return execute(sql, params, many, context)

        return wrapper

    deadline = time.time() + 60
    for _ in range(job["warm"]):
        if time.time() > deadline:
            break
        one()
    counts.clear()
    original = redis.Redis.execute_command
    pg_original = psycopg.Cursor.execute

    def counting_execute(self, *args, **kwargs):
        counts["redis"] += 1
        return original(self, *args, **kwargs)

    def counting_pg_execute(self, *args, **kwargs):  # every statement sent, Django's cursor or not
        counts["pg"] += 1
        return pg_original(self, *args, **kwargs)

    n = 0
    try:
        with contextlib.ExitStack() as stack:
            for alias in connections:
                stack.enter_context(connections[alias].execute_wrapper(counter(alias)))
            redis.Redis.execute_command = counting_execute
            psycopg.Cursor.execute = counting_pg_execute
            cpu0, wall0 = time.process_time(), time.perf_counter()
            while n < job["commands"] and time.time() < deadline:
                one()
                n += 1
            cpu1, wall1 = time.process_time(), time.perf_counter()
    finally:
        redis.Redis.execute_command = original
        psycopg.Cursor.execute = pg_original
    n = max(n, 1)
    return {"commands": n, "app_cpu_ms": round((cpu1 - cpu0) * 1000 / n, 2),
            "wall_ms": round((wall1 - wall0) * 1000 / n, 2),
            "sql_per_command": {k[4:]: round(v / n, 2) for k, v in sorted(counts.items()) if k.startswith("sql:")},
            "redis_per_command": round(counts["redis"] / n, 2),
            "pg_statements_per_command": round(counts["pg"] / n, 2),
            "kinds": {k[5:]: v for k, v in counts.items() if k.startswith("kind:")}}


def worker_main(index: int, tasks, results) -> None:
    """Entry point of one spawned client process."""
    client_setup()
    from bench import naive

    naive.install(enabled=False)
    serve_jobs(index, tasks, results, lambda job: run_probe(job) if job["layer"] == "probe" else run_job(job),
               lambda job: job["tag"])
