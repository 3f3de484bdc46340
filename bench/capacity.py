"""The capacity model (issue 34 §3; spec §5): `bench/run.sh capacity` measures what one unit of each kind of work
costs on this machine, per tier, and turns the design's targets into cores and instances per tier in
docs/capacity.md.

Measured in this run, each unit in a loop for --seconds on one client, so each figure is a cost per core, not a
throughput under contention; the CPU of every tier is read from /proc (this process: the web or worker tier;
`postgres` processes; `redis-server` processes), so a unit's cost includes what it makes the stores do:
- the command through the WSGI application gunicorn serves (the web tier: Django, DRF, the service layer);
- the pipeline per event: rounds of --batch commands over --videos videos, then the outbox publisher, each consumer
  of the event log, and the display snapshot, each as the worker runs it (one pass per partition);
- the batch read of 20 ids, warm, through the WSGI application;
- PostgreSQL per transaction at the pgbench ceiling of the command's statements (--clients clients), and the one-row
  hot counter's ceiling (the naive hot spot: what one bucket row takes);
- the event log's memory per entry (MEMORY USAGE of the stream keys over their entries).
The model (bench/capacity_model.py) states its assumptions; each is an option of this command."""

from __future__ import annotations

import random
import time
import types
import uuid
from collections import defaultdict
from pathlib import Path

from bench.harness import driver
from bench.harness.driver import ROOT
from bench.harness.report import fmt, md_table
from bench.harness.sampler import ResourceSampler, read_cpu_by_pid

NAME = "capacity"
DOC_PATH = ROOT / "docs" / "capacity.md"
OPTIONS = {
    "seconds": (15.0, "length of each measured loop", 2, 300),
    "batch": (800, "commands a pipeline round: at the 47 % change share of these commands, about 47 events a pass "
              "of each of the 8 partitions, what a pass every 100 ms takes at 30,000 events/s over 64 partitions",
              5, 20_000),
    "users": (5000, "bench users", 100, 200_000),
    "videos": (2000, "videos the commands spread over (uniform: most snapshots are of cold videos)", 10, 100_000),
    "clients": (8, "pgbench clients for the PostgreSQL ceiling", 1, 64),
    "pgbench_duration": (10, "pgbench seconds", 3, 120),
    "change_share": (0.6, "model: share of commands that change a relation (an event); spec §5", 0.05, 1),
    "utilization": (0.6, "model: the busy share a core is planned at (latency headroom)", 0.1, 1),
    "instance_cores": (4, "model: cores of a web or worker instance", 1, 64),
    "zones": (3, "model: availability zones; one may be lost", 2, 6),
    "backlog_minutes": (10.0, "model: a backlog of this many minutes of events ...", 0, 240),
    "catchup_minutes": (30.0, "model: ... drained within this many minutes while traffic goes on", 1, 600),
    "page": (20, "model: count reads a batch request answers", 1, 100),
}


def store_cpu() -> dict[str, float]:
    """CPU seconds so far of every `postgres` process and every `redis-server` process."""
    out = {"postgres": 0.0, "redis": 0.0}
    for comm, _ppid, cpu, _start in read_cpu_by_pid().values():
        if comm.startswith(("postgres", "postmaster")):
            out["postgres"] += cpu
        elif comm.startswith("redis"):
            out["redis"] += cpu
    return out


class Meter:
    """Per step: wall and CPU seconds of each tier, and the units it did."""

    def __init__(self) -> None:
        self.steps: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def run(self, step: str, fn, units: int):
        """`fn()` as `units` units of `step`; what it returns (a count of events, videos) is kept as its items. The
        scans of /proc stay outside this process's window (each costs milliseconds of its CPU)."""
        s0 = store_cpu()
        a0, t0 = time.process_time(), time.perf_counter()
        items = fn()
        t1, a1 = time.perf_counter(), time.process_time()
        s1 = store_cpu()
        row = self.steps[step]
        row["wall"] += t1 - t0
        row["app"] += a1 - a0
        for tier in s0:
            row[tier] += s1[tier] - s0[tier]
        row["units"] += units
        row["items"] += items or 0

    def per_unit(self) -> dict[str, dict]:
        return {step: {"units": int(r["units"]), "items": int(r["items"]),
                       **{f"{k}_ms": round(r[k] / r["units"] * 1000, 3) if r["units"] else None
                          for k in ("wall", "app", "postgres", "redis")}}
                for step, r in self.steps.items()}


def loop(meter: Meter, step: str, unit, seconds: float, chunk: int = 25) -> None:
    """`unit` for `seconds`, metered `chunk` units at a time."""
    def units() -> None:
        for _ in range(chunk):
            unit()

    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        meter.run(step, units, chunk)


def measure_pipeline(args, users, videos, meter: Meter) -> dict:
    """Rounds of --batch commands, then the publisher, each consumer and the snapshot, as the worker runs them."""
    from counting.services.snapshots import display_snapshot_refresh
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition, projector_get
    from likes_project.eventlog.registry import CONSUMERS
    from relations import routing
    from relations.services.commands import relation_set_state
    from relations.services.outbox import outbox_publish_batch

    rng = random.Random(args.seed)
    changed = [0]

    def commands() -> int:
        done = 0
        for _ in range(args.batch):
            done += relation_set_state(user_id=rng.choice(users)[0], video_id=rng.choice(videos),
                                       desired_state=rng.choice(("LIKED", "UNLIKED")),
                                       operation_id=uuid.uuid4().hex).changed
        changed[0] += done
        return done

    def publish() -> int:
        return sum(outbox_publish_batch(alias=alias, holder="capacity").sent for alias in routing.all_aliases())

    def consume(name: str):
        return lambda: sum(consume_partition(projector_get(name), partition=p, batch_size=500).dispatched
                           for p in streams.all_partitions())

    def snapshot() -> int:
        return display_snapshot_refresh(holder="capacity").videos

    deadline, rounds = time.perf_counter() + args.seconds, 0
    while time.perf_counter() < deadline or rounds < 3:
        for step, fn in (("command", commands), ("publish", publish),
                         *((f"consumer {name}", consume(name)) for name in CONSUMERS), ("snapshot", snapshot)):
            meter.run(step, fn, args.batch)  # every step per command of the round; its items: events, videos
        rounds += 1
    return {"rounds": rounds, "commands": rounds * args.batch, "changed": changed[0]}


def stream_memory() -> dict:
    """The event log's entries and the memory of their stream keys (MEMORY USAGE, every node sampled whole)."""
    from likes_project.eventlog import streams
    from likes_project.redis_client import stream_redis
    client, entries, used = stream_redis(), 0, 0
    for p in streams.all_partitions():
        key = streams.stream_key(p)
        entries += int(client.xlen(key))
        used += int(client.memory_usage(key, samples=0) or 0)
    return {"entries": entries, "bytes": used, "bytes_per_entry": round(used / entries, 1) if entries else None}


def pg_ceiling(args, sampler) -> dict:
    """PostgreSQL CPU per transaction at the pgbench ceiling of the command's statements, and the one-row hot
    counter's ceiling (bench/command's rows, same scripts)."""
    from bench.command.bench import pgbench_row
    from bench.harness.phases import pgbench_found
    if not pgbench_found(types.SimpleNamespace(log=driver.make_log(NAME))):
        return {}
    out = {}
    for hot in (False, True):
        row = pgbench_row(args, sampler, naive_hot=hot, clients=args.clients)
        cores = row["resources"]["cores_by_process"].get("postgres (bench backends)", 0.0)
        out["hot_row" if hot else "command_tx"] = {
            "tps": row["commands_per_s"], "p99_ms": row["p99_ms"],
            "postgres_ms": round(cores / row["commands_per_s"] * 1000, 3) if row["commands_per_s"] else None}
    return out


def measure(args) -> dict:
    from bench.harness.seed import prepare
    from bench.profile import batch_http, clean, http
    meter = Meter()
    clean()
    users, videos = prepare(users=args.users, videos=args.videos)
    log = driver.make_log(NAME)
    pipeline = measure_pipeline(args, users, videos, Meter())  # warm-up: connections, caches, plans
    clean()
    pipeline = measure_pipeline(args, users, videos, meter)
    log(f"pipeline: {pipeline['rounds']} rounds, {pipeline['commands']} commands, {pipeline['changed']} changed")
    memory = stream_memory()
    log(f"event log: {memory}")
    for step, build in (("http command", http), ("http batch read of 20", batch_http)):
        clean()
        unit, _per = build(random.Random(args.seed))
        loop(Meter(), step, unit, min(3.0, args.seconds / 4))  # warm-up
        loop(meter, step, unit, args.seconds)
        log(f"{step}: {meter.per_unit()[step]}")
    clean()
    ceiling = pg_ceiling(args, ResourceSampler())
    log(f"pgbench: {ceiling}")
    return {"units": meter.per_unit(), "pipeline": pipeline, "stream_memory": memory, "pgbench": ceiling}


def report(result: dict) -> list[str]:
    from bench.capacity_model import headline_ms, model_tables, p8_bound
    units = result["units"]
    rows = [[step, f"{u['units']:,}", fmt(u["wall_ms"], 3), fmt(u["app_ms"], 3), fmt(u["postgres_ms"], 3),
             fmt(u["redis_ms"], 3), fmt(sum(u[k] or 0 for k in ("app_ms", "postgres_ms", "redis_ms")), 3)]
            for step, u in units.items()]
    p, mem, pg = result["pipeline"], result["stream_memory"], result["pgbench"]
    blocks = [
        "**Per unit, one client** (ms; the pipeline's steps per command of the round, whether it changed a relation "
        f"or not: {p['changed']:,} of {p['commands']:,} did):\n\n"
        + md_table(["unit", "units", "wall", "app CPU", "PostgreSQL CPU", "Redis CPU", "CPU, all tiers"], rows),
        f"**Event log:** {mem['entries']:,} entries in {mem['bytes']:,} bytes of stream keys: "
        f"{fmt(mem['bytes_per_entry'])} bytes an entry.",
    ]
    if pg:
        blocks.append(f"**PostgreSQL ceiling (pgbench, {result['meta']['clients']} clients):** the command's "
                      f"transaction {fmt(pg['command_tx']['tps'])} tps, {fmt(pg['command_tx']['postgres_ms'], 3)} ms "
                      f"of PostgreSQL CPU each; one hot counter row {fmt(pg['hot_row']['tps'])} updates/s.")
    blocks.append(f"**Whole chain, CPU per command** (P10, from the units above): {fmt(headline_ms(result), 2)} ms. "
                  f"**P8's ceiling** (every command a change, the units alone): {fmt(p8_bound(result), 2)}.")
    return blocks + model_tables(result)


def headline(result: dict) -> dict:
    from bench.capacity_model import headline_ms
    return {"goal": "P10: CPU per command, whole chain ≤ 2.5 ms", "figure": f"{fmt(headline_ms(result), 2)} ms "
            "(units, one client)", "ceiling": "-", "ratio": "-"}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261207)
    from counting import routing
    result = measure(run.args)
    result["meta"] = {"virtual_buckets": routing.active().space.virtual_buckets}
    code = driver.finish(run, result, report=report, headline=headline)
    if not run.args.no_docs:
        from bench.capacity_model import document
        DOC_PATH.write_text(document(result))
        run.log(f"wrote {Path(DOC_PATH).relative_to(ROOT)}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
