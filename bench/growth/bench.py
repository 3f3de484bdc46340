"""Costs that do not grow with history (issue 15 §5): `bench/run.sh growth`. The same operations at each size of one
growing history; last ÷ first at most 1.2x (docs/benchmarks.md, "Growth")."""

from __future__ import annotations

import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field

from bench.growth import measure
from bench.growth import plan as shape
from bench.harness import checks, driver, load, seed
from bench.harness.load import disk_used, unload
from bench.harness.report import fmt, md_table
from bench.harness.seed import named_users

NAME = "growth"
OPTIONS = {
    "sizes": ("1000000,10000000", "relation counts to grow the history to, increasing"),
    "reps": (400, "timed repetitions per item (commands: reps / 2 like/unlike pairs)", 2, 10**6),
    "warmup": (20, "untimed repetitions before each item", 0, 10**5),
    "reconcile_reps": (3, "timed exact reconciliations after one untimed", 1, 100),
    "heavy_likes": (55_000, "LIKED relations of the heavy user", 1, 10**7),
    "hot_likes": (200_000, "likers of the hot video", 1, 10**7), "list_limit": (100, "my-likes page size", 1, 1000),
    "list_page": (500, "my-likes deep page", 2, 10**6), "likers_limit": (20, "likers page size", 1, 1000),
    "likers_page": (1000, "likers deep page", 2, 10**6),
    "bytes_per_relation": (3500, "disk estimate per relation before the first size is loaded", 1, 10**6),
    "quiet_wait": (900.0, "seconds to wait, before each size's measurements, for the machine to go idle", 0, 86400),
    "keep": (False, "keep the loaded data at the end (default: drop it)"),
}
GOAL = 1.2


@dataclass
class Users:
    heavy: int = 0
    light: list[int] = field(default_factory=list)
    core: list[int] = field(default_factory=list)

    def uid(self, kind: str, n: int) -> int:
        return self.heavy if kind == shape.HEAVY else self.core[n] if kind == shape.CORE else self.light[n]

    def ensure(self, plan: shape.Plan, n: int) -> None:
        """auth_user rows of the heavy, light and core users the first `n` relations name (idempotent)."""
        from django.contrib.auth import get_user_model
        self.heavy = get_user_model().objects.get_or_create(username=shape.HEAVY_USER,
                                                            defaults={"password": "!bench"})[0].pk
        self.light = self.light or seed.users_sql(shape.LIGHT_PREFIX, plan.hot_rel)
        self.core += seed.users_sql(shape.CORE_PREFIX, plan.core_users_started(n), start=len(self.core))


def grow(plan: shape.Plan, users: Users, a: int, b: int) -> dict:
    """The history grown from `a` to `b` relations by the harness loader (docs/benchmarks.md, "The load")."""
    t0 = time.monotonic()
    users.ensure(plan, b)
    seed.snapshots_insert("SELECT %s || lpad(i::text, 7, '0') FROM generate_series(0, %s - 1) AS i "
                          "UNION ALL SELECT %s", [shape.VIDEO_PREFIX, plan.catalog(b), shape.HOT_VIDEO],
                          author_id=seed.author_id())
    rows = ((idx, users.uid(kind, n), vid, *shape.state_of(idx)) for idx, kind, n, vid in plan.relations(a, b))
    out = load.load(rows, prefix=shape.PREFIX, base_ms=shape.BASE_MS, step_ms=shape.STEP_MS)
    return {"from": a, "to": b, **out, "seconds": round(time.monotonic() - t0, 1)}


def free_bytes() -> int:
    path = seed.rows("default", "SHOW data_directory")[0][0]
    try:
        return shutil.disk_usage(path).free
    except OSError:  # the data directory is not readable from here: the root filesystem's
        return shutil.disk_usage("/").free


def measure_size(run, plan, users, n: int) -> dict:
    args, m = run.args, {"machine": measure.wait_machine_quiet(run.args.quiet_wait)}
    for key, fn in (("batch", lambda: measure.run_batch(plan, users, n, reps=args.reps, warmup=args.warmup,
                                                        seed=args.seed)),
                    ("my_likes", lambda: measure.run_my_likes(users, reps=args.reps, warmup=args.warmup,
                                                              limit=args.list_limit, deep=args.list_page)),
                    ("likers", lambda: measure.run_likers(reps=args.reps, warmup=args.warmup, limit=args.likers_limit,
                                                          deep=args.likers_page)),
                    ("exact", lambda: measure.run_exact(reps=args.reconcile_reps)),
                    ("commands", lambda: measure.run_commands(plan, users, n, reps=max(1, args.reps // 2),
                                                              warmup=max(1, args.warmup // 2), seed=args.seed)),
                    ("drain", measure.pipeline_drain)):
        run.interference.note(f"{key} {n}")
        m[key] = fn()
    return m


def label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n:,}"


def items(size: dict) -> dict[str, tuple[dict, list]]:
    """item -> (its stats, its statements' plans) at one size."""
    m = size["measure"]
    ml, lk, c = m["my_likes"], m["likers"], m["commands"]
    return {"command (relation_set_state), likes and unlikes": (c, []),
            # a first like inserts, an unlike updates: the pooled p50 falls between the two modes
            "  of which first likes": (c["like"], []), "  of which unlikes": (c["unlike"], []),
            f"batch query, {m['batch']['ids']} ids, warm": (m["batch"], m["batch"]["plans"]),
            f"my-likes page 1 (limit {ml['limit']})": (ml["page1"], ml["page1"]["plans"]),
            f"my-likes page {ml['deep_page']:,}": (ml["deep"], ml["deep"]["plans"]),
            f"likers page 1 (limit {lk['limit']})": (lk["page1"], lk["page1"]["plans"]),
            f"likers page {lk['deep_page']:,}": (lk["deep"], lk["deep"]["plans"]),
            "exact reconciliation of the hot video": (m["exact"], m["exact"]["plans"])}


def ratios(result: dict) -> dict[str, dict]:
    sizes = result["sizes"]
    if len(sizes) < 2:
        return {}
    lo, hi = items(sizes[0]), items(sizes[-1])
    return {k: {q: round(hi[k][0][q] / lo[k][0][q], 2) if lo[k][0][q] and hi[k][0][q] is not None else None
                for q in ("p50_ms", "p99_ms")} for k in lo}


def report(result: dict) -> list[str]:
    sizes, rs = result["sizes"], result["ratios"]
    if not sizes:
        return ["(no size was measured)"]
    names, per = [label(s["relations"]) for s in sizes], [items(s) for s in sizes]

    def flag(x):
        return "-" if x is None else f"{x:.2f}x" + (" **over**" if x > GOAL else "")

    out = [f"**Figures** (ms; the ratio is the last size over the first, goal at most {GOAL}x)\n\n" + md_table(
        ["operation", *(f"p50 {x}:" for x in names), *(f"p99 {x}:" for x in names),
         *([f"p50 {names[-1]} ÷ {names[0]}:", f"p99 {names[-1]} ÷ {names[0]}:"] if rs else [])],
        [[k, *(fmt(p[k][0]["p50_ms"], 2) for p in per), *(fmt(p[k][0]["p99_ms"], 2) for p in per),
          *([flag(rs[k]["p50_ms"]), flag(rs[k]["p99_ms"])] if rs else [])] for k in per[0]])]
    tables = sorted({t for s in sizes for t in s["disk"]["tables"]})
    out.append("**Disk and load time**\n\n" + md_table(
        ["", *(f"{x}:" for x in names)],
        [["load time of this step (s)", *(fmt(s["load"]["seconds"], 0) for s in sizes)],
         ["  of which COPY (s)", *(fmt(s["load"]["steps"]["copy"], 0) for s in sizes)],
         ["all bench databases (MB)", *(fmt(s["disk"]["total"] / 2**20, 0) for s in sizes)],
         *([f"table {t} (MB)", *(fmt(s["disk"]["tables"].get(t, 0) / 2**20, 0) for s in sizes)] for t in tables)]))
    out.append("**Checks:** " + " ".join(
        f"{label(s['relations'])}: machine {'idle' if m['machine']['quiet'] else 'still busy'} before measuring "
        f"(waited {m['machine']['waited_s']} s); exact verdicts {m['exact']['statuses']} ({m['exact']['checked']:,} "
        f"relations, {m['exact']['diffs']} diffs); the hot video {s['hot']}; {s['load']['bucket_mismatches']} videos "
        f"whose vbuckets differ from the loaded relations; wrong batch answers {m['batch']['wrong']}; command errors "
        f"{m['commands']['errors'] or 0}; drain after the commands {m['drain']['seconds']} s."
        for s in sizes if (m := s["measure"])))
    for k in (k for k, r in rs.items() if (r["p50_ms"] or 0) > GOAL or (r["p99_ms"] or 0) > GOAL):
        for s, p in zip(names, per, strict=True):
            for plan in p[k][1][:1]:
                lines = plan["text"].splitlines()
                out.append(f"**{k.strip()}**, {s}, the slowest statement on {plan['alias']} "
                           f"({plan['execution_ms']} ms): `{plan['sql'][:300]}`\n\n```\n" + "\n".join(lines[:45])
                           + ("\n..." if len(lines) > 45 else "") + "\n```")
    return out + (["**Warnings:** " + " ".join(result["warnings"])] if result["warnings"] else [])


def headline(result: dict) -> dict:
    rs = result["ratios"]
    worst = max(rs.items(), key=lambda kv: kv[1]["p50_ms"] or 0) if rs else ("-", {"p50_ms": None})
    sizes = [label(s["relations"]) for s in result["sizes"]]
    return {"goal": f"every cost at the last size ≤ {GOAL}x the first", "figure": f"sizes {', '.join(sizes)}; "
            f"{len([k for k, r in rs.items() if (r['p50_ms'] or 0) > GOAL])} items over at p50",
            "ceiling": "-", "ratio": f"worst p50 {fmt(worst[1]['p50_ms'], 2)}x ({worst[0].strip()})"}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261203, wait_quiet=180.0)
    args = run.args
    sizes = driver.int_list(args.sizes)
    if not sizes or sizes != sorted(set(sizes)) or sizes[0] < 2000 or sizes[-1] > shape.MAX_RELATIONS:
        args.error(f"--sizes: increasing, between 2,000 and {shape.MAX_RELATIONS:,}")
    plan, warnings = shape.Plan(heavy_likes=args.heavy_likes, hot_likes=args.hot_likes), []
    if plan.core_start > sizes[0] // 2:  # a smoke run: the first size cannot hold the heavy user and the hot video
        f = sizes[0] / 2 / plan.core_start
        plan = shape.Plan(heavy_likes=max(args.list_limit * 3, int(args.heavy_likes * f)),
                          hot_likes=max(args.likers_limit * 3, int(args.hot_likes * f)))
        warnings.append(f"the first size cannot hold the heavy user and the hot video: both scaled by {f:.3f}")
    s = plan.summary(sizes[0])
    args.list_page = max(2, min(args.list_page, s["heavy_liked"] // args.list_limit - 1))
    args.likers_page = max(2, min(args.likers_page, s["hot_liked"] // args.likers_limit - 1))
    from django.db import connections
    unload(shape.PREFIX)  # everything this run writes
    named_users(shape.OPERATOR)
    users, result, failure, prev, per_relation = Users(), {"sizes": []}, None, 0, float(args.bytes_per_relation)
    try:
        for n in sizes:
            free = free_bytes()
            if (n - prev) * per_relation * 1.3 > free - 10 * 2**30:
                failure = f"not enough disk for {n:,} relations ({free / 2**30:.1f} GiB free); stopped after {prev:,}"
                break
            run.log(f"growing the history {prev:,} -> {n:,} relations ...")
            before = disk_used()["total"]
            load = grow(plan, users, prev, n)
            disk = disk_used()
            per_relation = max(1000.0, (disk["total"] - before) / max(1, n - prev))
            hot = {"planned": sum(shape.state_of(i)[0] == "LIKED" for i in range(plan.heavy_rel, plan.core_start)),
                   "facts": checks.facts(shape.HOT_VIDEO)[shape.HOT_VIDEO],
                   "display": checks.displays(shape.HOT_VIDEO).get(shape.HOT_VIDEO)}
            if load["bucket_mismatches"] or len(set(hot.values())) != 1:
                failure = f"the loaded data does not add up at {n:,}: {load['bucket_mismatches']} videos, hot {hot}"
                break
            connections.close_all()
            size = {"relations": n, "load": load, "disk": disk, "hot": hot,
                    "measure": measure_size(run, plan, users, n)}
            result["sizes"].append(size)
            ex, bq = size["measure"]["exact"], size["measure"]["batch"]
            if set(ex["statuses"]) != {"PASSED"} or ex["diffs"] or bq["wrong"]:
                failure = f"correctness at {n:,}: exact {ex['statuses']}, {ex['diffs']} diffs, {bq['wrong']} wrong"
                break
            prev = n
    except Exception as exc:
        failure = f"harness error: {exc.__class__.__name__}: {exc}"
        traceback.print_exc()
    finally:
        if not args.keep:
            t0 = time.monotonic()
            unload(shape.PREFIX)
            run.log(f"cleanup: the loaded data dropped in {time.monotonic() - t0:.0f}s")
    if [s["relations"] for s in result["sizes"]] != sizes:
        warnings.append(f"measured sizes {[s['relations'] for s in result['sizes']]} of the {sizes} asked")
    code = driver.code_version(("relations", "counting"))
    result.update(ratios=ratios(result), warnings=warnings, meta={"plan": plan.summary(prev or sizes[0]), "code": code})
    return driver.finish(run, result, report=report, headline=headline if result["sizes"] else None,
                         failure=f"ERROR: {failure}" if failure else None)


if __name__ == "__main__":
    sys.exit(main())
