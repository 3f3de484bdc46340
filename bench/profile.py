"""Where the time of a hot path goes (issue 15 §6): `bench/run.sh profile SCENARIO [--seconds 20] [--flame]`.

The scenario's unit in a loop for --seconds, unprofiled (wall and CPU a unit), then under cProfile (the top 40 into
bench/results/profiles/SCENARIO.txt); --flame: py-spy samples a third run into SCENARIO.svg. Scenarios: command, http
(PUT .../like-relation through Django's handler), batch (feed_page_read of 20 ids, warm), batch_http (the same through
the WSGI application), projector (the count consumer, per event of a 20,000-event backlog), reverse, relcache, notify
and risk (each of the other consumers the same way), snapshot (display_snapshot_refresh after 50 videos were made
dirty; snapshot_5 after 5), passes and passes_1 (one pass of each of the five consumers over one partition holding
50 new entries, or one: what a pass costs beyond its events, D142), groups and groups_1 (the same passes as the
worker runs them, one run of each pass group's leader, D143). --cpu: cProfile on the process's CPU clock (waits
drop out)."""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import os
import pstats
import random
import shlex
import shutil
import subprocess
import sys
import time
import uuid

from bench.harness import driver
from bench.harness.driver import RESULTS_DIR, ROOT
from bench.harness.seed import flush_redis, prepare, reset_count, reset_state, streams_reset

OUT_DIR = RESULTS_DIR / "profiles"


def command(rng):
    from relations.services.commands import relation_set_state
    users, videos = prepare(users=5000, videos=2000)
    return lambda: relation_set_state(user_id=rng.choice(users)[0], video_id=rng.choice(videos),
                                      desired_state=rng.choice(("LIKED", "UNLIKED")), operation_id=uuid.uuid4().hex), 1


def http(rng):
    """The command through the WSGI application gunicorn serves (`likes_project.wsgi`: the API's own middleware
    chain, D136), without a socket: an environ built by Django's RequestFactory, the answer's body read."""
    from django.conf import settings
    from django.test import RequestFactory

    from likes_project.wsgi import application
    settings.ALLOWED_HOSTS = ["testserver"]
    users, videos, factory = *prepare(users=5000, videos=2000), RequestFactory()
    status: list[str] = []

    def start_response(line, headers, exc_info=None):
        status.append(line)

    def unit() -> None:
        environ = factory.put(f"/v1/videos/{rng.choice(videos)}/like-relation", content_type="application/json",
                              data=json.dumps({"desiredState": rng.choice(("LIKED", "UNLIKED"))}),
                              HTTP_AUTHORIZATION=f"Token {rng.choice(users)[1]}",
                              HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex).environ
        status.clear()
        body = b"".join(application(environ, start_response))
        if not status[0].startswith("200"):
            raise RuntimeError(f"PUT answered {status[0]}: {body[:200]!r}")
    return unit, 1


def _wsgi_put_or_post():
    """The WSGI application gunicorn serves and a caller of it that raises on a non-200 answer."""
    from django.conf import settings
    from django.test import RequestFactory

    from likes_project.wsgi import application
    settings.ALLOWED_HOSTS = ["testserver"]
    factory, status = RequestFactory(), []

    def start_response(line, headers, exc_info=None):
        status.append(line)

    def call(method: str, path: str, body: dict, **headers) -> bytes:
        environ = getattr(factory, method)(path, content_type="application/json", data=json.dumps(body),
                                           **headers).environ
        status.clear()
        answer = b"".join(application(environ, start_response))
        if not status[0].startswith("200"):
            raise RuntimeError(f"{method.upper()} {path} answered {status[0]}: {answer[:200]!r}")
        return answer
    return call


def batch_http(rng):
    """The batch query of 20 ids through the WSGI application (the `batch` scenario's reads, over HTTP's stack)."""
    unit_data = _batch_data()
    call = _wsgi_put_or_post()

    def unit() -> None:
        _uid, token, feed, _expected = rng.choice(unit_data["users"])
        page = rng.randrange(5)
        call("post", "/v1/like-relations/batch-query", {"videoIds": feed[page * 20:(page + 1) * 20]},
             HTTP_AUTHORIZATION=f"Token {token}")
    return unit, 1


def _batch_data() -> dict:
    from bench.read.bench import prepare_batch
    from relations.services.relation_cache import relation_cache_repair
    users, _ = prepare(users=5000, videos=2000)
    data = prepare_batch(argparse.Namespace(seed=7, videos=2000, feed=100, users=400), users)
    for uid, _token, feed, _expected in data["users"]:
        relation_cache_repair(user_id=uid, video_ids=feed)
    return data


def batch(rng):
    from bench.read.bench import prepare_batch
    from counting.selectors import feed_page_read
    from relations.services.relation_cache import relation_cache_repair
    users, _ = prepare(users=5000, videos=2000)
    data = prepare_batch(argparse.Namespace(seed=7, videos=2000, feed=100, users=400), users)
    for uid, _token, feed, _expected in data["users"]:
        relation_cache_repair(user_id=uid, video_ids=feed)

    def unit() -> None:
        uid, _token, feed, _expected = rng.choice(data["users"])
        page = rng.randrange(5)
        feed_page_read(user_id=uid, video_ids=feed[page * 20:(page + 1) * 20], min_versions={})
    return unit, 1


def projector(rng, consumer: str = "count"):
    """A backlog of 20,000 events through one consumer of the event log (the count projector by default)."""
    from bench.harness.phases import backlog_events, publish
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition, projector_get
    rounds = [0]

    def unit() -> None:
        clean()
        publish(backlog_events(seed=rng.randrange(10**6), events=20_000, users=200_000, videos=5000, kind="uniform",
                               rnd=rounds[0], video_prefix="pjb-", user_base=8_000_000_000))
        rounds[0] += 1
        for _ in range(1000):
            if not sum(consume_partition(projector_get(consumer), partition=p, batch_size=500).dispatched
                       for p in streams.all_partitions()):
                return
    return unit, 20_000


def _partition_passes(rng, events: int, prefix: str, run_passes):
    """A unit that runs `run_passes(partition)` over the next partition in turn, after publishing enough events for
    every unit of the loop to find `events` new entries there."""
    from bench.harness.phases import backlog_events, publish
    from likes_project.eventlog import streams
    partitions = streams.all_partitions()
    publish(backlog_events(seed=rng.randrange(10**6), events=events * len(partitions) * 400, users=200_000,
                           videos=5000, kind="uniform", rnd=0, video_prefix=prefix, user_base=8_000_000_000))
    turn = [0]

    def unit() -> None:
        turn[0] += 1
        run_passes(partitions[(turn[0] - 1) % len(partitions)])
    return unit, 1


def passes(rng, events: int = 50):
    """One pass of each of the five consumers over one partition that holds `events` new entries (a Celery pass
    under load: tens of events, not a backlog's 500): what a pass costs beyond its events."""
    from likes_project.eventlog.consumer import consume_partition, projector_get
    from likes_project.eventlog.registry import CONSUMERS

    def run_passes(partition: int) -> None:
        for consumer in CONSUMERS:
            consume_partition(projector_get(consumer), partition=partition, batch_size=events, max_batches=1)
    return _partition_passes(rng, events, "pjp-", run_passes)


def groups(rng, events: int = 50):
    """`passes`, the way the worker runs them now (D143): one run of each pass group's leader over one partition,
    the group's consumers reading the log once between them."""
    from likes_project.eventlog.consumer import group_pass
    from likes_project.eventlog.registry import CONSUMERS, pass_task
    leaders = [name for name, spec in CONSUMERS.items() if pass_task(name) == spec.task]

    def run_passes(partition: int) -> None:
        for leader in leaders:
            group_pass(leader, partition=partition, batch_size=events, max_batches=1)
    return _partition_passes(rng, events, "pjg-", run_passes)


def snapshot(rng, dirty: int = 50):
    from counting.services.snapshots import display_snapshot_refresh
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition, projector_get
    from relations import routing
    from relations.services.commands import relation_set_state
    from relations.services.outbox import outbox_publish_batch
    users, videos = prepare(users=5000, videos=2000)

    def unit() -> None:
        for v in rng.sample(videos, dirty):
            relation_set_state(user_id=rng.choice(users)[0], video_id=v, desired_state="LIKED",
                               operation_id=uuid.uuid4().hex)
        for alias in routing.all_aliases():
            outbox_publish_batch(alias=alias, holder="profile")
        for p in streams.all_partitions():
            consume_partition(projector_get("count"), partition=p)
        display_snapshot_refresh()
    return unit, 1


SCENARIOS = {"command": command, "http": http, "batch": batch, "batch_http": batch_http, "projector": projector,
             **{name: functools.partial(projector, consumer=name)
                for name in ("reverse", "relcache", "notify", "risk")},
             "snapshot": snapshot, "passes": passes, "passes_1": functools.partial(passes, events=1),
             "groups": groups, "groups_1": functools.partial(groups, events=1),
             "snapshot_5": functools.partial(snapshot, dirty=5)}


def clean() -> None:
    for fn in (reset_state, reset_count, streams_reset, flush_redis):
        fn()


def loop(unit, seconds: float) -> tuple[int, float, float]:
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    while time.perf_counter() < t0 + seconds and n < 10_000_000:
        unit()
        n += 1
    return n, time.perf_counter() - t0, time.process_time() - c0


def main(argv=None) -> int:
    args = driver.parse(argv, "profile", __doc__, {"seconds": (20.0, "length of each loop", 1, 300),
                                                   "flame": (False, "also a py-spy flame graph (SVG)"),
                                                   "cpu": (False, "cProfile counts this process's CPU time, not wall "
                                                                  "time (waits on PostgreSQL and Redis drop out)"),
                                                   "callees": ("", "also what the functions matching this regex call "
                                                                   "(e.g. 'snapshots.py:\\d+\\(_refresh\\)')")},
                        seed=20261203, choice=("scenario", SCENARIOS))
    import django
    django.setup()
    driver.check_environment()
    log = driver.make_log("profile")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    clean()
    try:
        unit, per = SCENARIOS[args.scenario](random.Random(args.seed))
        loop(unit, min(5.0, args.seconds / 4))  # warm-up: connections, caches, prepared statements
        n, wall, cpu = loop(unit, args.seconds)
        head = (f"scenario {args.scenario}: {n} units of {per} in {wall:.1f} s unprofiled: {wall / n / per * 1000:.3f} "
                f"ms wall and {cpu / n / per * 1000:.3f} ms of this process's CPU per {'event' if per > 1 else 'unit'}")
        log(head)
        prof = cProfile.Profile(time.process_time) if args.cpu else cProfile.Profile()
        pn, pwall, _ = prof.runcall(loop, unit, args.seconds)
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("cumulative").print_stats(40).sort_stats("tottime").print_stats(40)
        # Who sends each SQL statement and Redis command: the round trips a unit pays (issue 34 §1).
        stats.print_callers(r"(psycopg/cursor.py:\d+\(execute\)|redis/client.py:\d+\(execute(_command)?\))")
        if args.callees:
            stats.print_callees(args.callees)
        (OUT_DIR / f"{args.scenario}.txt").write_text(f"{head}\nprofiled: {pn} units in {pwall:.1f} s\n"
                                                      f"{buf.getvalue()}".replace(str(ROOT) + "/", ""))
        if args.flame:
            svg = OUT_DIR / f"{args.scenario}.svg"
            rec = subprocess.Popen([shutil.which("py-spy") or str(ROOT / ".venv" / "bin" / "py-spy"), "record", "--pid",
                                    str(os.getpid()), "--output", str(svg), "--format", "flamegraph", "--rate", "200",
                                    "--duration", str(int(args.seconds)), "--nonblocking"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
            time.sleep(1.0)  # py-spy attaches before the loop starts
            loop(unit, args.seconds)
            err = rec.communicate(timeout=args.seconds + 60)[1]
            log(f"py-spy failed: {err.decode(errors='replace')[-500:]}" if rec.returncode else f"wrote {svg}")
        log(f"wrote {OUT_DIR / args.scenario}.txt")
        if not args.no_docs:
            from bench.harness import report as rep
            meta = {"finished_at": time.strftime("%Y-%m-%d", time.gmtime()),
                    "command": "bench/run.sh " + shlex.join(["profile", *sys.argv[1:]])}
            rep.history_append("profile", meta, {
                "goal": "where one unit's time goes (no ceiling)", "ceiling": "-", "ratio": "-",
                "figure": f"{args.scenario}: {wall / n / per * 1000:.3f} ms wall, {cpu / n / per * 1000:.3f} ms CPU a "
                          f"{'event' if per > 1 else 'unit'}; bench/results/profiles/{args.scenario}.txt"})
            rep.table_write()
    finally:
        from django.db import connections
        connections.close_all()
        if args.scenario == "batch":
            from bench.read.bench import cleanup
            cleanup()  # its videos, display snapshots and relation-cache floors too
        clean()
    return 0


if __name__ == "__main__":
    sys.exit(main())
