"""The capacity model of `bench/run.sh capacity` (issue 34 §3; spec §5): the design's targets over the per-unit
costs that run measured, to cores and instances per tier with headroom. Pure arithmetic on the result: no Django."""

from __future__ import annotations

import math

from bench.harness.report import fmt, md_table

TARGETS = {"commands_per_s": 50_000, "count_reads_per_s": 200_000, "hot_video_changes_per_s": 10_000}
PIPELINE_SKIP = ("command", "http command", "http batch read of 20")  # the steps that are not the pipeline's
REDIS_NODE_SHARE = 0.7  # a Redis node (one thread) planned at this share of one core
REDIS_NODE_GIB = 25  # memory a Redis node is planned with (keys + streams), before replicas
DB_SERVER_CORES = 16  # a PostgreSQL server's cores
STREAM_RETENTION_H = 72  # OUTBOX_RETENTION_HOURS: the event log keeps what the outbox keeps (streams_trim)
TIERS = ("app", "postgres", "redis")
SERIAL_GROUP = ("consumer count", "consumer relcache", "consumer reverse")  # CONSUMER_PASS_GROUPS' first group
PASS_GROUPS = 2  # CONSUMER_PASS_GROUPS' default: count,relcache,reverse; notify,risk
POOL_PER_INSTANCE = 4  # the Procfile worker's CELERY_CONCURRENCY default


def _pipeline(result: dict) -> dict[str, dict]:
    return {k: v for k, v in result["units"].items() if k not in PIPELINE_SKIP}


def _total(unit: dict) -> float:
    return sum(unit[f"{t}_ms"] or 0.0 for t in TIERS)


def headline_ms(result: dict) -> float:
    """P10 from units: the command over HTTP plus every pipeline step, CPU of all tiers, per command."""
    return _total(result["units"]["http command"]) + sum(_total(u) for u in _pipeline(result).values())


def p8_bound(result: dict) -> float:
    """The share of their own rate the service-layer commands keep on one shared host while the pipeline keeps up, when
    every command is a change (as in `convergence`): the units' costs with no overhead and no contention, so issue
    34's P8 cannot exceed it."""
    command = _total(result["units"]["command"])
    return command / (command + sum(_per_event(result, t) for t in TIERS))


def _change_share(result: dict) -> float:
    """The share of the pipeline rounds' commands that changed a relation (made an event), never 0."""
    p = result["pipeline"]
    return max(p["changed"] / p["commands"] if p["commands"] else 1.0, 1e-9)


def _per_event(result: dict, tier: str) -> float:
    """ms of `tier` the pipeline spends per event (per changed command)."""
    return sum(u[f"{tier}_ms"] or 0.0 for u in _pipeline(result).values()) / _change_share(result)


def plan(result: dict) -> dict:
    """Cores per tier for the targets, before and after headroom, and instances (see `document` for the rules)."""
    m = result["meta"]
    c, e = TARGETS["commands_per_s"], TARGETS["commands_per_s"] * m["change_share"]
    reads = TARGETS["count_reads_per_s"] / m["page"]
    http, batch = result["units"]["http command"], result["units"]["http batch read of 20"]
    zone = m["zones"] / (m["zones"] - 1)
    catchup = 1 + m["backlog_minutes"] / m["catchup_minutes"]

    def cores(tier: str) -> dict:
        return {"commands": c * (http[f"{tier}_ms"] or 0) / 1000, "reads": reads * (batch[f"{tier}_ms"] or 0) / 1000,
                "pipeline": e * _per_event(result, tier) / 1000}

    out = {}
    for tier, label in (("app", "web"), ("app", "workers"), ("postgres", "PostgreSQL"), ("redis", "Redis")):
        parts = cores(tier)
        if label == "web":
            parts.pop("pipeline")
        elif label == "workers":
            parts = {"pipeline": parts["pipeline"]}
        raw = sum(parts.values())
        busy = raw + parts.get("pipeline", 0.0) * (catchup - 1)  # the pipeline's share, draining a backlog too
        planned = busy / m["utilization"] * zone
        row = {"raw": raw, "busy_with_catchup": busy, "planned": planned, "parts": parts}
        if label in ("web", "workers"):
            row["instances"] = math.ceil(planned / m["instance_cores"]) + 1  # one more: a rolling deploy's
        elif label == "PostgreSQL":
            row["instances"] = math.ceil(planned / DB_SERVER_CORES)
        else:
            row["instances"] = math.ceil(busy / REDIS_NODE_SHARE * zone)
        out[label] = row
    mem = result["stream_memory"].get("bytes_per_entry") or 0
    out["event_log"] = {"events_per_s": e, "bytes_per_entry": mem, "gib_per_minute": e * mem * 60 / 2**30,
                        "gib_at_retention": e * mem * STREAM_RETENTION_H * 3600 / 2**30,
                        "hours_in_nodes": (out["Redis"]["instances"] * REDIS_NODE_GIB * 2**30 / (e * mem) / 3600)
                        if e * mem else None}
    log = out["event_log"]
    log["nodes_for_memory"] = math.ceil(log["gib_at_retention"] / REDIS_NODE_GIB)
    log["events_per_s_in_cpu_nodes"] = (out["Redis"]["instances"] * REDIS_NODE_GIB * 2**30
                                        / (mem * STREAM_RETENTION_H * 3600)) if mem else None
    # One partition's passes of a group run one at a time (a lease per consumer and partition): its first group's cost
    # per event bounds what one partition carries; each partition keeps PASS_GROUPS pool processes busy at once.
    units, share = result["units"], _change_share(result)
    group_ms = sum(_total(units[u]) for u in SERIAL_GROUP) / share
    group_app_ms = sum(units[u]["app_ms"] or 0.0 for u in SERIAL_GROUP) / share
    per_partition = 1000 / group_ms * m["utilization"] if group_ms else None
    needed = math.ceil(e * catchup / per_partition) if per_partition else None
    out["stream"] = {"group_ms": group_ms, "per_partition": per_partition, "events_per_s": e * catchup,
                     "needed": needed, "processes": needed * PASS_GROUPS if needed else None,
                     "app_share": group_app_ms / group_ms if group_ms else None,
                     "per_instance": math.ceil(needed * PASS_GROUPS / out["workers"]["instances"]) if needed else None}
    hot, changes = result["pgbench"].get("hot_row", {}).get("tps"), TARGETS["hot_video_changes_per_s"]
    out["hot"] = {"row_ceiling": hot, "per_bucket": changes / m["virtual_buckets"],
                  "rows_needed": math.ceil(changes / (hot * m["utilization"])) if hot else None}
    return out


def model_tables(result: dict) -> list[str]:
    p = plan(result)
    rows = [[tier, fmt(r["raw"], 0), fmt(r["planned"], 0), f"{r['instances']:,}",
             ", ".join(f"{k} {fmt(v, 0)}" for k, v in r["parts"].items() if v)]
            for tier, r in p.items() if tier in ("web", "workers", "PostgreSQL", "Redis")]
    log, hot = p["event_log"], p["hot"]
    return [
        "**The design's targets (spec §5) on these costs** (cores of this machine's kind; see docs/capacity.md):\n\n"
        + md_table(["tier", "cores busy", "cores planned", "instances", "busy cores by load"], rows),
        f"**Event log at {fmt(log['events_per_s'], 0)} events/s:** {fmt(log['gib_per_minute'], 2)} GiB a minute, "
        f"{fmt(log['gib_at_retention'], 0)} GiB over the {STREAM_RETENTION_H} h retention.",
        f"**Stream partitions:** at least {p['stream']['needed']}; the workers' pool at least "
        f"{p['stream']['processes']} processes (`CELERY_CONCURRENCY` {p['stream']['per_instance']} on each of "
        f"{p['workers']['instances']} instances).",
        f"**One hot video at {TARGETS['hot_video_changes_per_s']:,} changes/s:** {fmt(hot['per_bucket'], 1)} a "
        f"bucket row a second over V = {result['meta']['virtual_buckets']}; one row takes "
        f"{fmt(hot['row_ceiling'], 0)}.",
    ]


def document(result: dict) -> str:
    """docs/capacity.md, whole: written by every run without --no-docs."""
    m, p, units = result["meta"], plan(result), result["units"]
    rows = [[step, fmt(u["app_ms"], 3), fmt(u["postgres_ms"], 3), fmt(u["redis_ms"], 3), fmt(_total(u), 3)]
            for step, u in units.items()]
    per_event = [fmt(_per_event(result, t), 3) for t in TIERS]
    pg, log, hot, st = result["pgbench"], p["event_log"], p["hot"], p["stream"]
    cs = result["pipeline"]["changed"] / max(1, result["pipeline"]["commands"])
    tiers = [[t, fmt(r["raw"], 1), fmt(r["busy_with_catchup"], 1), fmt(r["planned"], 1), f"{r['instances']:,}"]
             for t, r in p.items() if t in ("web", "workers", "PostgreSQL", "Redis")]
    zone = m["zones"] / (m["zones"] - 1)
    pg_line = (f"pgbench of the command's own statements: {fmt(pg['command_tx']['tps'])} transactions/s with "
               f"{m['clients']} clients, {fmt(pg['command_tx']['postgres_ms'], 3)} ms of PostgreSQL CPU each (the "
               f"service layer's transaction measured above costs PostgreSQL "
               f"{fmt(units['command']['postgres_ms'], 3)} ms a command); one counter row updated by every client: "
               f"{fmt(pg['hot_row']['tps'])} updates/s.") if pg else "pgbench was not found: no ceiling in this run."
    return "\n".join([
        "# Capacity model",
        "",
        "<!-- Written by `bench/run.sh capacity` (bench/capacity.py, bench/capacity_model.py); a run replaces the "
        "whole file. -->",
        "",
        f"Measured {result['meta']['finished_at']} on {result['machine'].get('nproc')} cores "
        f"({result['machine'].get('cpu_model', 'unknown')}), PostgreSQL {result['machine'].get('postgresql')}, "
        f"Redis {result['machine'].get('redis')}: `{m['command']}`. Every figure below comes from this run's "
        "measurements and the assumptions listed; nothing is copied from an earlier run. Costs are per core of "
        "this machine; a different machine gives different costs, and the model should be re-run there.",
        "",
        "## 1. What one unit costs",
        "",
        f"Each unit ran in a loop for {fmt(m['seconds'], 0)} s on one client, so a cost is CPU time per unit, "
        "without contention. The CPU of each tier is read from /proc: the process running the unit (the web "
        "or worker tier), every `postgres` process, every `redis-server` process. The pipeline ran in rounds of "
        f"{m['batch']} commands over {m['videos']:,} videos (uniform, so nearly every snapshot is of a cold video); "
        f"each of its steps is given per command of the round, and {fmt(cs * 100, 0)} % of those commands "
        "changed a relation (the rest were no-change targets: an unlike of a relation never liked).",
        "",
        md_table(["unit (ms per command; the batch read: per request)", "app CPU", "PostgreSQL CPU", "Redis CPU",
                  "all tiers"], rows),
        "",
        f"Per event (per changed command), the whole pipeline costs {per_event[0]} ms of worker CPU, {per_event[1]} "
        f"ms of PostgreSQL and {per_event[2]} ms of Redis. The whole chain per command (the HTTP command plus every "
        f"pipeline step at this run's change share; issue 34's P10): **{fmt(headline_ms(result), 2)} ms**. When every "
        "command is a change (as in `bench/run.sh convergence`), the commands of the service layer and the pipeline "
        f"on one shared host leave the commands at most **{fmt(p8_bound(result), 2)}** of their own rate: the units' "
        "costs, without a pass's fixed cost, the Celery tasks or contention, so issue 34's P8 cannot exceed it.",
        "",
        pg_line,
        "",
        f"The event log: {result['stream_memory']['entries']:,} entries held {result['stream_memory']['bytes']:,} "
        f"bytes of stream keys, {fmt(log['bytes_per_entry'])} bytes an entry.",
        "",
        "## 2. Assumptions (each an option of `bench/run.sh capacity`)",
        "",
        f"- Targets (spec §5): {TARGETS['commands_per_s']:,} commands/s, {TARGETS['count_reads_per_s']:,} count "
        f"reads/s, {TARGETS['hot_video_changes_per_s']:,} changes/s on one video.",
        f"- `--change-share {m['change_share']}`: the share of commands that change a relation and so make an "
        "event (spec §5: the 50,000 include repeats, no-change targets, risk refusals and unlikes). The pipeline's "
        "per-event cost is scaled to it.",
        f"- `--page {m['page']}`: a count read arrives in a batch query of {m['page']} ids (a feed page), so the "
        f"reads are {TARGETS['count_reads_per_s'] // m['page']:,} batch requests/s, warm (the relation cache and "
        "the count views filled, as on a feed).",
        f"- `--utilization {m['utilization']}`: a core is planned busy at this share, for latency.",
        f"- `--zones {m['zones']}`: one zone may be lost; the others carry its load (×{fmt(zone, 2)}).",
        f"- `--backlog-minutes {fmt(m['backlog_minutes'], 0)} --catchup-minutes {fmt(m['catchup_minutes'], 0)}`: "
        "after an outage the workers drain that backlog within that time while live traffic goes on (×"
        f"{fmt(1 + m['backlog_minutes'] / m['catchup_minutes'], 2)} for the workers and for what they make the "
        "stores do).",
        f"- `--instance-cores {m['instance_cores']}`: a web or worker instance; one instance more than the load "
        f"needs, for a rolling deploy. A PostgreSQL server has {DB_SERVER_CORES} cores; a Redis node is one thread, "
        f"planned at {fmt(REDIS_NODE_SHARE * 100, 0)} % of a core and {REDIS_NODE_GIB} GiB, before replicas.",
        "- Background work that does not scale with traffic (beat's checks, gauges, reconciliation, snapshots of "
        "recovery) is left out; the convergence benchmark shows it below 0.1 core on this machine.",
        "",
        "## 3. Cores and instances for the targets",
        "",
        md_table(["tier", "cores busy", "with backlog catch-up", "planned (utilization, zone loss)", "instances"],
                 tiers),
        "",
        "- **web**: the command over HTTP and the batch reads (gunicorn workers, one per core).",
        "- **workers**: the publisher, every consumer and the display snapshot (Celery, `worker` of the Procfile).",
        "- **PostgreSQL**: the relation shards, the count partitions and `default` together; the split follows the "
        "routing (relation shards take the command's transaction, count partitions the projections). Instances are "
        f"servers of {DB_SERVER_CORES} cores, each with its replica, not counted.",
        "- **Redis**: the caches, the event log and the broker; instances are Cluster primaries for CPU. Memory is "
        "the next section's question.",
        f"- **Stream partitions** (`STREAM_PARTITIONS`, fixed when a deployment is bootstrapped: another P is a new "
        "stream contract and a drain, not built): the passes of one group over one partition run one at a time, and "
        f"the first group (count, relation cache, reverse index) costs {fmt(st['group_ms'], 3)} ms of all tiers an "
        f"event, so one partition carries at most {fmt(1000 / st['group_ms'], 0)} events/s (CPU only, a lower "
        f"bound of a pass's wall time), {fmt(st['per_partition'], 0)} at the planned utilization. "
        f"{fmt(st['events_per_s'], 0)} events/s with catch-up need **at least {st['needed']} partitions**. Their "
        f"passes, {PASS_GROUPS} groups a partition, keep {st['processes']:,} pool processes busy at once: the "
        f"{p['workers']['instances']} worker instances run **`CELERY_CONCURRENCY` {st['per_instance']}** each (the "
        f"Procfile's default is {POOL_PER_INSTANCE}), more processes than cores, since a pass is on the worker's CPU "
        f"for {fmt(st['app_share'] * 100, 0)} % of its cost and waits on PostgreSQL and Redis for the rest. More "
        "partitions than pool "
        f"processes ÷ {PASS_GROUPS} only queue passes behind each other: each one adds a pass's fixed cost and its "
        "wait for a free process (docs/benchmarks.md, \"Stream partitions\", measures it on one host).",
        "",
        "## 4. The event log: where Redis Streams stop being the right log",
        "",
        f"At {fmt(log['events_per_s'], 0)} events/s and {fmt(log['bytes_per_entry'])} bytes an entry, the streams "
        f"grow by {fmt(log['gib_per_minute'], 2)} GiB a minute. The log keeps what the outbox keeps "
        f"({STREAM_RETENTION_H} h, `OUTBOX_RETENTION_HOURS`, so a consumer or a snapshot can replay the window): "
        f"**{fmt(log['gib_at_retention'], 0)} GiB**, in memory, before replicas: "
        f"{log['nodes_for_memory']:,} nodes of {REDIS_NODE_GIB} GiB for the log alone, where the CPU of every Redis "
        f"role needs {p['Redis']['instances']:,} (which would hold {fmt(log['hours_in_nodes'], 1)} h of it).",
        "",
        "So at the design's rate memory, not CPU, sizes the log, and Redis Streams stop being the right log: RAM "
        "is paid for a window that is read only after an outage, a rebuild or a snapshot restore. The log belongs on "
        "disk there: Kafka (or Redpanda), partitioned by the same aggregate key, retained by time, replicated by its "
        "brokers. It goes behind the same interface, `likes_project.eventlog.streams` (`publish_pipeline`, "
        "`read_after`, `last_generated_id(s)`, `trim_below`), with entry ids mapped to (partition, offset). The "
        "per-consumer checkpoints in PostgreSQL, the receipts and the fences stay as they are: the consumers already "
        "commit their own positions and never rely on the log's consumer groups. Redis Streams remain the simpler "
        f"choice while the window fits in the nodes the caches need anyway: below about "
        f"{fmt(log['events_per_s_in_cpu_nodes'], 0)} events/s the {STREAM_RETENTION_H} h window fits in the "
        f"{p['Redis']['instances']:,} nodes the CPU asks for, and below about "
        f"{fmt(REDIS_NODE_GIB * 2**30 / (log['bytes_per_entry'] or 1) / (STREAM_RETENTION_H * 3600), 0)} events/s in "
        "one node.",
        "",
        "## 5. One hot video",
        "",
        f"{TARGETS['hot_video_changes_per_s']:,} changes/s on one video spread over its V = {m['virtual_buckets']} "
        f"virtual buckets by the user: {fmt(hot['per_bucket'], 1)} updates a second a bucket row. This run's "
        f"one-row ceiling is {fmt(hot['row_ceiling'], 0)} updates/s, so "
        f"{hot['rows_needed'] if hot['rows_needed'] is not None else '-'} rows at {fmt(m['utilization'] * 100, 0)} % "
        "would carry the load: V has room to spare (BKT-8), and the buckets spread over every count partition and "
        "every stream partition. What does not spread is the display snapshot of that video: it is refreshed at "
        "most every `COUNT_HOT_REFRESH_S` whatever the rate (DEG-2), and its reverse index goes by the same "
        "buckets.",
        "",
    ])
