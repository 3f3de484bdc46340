"""Benchmark driver for relation slot moves (issue 16 "Benchmark": 64 slots holding 1,000,000 relations, moved
under load; the duration, and the write pause p50 and p99).

Run through ./bench/slotmove.sh, which points every setting at this benchmark's own databases (likes_bench_slot*,
dropped and created again by migrate_all) with three relation shards of which contract v1 spreads over two
(rel_02 starts empty, the way a shard is added). The run seeds `--scale` LIKED relations (and one command row
each) of users in the first `--slots` slots of rel_00, and `--rest-share` as many in rel_00's other slots, in bulk
(bench/slotmove/seed.py), then:

  load     `--procs` processes send commands on the service layer for `--users` users spread over every slot
           (bench/slotmove/load.py); every command is timed;
  move     after `--window` seconds of load alone, the slots move rel_00 -> rel_02 by the product (plan by one
           operator, approval by another, the ops job run to its end in this process as a worker runs it),
           then, after another window, back rel_02 -> rel_00 (skip with --no-back): per move the duration and
           its steps, the rows copied, the captured changes, the ledger's write pause (slot locks taken ->
           released), and what the clients saw: the latency of the commands of the moving users in flight
           during the pause (p50, p99, max), and of every command during the move against the load alone;
  baselines with the load stopped, the same rows copied between the two shards by a naive client-side move
           (one SELECT, executemany INSERTs: a stop-the-world move pauses the slots' writes this long) and by
           the raw SQL ceiling (COPY TO STDOUT -> COPY FROM STDIN), both into the real tables, rolled back;
  final    every acknowledged command's state is the relation's state on the shard the contract names; no row
           of a moved user on any other shard; relation rows = seeded + distinct pairs the load touched;
           command rows = seeded + acknowledged commands (none lost, none twice); no write_barrier refusal.

Results: the tables on stdout and bench/results/slotmove_latest.json (its "markdown" key holds the text of the
docs/benchmarks.md section). Nothing asserts on timings; the exit code is 1 when a move did not reach RETIRED with
its VERIFY passed, or a final check failed. Counts and projections are not run here (no publishers or projectors:
the move copies relation and command rows; the outbox stays on the source and drains there, tests/relations/
test_slot_move.py checks the counts across a move).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter

from bench import common
from bench.common import BENCH_DIR, fmt, percentile, rounded
from bench.slotmove import (
    APPROVER,
    LOAD_VIDEO_PREFIX,
    OPERATOR,
    SEED_USER_BASE,
    SOURCE,
    TARGET,
    check_own_databases,
    log,
)

OPTIONS = {
    "scale": (1_000_000, "LIKED relations seeded in the slots that move (one command row each besides)"),
    "slots": (64, "slots moved rel_00 -> rel_02: the first N of those contract v1 puts on rel_00"),
    "per_user": (50, "seeded relations per user"),
    "rest_share": (1.0, "relations seeded in rel_00's other slots, as a share of the moving ones"),
    "users": (2000, "users of the command load (spread over every slot)"),
    "load_videos": (200, "videos of the command load"),
    "procs": (4, "command load processes"),
    "window": (10.0, "seconds of load alone before, between and after the moves"),
    "no_back": (False, "do not move the slots back rel_02 -> rel_00"),
    "series": (20, "then a write-pause series: this many moves of --series-slots slots, there and back in turn"),
    "series_slots": (1, "slots each series move takes (the first N of the moved ones)"),
    "no_baselines": (False, "skip the naive move and the COPY ceiling"),
}
RESULT = BENCH_DIR / "results" / "slotmove_latest.json"
STEPS = ("prepare", "copy", "catch-up", "cutover", "verify", "cleanup")


def parse_args(argv=None):
    p, args = common.parse_options(argv, "bench/slotmove.sh", __doc__, OPTIONS, seed=20261204, wait_quiet=120.0)
    common.require_positive(p, args, ("scale", "slots", "per_user", "users", "load_videos", "procs"))
    if not (1_000 <= args.scale <= 20_000_000 and args.slots <= 128 and 0 <= args.rest_share <= 4
            and 1 <= args.window <= 300 and args.procs <= 32 and 0 <= args.series <= 200
            and 1 <= args.series_slots <= args.slots):
        p.error("out of range (scale 1,000-20,000,000, slots 1-128, rest-share 0-4, window 1-300 s, procs 1-32, "
                "series 0-200, series-slots 1 to --slots)")
    return args


# --- the moves -----------------------------------------------------------------------------------------------


def run_move(slots: list[int], target: str, *, series: bool = False) -> dict:
    """One move by the product: planned by OPERATOR, approved by APPROVER, its ops job run here to its end."""
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_run_inline
    from relations.services.slot_moves import ledger

    t0 = time.time()
    m = ledger.move_plan(slots=slots, target=target, reason="benchmark", actor=Actor(OPERATOR, "cli"))
    planned = m.rows_to_copy
    m = ledger.move_approve(move_id=m.pk, actor=Actor(APPROVER, "cli"))
    says: list[tuple[float, str]] = []
    job_run_inline(m.job_id, on_say=lambda text: says.append((time.time(), text)))
    t1 = time.time()
    m = ledger.move_get(m.pk)
    # each step says "slot move N STATE: <step>: ..." when it ends
    ends = [(t, text.split(": ", 2)[1] if text.count(": ") >= 2 else text) for t, text in says]
    steps, last = {}, t0
    for t, name in ends:
        steps[name] = round(steps.get(name, 0.0) + t - last, 2)
        last = t
    cut = next((t for t, name in ends if name == "cutover"), None)
    pause_s = (m.write_pause_ms or 0) / 1000.0
    out = {"move_id": m.pk, "slots": list(slots), "from": m.source_alias, "to": m.target_alias, "state": m.state,
           "verify_ok": bool((m.verify_result or {}).get("ok")), "error": m.error, "rows_to_copy": planned,
           "copied_rows": m.copied_rows, "captured_applied": m.captured_applied, "catchup_passes": m.catchup_passes,
           "write_pause_ms": m.write_pause_ms, "seconds": round(t1 - t0, 2), "t_start": t0, "t_end": t1,
           "steps": steps, "said": [[round(t - t0, 2), text] for t, text in says],
           "pause_window": [cut - pause_s, cut] if cut is not None else None, "series": series}
    log(f"move {m.pk} {m.source_alias} -> {m.target_alias}: {m.state} in {out['seconds']} s, "
        f"{m.copied_rows:,} rows copied, {m.captured_applied:,} captured changes, write pause {m.write_pause_ms} ms")
    return out


# --- the baselines (the load stopped) ------------------------------------------------------------------------


def _rows_sql(slots: list[int]):
    from relations import routing
    from relations.services.slot_moves import rows as protocol_rows

    contract = routing.active_contract()
    cond, params = protocol_rows.slot_sql(contract)
    return [(table, cols, f"SELECT {', '.join(cols)} FROM {table} WHERE {cond}", [*params, slots])
            for table, cols, _types, _key in protocol_rows.TABLES.values()]


def baselines(slots: list[int], home: str, other: str) -> dict:
    """The slots' rows copied home -> other twice, into the real tables (indexes, constraints, triggers, WAL) in a
    transaction rolled back: naive (one SELECT, then executemany INSERTs) and the COPY ceiling (binary COPY TO
    STDOUT streamed into COPY FROM STDIN). Returns the seconds and rows of each."""
    from django.db import connections

    out = {}
    src, dst = connections[home], connections[other]
    for conn in (src, dst):
        conn.ensure_connection()
        with conn.connection.cursor() as c:
            c.execute("SET statement_timeout = 0")
    for name in ("naive", "ceiling"):
        t0, rows = time.monotonic(), 0
        raw_src, raw_dst = src.connection, dst.connection
        with raw_dst.transaction(force_rollback=True):
            for table, cols, select, params in _rows_sql(slots):
                with raw_src.cursor() as cs, raw_dst.cursor() as cd:
                    if name == "naive":
                        cs.execute(select, params)
                        batch = cs.fetchall()
                        marks = ", ".join(["%s"] * len(cols))
                        cd.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", batch)
                        rows += len(batch)
                        continue
                    query = cs.mogrify(select, params)
                    with cs.copy(f"COPY ({query}) TO STDOUT (FORMAT BINARY)") as source, \
                            cd.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN (FORMAT BINARY)") as sink:
                        for data in source:
                            sink.write(data)
                    rows += cd.rowcount
        seconds = time.monotonic() - t0
        out[name] = {"seconds": round(seconds, 2), "rows": rows,
                     "rows_per_s": round(rows / seconds) if seconds else None}
        log(f"baseline {name}: {rows:,} rows in {seconds:.1f} s")
    for conn in (src, dst):
        conn.close()
    return out


# --- what the clients saw ----------------------------------------------------------------------------------


def _stats(latencies: list[float], seconds: float | None = None) -> dict:
    vals = sorted(latencies)
    out = {"commands": len(vals), "p50_ms": rounded(percentile(vals, 0.5)), "p99_ms": rounded(percentile(vals, 0.99)),
           "max_ms": rounded(vals[-1] if vals else None)}
    if seconds:
        out["per_s"] = round(len(vals) / seconds, 1)
    return out


def client_view(samples: list[list], moving_users: set[int], windows: dict[str, tuple[float, float]],
                moves: list[dict]) -> dict:
    """Latency and throughput of the commands, moving users apart from the others: in each window of load alone,
    during each move, and in flight during each move's write pause."""
    def pick(lo: float, hi: float, who: str, *, in_flight: bool = False) -> list[float]:
        out = []
        for t0, ms, user, _video, _desired, outcome in samples:
            if outcome != "ok" or (user in moving_users) != (who == "moving"):
                continue
            if (t0 <= hi and t0 + ms / 1000.0 >= lo) if in_flight else lo <= t0 < hi:
                out.append(ms)
        return out

    view = {}
    for name, (lo, hi) in windows.items():
        view[name] = {who: _stats(pick(lo, hi, who), hi - lo) for who in ("moving", "others")}
    for m in (m for m in moves if not m.get("series")):
        key = f"move {m['move_id']} ({m['from']} -> {m['to']})"
        view[key] = {who: _stats(pick(m["t_start"], m["t_end"], who), m["t_end"] - m["t_start"])
                     for who in ("moving", "others")}
        if m["pause_window"]:
            lo, hi = m["pause_window"]
            view[key]["moving_in_pause"] = _stats(pick(lo, hi, "moving", in_flight=True))
    return view


# --- the final check ---------------------------------------------------------------------------------------------


def final_check(samples: list[list], seeded: dict, slots: list[int]) -> dict:
    from django.conf import settings
    from django.db import connections

    from relations import routing
    from relations.models import LikeCommand, LikeRelation
    from relations.services.slot_moves import rows as protocol_rows

    routing.reset_cache()
    contract = routing.active_contract()
    outcomes = Counter(s[5] for s in samples)
    last: dict[tuple[int, str], str] = {}
    for _t0, _ms, user, video, desired, outcome in samples:
        if outcome == "ok":
            last[(user, video)] = desired
    wrong = []
    by_alias: dict[str, list[tuple[int, str]]] = {}
    for pair in last:
        by_alias.setdefault(routing.alias_for_user(pair[0]), []).append(pair)
    for alias, pairs in by_alias.items():
        with connections[alias].cursor() as c:
            c.execute(f"SELECT user_id, video_id, state FROM {LikeRelation._meta.db_table} "
                      f"JOIN unnest(%s::bigint[], %s::text[]) AS k(u, v) ON user_id = k.u AND video_id = k.v",
                      [[u for u, _ in pairs], [v for _, v in pairs]])
            found = {(u, v): st for u, v, st in c.fetchall()}
        wrong += [p for p in pairs if found.get(p) != last[p]]
    cond, params = protocol_rows.slot_sql(contract)
    totals, strays = {}, {}
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as c:
            c.execute("SET statement_timeout = 0")  # whole-table counts through likes_slot_of: a check, not the product
            for model in (LikeRelation, LikeCommand):
                table = model._meta.db_table
                c.execute(f"SELECT count(*) FROM {table}")
                totals[(alias, table)] = c.fetchone()[0]
                foreign = [s for s in slots if contract.slot_aliases[s] != alias]
                if foreign:
                    c.execute(f"SELECT count(*) FROM {table} WHERE {cond}", [*params, foreign])
                    strays[f"{alias}.{table}"] = c.fetchone()[0]
    seeded_rows = seeded["moving_relations"] + seeded["rest_relations"]
    rel_total = sum(v for (_a, t), v in totals.items() if t == LikeRelation._meta.db_table)
    cmd_total = sum(v for (_a, t), v in totals.items() if t == LikeCommand._meta.db_table)
    expected_rel = seeded_rows + len(last)
    expected_cmd = seeded_rows + outcomes.get("ok", 0)
    checks = {
        "acknowledged_state_wrong": len(wrong),
        "stray_rows_of_moved_users": sum(strays.values()),
        "relation_rows": rel_total, "relation_rows_expected": expected_rel,
        "command_rows": cmd_total, "command_rows_expected": expected_cmd,
        "outcomes": dict(outcomes),
    }
    failures = []
    if wrong:
        failures.append(f"{len(wrong)} acknowledged commands not in the relation's state (first {wrong[:3]})")
    if checks["stray_rows_of_moved_users"]:
        failures.append(f"rows of moved users off their shard: {strays}")
    if rel_total != expected_rel:
        failures.append(f"relation rows {rel_total:,} != seeded + touched pairs {expected_rel:,}")
    if cmd_total != expected_cmd:
        failures.append(f"command rows {cmd_total:,} != seeded + acknowledged commands {expected_cmd:,}")
    if set(outcomes) - {"ok"}:
        failures.append(f"commands not acknowledged: { {k: v for k, v in outcomes.items() if k != 'ok'} }")
    checks["failures"] = failures
    return checks


# --- the report ------------------------------------------------------------------------------------------------


def tables(result: dict) -> list[str]:
    every = result["moves"]
    moves = [m for m in every if not m.get("series")]
    rows = [[f"{m['from']} -> {m['to']}", m["state"], "yes" if m["verify_ok"] else "NO", fmt(m["seconds"], 1),
             " / ".join(fmt(m["steps"].get(k), 1) for k in STEPS), f"{m['copied_rows']:,}",
             f"{m['captured_applied']:,}", fmt(m["write_pause_ms"], 1)] for m in moves]
    blocks = [common.md_table(["move", "state", "verified", "duration s", " / ".join(STEPS) + " s", "rows copied",
                               "captured changes", "write pause ms (ledger)"], rows)]
    view = result["client_view"]
    vrows = []
    for name, groups in view.items():
        for who, st in groups.items():
            vrows.append([name, who, f"{st['commands']:,}", fmt(st.get("per_s"), 1), fmt(st["p50_ms"], 2),
                          fmt(st["p99_ms"], 2), fmt(st["max_ms"], 1)])
    blocks.append(common.md_table(["window", "users", "commands", "commands/s", "p50 ms", "p99 ms", "max ms"], vrows))
    ledger = sorted(m["write_pause_ms"] for m in every if m["write_pause_ms"] is not None)
    pauses = sorted(x for m in every for x in result.get("pause_latencies", {}).get(str(m["move_id"]), []))
    series = [m for m in every if m.get("series")]
    if series:
        blocks.append(f"Write-pause series: {len(series)} moves of {len(series[0]['slots'])} slot(s) under the load, "
                      f"{sum(m['state'] == 'RETIRED' and m['verify_ok'] for m in series)} retired and verified; "
                      f"duration p50 {fmt(percentile(sorted(m['seconds'] for m in series), 0.5), 1)} s, "
                      f"{fmt(sum(m['copied_rows'] for m in series) / len(series), 0)} rows copied a move.")
    if ledger:
        blocks.append(f"Write pause (the ledger's: slot locks taken -> released), all {len(ledger)} moves: "
                      f"p50 {fmt(percentile(ledger, 0.5), 1)} ms, p99 {fmt(percentile(ledger, 0.99), 1)} ms, "
                      f"max {fmt(ledger[-1], 1)} ms.")
    if pauses:
        blocks.append(f"What the clients saw: the commands of the moving users in flight during a write pause, all "
                      f"moves: {len(pauses)}; latency p50 {fmt(percentile(pauses, 0.5), 2)} ms, p99 "
                      f"{fmt(percentile(pauses, 0.99), 2)} ms, max {fmt(pauses[-1], 1)} ms.")
    if result.get("baselines"):
        b = result["baselines"]
        ours = moves[-1]
        blocks.append(common.md_table(
            ["copy of the slots' rows (load stopped)", "rows", "seconds", "rows/s", "slots' writes paused s"],
            [["ours (the last move: copy + catch-up + cutover + verify + cleanup)", f"{ours['copied_rows']:,}",
              fmt(ours["seconds"], 1), "-", fmt((ours["write_pause_ms"] or 0) / 1000.0, 3)],
             ["naive stop-the-world (SELECT, executemany INSERT)", f"{b['naive']['rows']:,}",
              fmt(b["naive"]["seconds"], 1), f"{b['naive']['rows_per_s']:,}", fmt(b["naive"]["seconds"], 1)],
             ["raw SQL ceiling (binary COPY -> COPY)", f"{b['ceiling']['rows']:,}", fmt(b["ceiling"]["seconds"], 1),
              f"{b['ceiling']['rows_per_s']:,}", fmt(b["ceiling"]["seconds"], 1)]]))
    f = result["final"]
    blocks.append(f"Final check: relation rows {f['relation_rows']:,} (expected {f['relation_rows_expected']:,}), "
                  f"command rows {f['command_rows']:,} (expected {f['command_rows_expected']:,}), acknowledged "
                  f"states wrong {f['acknowledged_state_wrong']}, stray rows of moved users "
                  f"{f['stray_rows_of_moved_users']}, outcomes {f['outcomes']}: "
                  + ("**exact**." if not f["failures"] else "**FAILED**: " + "; ".join(f["failures"])))
    return blocks


def print_report(result: dict) -> None:
    common.print_blocks(*tables(result))


def main(argv=None) -> int:
    args = parse_args(argv)
    wall0 = common.start_driver()
    check_own_databases()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connections

    from bench.dataset import author_id, prepare, snapshots_insert
    from bench.slotmove import seed
    from bench.slotmove.load import Load
    from relations import routing

    common.refuse_nudges("slotmove", "slotmove.sh")
    connections.close_all()
    waited = common.wait_for_quiet(args.wait_quiet, tag="slotmove", log=log)
    spec = common.machine_spec()
    common.log_machine(spec, log)
    routing.reset_cache()
    contract = routing.active_contract()
    slots = [s for s in range(contract.logical_slots) if contract.slot_aliases[s] == SOURCE][:args.slots]
    log(f"seeding {args.scale:,} relations in {len(slots)} slots of {SOURCE} (+{args.rest_share:g} as many in its "
        f"other slots), {args.per_user} a user ...")
    seeded = seed.seed(contract=contract, moving=slots, scale=args.scale, per_user=args.per_user,
                       rest_share=args.rest_share)
    log(f"seeded {seeded}")
    users, _ = prepare(users=args.users, videos=0)
    for name in (OPERATOR, APPROVER):
        get_user_model().objects.get_or_create(username=name, defaults={"password": "!bench"})
    snapshots_insert("SELECT %s || lpad(i::text, 5, '0') FROM generate_series(0, %s - 1) AS i",
                     [LOAD_VIDEO_PREFIX, args.load_videos], author_id=author_id())
    videos = [f"{LOAD_VIDEO_PREFIX}{i:05d}" for i in range(args.load_videos)]
    user_ids = [u for u, _ in users]
    assert max(user_ids) < SEED_USER_BASE
    moving_users = {u for u in user_ids if routing.slot_for_user(contract, u) in set(slots)}
    connections.close_all()

    result: dict = {"seed": seeded, "moves": []}
    windows: dict[str, tuple[float, float]] = {}

    def load_alone(name: str) -> None:
        # A measurement window, not a wait for a condition: the load runs alone for --window seconds and the
        # commands sent in it are the baseline the moves are compared with.
        t = time.time()
        time.sleep(args.window)
        windows[name] = (t, time.time())
    with tempfile.TemporaryDirectory(prefix="slotmove-") as tmp:
        load = Load(procs=args.procs, users=user_ids, videos=videos, seed=args.seed, tmpdir=tmp)
        try:
            load.wait_ready()
            load_alone("load alone, before")
            log(f"moving {len(slots)} slots {SOURCE} -> {TARGET} under the load ({args.procs} processes) ...")
            result["moves"].append(run_move(slots, TARGET))
            load_alone("load alone, between")
            if not args.no_back:
                log(f"moving them back {TARGET} -> {SOURCE} under the load ...")
                result["moves"].append(run_move(slots, SOURCE))
                load_alone("load alone, after")
            if args.series:
                log(f"write-pause series: {args.series} moves of {args.series_slots} slot(s) under the load ...")
                part, there = slots[:args.series_slots], True
                routing.reset_cache()
                if routing.active_contract().slot_aliases[part[0]] == TARGET:
                    there = False
                for _ in range(args.series):
                    result["moves"].append(run_move(part, TARGET if there else SOURCE, series=True))
                    there = not there
        finally:
            samples = load.stop()
    log(f"{len(samples):,} commands sent")
    result["client_view"] = client_view(samples, moving_users, windows, result["moves"])
    result["pause_latencies"] = {}
    for m in result["moves"]:
        if m["pause_window"]:
            lo, hi = m["pause_window"]
            mine = {u for u in moving_users if routing.slot_for_user(contract, u) in set(m["slots"])}
            result["pause_latencies"][str(m["move_id"])] = [
                ms for t0, ms, user, _v, _d, outcome in samples
                if outcome == "ok" and user in mine and t0 <= hi and t0 + ms / 1000.0 >= lo]
    routing.reset_cache()
    home = routing.active_contract().slot_aliases[slots[-1]]  # the series moves the first slots only
    if args.series and args.series_slots < len(slots):
        slots_home = slots[args.series_slots:]
    else:
        slots_home = slots
    if not args.no_baselines:
        log("baselines: the slots' rows copied by a naive move and by the COPY ceiling (rolled back) ...")
        result["baselines"] = baselines(slots_home, home, TARGET if home == SOURCE else SOURCE)
    RESULT.write_text(json.dumps(result, indent=2, default=str) + "\n")  # what was measured, whatever comes next
    result["final"] = final_check(samples, seeded, slots)
    result["meta"] = {
        **common.run_times(wall0), "scale": args.scale, "slots": len(slots), "slot_list": slots,
        "per_user": args.per_user, "rest_share": args.rest_share, "users": args.users,
        "moving_load_users": len(moving_users), "load_videos": args.load_videos, "procs": args.procs,
        "window_s": args.window, "series": args.series, "series_slots": args.series_slots,
        "waited_for_other_benchmarks_s": waited, "loadavg_at_end": common.loadavg(),
        "relation_shards": list(settings.RELATION_SHARD_ALIASES),
        "contract_v1_shards": list(settings.RELATION_CONTRACT_SHARDS),
        "copy_chunk": settings.RELATION_MOVE_COPY_CHUNK, "cutover_lag": settings.RELATION_MOVE_CUTOVER_LAG,
        "max_pause_ms": settings.RELATION_MOVE_MAX_PAUSE_MS, "retention_s": settings.RELATION_MOVE_RETENTION_S,
        "contract_refresh_s": settings.RELATION_CONTRACT_REFRESH_S,
        "databases": settings.DATABASES["default"]["NAME"] + "*", "celery": False,
    }
    result["machine"] = spec
    bad = [f"move {m['move_id']}: {m['state']}, verified {m['verify_ok']} {m['error']}" for m in result["moves"]
           if m["state"] != "RETIRED" or not m["verify_ok"]] + result["final"]["failures"]
    result["markdown"] = "\n\n".join(tables(result))
    return common.finish_run(result, RESULT, report=print_report, docs=None, log=log, clock="driver wall clock",
                             failure=f"FAILED: {'; '.join(bad)}" if bad else None)


if __name__ == "__main__":
    sys.exit(main())
