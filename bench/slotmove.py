"""Relation slot moves (issue 16): `bench/run.sh slotmove`, on its own databases, under a command load, against a
naive copy and the COPY ceiling (docs/benchmarks.md, "Relation slot moves")."""

from __future__ import annotations

import sys
import time
from collections import Counter

from bench.harness import checks, driver
from bench.harness.phases import ROLE, STEPS, step_times
from bench.harness.pool import Pool
from bench.harness.report import fmt, md_table, pct
from bench.harness.seed import author_id, named_users, prepare, relations_insert, rows, snapshots_insert, table, vacuum

NAME = "slotmove"
DB_NAME, SOURCE, TARGET, CONTRACT = "likes_bench_slot", "rel_00", "rel_02", ("rel_00", "rel_01")
SEED_USER_BASE, SEED_VIDEO_PREFIX, LOAD_VIDEO_PREFIX = 3_000_000_000, "bench-slot-v", "bench-slot-load-"
OPERATOR, APPROVER = "bench-slot-operator", "bench-slot-approver"
OPTIONS = {
    "scale": (1_000_000, "LIKED relations seeded in the slots that move", 1000, 2 * 10**7),
    "slots": (64, "slots moved rel_00 -> rel_02: the first N contract v1 puts on rel_00", 1, 128),
    "per_user": (50, "seeded relations per user", 1, 10_000),
    "rest_share": (1.0, "relations seeded in rel_00's other slots, as a share of the moving ones", 0, 4),
    "users": (2000, "users of the command load (over every slot)", 1, 10**6),
    "load_videos": (200, "videos of the command load", 1, 99_999), "procs": (4, "command processes", 1, 32),
    "window": (10.0, "seconds of load alone before, between and after the moves", 1, 300),
    "no_back": (False, "do not move the slots back"),
    "series": (20, "then this many moves of --series-slots slots, there and back in turn", 0, 200),
    "series_slots": (1, "slots each series move takes", 1, 128), "no_baselines": (False, "skip naive and ceiling"),
}


def seed(contract, moving: list[int], args) -> dict:
    """LIKED relations (and their command rows) of users whose slot moves, and of users of rel_00's other slots."""
    from django.db import connections, transaction

    from relations.models import LikeCommand, LikeRelation
    def users(slots: list[int], n: int) -> list[int]:
        span = max(n * contract.logical_slots // max(len(slots), 1) * 2, 1000)
        cur.execute("SELECT i FROM generate_series(%s::bigint, %s::bigint) AS i WHERE likes_slot_of(i, %s, %s) = "
                    "ANY(%s) ORDER BY i LIMIT %s", [SEED_USER_BASE, SEED_USER_BASE + span, contract.hash_seed,
                                                    contract.logical_slots, slots, n])
        return [r[0] for r in cur.fetchall()]

    t0 = time.monotonic()
    others = [s for s in range(contract.logical_slots) if contract.slot_aliases[s] == SOURCE and s not in moving]
    n = max(args.scale // args.per_user, 1)
    with transaction.atomic(using=SOURCE), connections[SOURCE].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")  # a bulk load, not the product's statements
        mine, rest = users(moving, n), users(others, int(n * args.rest_share)) if others else []
        pairs = ("SELECT u, %s || lpad(((u %% 1000) + k)::text, 5, '0') AS v, k FROM unnest(%s::bigint[]) AS u "
                 "CROSS JOIN generate_series(0, %s - 1) AS k")
        params = [SEED_VIDEO_PREFIX, sorted(mine + rest), args.per_user]  # the moving rows spread over the table
        relations_insert(cur, f"SELECT u, v, 'LIKED', 1, 'seed-' || u || '-' || k, now() - interval '30 days' FROM "
                              f"({pairs}) AS p", params)
        cur.execute(f"INSERT INTO {table(LikeCommand)} (user_id, operation_id, video_id, desired_state, result_state, "
                    "result_version, changed, base_version, device_id, client_sequence, created_at) SELECT u, 'seed-' "
                    f"|| u || '-' || k, v, 'LIKED', 'LIKED', 1, true, NULL, 'bench', NULL, now() - interval '30 days' "
                    f"FROM ({pairs}) AS p", params)
    vacuum(SOURCE, LikeRelation, LikeCommand)
    return {"moving_relations": len(mine) * args.per_user, "rest_relations": len(rest) * args.per_user,
            "seconds": round(time.monotonic() - t0, 1)}


def run_move(slots: list[int], target: str, *, series: bool = False) -> dict:
    """One move by the product: planned by OPERATOR, approved by APPROVER, its ops job run here to its end."""
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_run_inline
    from relations.services.slot_moves import ledger
    t0 = time.time()
    m = ledger.move_plan(slots=slots, target=target, reason="benchmark", actor=Actor(OPERATOR, "cli"))
    m = ledger.move_approve(move_id=m.pk, actor=Actor(APPROVER, "cli"))
    says: list[tuple[float, str]] = []
    job_run_inline(m.job_id, on_say=lambda text: says.append((time.time(), text)))
    m, t1 = ledger.move_get(m.pk), time.time()
    steps, ends = step_times(says, t0, 2)
    cut = ends.get("cutover")
    pause = (m.write_pause_ms or 0) / 1000
    driver.make_log(NAME)(f"move {m.pk} {m.source_alias} -> {m.target_alias}: {m.state} in {t1 - t0:.1f} s, "
                          f"{m.copied_rows:,} rows, write pause {m.write_pause_ms} ms")
    return {"move_id": m.pk, "slots": list(slots), "from": m.source_alias, "to": m.target_alias, "state": m.state,
            "verify_ok": bool((m.verify_result or {}).get("ok")), "error": m.error, "copied_rows": m.copied_rows,
            "captured_applied": m.captured_applied, "write_pause_ms": m.write_pause_ms, "seconds": round(t1 - t0, 2),
            "t_start": t0, "t_end": t1, "steps": steps, "series": series,
            "pause_window": [cut - pause, cut] if cut is not None else None}


def baselines(slots: list[int], home: str, other: str) -> dict:
    """The slots' rows copied home -> other, rolled back: naive (SELECT, executemany) and ceiling (binary COPY)."""
    from django.db import connections

    from relations import routing
    from relations.services.slot_moves import rows as protocol_rows
    cond, cparams = protocol_rows.slot_sql(routing.active_contract())
    src, dst, out = connections[home], connections[other], {}
    for conn in (src, dst):
        conn.ensure_connection()
        conn.connection.execute("SET statement_timeout = 0")
    for name in ("naive", "ceiling"):
        t0, rows = time.monotonic(), 0
        with dst.connection.transaction(force_rollback=True):
            for tbl, cols, _types, _key in protocol_rows.TABLES.values():
                select = f"SELECT {', '.join(cols)} FROM {tbl} WHERE {cond}"
                with src.connection.cursor() as cs, dst.connection.cursor() as cd:
                    if name == "naive":
                        batch = cs.execute(select, [*cparams, slots]).fetchall()
                        cd.executemany(f"INSERT INTO {tbl} ({', '.join(cols)}) VALUES "
                                       f"({', '.join(['%s'] * len(cols))})", batch)
                        rows += len(batch)
                        continue
                    with cs.copy(f"COPY ({cs.mogrify(select, [*cparams, slots])}) TO STDOUT (FORMAT BINARY)") as so, \
                            cd.copy(f"COPY {tbl} ({', '.join(cols)}) FROM STDIN (FORMAT BINARY)") as sink:
                        for data in so:
                            sink.write(data)
                    rows += cd.rowcount
        seconds = time.monotonic() - t0
        out[name] = {"seconds": round(seconds, 2), "rows": rows, "rows_per_s": round(rows / max(seconds, 1e-6))}
    for conn in (src, dst):
        conn.close()
    return out


def stats(latencies: list[float], seconds: float | None = None) -> dict:
    return {"commands": len(latencies), "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99),
            "max_ms": max(latencies, default=None), "per_s": round(len(latencies) / seconds, 1) if seconds else None}


def client_view(samples, moving: set[int], windows: dict, moves: list[dict]) -> dict:
    """The commands of the moving users and the others: alone, during each move, in flight in its write pause."""
    def pick(lo, hi, who, in_flight=False):
        return [ms for t0, ms, user, _v, _s, outcome, _w in samples if outcome == "ok"
                and (user in moving) == (who == "moving")
                and ((t0 <= hi and t0 + ms / 1000 >= lo) if in_flight else lo <= t0 < hi)]

    view = {name: {who: stats(pick(lo, hi, who), hi - lo) for who in ("moving", "others")}
            for name, (lo, hi) in windows.items()}
    for m in moves:
        if not m["series"]:
            key = f"move {m['move_id']} ({m['from']} -> {m['to']})"
            view[key] = {who: stats(pick(m["t_start"], m["t_end"], who), m["t_end"] - m["t_start"])
                         for who in ("moving", "others")}
            if m["pause_window"]:
                view[key]["moving, in flight in the pause"] = stats(pick(*m["pause_window"], "moving", True))
    return view


def final_check(samples, seeded: dict, slots: list[int]) -> dict:
    from django.conf import settings

    from relations import routing
    from relations.models import LikeCommand, LikeRelation
    from relations.services.slot_moves import rows as protocol_rows
    routing.reset_cache()
    contract = routing.active_contract()
    outcomes = Counter(s[5] for s in samples)
    last = {(u, v): s for _t, _ms, u, v, s, out, _w in sorted(samples) if out == "ok"}
    cond, params = protocol_rows.slot_sql(contract)
    counts, strays = Counter(), 0
    for alias in settings.RELATION_SHARD_ALIASES:  # whole-table counts through likes_slot_of: a check, slow
        for model in (LikeRelation, LikeCommand):
            counts[model.__name__] += rows(alias, f"SELECT count(*) FROM {table(model)}", slow=True)[0][0]
            if foreign := [s for s in slots if contract.slot_aliases[s] != alias]:
                strays += rows(alias, f"SELECT count(*) FROM {table(model)} WHERE {cond}", [*params, foreign],
                               slow=True)[0][0]
    seeded_rows = seeded["moving_relations"] + seeded["rest_relations"]
    out = {**checks.acknowledged(last), "stray_rows": strays, "outcomes": dict(outcomes),
           "relation_rows": counts["LikeRelation"], "relation_rows_expected": seeded_rows + len(last),
           "command_rows": counts["LikeCommand"], "command_rows_expected": seeded_rows + outcomes.get("ok", 0)}
    out["failures"] = [k for k, bad in (
        (f"{out['acknowledged_lost']} acknowledged states wrong", out["acknowledged_lost"]),
        (f"{strays} rows of moved users off their shard", strays),
        ("relation rows != seeded + touched pairs", out["relation_rows"] != out["relation_rows_expected"]),
        ("command rows != seeded + acknowledged", out["command_rows"] != out["command_rows_expected"]),
        (f"commands not acknowledged: {outcomes}", set(outcomes) - {"ok"})) if bad]
    return out


def report(result: dict) -> list[str]:
    every = result["moves"]
    moves = [m for m in every if not m["series"]]
    series = [m for m in every if m["series"]]
    out = [md_table(["move", "state", "verified", "duration s:", " / ".join(STEPS) + " s", "rows copied:",
                     "captured changes:", "write pause ms:"],
                    [[f"{m['from']} → {m['to']}", m["state"], m["verify_ok"], fmt(m["seconds"]),
                      " / ".join(fmt(m["steps"].get(k)) for k in STEPS), f"{m['copied_rows']:,}",
                      f"{m['captured_applied']:,}", fmt(m["write_pause_ms"])] for m in moves]),
           md_table(["window", "users", "commands:", "commands/s:", "p50 ms:", "p99 ms:", "max ms:"],
                    [[name, who, f"{st['commands']:,}", fmt(st["per_s"]), fmt(st["p50_ms"], 2), fmt(st["p99_ms"], 2),
                      fmt(st["max_ms"])] for name, g in result["client_view"].items() for who, st in g.items()])]
    ledger = [m["write_pause_ms"] for m in every if m["write_pause_ms"] is not None]
    if series:
        out.append(f"Write-pause series: {len(series)} moves of {len(series[0]['slots'])} slot(s) under the load, "
                   f"{sum(m['state'] == 'RETIRED' and m['verify_ok'] for m in series)} retired and verified.")
    out.append(f"**Write pause** (the ledger's: slot locks taken -> released), all {len(ledger)} moves: **p50 "
               f"{fmt(pct(ledger, 0.5))} ms, p99 {fmt(pct(ledger, 0.99))} ms**, max "
               f"{fmt(max(ledger, default=None))} ms.")
    if result.get("baselines") and moves:
        b, ours = result["baselines"], moves[-1]
        out.append(md_table(["copy of the slots' rows (load stopped)", "rows:", "seconds:", "rows/s:",
                             "slots' writes paused s:"],
                            [["ours (the last move: copy, catch-up, cutover, verify, cleanup)",
                              f"{ours['copied_rows']:,}",
                              fmt(ours["seconds"]), "-", fmt((ours["write_pause_ms"] or 0) / 1000, 3)],
                             *([n, f"{b[k]['rows']:,}", fmt(b[k]["seconds"]), f"{b[k]['rows_per_s']:,}", fmt(
                                 b[k]["seconds"])] for k, n in (("naive", "naive stop-the-world (SELECT, executemany)"),
                                                                ("ceiling", "raw SQL ceiling (binary COPY → COPY)")))]))
    f = result["final"]
    out.append(f"**Final check:** relation rows {f['relation_rows']:,} (expected {f['relation_rows_expected']:,}), "
               f"command rows {f['command_rows']:,} (expected {f['command_rows_expected']:,}), acknowledged states "
               f"wrong {f['acknowledged_lost']}, stray rows {f['stray_rows']}, outcomes {f['outcomes']}: "
               + ("**exact**." if not f["failures"] else "**FAILED**: " + "; ".join(f["failures"])))
    return out


def headline(result: dict) -> dict:
    moves = [m for m in result["moves"] if not m["series"]]
    pauses = [m["write_pause_ms"] for m in result["moves"] if m["write_pause_ms"] is not None]
    b = result.get("baselines") or {}
    return {"goal": "write pause short; the move within a small factor of a COPY",
            "figure": f"{moves[0]['copied_rows']:,} rows in {fmt(moves[0]['seconds'], 0)} s; pause p50 / p99 "
                      f"{fmt(pct(pauses, 0.5), 0)} / {fmt(pct(pauses, 0.99), 0)} ms",
            "ceiling": f"COPY {fmt((b.get('ceiling') or {}).get('seconds'), 0)} s; naive stop-the-world "
                       f"{fmt((b.get('naive') or {}).get('seconds'), 0)} s",
            "ratio": fmt((b.get("ceiling") or {}).get("seconds", 0) / moves[-1]["seconds"], 2) + " (COPY ÷ ours)"}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261204)
    args = run.args
    from relations import routing
    driver.check_environment(DB_NAME, RELATION_SHARD_ALIASES=[*CONTRACT, TARGET],
                             RELATION_CONTRACT_SHARDS=list(CONTRACT))
    routing.reset_cache()
    contract = routing.active_contract()
    slots = [s for s in range(contract.logical_slots) if contract.slot_aliases[s] == SOURCE][:args.slots]
    seeded = seed(contract, slots, args)
    run.log(f"seeded {seeded}")
    users, _ = prepare(users=args.users, videos=0)
    named_users(OPERATOR, APPROVER)
    snapshots_insert("SELECT %s || lpad(i::text, 5, '0') FROM generate_series(0, %s - 1) AS i",
                     [LOAD_VIDEO_PREFIX, args.load_videos], author_id=author_id())
    videos = [f"{LOAD_VIDEO_PREFIX}{i:05d}" for i in range(args.load_videos)]
    moving = {u for u, _ in users if routing.slot_for_user(contract, u) in set(slots)}
    result, windows, pool = {"seed": seeded, "moves": []}, {}, Pool(args.procs, name="client")

    def alone(name: str) -> None:
        t = time.time()
        time.sleep(args.window)  # a measurement window of load alone, what the moves are compared with
        windows[name] = (t, time.time())

    try:
        for k in range(args.procs):
            pool.submit(k, {"role": ROLE + "tracked", "stop": "commands", "users": users[k::args.procs],
                            "videos": videos, "mix": "flip", "seed": args.seed * 1000 + k, "t_start": 0,
                            "hard_deadline": time.time() + 3600, "key_prefix": ""})
        alone("load alone, before")
        result["moves"].append(run_move(slots, TARGET))
        alone("load alone, between")
        if not args.no_back:
            result["moves"].append(run_move(slots, SOURCE))
            alone("load alone, after")
        part = slots[:args.series_slots]
        for _ in range(args.series):
            routing.reset_cache()
            here = routing.active_contract().slot_aliases[part[0]]
            result["moves"].append(run_move(part, SOURCE if here == TARGET else TARGET, series=True))
    finally:
        try:
            samples = [s for r in pool.stopped(list(range(args.procs)), 180, commands=True).values()
                       for s in r["samples"]]
        finally:
            pool.close()
    result["client_view"] = client_view(samples, moving, windows, result["moves"])
    routing.reset_cache()
    home = routing.active_contract().slot_aliases[slots[-1]]
    if not args.no_baselines:
        rest = slots[args.series_slots:] if args.series and args.series_slots < len(slots) else slots
        result["baselines"] = baselines(rest, home, TARGET if home == SOURCE else SOURCE)
    result["final"] = final_check(samples, seeded, slots)
    bad = [f"move {m['move_id']}: {m['state']}, verified {m['verify_ok']} {m['error']}" for m in result["moves"]
           if m["state"] != "RETIRED" or not m["verify_ok"]] + result["final"]["failures"]
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"FAILED: {'; '.join(bad)}" if bad else None)


if __name__ == "__main__":
    sys.exit(main())
