"""Profiles of the hot paths (issue 15 §6), run through ./bench/profile.sh SCENARIO.

One process runs the scenario's unit of work in a loop for --seconds, first unprofiled (the mean wall and CPU
time of one unit, the figures to compare with the benchmarks), then under cProfile; the summary (top 40 by
cumulative and by own time) is written to bench/results/profiles/SCENARIO.txt. With --flame, py-spy samples
a third run of the loop (this process, from outside: `py-spy record --pid`) into SCENARIO.svg.

Scenarios (the unit of work):
  command    relations.services.commands.relation_set_state, uniform like/unlike over 5,000 users x 2,000 videos
  http       PUT /v1/videos/<id>/like-relation through Django's full handler (the test client: middleware,
             DRF, token authentication), the same mix
  batch      counting.selectors.feed_page_read of 20 ids, warm caches (what the batch-query view calls)
  projector  consume_partition(CountProjector()) draining a 20,000-event backlog, per event
  snapshot   display_snapshot_refresh after 50 videos were made dirty, per run

Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import subprocess
import sys
import time
import uuid

from bench import common

log = common.make_log("profile")
OUT_DIR = common.RESULTS_DIR / "profiles"
SCENARIOS = ("command", "http", "batch", "projector", "snapshot")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/profile.sh", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=SCENARIOS)
    p.add_argument("--seconds", type=float, default=20.0, help="length of each loop (default 20)")
    p.add_argument("--flame", action="store_true", help="also a py-spy flame graph (SVG)")
    args = p.parse_args(argv)
    if not 1 <= args.seconds <= 300:
        p.error("--seconds must be 1..300")
    return args


# --- scenarios: each returns (unit of work, units per call, cleanup) ------------------------------------


def _command_unit(rng: random.Random):
    from bench.dataset import prepare
    from relations.services.commands import relation_set_state

    users, videos = prepare(users=5000, videos=2000)

    def unit() -> None:
        uid, _token = users[rng.randrange(len(users))]
        relation_set_state(user_id=uid, video_id=videos[rng.randrange(len(videos))],
                           desired_state=rng.choice(("LIKED", "UNLIKED")), operation_id=uuid.uuid4().hex)
    return unit, 1


def _http_unit(rng: random.Random):
    import json

    from django.conf import settings
    from django.test import Client

    from bench.dataset import prepare

    settings.ALLOWED_HOSTS = ["testserver"]
    users, videos = prepare(users=5000, videos=2000)
    client = Client()

    def unit() -> None:
        _uid, token = users[rng.randrange(len(users))]
        resp = client.put(f"/v1/videos/{videos[rng.randrange(len(videos))]}/like-relation",
                          data=json.dumps({"desiredState": rng.choice(("LIKED", "UNLIKED"))}),
                          content_type="application/json", HTTP_AUTHORIZATION=f"Token {token}",
                          HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex)
        if resp.status_code != 200:
            raise RuntimeError(f"PUT answered {resp.status_code}: {resp.content[:200]!r}")
    return unit, 1


def _batch_unit(rng: random.Random):
    from bench.dataset import prepare
    from bench.read.batch import prepare_batch
    from counting.selectors import feed_page_read
    from relations.services.relation_cache import relation_cache_repair

    bench_users, _ = prepare(users=5000, videos=2000)
    data = prepare_batch(argparse.Namespace(seed=7, videos=2000, feed=100, users=400, batch=20), bench_users)
    for uid, _token, feed, _expected in data["users"]:
        relation_cache_repair(user_id=uid, video_ids=feed)

    def unit() -> None:
        uid, _token, feed, _expected = data["users"][rng.randrange(len(data["users"]))]
        page = rng.randrange(5)
        feed_page_read(user_id=uid, video_ids=feed[page * 20:(page + 1) * 20], min_versions={})
    return unit, 1


def _projector_unit(rng: random.Random):
    from bench.projector_bench import backlog, publish, streams_reset
    from counting.services.projection import CountProjector
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition

    spec = argparse.Namespace(seed=rng.randrange(10**6), events=20_000, event_users=200_000, uniform_videos=5000)
    state = {"round": 0}

    def unit() -> None:
        streams_reset()
        publish(backlog(spec, "uniform", state["round"]))
        state["round"] += 1
        for _ in range(1000):
            moved = 0
            for p in streams.all_partitions():
                moved += consume_partition(CountProjector(), partition=p, batch_size=500).dispatched
            if not moved:
                return
    return unit, spec.events


def _snapshot_unit(rng: random.Random):
    from bench.dataset import prepare
    from counting.services.projection import CountProjector
    from counting.services.snapshots import display_snapshot_refresh
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition
    from relations import routing
    from relations.services.commands import relation_set_state
    from relations.services.outbox import outbox_publish_batch

    users, videos = prepare(users=5000, videos=2000)

    def unit() -> None:
        for v in rng.sample(videos, 50):
            uid, _token = users[rng.randrange(len(users))]
            relation_set_state(user_id=uid, video_id=v, desired_state="LIKED", operation_id=uuid.uuid4().hex)
        for alias in routing.all_aliases():
            outbox_publish_batch(alias=alias, holder="profile")
        for p in streams.all_partitions():
            consume_partition(CountProjector(), partition=p)
        display_snapshot_refresh()
    return unit, 1


UNITS = {"command": _command_unit, "http": _http_unit, "batch": _batch_unit, "projector": _projector_unit,
         "snapshot": _snapshot_unit}


def _loop(unit, seconds: float) -> tuple[int, float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    deadline = t0 + seconds
    while time.perf_counter() < deadline and n < 10_000_000:
        unit()
        n += 1
    return n, time.perf_counter() - t0, time.process_time() - c0


def main(argv=None) -> int:
    args = parse_args(argv)
    common.start_driver()
    from bench.dataset import flush_bench_redis, reset_state
    from bench.projection.state import reset_ours

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261203)
    reset_state()
    reset_ours()
    flush_bench_redis()
    try:
        unit, per = UNITS[args.scenario](rng)
        _loop(unit, min(5.0, args.seconds / 4))  # warm-up: connections, caches, prepared statements
        n, wall, cpu = _loop(unit, args.seconds)
        head = (f"scenario {args.scenario}: {n} units of {per} in {wall:.1f} s unprofiled: "
                f"{wall / n / per * 1000:.3f} ms wall and {cpu / n / per * 1000:.3f} ms of this process's CPU per "
                f"{'event' if per > 1 else 'unit'}")
        log(head)
        prof = cProfile.Profile()
        prof.enable()
        pn, pwall, _ = _loop(unit, args.seconds)
        prof.disable()
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(40)
        text = f"{head}\nprofiled: {pn} units in {pwall:.1f} s\n{buf.getvalue()}"
        out = OUT_DIR / f"{args.scenario}.txt"
        out.write_text(text.replace(str(common.ROOT) + "/", ""))
        log(f"wrote {out.relative_to(common.ROOT)}")
        if args.flame:
            spy = shutil.which("py-spy") or str(common.ROOT / ".venv" / "bin" / "py-spy")
            svg = OUT_DIR / f"{args.scenario}.svg"
            cmd = [spy, "record", "--pid", str(os.getpid()), "--output", str(svg), "--format", "flamegraph",
                   "--rate", "200", "--duration", str(int(args.seconds)), "--nonblocking"]
            rec = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)  # py-spy attaches before the loop starts
            _loop(unit, args.seconds)
            _out, err = rec.communicate(timeout=args.seconds + 60)
            if rec.returncode != 0:
                log(f"py-spy failed (rc={rec.returncode}): {err.decode(errors='replace')[-500:]}")
            else:
                log(f"wrote {svg.relative_to(common.ROOT)}")
    finally:
        from django.db import connections

        connections.close_all()
        if args.scenario == "batch":
            from bench.read_bench import cleanup

            cleanup()  # its videos, display snapshots and relation-cache floors too
        reset_state()
        reset_ours()
        flush_bench_redis()
    return 0


if __name__ == "__main__":
    sys.exit(main())
