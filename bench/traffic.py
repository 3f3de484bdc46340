"""The four traffic groups of TEST-2 in one run (issue 32): `bench/run.sh traffic`, over HTTP against gunicorn with the
gateway limits on, the Procfile's Celery worker and beat running the pipeline and the risk scorer (docs/benchmarks.md,
"Traffic groups").

Honest users run uniform, hot and flip open loops; phase A: those alone (the baseline); phase B: plus rings of young
abusers toggling boosted videos. After the drain: the abusers' answers, the scorer's verdicts, every count against
the facts, and the hot-spot figures with the suggested move."""

from __future__ import annotations

import http.client
import json
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench.harness import checks, driver, roles, seed
from bench.harness.phases import command_figures, drain_wait
from bench.harness.pool import Gunicorn, Pool
from bench.harness.report import fmt, md_table, pair, pct, ratio, resources_table
from bench.harness.sampler import ResourceSampler
from bench.projection.convergence import celery_running, procfile_lines

NAME = "traffic"
OPTIONS = {
    "users": (3000, "honest users (flip, hot and uniform groups)", 100, 10**6),
    "videos": (1000, "videos of the uniform group", 10, 99_999),
    "flip_users": (20, "users of the flip group", 1, 10_000), "flip_videos": (5, "videos of the flip group", 1, 100),
    "abusers": (10, "abusive accounts", 1, 500), "ring_size": (5, "abusive accounts sharing one device", 1, 500),
    "boosted": (150, "videos the abusers toggle (the uniform group's first)", 1, 99_999),
    "uniform_rate": (24.0, "uniform group, commands/s", 1, 5000), "hot_rate": (10.0, "hot group, commands/s", 1, 5000),
    "flip_rate": (6.0, "flip group, commands/s", 1, 5000), "abuser_rate": (35.0, "commands/s of each ring", 1, 5000),
    "connections": (4, "connections (threads) of each honest group", 1, 64),
    "warmup": (5.0, "seconds of honest load before phase A is measured", 0, 60),
    "duration": (45.0, "measured seconds of each phase", 5, 600),
    "gunicorn_workers": (4, "gunicorn workers (the Procfile's default)", 1, 32),
    "drain_timeout": (180.0, "seconds to wait for the pipeline and the scorer after the load", 10, 1800),
}
# Only the web tier's: the bench's own processes keep RATE_LIMIT_ENABLED=false (driver.check_environment). Each
# honest user has an address of its own, sent as the one trusted proxy's X-Forwarded-For.
SERVICE_ENV = {"RATE_LIMIT_ENABLED": "true", "TRUSTED_PROXY_COUNT": "1", "LIKES_NUDGE_ENABLED": "true"}
THRESHOLDS = ("RATE_LIMIT_", "BEHAVIOUR_", "RISK_", "HOTSPOT_")  # the settings the report prints
MIXES = {"uniform": {"like": 55, "unlike": 25, "noop": 10, "replay": 10},
         "hot": {"like": 60, "unlike": 30, "replay": 10}, "flip": {"like": 45, "unlike": 45, "replay": 10},
         "abusers": {"like": 70, "unlike": 30}}
ABUSER_PREFIX, FLIP_PREFIX, HONEST_AGE = "bench-ab", "bench-f", "400 days"
# The first 200 bytes of the body that HttpStatusError keeps hold the error's code and its scope or signal.
_CODE = re.compile(r'"(code|scope|signal)":"(\w+)"')


def client(job: dict, ctl) -> dict:
    """One group's commands over HTTP: `connections` threads, each an open loop on its own connection and users (a
    slow answer holds no rate back); every answer as [completed at, ms, user id, "ok" or "STATUS code[/detail]"]."""
    answers: list = []
    n = min(job["connections"], len(job["users"]))
    threads = [threading.Thread(target=_loop, args=(job, job["users"][k::n], job["rate_per_s"] / n, k, ctl, answers))
               for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"answers": answers}


def _loop(job: dict, users: list, rate: float, k: int, ctl, answers: list) -> None:
    gen = roles.CommandMix(rng=random.Random(job["seed"] * 100 + k), users=users, videos=job["videos"],
                           mix=job["mix"], key_prefix=f"{job['key_prefix']}-{k}")
    conn = http.client.HTTPConnection("127.0.0.1", job["port"], timeout=roles.HTTP_TIMEOUT_S)
    t_end = job["t_end"]
    ctl.sleep_until(job["t_start"])
    t_first = time.time()
    try:
        for sent in range(roles.MAX_LOOP):
            if (delay := min(t_first + sent / rate, t_end) - time.time()) > 0:
                time.sleep(delay)  # an open loop paces on the clock: there is no event to wait for
            if not ctl.go(t_end):
                break
            _kind, ui, vid, desired, key = gen.next()
            uid, token, device, address = users[ui]
            t0 = time.perf_counter()
            try:
                doc = json.loads(roles.http_exchange(
                    conn, "PUT", f"/v1/videos/{vid}/like-relation", body=json.dumps({"desiredState": desired}),
                    headers={"Authorization": f"Token {token}", "Idempotency-Key": key, "X-Device-Id": device,
                             "X-Forwarded-For": address, "Content-Type": "application/json"}))
                gen.observe(ui, vid, doc["currentRelation"]["state"])
                outcome = "ok"
            except roles.HttpStatusError as exc:
                found = dict(_CODE.findall(str(exc)))
                detail = found.get("scope") or found.get("signal")
                outcome = f"{exc.status} {found.get('code', '?')}" + (f"/{detail}" if detail else "")
            except Exception as exc:
                outcome = roles.error_kind(exc)
            answers.append([round(time.time(), 3), round((time.perf_counter() - t0) * 1000, 2), uid, outcome])
    finally:
        conn.close()


def prepare(args) -> tuple[list, list, list[str], list[str]]:
    """Honest users a year old, a device and an address each; young abusers, a device and address a ring; videos."""
    from rest_framework.authtoken.models import Token
    seed.flush_redis()
    users, videos = seed.prepare(users=args.users, videos=args.videos)
    seed.rows("default", f"UPDATE auth_user SET date_joined = now() - interval '{HONEST_AGE}' WHERE id = ANY(%s)",
              [[u for u, _t in users]])
    honest = [[u, tok, f"phone-{u}", f"10.{u >> 16 & 255}.{u >> 8 & 255}.{u & 255}"] for u, tok in users]
    abusers = [[u, Token.objects.get_or_create(user_id=u)[0].key, f"farm-{k // args.ring_size}",
                f"198.51.100.{k // args.ring_size + 1}"]
               for k, u in enumerate(seed.users_sql(ABUSER_PREFIX, args.abusers, digits=4))]
    flip_videos = [f"{FLIP_PREFIX}{i:02d}" for i in range(args.flip_videos)]
    seed.videos_ensure(flip_videos)
    return honest, abusers, videos, flip_videos


def jobs_for(args, honest, abusers, videos, flip_videos, port: int, times: dict) -> list[tuple[str, dict]]:
    """(group, job) for every client process: uniform, hot, flip, then one a ring (a connection an account)."""
    flip, rest = honest[:args.flip_users], honest[args.flip_users:]
    hot, uniform = rest[::3], [u for k, u in enumerate(rest) if k % 3]
    groups = [("uniform", uniform, videos, args.uniform_rate), ("hot", hot, [seed.HOT_VIDEO], args.hot_rate),
              ("flip", flip, flip_videos, args.flip_rate)]
    groups += [("abusers", abusers[k:k + args.ring_size], videos[:args.boosted], args.abuser_rate)
               for k in range(0, len(abusers), args.ring_size)]
    out = []
    for i, (group, users, vids, rate) in enumerate(groups):
        honest_group = group != "abusers"
        out.append((group, {"role": "bench.traffic:client", "port": port, "users": users, "videos": vids,
                            "mix": MIXES[group], "rate_per_s": rate, "seed": args.seed * 100 + i,
                            "connections": args.ring_size if group == "abusers" else args.connections,
                            "key_prefix": f"t{i}", "t_start": times["t0" if honest_group else "b0"],
                            "t_end": times["b1"]}))
    return out


def counts(abuser_ids: list[int]) -> dict:
    """Every bench video's snapshot and served count against the facts and the hidden accounts' likes."""
    from counting.models import VideoDisplayCount
    from counting.selectors import display_counts_get, display_l1
    from relations.selectors.privacy import policy_hidden_user_ids
    hidden_ids = policy_hidden_user_ids()
    facts, hidden, abused = checks.facts("bench-"), checks.facts(users=hidden_ids), checks.facts(users=abuser_ids)
    snap = {v: tuple(r) for v, *r in VideoDisplayCount.objects.filter(video_id__startswith="bench-").values_list(
        "video_id", "raw_active_count", "risk_hidden_count", "policy_hidden_count", "display_count")}
    videos = sorted(set(facts) | set(snap))
    display_l1().clear()
    served = display_counts_get(video_ids=videos)
    wrong = [(v, facts[v], hidden[v], snap.get(v), served[v].display_count) for v in videos  # None: no snapshot
             if snap.get(v, (0, 0, 0, 0)) != (facts[v], 0, hidden[v], facts[v] - hidden[v])
             or (served[v].display_count or 0) != facts[v] - hidden[v]]
    public = checks.facts(users=[u for u in abuser_ids if u not in set(hidden_ids)])
    return {"videos": len(videos), "liked": sum(facts.values()), "mismatches": len(wrong), "examples": wrong[:10],
            "abuser_likes": sum(abused.values()), "abuser_likes_public": sum(public.values()),
            "policy_hidden": sum(hidden.values()), "abused_videos": len(abused),
            "honest_only": sum(1 for v in videos if not abused[v]),
            "honest_only_exact": sum(1 for v in videos if not abused[v] and v not in {w[0] for w in wrong}),
            "exact": not wrong}


def risk_figures(abusers: list[dict], honest_ids: set[int], t_abuse: float) -> dict:
    """The scorer's verdicts (by level and status, their signals, seconds after the abuse began) and the levels."""
    from counting.risk.models import RiskVerdict
    from relations.models import AccountStatus
    levels = dict(AccountStatus.objects.values_list("user_id", "risk_level"))
    by: dict[tuple, list] = {}
    for level, status, signals, at in RiskVerdict.objects.values_list("level", "status", "signals", "created_at"):
        by.setdefault((level, status), []).append((at.timestamp() - t_abuse, signals))
    return {"verdicts": [{"level": k[0], "status": k[1], "n": len(v), "after_p50_s": pct([s for s, _ in v], 0.5, 1),
                          "after_max_s": round(max(s for s, _ in v), 1),
                          "signals": dict(Counter(name for _s, sig in v for name in sig))}
                         for k, v in sorted(by.items())],
            "abuser_levels": dict(Counter(levels.get(a["uid"], "none") for a in abusers)),
            "honest_flagged": sum(1 for u, level in levels.items() if u in honest_ids and level != "none")}


def abuser_figures(answers: list, ids: list[int], t_abuse: float) -> tuple[dict, list[dict]]:
    """Their answers by outcome; per abuser, when the first 403 came and how many commands it got through after."""
    per = []
    for uid in ids:
        mine = sorted(a for a in answers if a[2] == uid)
        first = next((a[0] for a in mine if a[3].startswith("403")), None)
        per.append({"uid": uid, "first_403_s": round(first - t_abuse, 1) if first else None,
                    "ok_after_403": sum(1 for a in mine if first and a[0] > first and a[3] == "ok")})
    return dict(Counter(a[3] for a in answers).most_common()), per


def hotspot_figures() -> dict:
    """The hot-spot window the suggestion reads (the last 5 minutes: the whole load), and the suggestion."""
    from django.conf import settings

    from counting import hotspots
    w = hotspots.read(hotspots.SUGGEST_WINDOW_S)
    s = hotspots.suggest(w)
    return {"writes": w.total, "shares": {p: round(w.share(p), 3) for p in w.partitions}, "skew": round(w.skew, 2),
            "top_videos": w.videos[:3], "share_needed": settings.HOTSPOT_MOVE_SUGGEST_SHARE,
            "min_writes": settings.HOTSPOT_MIN_WRITES, "suggestion": s and {
                "source": s.source, "target": s.target, "buckets": s.buckets_text,
                "source_share": round(s.source_share, 3), "moved_writes": s.moved_writes}}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261207,
                       check=lambda a: "--boosted exceeds --videos" if a.boosted > a.videos else None)
    args = run.args
    from django.conf import settings

    from counting.risk.scorer import RISK_CONSUMER
    honest, abusers, videos, flip_videos = prepare(args)
    workdir = Path(tempfile.mkdtemp(prefix="likes-traffic-"))
    try:
        with Pool(3 + -(-args.abusers // args.ring_size), name="traffic") as pool, celery_running(workdir), \
                Gunicorn("likes_project.wsgi:application", args.gunicorn_workers, workdir, env=SERVICE_ENV) as web:
            t0 = time.time() + 1.0
            times = {"t0": t0, "a0": t0 + args.warmup, "b0": t0 + args.warmup + args.duration,
                     "b1": t0 + args.warmup + 2 * args.duration}
            windows = {"A": (times["a0"], times["b0"]), "B": (times["b0"], times["b1"])}
            jobs = jobs_for(args, honest, abusers, videos, flip_videos, web.port, times)
            for i, (_group, job) in enumerate(jobs):
                pool.submit(i, job)
            samplers = {ph: ResourceSampler() for ph in windows}
            labels = {pool.pid(i): f"clients: {g}" for i, (g, _j) in enumerate(jobs)}
            for ph, (a, b) in windows.items():
                samplers[ph].start(a, b, labels=labels, parents={web.proc.pid: "gunicorn workers"})
            got = pool.collect(list(range(len(jobs))), timeout=times["b1"] - time.time() + 120)
            resources = {ph: s.stop() for ph, s in samplers.items()}
            run.interference.note("the load")
            # a verdict marks its account's videos dirty before the risk consumer's checkpoint
            pending, drain_s = drain_wait(args.drain_timeout, active_only=True, consumers=(RISK_CONSUMER,))
            hot = hotspot_figures()  # after the drain: every write of the run applied, all within its window
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    by_group: dict[str, list] = {}
    for i, (group, _job) in enumerate(jobs):
        by_group.setdefault(group, []).extend(got[i]["answers"])
    by_group["all honest"] = [a for g, rows in by_group.items() if g != "abusers" for a in rows]
    honest_rows = {g: {ph: command_figures([(t, ms, out, False) for t, ms, _u, out in rows], *win)
                       for ph, win in windows.items()} for g, rows in by_group.items() if g != "abusers"}
    outcomes, per_abuser = abuser_figures(by_group.get("abusers", []), [a[0] for a in abusers], times["b0"])
    result = {"honest": honest_rows, "abuser_outcomes": outcomes, "per_abuser": per_abuser,
              "risk": risk_figures(per_abuser, {u[0] for u in honest}, times["b0"]), "counts": counts(
                  [a[0] for a in abusers]), "hotspots": hot, "drained": not pending, "pending": pending,
              "drain_s": drain_s, "resources": resources,
              "meta": {"service_env": SERVICE_ENV, "thresholds": {k: getattr(settings, k) for k in dir(settings)
                                                                 if k.startswith(THRESHOLDS) and k not in SERVICE_ENV},
                       "mixes": MIXES, "procfile": procfile_lines(), "honest_age": HONEST_AGE,
                       "code": driver.code_version(("relations", "counting", "likes_project"))}}
    ok = result["counts"]["exact"] and result["drained"]
    return driver.finish(run, result, report=report, failure=None if ok else
                         f"MISMATCH: {result['counts']['mismatches']} videos differ from the facts, or no drain "
                         f"({pending})")


def report(result: dict) -> list[str]:
    m, risk, c, hot = result["meta"], result["risk"], result["counts"], result["hotspots"]
    frozen = [a["first_403_s"] for a in result["per_abuser"] if a["first_403_s"] is not None]
    limits = ", ".join(f"{k} {v}" for k, v in m["thresholds"].items())
    params = (f"**Parameters:** {m['users']:,} honest users (accounts {m['honest_age']} old, a device and an address "
              f"each): uniform {m['uniform_rate']:g}/s over {m['videos']:,} videos, hot {m['hot_rate']:g}/s on one "
              f"video, flip {m['flip_rate']:g}/s over {m['flip_users']} users × {m['flip_videos']} videos; "
              f"{m['abusers']} abusers (new accounts) in rings of {m['ring_size']}, one device and one address a "
              f"ring, {m['abuser_rate']:g}/s a ring over {m['boosted']} boosted videos; mixes {m['mixes']}. Open "
              f"loops over HTTP ({m['connections']} connections a group, one an abuser), gunicorn --workers "
              f"{m['gunicorn_workers']} with {m['service_env']}; warm-up {m['warmup']:g} s, then phase A (honest "
              f"only) and phase B (honest + abusers), {m['duration']:g} s each. Worker and beat: the Procfile's "
              f"lines. The thresholds as the service read them (the bench sets none): {limits}.\n\n**Baseline:** "
              "phase A of the same run (no abusers). **No raw SQL ceiling:** the question is whether the honest load "
              "keeps its answers, not how near a path gets to the hardware (the command path's ceiling is "
              "`bench/run.sh command`'s pgbench).")
    honest = md_table(["honest group", "A cmd/s:", "B cmd/s:", "B ÷ A:", "A p50 / p99 ms:", "B p50 / p99 ms:",
                       "not ok A", "not ok B"],
                      [[g, fmt(a := r["A"]["commands_per_s"]), fmt(b := r["B"]["commands_per_s"]), fmt(ratio(b, a), 3),
                        pair(r["A"]["p50_ms"], r["A"]["p99_ms"]), pair(r["B"]["p50_ms"], r["B"]["p99_ms"]),
                        r["A"]["errors"] or 0, r["B"]["errors"] or 0] for g, r in result["honest"].items()])
    total = sum(result["abuser_outcomes"].values()) or 1
    abusers = md_table(["abusers' answers in phase B", "commands:", "share:"],
                       [[k, f"{n:,}", f"{n / total:.1%}"] for k, n in result["abuser_outcomes"].items()])
    verdicts = md_table(["verdict level", "status", "verdicts:", "signals", "s after abuse began p50 / max:"],
                        [[v["level"], v["status"], v["n"], v["signals"], pair(v["after_p50_s"], v["after_max_s"])]
                         for v in risk["verdicts"]])
    exact = "EXACT" if c["exact"] else f"{c['mismatches']} MISMATCHES"
    s = hot["suggestion"]
    suggestion = (f"move buckets {s['buckets']} {s['source']} → {s['target']} ({s['source']} took "
                  f"{s['source_share']})" if s else f"none (one partition must take more than {hot['share_needed']} "
                  f"of at least {hot['min_writes']} writes)")
    lines = [f"- Abusers' levels after the run: {risk['abuser_levels']}; frozen (answered 403) {len(frozen)} of "
             f"{m['abusers']}, the first 403 p50 / max {pair(pct(frozen, 0.5, 1), max(frozen, default=None))} s "
             f"after the abuse began; commands accepted after an account's first 403: "
             f"{sum(a['ok_after_403'] for a in result['per_abuser'])}. Honest accounts given a level: "
             f"{risk['honest_flagged']}.",
             f"- Counts after the drain ({result['drain_s']} s, {'drained' if result['drained'] else 'NOT drained'}): "
             f"{c['videos']:,} videos, {c['liked']:,} likes; snapshot (raw, risk_hidden, policy_hidden, display) and "
             f"served count against the facts and the hidden accounts' likes: **{exact}**. Abusers' likes standing "
             f"in the facts: {c['abuser_likes']:,} on {c['abused_videos']} videos, of them still in public counts: "
             f"**{c['abuser_likes_public']:,}**; policy_hidden in all: {c['policy_hidden']:,}; videos no abuser "
             f"liked: {c['honest_only']:,}, exact {c['honest_only_exact']:,}.",
             f"- Hot spots over the last 300 s: {hot['writes']:,} writes, partition shares {hot['shares']} (skew "
             f"{hot['skew']}), hottest videos {hot['top_videos']}; suggested move: **{suggestion}**."]
    return [params, honest, abusers, verdicts, "\n".join(lines),
            resources_table((f"phase {ph}", res) for ph, res in result["resources"].items())]


if __name__ == "__main__":
    sys.exit(main())
