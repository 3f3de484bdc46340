"""What the drivers do with the pool: the roles' layout, sessions of command load with the pipeline running, windows,
drains, checks, pgbench, and backlogs of crafted events in the streams."""

from __future__ import annotations

import contextlib
import os
import random
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.harness import checks, roles
from bench.harness.driver import make_log, pg_conninfo, pg_env
from bench.harness.pool import Pool, role
from bench.harness.report import pct, pooled
from bench.harness.sampler import ResourceSampler, sampled

log = make_log("bench")
ROLE = "bench.harness.roles:"


def partition_shares(n: int) -> list[list[int]]:
    from likes_project.eventlog import streams
    parts = streams.all_partitions()
    return [parts[i::n] for i in range(n) if parts[i::n]]


class Layout:
    """Which pool process plays which role (commands, publishers, projectors, snapshot loop, probe, checker)."""

    def __init__(self, args, *, probe: bool = False, checker: bool = False, extra: int = 0):
        from relations import routing
        n = 0

        def take(k: int) -> list[int]:
            nonlocal n
            n += k
            return list(range(n - k, n))

        shards = routing.all_aliases()
        self.commands = take(args.procs)
        self.publishers = dict(zip(shards, take(len(shards)), strict=True))
        self.projectors = take(args.projectors)
        self.snapshot = take(1)[0]
        self.probe = take(1)[0] if probe else None
        self.checker = take(1)[0] if checker else None
        roles = [*self.projectors, *self.commands, *self.publishers.values(), self.snapshot, self.probe, self.checker]
        self.replay_order = [i for i in roles if i is not None] + take(max(0, extra - n))
        self.size = n
        self.shares = partition_shares(args.projectors)

    @property
    def loops(self) -> list[int]:
        return [*self.publishers.values(), *self.projectors[:len(self.shares)], self.snapshot]

    def labels(self, pool) -> dict[int, str]:
        names = {"command clients": self.commands, "publishers": self.publishers.values(),
                 "projectors": self.projectors, "snapshot loop": [self.snapshot], "probe": [self.probe],
                 "checker": [self.checker]}
        return {pool.pid(i): name for name, ids in names.items() for i in ids if i is not None}


def window_times(args, lead: float = 0.5) -> dict:
    """When a window's clients start (in `lead` s), when its measured --duration starts (after --warmup), its end."""
    t_start = time.time() + lead
    return {"t_start": t_start, "t_measure": t_start + args.warmup, "t_end": t_start + args.warmup + args.duration}


def clients_run(pool, sampler, jobs: list[dict], times: dict, server=None) -> tuple[list[dict], dict]:
    """A job each to the first len(jobs) client processes over a window (`times`), sampled: (answers, resources)."""
    jobs = [{**times, **job} for job in jobs]
    return sampled(sampler, lambda: pool.run(jobs, timeout=times["t_end"] - time.time() + 90),
                   pool.labels("bench clients"), window=(times["t_measure"], times["t_end"]), server=server)


def drain_wait(timeout: float, *, active_only: bool = False, outbox_only: bool = False,
               consumers: tuple[str, ...] = ()) -> tuple[dict, float]:
    """Poll checks.pipeline_pending (`outbox_only`: the outbox) until nothing or `timeout`; (what was left, s)."""
    from likes_project.waiting import wait_until
    t0, pending = time.time(), {}

    def done() -> bool:
        nonlocal pending
        pending = checks.pipeline_pending(active_only=active_only, consumers=consumers)
        pending = {k: v for k, v in pending.items() if k == "outbox" or not outbox_only}
        return not pending

    wait_until(done, timeout_s=timeout, poll_s=0.25)
    return pending, round(time.time() - t0, 1)


class Session:
    """A pool in a session of load: the pipeline's loops, the tracked commands (their last states in `acks`), checks."""

    def __init__(self, pool, layout: Layout, args, users: list, *, actor: str = "bench-operator"):
        self.pool, self.layout, self.args, self.users, self.actor = pool, layout, args, users, actor
        self.sampler, self.run_id, self.acks, self._probing = ResourceSampler(), secrets.token_hex(3), {}, False

    @classmethod
    def on_workers(cls, args, users: list, *, actor: str, **layout) -> Session:
        """A session on a pool of its own, laid out for `args` (Layout's `layout` keywords)."""
        lay = Layout(args, **layout)
        return cls(Pool(lay.size, name="worker"), lay, args, users, actor=actor)

    def pipeline_start(self, hard: float, times: dict | None = None, *, publishers_only: bool = False) -> None:
        """The publishers, projectors and snapshot loop (`times`: when they start, the window they count in)."""
        now = time.time()
        times = times or {"t_start": now, "t_measure": now, "t_end": hard, "hard_deadline": hard}
        for alias, i in self.layout.publishers.items():
            self.pool.submit(i, {**times, "role": ROLE + "publisher", "alias": alias, "idle_s": self.args.publish_idle})
        if publishers_only:
            return
        for share, i in zip(self.layout.shares, self.layout.projectors, strict=False):
            self.pool.submit(i, {**times, "role": ROLE + "projector", "mode": "sustained", "partitions": share,
                                 "idle_s": self.args.project_idle})
        self.pool.submit(self.layout.snapshot, {**times, "role": ROLE + "snapshot",
                                                "interval_s": self.args.snapshot_interval})

    def pipeline_stop(self, *, active_only: bool = False) -> dict:
        """Keep the loops running until nothing is pending (bounded by --drain-timeout), then stop them."""
        pending, drain_s = drain_wait(self.args.drain_timeout, active_only=active_only)
        loops = self.pool.stopped(self.layout.loops)
        if pending:
            log(f"  the pipeline did NOT drain within {drain_s:.0f}s: {pending}")
        pubs = [loops[i] for i in self.layout.publishers.values()]
        projs = [loops[i] for i in self.layout.projectors[:len(self.layout.shares)]]
        snap = loops[self.layout.snapshot]
        (errors,), (statuses, logged) = pooled([*pubs, *projs, snap], "errors"), pooled(projs, "statuses", "logged")
        return {"drained": not pending, "pending": pending, "drain_s": drain_s,
                **{k: sum(p.get(k, 0) for p in pubs) for k in ("sent_window", "batches")},
                "published": sum(p.get("sent", 0) for p in pubs), "applied": sum(p.get("applied", 0) for p in projs),
                "projector_statuses": dict(statuses), "projector_logged": dict(logged),
                "snapshot_runs": snap.get("runs", 0), "snapshot_p50_ms": snap.get("p50_ms"),
                "snapshot_p99_ms": snap.get("p99_ms"), "loop_errors": dict(errors)}

    def commands_start(self, videos: list[str], phase: str, t_start: float, hard: float, *,
                       probe: list[str] | None = None) -> None:
        """The tracked load on `videos`; `probe`: the first client sends only no-change commands on those videos (they
        meet the write barrier, the facts stay)."""
        n = len(self.layout.commands)
        for k, i in enumerate(self.layout.commands):
            probing = probe is not None and k == 0
            self.pool.submit(i, {"role": ROLE + "tracked", "stop": "commands", "users": self.users[k::n],
                                 "videos": probe if probing else videos, "t_start": t_start, "hard_deadline": hard,
                                 "mix": {"noop": 100.0} if probing else self.args.mix_shares,
                                 "seed": self.args.seed * 1000 + k + zlib.crc32(phase.encode()) % 997,
                                 "key_prefix": f"b{self.run_id}{phase[:3]}{k}"})
        self._probing = probe is not None

    def commands_stop(self) -> dict:
        """Stop the load: its commands as rows (completed at, ms, outcome, waited), the probe's apart; `acks` too."""
        res = self.pool.stopped(self.layout.commands, 120, commands=True)
        probe_index = self.layout.commands[0] if self._probing else None

        def rows(results) -> list[tuple]:
            return sorted((t0 + ms / 1000, ms, out, waited) for r in results for t0, ms, _u, _v, _s, out, waited
                          in r["samples"])

        for r in res.values():
            for _t0, _ms, u, v, s, out, _w in sorted(r["samples"], key=lambda x: x[0] + x[1] / 1000):
                if out == "ok":
                    self.acks[(u, v)] = s
        return {"rows": rows(r for i, r in res.items() if i != probe_index),
                "probe_rows": rows([res[probe_index]]) if probe_index is not None else []}

    def start_load(self, videos: list[str], phase: str, budget_s: float, *, probe: list[str] | None = None) -> dict:
        """The pipeline and the tracked load, then --warmup and a --window of load alone; the times."""
        args = self.args
        hard = time.time() + args.warmup + 2 * args.window + budget_s + 600
        self.pipeline_start(hard)
        t_start = time.time() + 1.0
        self.commands_start(videos, phase, t_start, hard, probe=probe)
        t_pre0 = t_start + args.warmup
        time.sleep(max(0.0, t_pre0 + args.window - time.time()))  # the window of load alone (what others compare to)
        return {"t_start": t_start, "pre": [t_pre0, time.time()], "hard": hard}

    def stop_load(self, cmds: dict | None = None, *, active_only: bool = True) -> tuple[dict, dict]:
        """Stop the command load (unless `cmds` says it was), drain the pipeline and stop the loops."""
        cmds = cmds or self.commands_stop()
        return cmds, self.pipeline_stop(active_only=active_only)

    def check_submit(self, what: str, **params) -> None:
        job = {"role": "bench.harness.phases:check", "what": what, "actor": self.actor, **params}
        self.pool.submit(self.layout.checker, job)

    def check_collect(self) -> dict:
        return self.pool.collect([self.layout.checker], self.args.check_timeout)[self.layout.checker]

    def check(self, what: str, **params) -> dict:
        self.check_submit(what, **params)
        return self.check_collect()

    def sampled(self, fn, *, driver: str | None = None):
        """fn() with the sampler over it (the roles labelled, and this driver process when `driver`)."""
        return sampled(self.sampler, fn, self.layout.labels(self.pool) | ({os.getpid(): driver} if driver else {}))


@contextlib.contextmanager
def dispatch_stopped(holder: str):
    """No count dispatch while the block runs (the cut's leases, renewed from a thread); yields {"lost": ...}."""
    from django.conf import settings
    from django.db import connections

    from likes_project import leases
    from reconciliation.services.cut import count_leases_take
    grants = count_leases_take(time.monotonic() + settings.RECONCILE_DRAIN_MAX_S, holder_prefix=holder)
    state, done = {"lost": None}, threading.Event()

    def renew() -> None:
        for g in grants:
            try:
                leases.lease_renew(g, ttl_s=max(5.0, settings.RECONCILE_DRAIN_MAX_S))
            except leases.LeaseLost as exc:
                state["lost"] = state["lost"] or str(exc)

    def loop() -> None:
        while not done.wait(1.0):  # the renewal cadence, well inside the TTL
            renew()
        connections.close_all()

    renew()  # the first leases taken may be near their expiry by the time the last one is free
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        done.set()
        thread.join(timeout=30)
        for g in grants:
            leases.lease_release(g)


class AutoVacuum(threading.Thread):
    """Autovacuum where it is off: every `naptime` s on `aliases`, what it would do by the server's thresholds
    (`tables`: those, ANALYZE only); a bulk load left unanalyzed makes the planner scan a generation per key."""

    def __init__(self, naptime: float, aliases, tables: tuple[str, ...] = ()):
        super().__init__(daemon=True, name="bench-autovacuum")
        self.naptime, self.aliases, self.tables = naptime, list(aliases), tables
        self.done, self.runs, self.errors, self.t0 = threading.Event(), [], [], time.time()

    def _pass(self, conns: dict) -> None:
        for alias, conn in conns.items():
            s = {n: float(conn.execute(f"SHOW autovacuum_{n}").fetchone()[0]) for n in (
                "vacuum_threshold", "vacuum_scale_factor", "analyze_threshold", "analyze_scale_factor")}
            for name, dead, changed, tuples in conn.execute(
                    "SELECT s.relname, s.n_dead_tup, s.n_mod_since_analyze, greatest(c.reltuples, 0) FROM "
                    "pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid").fetchall():
                if self.done.is_set() or (self.tables and name not in self.tables):
                    continue
                if not self.tables and dead > s["vacuum_threshold"] + s["vacuum_scale_factor"] * tuples:
                    what = "VACUUM (ANALYZE)"
                elif changed > s["analyze_threshold"] + s["analyze_scale_factor"] * tuples:
                    what = "ANALYZE"
                else:
                    continue
                t = time.perf_counter()
                conn.execute(f'{what} "{name}"')
                self.runs.append({"at_s": round(time.time() - self.t0, 1), "db": alias, "table": name, "what": what,
                                  "ms": round((time.perf_counter() - t) * 1000, 1)})

    def run(self) -> None:
        import psycopg
        conns = {}
        try:
            conns = {a: psycopg.connect(**pg_conninfo(a), autocommit=True, connect_timeout=5) for a in self.aliases}
            while not self.done.wait(self.naptime):  # autovacuum's naptime
                try:
                    self._pass(conns)
                except Exception as exc:
                    self.errors.append(f"{exc.__class__.__name__}: {exc}"[:200])
        except Exception as exc:
            self.errors.append(f"{exc.__class__.__name__}: {exc}"[:200])
        finally:
            for conn in conns.values():
                conn.close()

    def stop(self) -> dict:
        self.done.set()
        self.join(timeout=120)
        return {"naptime_s": self.naptime, "t0": self.t0, "runs": self.runs, "errors": self.errors[:10],
                "by_table": dict(Counter(f"{r['what']} {r['table']}" for r in self.runs))}


def check(job: dict, ctl) -> dict:
    """One check, timed: `what` "check" (a reconciliation run), "opsjob" (an approved job) or "module:function"."""
    ctl.sleep_until(job.get("t_start", 0.0))
    # Fresh connections for every check; the previous check's stayed open so that the sampler could still read
    # their backends' CPU after it.
    roles.reset_connections()
    t0 = time.time()
    with roles.LogTally() as logged:  # the cut drives the projector itself: its warnings counted, not printed
        out = {"check": _check_run, "opsjob": _ops_job}.get(job["what"], lambda j: role(j["what"])())(job)
    return {"t_start": t0, "t_end": time.time(), **out, "logged": dict(logged.counts)}


def check_inline(mode: str, scope: dict, actor: str) -> tuple:
    """A reconciliation run through the ops job as `manage.py reconcile` starts it, run here: (the job, its run)."""
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_run_inline, job_start
    from reconciliation.jobs import job_for_mode
    from reconciliation.models import CheckRun
    done = job_run_inline(job_start(kind=job_for_mode(mode), actor=Actor(name=actor, channel="cli"),
                                    params={"mode": mode, "scope": scope}).pk)
    return done, CheckRun.objects.get(pk=done.params["runId"])


def _check_run(job: dict) -> dict:
    t0 = time.time()
    done, run = check_inline(job["mode"], job["scope"], job["actor"])
    return {"run_id": run.pk, "mode": run.mode, "status": run.status, "checked": run.checked, "diffs": run.diffs_found,
            "diff_ids": list(run.diffs.order_by("id").values_list("id", flat=True)[:50]),
            "diff_layers": dict(Counter(run.diffs.values_list("layer", flat=True))), "skipped": len(run.skipped),
            "barrier_held_ms": run.barrier_held_ms, "refused_because": run.refused_because,
            "job_status": done.status, "job_error": done.last_error, "elapsed_s": round(time.time() - t0, 3)}


def _ops_job(job: dict) -> dict:
    from likes_project.opsjobs.services import job_run_inline
    said: list[tuple[float, str]] = []
    done = job_run_inline(job["job_id"], on_say=lambda m: said.append((round(time.time(), 4), m[:300])))
    return {"job_status": done.status, "job_error": done.last_error, "said": said}


def command_figures(rows: list[tuple], t0: float, t1: float) -> dict:
    """The commands that completed in [t0, t1): count, acknowledged commands/s, latency, outcomes, barrier waits."""
    inside = [r for r in rows if t0 <= r[0] < t1]
    lat = [r[1] for r in inside if r[2] == "ok"]
    waited = sorted(r[1] for r in inside if r[3])
    outcomes = Counter(r[2] for r in inside)
    seconds = max(t1 - t0, 1e-9)
    return {"seconds": round(seconds, 2), "commands": len(inside), "ok": len(lat),
            "commands_per_s": round(len(lat) / seconds, 1), "p50_ms": pct(lat, 0.5, 1), "p99_ms": pct(lat, 0.99, 1),
            "waited": len(waited), "waited_p50_ms": pct(waited, 0.5, 1), "waited_p99_ms": pct(waited, 0.99, 1),
            "waited_max_ms": waited[-1] if waited else None, "barrier_503": outcomes.get("503 write_barrier", 0),
            "errors": {k: v for k, v in outcomes.items() if k not in ("ok", "503 write_barrier")}}


def pooled_windows(rows, windows: list[tuple[float, float]]) -> dict:
    """command_figures over several windows, pooled."""
    windows = [(a, b) for a, b in windows if b > a]
    if not windows:
        return {}
    inside = [r for r in rows if any(a <= r[0] < b for a, b in windows)]
    out = command_figures(inside, min(a for a, _ in windows), max(b for _, b in windows))
    out["seconds"] = round(sum(b - a for a, b in windows), 2)
    out["commands_per_s"] = round(out["ok"] / out["seconds"], 1)
    return out


_TPS = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)
_FAILED = re.compile(r"^number of failed transactions: (\d+)", re.M)
_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)", re.M)
STEPS = ("prepare", "copy", "catch-up", "cutover", "verify", "cleanup")  # of a bucket migration and a slot move


def step_times(said: list[tuple[float, str]], t0: float, nd: int = 3) -> tuple[dict, dict]:
    """A move's steps from what its job said at their ends: ({step: seconds, from t0}, {step: when it ended})."""
    steps, ends, last = {}, {}, t0
    for t, msg in said:
        name = next((st for st in STEPS if msg.split(": ", 1)[-1].startswith(st)), None)
        if name:
            steps[name], ends[name], last = round(steps.get(name, 0.0) + t - last, nd), t, t
    return steps, ends


def pgbench_found(run) -> bool:
    """Whether pgbench is installed (said when it is not: the run goes on without its raw SQL ceiling)."""
    if shutil.which("pgbench") or Path("/usr/bin/pgbench").exists():
        return True
    run.log("pgbench not found (Debian package postgresql-client); no raw SQL ceiling")
    return False


def pgbench(alias: str, options: list[str], *, clients: int, seconds: int, sampler: ResourceSampler,
            latencies: bool = False) -> dict:
    """pgbench on `alias`: tps, failed, (`latencies`) the sorted latencies in ms, resources."""
    logdir = Path(tempfile.mkdtemp(prefix="likes-pgbench-"))
    cmd = [shutil.which("pgbench") or "/usr/bin/pgbench", "-n", *options, "-c", str(clients), "-j",
           str(min(clients, os.cpu_count() or 2)), "-T", str(seconds),
           *(["-l", "--log-prefix", str(logdir / "pgb")] if latencies else [])]
    t0 = time.time()
    sampler.start(t0 + min(1.0, seconds / 4), t0 + seconds, labels={})  # skip the connection set-up
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=pg_env(alias), timeout=seconds + 120, cwd=logdir)
    finally:
        resources = sampler.stop()
    out = proc.stdout + proc.stderr
    tps = _TPS.search(out)
    if proc.returncode != 0 or not tps:
        shutil.rmtree(logdir, ignore_errors=True)
        raise RuntimeError(f"pgbench failed (rc={proc.returncode}):\n{out[-2000:]}")
    lat = sorted(int(p[2]) / 1000.0 for f in logdir.glob("pgb*") for line in f.read_text().splitlines()
                 if len(p := line.split()) >= 3 and p[2].isdigit())
    shutil.rmtree(logdir, ignore_errors=True)
    failed, processed = _FAILED.search(out), _PROCESSED.search(out)
    return {"tps": round(float(tps.group(1)), 1), "failed": int(failed.group(1)) if failed else 0,
            "processed": int(processed.group(1)) if processed else None, "latencies": lat, "resources": resources}


def backlog_events(*, seed: int, events: int, users: int, videos: int, kind: str, rnd: int, video_prefix: str,
                   user_base: int) -> list[dict]:
    """`events` envelopes over events/2 (user, video) pairs (one video when hot), versions 1, 2, ... (odd LIKED)."""
    rng = random.Random(seed * 31 + rnd * 7 + (kind == "hot"))
    n_pairs = max(1, events // 2)
    pairs = [(user_base + rng.randrange(users),
              f"{video_prefix}hot" if kind == "hot" else f"{video_prefix}{rng.randrange(videos):05d}")
             for _ in range(n_pairs)]
    versions: Counter = Counter()
    base = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=rnd)
    out = []
    for i in range(events):
        user, video = pairs[rng.randrange(n_pairs)]
        versions[(user, video)] += 1
        v = versions[(user, video)]
        out.append({"eventType": "LikeRelationChanged", "eventId": str(uuid.uuid4()), "aggregateKey": f"{user}:{video}",
                    "userId": user, "videoId": video, "relationVersion": v, "absoluteState": "LIKED" if v % 2 else
                    "UNLIKED", "sourceCommitSeq": i + 1,
                    "stateChangedAt": (base + timedelta(milliseconds=i)).isoformat().replace("+00:00", "Z")})
    return out


def expected_liked(events: list[dict]) -> dict[str, int]:
    """video -> LIKED pairs after the backlog (every video of it, 0 included)."""
    final = {(ev["userId"], ev["videoId"]): ev["absoluteState"] for ev in events}
    out = dict.fromkeys({v for _u, v in final}, 0)
    for (_u, v), state in final.items():
        out[v] += state == roles.LIKED
    return out


def publish(events: list[dict]) -> float:
    """XADD the envelopes into their stream partitions, 1,000 a round trip; the seconds it took."""
    from likes_project.eventlog.streams import publish_pipeline
    t0 = time.monotonic()
    for k in range(0, len(events), 1000):
        publish_pipeline(events[k:k + 1000])
    return time.monotonic() - t0


def drained(pool, variant: str, procs: int, *, max_s: float, on: list[int] | None = None, lead: float = 0.5,
            batch_size: int | None = None, sampler: ResourceSampler | None = None,
            label: str = "projectors") -> tuple[list[dict], float | None, dict]:
    """`procs` pool processes (`on`) draining every partition with `variant`: (answers, s to the last progress, res)."""
    t0 = time.time() + lead
    jobs = [{"role": ROLE + "projector", "mode": "drain", "variant": variant, "partitions": share, "idle_s": 0.01,
             "t_start": t0, "hard_deadline": t0 + max_s, "batch_size": batch_size} for share in partition_shares(procs)]
    used = list(on or range(len(jobs)))[:len(jobs)]
    for i, job in zip(used, jobs, strict=True):
        pool.submit(i, job)

    def collect() -> list[dict]:
        return list(pool.collect(used, max_s + 60).values())

    res, resources = sampled(sampler, collect, {pool.pid(i): label for i in used}, window=(t0, t0 + max_s)) \
        if sampler else (collect(), {})
    ends = [r["t_last_progress"] for r in res if r.get("t_last_progress")]
    return res, max(ends) - t0 if ends else None, resources
