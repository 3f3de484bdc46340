"""The timed operations of the growth benchmark, in-process, one client, sequential: a warm-up, then `reps`
timed repetitions each. Also the statements each one ran (captured once, then EXPLAIN (ANALYZE, BUFFERS) of each
SELECT; the slowest is its main statement) and the drain of the pipeline after the commands, so the next size
grows a history the service has fully projected."""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections import Counter

from bench.common import percentile
from bench.growth import HOT_VIDEO, INTERFERENCE, MAX_LOOP_ITERATIONS, OPERATOR, PREFIX, log
from bench.growth.load import Users
from bench.growth.plan import Plan, state_of, video_id

ITEM_BOUND_S = 600.0  # no timed loop runs longer than this


def stats(times_ms: list[float]) -> dict:
    v = sorted(times_ms)
    return {"p50_ms": round(percentile(v, 0.5), 3), "p99_ms": round(percentile(v, 0.99), 3),
            "mean_ms": round(sum(v) / len(v), 3), "max_ms": round(v[-1], 3), "n": len(v)}


class SqlCount:
    """Counts the SQL statements sent through Django's connections while installed."""

    def __init__(self):
        from django.db import connections

        self.n = 0
        self.conns = [connections[a] for a in connections]

    def _wrap(self, execute, sql, params, many, context):
        self.n += 1
        return execute(sql, params, many, context)

    def __enter__(self):
        for c in self.conns:
            c.execute_wrappers.append(self._wrap)
        return self

    def __exit__(self, *exc):
        for c in self.conns:
            if self._wrap in c.execute_wrappers:
                c.execute_wrappers.remove(self._wrap)


class CpuBusy:
    """Cores the whole machine kept busy (/proc/stat) and this process's own CPU, over a block: another load on
    the machine (a test suite, autovacuum) shows as busy cores well above the driver's plus its backend's."""

    @staticmethod
    def _busy() -> tuple[float, float]:
        with open("/proc/stat") as f:
            vals = [float(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0.0)
        return sum(vals) - idle, sum(vals)

    def __enter__(self):
        self.b0, self.t0 = self._busy()
        self.w0, self.p0 = time.monotonic(), time.process_time()
        return self

    def __exit__(self, *exc):
        b1, _t1 = self._busy()
        wall = max(time.monotonic() - self.w0, 1e-6)
        hz = 100.0  # USER_HZ: /proc/stat counts in hundredths of a second on Linux
        self.result = {"machine_busy_cores": round((b1 - self.b0) / hz / wall, 2),
                       "driver_cores": round((time.process_time() - self.p0) / wall, 2),
                       "loadavg": [round(x, 2) for x in os.getloadavg()]}


def wait_machine_quiet(max_wait_s: float, *, busy_below: float = 0.6, window_s: float = 5.0) -> dict:
    """Before the timed items: wait (up to `max_wait_s`) until the machine is idle, i.e. fewer than
    `busy_below` cores busy over `window_s` while this run is doing nothing, so another load (a test suite,
    the checkpointer after a load) does not land in one size's figures only. Returns what it saw."""
    t0 = time.monotonic()
    seen = []
    for _ in range(MAX_LOOP_ITERATIONS):
        with CpuBusy() as cpu:
            time.sleep(window_s)  # sampling the machine's idle time
        seen.append(cpu.result["machine_busy_cores"])
        if seen[-1] < busy_below or time.monotonic() - t0 >= max_wait_s:
            break
        if len(seen) % 12 == 1:
            log(f"  the machine is busy ({seen[-1]} cores) before the measurements; waiting up to {max_wait_s:.0f}s")
    out = {"waited_s": round(time.monotonic() - t0, 1), "busy_cores_last": seen[-1], "quiet": seen[-1] < busy_below}
    if not out["quiet"]:
        log(f"  WARNING: still {seen[-1]} cores busy after {out['waited_s']}s; measuring anyway")
    return out


def run_timed(fn, *, warmup: int, reps: int, label: str) -> tuple[dict, list]:
    """`fn()` `warmup` times untimed, then up to `reps` times timed (bounded by ITEM_BOUND_S). Returns the
    stats (with the SQL statements per call) and the results of the timed calls."""
    for _ in range(warmup):
        fn()
    times, results = [], []
    deadline = time.monotonic() + ITEM_BOUND_S
    with SqlCount() as sql, CpuBusy() as cpu:
        for _ in range(reps):
            if time.monotonic() > deadline:
                log(f"{label}: stopped at the {ITEM_BOUND_S:.0f} s bound after {len(times)} calls")
                break
            t0 = time.perf_counter()
            results.append(fn())
            times.append((time.perf_counter() - t0) * 1000.0)
    out = stats(times)
    out["sql_per_call"] = round(sql.n / len(times), 2)
    out["cpu"] = cpu.result
    log(f"  {label}: p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms ({out['n']} calls, "
        f"{out['sql_per_call']} SQL statements each; machine busy {cpu.result['machine_busy_cores']} cores)")
    return out, results


# --- plans ---------------------------------------------------------------------------------------------------


def explain(alias: str, sql: str, params=None, *, rollback: bool = False) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of one statement on `alias`, run once, inside a transaction (rolled back with
    `rollback`, for a write): the text plan, its execution time and the top node's shared buffers hit/read."""
    import re

    from django.db import connections, transaction

    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            if _superuser(alias):  # the time spent reading pages, in the plan ("I/O Timings")
                cur.execute("SET LOCAL track_io_timing = on")
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            text = "\n".join(r[0] for r in cur.fetchall())
        if rollback:
            transaction.set_rollback(True, using=alias)
    execution = re.search(r"Execution Time: ([0-9.]+) ms", text)
    buffers = re.search(r"Buffers: shared( hit=(\d+))?( read=(\d+))?", text)
    io = re.search(r"I/O Timings: (shared )?read=([0-9.]+)", text)
    return {"alias": alias, "execution_ms": float(execution.group(1)) if execution else None,
            "shared_hit": int(buffers.group(2) or 0) if buffers else 0,
            "shared_read": int(buffers.group(4) or 0) if buffers else 0,
            "io_read_ms": float(io.group(2)) if io else None, "text": text}


_SUPERUSER: dict[str, bool] = {}


def _superuser(alias: str) -> bool:
    from django.db import connections

    if alias not in _SUPERUSER:
        with connections[alias].cursor() as cur:
            cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            row = cur.fetchone()
        _SUPERUSER[alias] = bool(row and row[0])
    return _SUPERUSER[alias]


def captured_plans(fn) -> list[dict]:
    """Run `fn()` once with every connection's statements captured, then EXPLAIN (ANALYZE, BUFFERS) each SELECT
    that reads a table of this service (the capture holds the statements with their literals), slowest first."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    with contextlib.ExitStack() as stack:
        caps = {a: stack.enter_context(CaptureQueriesContext(connections[a])) for a in connections}
        fn()
    seen, plans = set(), []
    for alias, cap in caps.items():
        for q in cap.captured_queries:
            sql = q["sql"]
            if not sql.lstrip().upper().startswith("SELECT") or (alias, sql) in seen:
                continue
            if not any(t in sql for t in ("relations_", "counting_", "auth_user")):
                continue
            seen.add((alias, sql))
            try:
                p = explain(alias, sql)
            except Exception as exc:  # a statement that cannot be replayed alone (e.g. a temp table)
                p = {"alias": alias, "execution_ms": None, "error": f"{exc.__class__.__name__}: {exc}"[:200]}
            p["sql"] = sql if len(sql) <= 1200 else sql[:1200] + " ..."
            plans.append(p)
    plans.sort(key=lambda p: -(p.get("execution_ms") or 0))
    return plans


# --- 1. the command ------------------------------------------------------------------------------------------


def run_commands(plan: Plan, users: Users, n: int, *, reps: int, warmup: int, seed: int) -> dict:
    """`warmup` + `reps` pairs (a core user, a random video of the catalog): LIKED, then UNLIKED, each with a
    fresh operation id, through relation_set_state as bench/worker.py's service client sends them. Only users
    whose whole history is loaded, so a later growth never adds a relation a command created."""
    from relations.services import commands

    rng = random.Random(seed * 7 + n)
    complete = plan.core_users_complete(n)
    catalog = plan.catalog(n)
    tag = f"{PREFIX}cmd-{n}-{seed}"
    seq = Counter()
    times: dict[str, list[float]] = {"like": [], "unlike": []}
    changed = Counter()
    errors = Counter()

    def send(uid: int, vid: str, desired: str) -> tuple[float, bool]:
        seq["n"] += 1
        t0 = time.perf_counter()
        res = commands.relation_set_state(user_id=uid, video_id=vid, desired_state=desired,
                                          operation_id=f"{tag}-{seq['n']}", device_id="bench")
        return (time.perf_counter() - t0) * 1000.0, res.changed

    deadline = time.monotonic() + ITEM_BOUND_S
    cpu = CpuBusy().__enter__()
    for i in range(warmup + reps):
        if time.monotonic() > deadline:
            log(f"commands: stopped at the {ITEM_BOUND_S:.0f} s bound")
            break
        uid = users.core[rng.randrange(complete)]
        vid = video_id(rng.randrange(catalog))
        for kind, desired in (("like", "LIKED"), ("unlike", "UNLIKED")):
            try:
                ms, was_changed = send(uid, vid, desired)
            except Exception as exc:
                errors[exc.__class__.__name__] += 1
                continue
            if i >= warmup:
                times[kind].append(ms)
                changed[kind] += bool(was_changed)
    cpu.__exit__(None, None, None)
    both = times["like"] + times["unlike"]
    out = {**stats(both), "like": stats(times["like"]), "unlike": stats(times["unlike"]),
           "changed": dict(changed), "errors": dict(errors), "pairs": reps, "warmup_pairs": warmup,
           "cpu": cpu.result}
    log(f"  command: p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms ({out['n']} commands; like p50 "
        f"{out['like']['p50_ms']}, unlike p50 {out['unlike']['p50_ms']}; changed {dict(changed)}; "
        f"errors {dict(errors)})")
    out["plan"] = command_plan(plan, users, n, rng)
    out["statements"] = command_statements(plan, users, n, rng)
    return out


def command_plan(plan: Plan, users: Users, n: int, rng: random.Random, runs: int = 5) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of the command's one statement (`likes_relation_apply`, a first like of a random
    pair) in a transaction rolled back afterwards, `runs` times: its buffers are every page its reads and writes
    touched, indexes included. Returns the run with the median execution time, and every run's figures."""
    import uuid

    from django.conf import settings
    from django.utils import timezone

    from relations import events, routing
    from relations.services import commands, write_barrier

    g_ns, v_ns = write_barrier.LOCK_NAMESPACES
    done = []
    for _ in range(runs):
        uid = users.core[rng.randrange(plan.core_users_complete(n))]
        vid = video_id(rng.randrange(plan.catalog(n)))
        alias, slot = routing.placement(uid)
        params = [uid, vid, "LIKED", f"{PREFIX}explain-{uuid.uuid4().hex[:12]}", None, "bench", None,
                  timezone.now(), alias, uuid.uuid4(), events.aggregate_key(uid, vid), events.EVENT_TYPE,
                  events.EVENT_SCHEMA_VERSION,
                  settings.LIKE_STALE_BASE_POLICY != commands.STALE_POLICY_LAST_COMMIT_WINS, True, g_ns, v_ns,
                  write_barrier.SLOT_NS, slot]
        done.append(explain(alias, commands._APPLY_FUNCTION_SQL, params, rollback=True))
    done.sort(key=lambda p: p["execution_ms"] or 0)
    out = dict(done[len(done) // 2])
    out["sql"] = f"likes_relation_apply(...) -- a first like, rolled back; median of {runs}"
    out["runs"] = [{"execution_ms": p["execution_ms"], "shared_hit": p["shared_hit"], "shared_read": p["shared_read"]}
                   for p in done]
    return out


def command_statements(plan: Plan, users: Users, n: int, rng: random.Random, runs: int = 5) -> list[dict]:
    """The statements of a first like one by one (`_apply_python`'s, which `likes_relation_apply` runs in one
    round trip), each under EXPLAIN (ANALYZE, BUFFERS) in one transaction rolled back afterwards, `runs` random
    pairs: per statement the median time, buffers read and I/O time, so the growth of the command shows where
    it is (which table's indexes need a page that is not in shared buffers)."""
    import uuid

    from django.db import connections, transaction
    from django.utils import timezone

    from relations import events, routing
    from relations.models import LikeCommand, LikeRelation, OutboxEvent
    from relations.selectors import UNLIKED_V0
    from relations.services import commands

    rel, cmd, outbox = LikeRelation._meta.db_table, LikeCommand._meta.db_table, OutboxEvent._meta.db_table
    per: dict[str, list[dict]] = {}
    for _ in range(runs):
        for _draw in range(50):  # a pair with no relation yet: a first like
            uid = users.core[rng.randrange(plan.core_users_complete(n))]
            vid = video_id(rng.randrange(plan.catalog(n)))
            alias = routing.alias_for_user(uid)
            if not LikeRelation.objects.using(alias).filter(user_id=uid, video_id=vid).exists():
                break
        op = f"{PREFIX}explain-{uuid.uuid4().hex[:12]}"
        now = timezone.now()
        payload = events.event_payload(event_id=uuid.uuid4(), alias=alias, user_id=uid, video_id=vid,
                                       operation_id=op, previous=UNLIKED_V0, new_state="LIKED", new_version=1,
                                       changed_at=now)
        steps = [
            ("command lookup", f"SELECT result_state FROM {cmd} WHERE user_id = %s AND operation_id = %s", [uid, op]),
            ("relation lock", f"SELECT id, state, relation_version FROM {rel} WHERE user_id = %s AND video_id = %s "
                              "FOR UPDATE", [uid, vid]),
            ("relation insert", f"INSERT INTO {rel} (user_id, video_id, state, relation_version, last_operation_id, "
                                "state_changed_at, created_at, updated_at) VALUES (%s, %s, 'LIKED', 1, %s, %s, %s, "
                                "%s) ON CONFLICT (user_id, video_id) DO NOTHING", [uid, vid, op, now, now, now]),
            ("outbox insert", commands._INSERT_OUTBOX_SQL.format(table=outbox),
             [payload["eventId"], payload["aggregateKey"], 1, events.EVENT_TYPE, events.EVENT_SCHEMA_VERSION,
              json.dumps(payload), now, now]),
            ("command insert", commands._INSERT_COMMAND_SQL.format(table=cmd),
             [uid, op, vid, "LIKED", "LIKED", 1, True, None, "bench", None, now]),
        ]
        with transaction.atomic(using=alias):
            with connections[alias].cursor() as cur:
                cur.execute("SET LOCAL statement_timeout = 0")
                if _superuser(alias):
                    cur.execute("SET LOCAL track_io_timing = on")
            for name, sql, params in steps:
                per.setdefault(name, []).append(explain(alias, sql, params))  # in a savepoint of this transaction
            transaction.set_rollback(True, using=alias)
    out = []
    for name, ps in per.items():
        ps.sort(key=lambda p: p["execution_ms"] or 0)
        mid = ps[len(ps) // 2]
        out.append({"statement": name, "median_ms": mid["execution_ms"],
                    "runs": [{k: p.get(k) for k in ("execution_ms", "shared_hit", "shared_read", "io_read_ms")}
                             for p in ps], "text": mid["text"]})
    log("  command statements (median ms / buffers read): " + ", ".join(
        f"{s['statement']} {s['median_ms']} / {sorted(r['shared_read'] for r in s['runs'])[len(s['runs']) // 2]}"
        for s in out))
    return out


# --- 2. the batch query ---------------------------------------------------------------------------------------


def run_batch(plan: Plan, users: Users, n: int, *, reps: int, warmup: int, seed: int, batch: int = 20) -> dict:
    """The batch query of `batch` ids (what counting.api.batch_views does: videos_visible_to, relation_states_get,
    display_counts_get) for 20 core users, each with a feed of a third liked videos and the rest random catalog
    videos, relation cache and count views warm. Each answer is checked against the facts and snapshots."""
    from django.db import connections

    from counting import selectors as count_selectors
    from counting.models import VideoDisplayCount
    from counting.services.count_cache.layers import count_cache_views_write
    from relations import routing, selectors
    from relations.models import LikeRelation
    from relations.services.relation_cache import relation_cache_repair

    rng = random.Random(seed * 11 + n)
    complete = plan.core_users_complete(n)
    feeds = []
    for _ in range(20):
        j = rng.randrange(complete)
        uid = users.core[j]
        mine = [video_id(v) for v in rng.sample(plan.core_videos(j), batch // 3)]
        others = [video_id(rng.randrange(plan.catalog(n))) for _ in range(batch * 2)]
        feed = list(dict.fromkeys(mine + others))[:batch]
        rng.shuffle(feed)
        with connections[routing.alias_for_user(uid)].cursor() as cur:
            cur.execute(f"SELECT video_id, state, relation_version FROM {LikeRelation._meta.db_table} "
                        "WHERE user_id = %s AND video_id = ANY(%s)", [uid, feed])
            facts = {v: (s, ver) for v, s, ver in cur.fetchall()}
        feeds.append((uid, feed, facts))
        relation_cache_repair(user_id=uid, video_ids=feed)
    videos = sorted({v for _, feed, _ in feeds for v in feed})
    snaps = {v: (c, sid, at) for v, c, sid, at in VideoDisplayCount.objects.filter(video_id__in=videos)
             .values_list("video_id", "display_count", "snapshot_id", "generated_at")}
    count_cache_views_write(rows=[(v, c, sid, at.isoformat().replace("+00:00", "Z")) for v, (c, sid, at)
                                  in sorted(snaps.items())])
    turn = Counter()
    wrong = Counter()

    def call():
        uid, feed, facts = feeds[turn["i"] % len(feeds)]
        turn["i"] += 1
        visible = selectors.videos_visible_to(user_id=uid, video_ids=feed)
        rels = selectors.relation_states_get(user_id=uid, video_ids=feed, min_versions={})
        counts = count_selectors.display_counts_get(video_ids=[v for v in feed if visible[v]])
        for v in feed:
            want = facts.get(v, ("UNLIKED", 0))
            if not visible[v] or (rels[v].state, rels[v].relation_version) != want \
                    or counts[v].display_count != snaps.get(v, (0,))[0]:
                wrong["answers"] += 1
        return counts

    out, results = run_timed(call, warmup=warmup, reps=reps, label="batch query (20 ids, warm)")
    sources = Counter(c.source for r in results for c in r.values())
    out.update(wrong=wrong["answers"], users=len(feeds), ids=batch, count_sources=dict(sources))
    out["plans"] = captured_plans(call)[:4]
    return out


# --- 3. my-likes and 4. likers pages -----------------------------------------------------------------------


def run_my_likes(users: Users, *, reps: int, warmup: int, limit: int, deep: int) -> dict:
    """The heavy user's my-likes page 1 and page `deep` (limit `limit`): liked_page_list plus its cursor encode
    (and decode for the deep page), as the API view does; the cursor walked once to the deep page."""
    from relations.selectors import my_likes as sel

    uid = users.heavy

    def page(cursor: str | None):
        after = None if cursor is None else sel.list_cursor_decode(user_id=uid, cursor=cursor)
        p = sel.liked_page_list(user_id=uid, limit=limit, after=after)
        nxt = None if p.next_key is None else sel.list_cursor_encode(user_id=uid, key=p.next_key)
        return p, nxt

    return _pages_timed(page, name="my-likes", item_key=lambda i: i.video_id, reps=reps, warmup=warmup,
                        limit=limit, deep=deep)


def _pages_timed(page, *, name: str, item_key, reps: int, warmup: int, limit: int, deep: int) -> dict:
    """Walk `page(cursor) -> (page, next cursor)` once to page `deep`, then time page 1 and page `deep`:
    each repeat must return the same full page; the plans of each page's statements are kept."""
    t0 = time.monotonic()
    cursor = None
    for page_no in range(1, deep):
        _p, cursor = page(cursor)
        if cursor is None:
            raise RuntimeError(f"{name}: the list ended at page {page_no}")
    walk_s = round(time.monotonic() - t0, 2)
    out = {"limit": limit, "deep_page": deep, "walk_seconds": walk_s}
    for key, cur in (("page1", None), ("deep", cursor)):
        s, results = run_timed(lambda cur=cur: page(cur), warmup=warmup, reps=reps,
                               label=f"{name} page {1 if cur is None else deep}")
        ids = {tuple(item_key(i) for i in p.items) for p, _ in results}
        if len(ids) != 1 or len(next(iter(ids))) != limit:
            raise RuntimeError(f"{name} {key}: {len(ids)} different pages or a short page")
        s["plans"] = captured_plans(lambda cur=cur: page(cur))[:4]
        out[key] = s
    return out


def run_likers(*, reps: int, warmup: int, limit: int, deep: int) -> dict:
    """The hot video's likers page 1 and page `deep` (limit `limit`), as its author: likers_page_list plus
    likers_cursor_encode (bench/reverse/likers.py's fetch); the cursor walked once to the deep page."""
    from bench.dataset import author_id
    from counting.selectors.likers import likers_cursor_encode, likers_page_list

    author = author_id()

    def page(cursor: str | None):
        p = likers_page_list(caller_id=author, video_id=HOT_VIDEO, limit=limit, cursor=cursor)
        nxt = None if p.exhausted else likers_cursor_encode(caller_id=author, video_id=HOT_VIDEO, page=p)
        return p, nxt

    return _pages_timed(page, name="likers", item_key=lambda i: i.user_id, reps=reps, warmup=warmup,
                        limit=limit, deep=deep)


# --- 5. the exact reconciliation ----------------------------------------------------------------------------


def operator_ensure() -> None:
    from django.contrib.auth import get_user_model

    get_user_model().objects.get_or_create(username=OPERATOR, defaults={"password": "!bench"})


def exact_check() -> dict:
    """One exact run over the hot video, as `manage.py reconcile --mode exact --video bgr-hot` runs it (the ops
    job, started and run inline), timed end to end."""
    from likes_project.audit.services import Actor
    from likes_project.opsjobs.services import job_run_inline, job_start
    from reconciliation.jobs import job_for_mode
    from reconciliation.models import CheckRun

    t0 = time.perf_counter()
    started = job_start(kind=job_for_mode("exact"), actor=Actor(name=OPERATOR, channel="cli"),
                        params={"mode": "exact", "scope": {"videos": [HOT_VIDEO]}})
    done = job_run_inline(started.pk)
    ms = (time.perf_counter() - t0) * 1000.0
    run = CheckRun.objects.get(pk=done.params["runId"])
    diffs = list(run.diffs.values("layer", "expected", "actual", "virtual_bucket")[:10])
    return {"ms": round(ms, 1), "status": run.status, "checked": run.checked, "diffs": run.diffs_found,
            "diff_sample": diffs, "barrier_held_ms": run.barrier_held_ms, "refused_because": run.refused_because,
            "job_status": done.status}


def run_exact(*, reps: int) -> dict:
    """One untimed exact run, then `reps` timed ones; every verdict must be PASSED with no diff."""
    from reconciliation.services import evidence

    operator_ensure()
    first = exact_check()
    runs = [exact_check() for _ in range(reps)]
    out = {**stats([r["ms"] for r in runs]), "runs": [first, *runs],
           "statuses": [r["status"] for r in [first, *runs]], "checked": first["checked"],
           "diffs": sum(r["diffs"] for r in [first, *runs])}
    log(f"  exact reconciliation of {HOT_VIDEO}: p50 {out['p50_ms']} ms over {len(runs)} runs, statuses "
        f"{out['statuses']}, {out['checked']:,} relations checked, {out['diffs']} diffs")

    def reads():
        from counting import routing as count_routing

        gen = count_routing.load_generation()
        evidence.source_relations([HOT_VIDEO])
        evidence.projected_relations(gen, [HOT_VIDEO])
        evidence.bucket_counts(gen, [HOT_VIDEO])

    out["plans"] = captured_plans(reads)[:4]
    return out


# --- the drain --------------------------------------------------------------------------------------------------


def pipeline_drain(bound_s: float = 600.0) -> dict:
    """Publish every outbox row, run every consumer of the event log over every stream partition and refresh the
    display snapshots until nothing is left (bounded): the commands' history fully projected, as the workers
    leave it."""
    from django.conf import settings

    from counting.services.snapshots import display_snapshot_refresh
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition, projector_get
    from likes_project.eventlog.registry import CONSUMERS
    from relations.services.outbox import outbox_publish_batch

    INTERFERENCE.note("drain")
    t0 = time.monotonic()
    totals = Counter()
    for _ in range(MAX_LOOP_ITERATIONS):
        if time.monotonic() - t0 > bound_s:
            raise RuntimeError(f"the pipeline did not drain within {bound_s:.0f} s: {dict(totals)}")
        moved = 0
        for alias in settings.RELATION_SHARD_ALIASES:
            rep = outbox_publish_batch(alias=alias, holder=f"growth-bench:{alias}")
            moved += rep.sent
            totals["published"] += rep.sent
        for name in CONSUMERS:
            projector = projector_get(name)
            for p in streams.all_partitions():
                rep = consume_partition(projector, partition=p, batch_size=200, max_batches=10, ignore_backoff=True)
                moved += rep.dispatched
                totals[f"{name}_applied"] += rep.applied
                totals[f"{name}_dead"] += rep.dead_lettered
        snap = display_snapshot_refresh()
        moved += snap.videos
        totals["display_refreshed"] += snap.videos
        if not moved:
            break
        time.sleep(0.01)  # between passes of the drain (bounded by bound_s)
    out = {**dict(totals), "seconds": round(time.monotonic() - t0, 1)}
    log(f"  pipeline drained in {out['seconds']}s: {dict(totals)}")
    if totals["count_dead"] or totals["reverse_dead"] or totals["relcache_dead"]:
        raise RuntimeError(f"dead letters while draining: {dict(totals)}")
    return out


def hot_counts(plan: Plan) -> dict:
    """The hot video's LIKED count by the plan, in the facts, and in its display snapshot (all must agree)."""
    from django.conf import settings
    from django.db import connections

    from counting.models import VideoDisplayCount
    from relations.models import LikeRelation

    facts = 0
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {LikeRelation._meta.db_table} WHERE video_id = %s AND state = 'LIKED'",
                        [HOT_VIDEO])
            facts += cur.fetchone()[0]
    planned = sum(1 for idx in range(plan.heavy_rel, plan.core_start) if state_of(idx)[0] == "LIKED")
    display = VideoDisplayCount.objects.filter(video_id=HOT_VIDEO).values_list("display_count", flat=True).first()
    return {"planned": planned, "facts": facts, "display": display, "ok": planned == facts == display}
