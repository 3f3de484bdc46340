"""What other teams read (issue 31): `bench/run.sh downstream`. A backlog of `--events` crafted events on the log, then
in this one process: 1. a subscription pulled to its end through `subscription_read` (the endpoint's selector) and
over HTTP (gunicorn, one worker), against the raw ceiling (XRANGE of every partition, `--limit` a round trip,
decoded); 2. the `notify` consumer draining it, against the `count` consumer (µs per event); 3. the feature export
(`feature_export_run` into a temporary directory), against the raw ceiling (XRANGE, JSON encode, gzip in memory).
Every pull reads, and every export writes, each event exactly once (checked)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.request
from statistics import median

from bench.harness import driver
from bench.harness.phases import backlog_events, publish
from bench.harness.pool import Gunicorn
from bench.harness.report import fmt, md_table, ratio
from bench.harness.seed import author_id, consumer_reset, snapshots_insert, streams_reset

NAME = "downstream"
OPTIONS = {
    "events": (50_000, "backlog events", 1, 10**7), "videos": (2000, "videos of the backlog", 1, 99_999),
    "users": (20_000, "users of the backlog", 1, 10**9), "limit": (1000, "events a pull (and an XRANGE)", 1, 1000),
    "rounds": (3, "rounds of each measure", 1, 20),
}
VIDEO_PREFIX, USER_BASE, SUB = "dsb-", 8 * 10**9, "bench-downstream"
EXPORT_DIR = f"{tempfile.gettempdir()}/likes-bench-exports"  # never the development .data/exports


def _subscription_drop(name: str) -> None:
    from likes_project.eventlog.models import ConsumerCheckpoint
    from likes_project.subscriptions.models import Subscription

    Subscription.objects.filter(name=name).delete()
    ConsumerCheckpoint.objects.filter(consumer=f"sub:{name}").delete()


def rate(t0: float, events: int, **extra) -> dict:
    """`events` since monotonic `t0`: how many, the seconds, events/s."""
    seconds = time.monotonic() - t0
    return {"events": events, "seconds": round(seconds, 3), "events_per_s": events / seconds, **extra}


def ceiling(limit: int, *, encode: bool = False) -> dict:
    """XRANGE every partition to its end, `limit` a round trip, decoded (`encode`: and gzipped JSON in memory)."""
    import gzip
    import io

    from likes_project.eventlog import streams
    t0, n = time.monotonic(), 0
    with gzip.GzipFile(fileobj=io.BytesIO(), mode="wb", compresslevel=6, mtime=0) as gz:
        for p in streams.all_partitions():
            last = "0-0"
            while batch := streams.read_after(p, last, limit):
                if encode:
                    gz.writelines(json.dumps(e.event, separators=(",", ":")).encode() + b"\n" for e in batch)
                n, last = n + len(batch), batch[-1].entry_id
    return rate(t0, n)


def selector_pull(sub, limit: int) -> dict:
    from likes_project.subscriptions.selectors import subscription_read
    t0, ids, cursor = time.monotonic(), set(), None
    while (page := subscription_read(sub, cursor=cursor, limit=limit)).events:
        ids.update(e["eventId"] for e in page.events)
        cursor = page.next_cursor
    return rate(t0, len(ids))


def http_pull(port: int, token: str, limit: int) -> dict:
    t0, ids, after = time.monotonic(), set(), ""
    while True:
        url = f"http://127.0.0.1:{port}/internal/v1/subscriptions/{SUB}/events?limit={limit}{after}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            page = json.loads(resp.read())
        if not page["events"]:
            break
        ids.update(e["eventId"] for e in page["events"])
        after = "&after=" + urllib.request.quote(page["nextCursor"])
    return rate(t0, len(ids))


def consumer_drain(name: str) -> dict:
    """One consumer over every partition from the start (notify: its state emptied); µs per event."""
    from counting.notifications.models import NotifyRelation, NotifyWindow, NotifyWindowLiker
    from counting.notifications.projector import NotifyProjector
    from counting.services.projection import CountProjector
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition
    projector = {"notify": NotifyProjector, "count": CountProjector}[name]
    consumer_reset(name)
    for model in (NotifyWindowLiker, NotifyWindow, NotifyRelation) if name == "notify" else ():
        model.objects.all().delete()
    t0, applied = time.monotonic(), 0
    for p in streams.all_partitions():
        while (r := consume_partition(projector(), partition=p, ignore_backoff=True)).dispatched:
            applied += r.dispatched
    seconds = time.monotonic() - t0
    return {"events": applied, "seconds": round(seconds, 3), "us_per_event": 1e6 * seconds / max(applied, 1)}


def export_run() -> dict:
    """`feature_export_run` over the whole backlog from a fresh subscription, `now` past its last period's grace."""
    from django.conf import settings

    from counting.features import policy, services
    _subscription_drop(policy.SUBSCRIPTION)
    shutil.rmtree(EXPORT_DIR, ignore_errors=True)
    t0 = time.monotonic()
    report = services.feature_export_run(now=time.time() + settings.FEATURE_EXPORT_FILE_S
                                         + settings.FEATURE_EXPORT_GRACE_S + 1)
    return rate(t0, sum(f["rows"] for f in report.files), files=len(report.files))


def report(result: dict) -> list[str]:
    pull, cons, export = result["pull"], result["consumers"], result["export"]
    return [f"**1. Pulling a subscription to the end**, {result['events']:,} events, {pull['limit']} a page, median "
            f"of {len(pull['rounds'])} rounds\n\n" + md_table(
                ["path", "events/s:", "÷ ceiling:"],
                [["raw XRANGE + JSON decode (ceiling)", fmt(pull["ceiling"], 0), "1.00"],
                 ["subscription_read (the endpoint's selector)", fmt(pull["selector"], 0),
                  ratio(pull["selector"], pull["ceiling"], 2)],
                 ["HTTP, gunicorn 1 worker", fmt(pull["http"], 0), ratio(pull["http"], pull["ceiling"], 2)]]),
            "**2. The notify consumer per event**, against the count consumer on the same backlog (median)\n\n" +
            md_table(["consumer", "µs/event:", "events/s:"],
                     [[k, fmt(v, 1), fmt(1e6 / v, 0)] for k, v in cons.items()]),
            "**3. The feature export**, the backlog into gzip JSON Lines files through the storage (median)\n\n" +
            md_table(["path", "events/s:", "÷ ceiling:"],
                     [["raw XRANGE + JSON encode + gzip in memory (ceiling)", fmt(export["ceiling"], 0), "1.00"],
                      ["feature_export_run", fmt(export["export"], 0), ratio(export["export"], export["ceiling"], 2)]])]


def headline(result: dict) -> dict:
    pull, cons, export = result["pull"], result["consumers"], result["export"]
    return {"goal": "pull and export near their ceilings; notifications cheaper than counts per event",
            "figure": f"pull {fmt(pull['selector'], 0)} events/s (HTTP {fmt(pull['http'], 0)}); notify "
                      f"{fmt(cons['notify'], 1)} µs/event; export {fmt(export['export'], 0)} events/s",
            "ceiling": f"XRANGE {fmt(pull['ceiling'], 0)} events/s; count consumer {fmt(cons['count'], 1)} µs/event; "
                       f"XRANGE + gzip {fmt(export['ceiling'], 0)} events/s",
            "ratio": f"{ratio(pull['selector'], pull['ceiling'], 2)}; notify ÷ count "
                     f"{ratio(cons['notify'], cons['count'], 2)}; export "
                     f"{ratio(export['export'], export['ceiling'], 2)}"}


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261206, env=lambda args: {
        "FEATURE_EXPORT_STORAGE_BACKEND": "filesystem", "FEATURE_EXPORT_DIR": EXPORT_DIR})
    args = run.args
    streams_reset()
    events = backlog_events(seed=args.seed, events=args.events, users=args.users, videos=args.videos, kind="uniform",
                            rnd=0, video_prefix=VIDEO_PREFIX, user_base=USER_BASE)
    snapshots_insert("SELECT unnest(%s::text[])", [sorted({e["videoId"] for e in events})], author_id=author_id())
    publish(events)
    from likes_project.audit.services import Actor
    from likes_project.subscriptions.services import subscription_create
    _subscription_drop(SUB)
    created = subscription_create(name=SUB, owner="bench", purpose="bench", start_from="earliest",
                                  fields=["userPseudonym", "videoId", "state", "relationVersion", "stateChangedAt"],
                                  actor=Actor("bench", "cli"))
    rounds = []
    with Gunicorn("likes_project.wsgi:application", 1, driver.RESULTS_DIR, label="pull") as server:
        for rnd in range(args.rounds):
            run.interference.note(f"pull round {rnd + 1}")
            one = {"ceiling": ceiling(args.limit), "selector": selector_pull(created.subscription, args.limit),
                   "http": http_pull(server.port, created.token, args.limit)}
            rounds.append(one)
            run.log(f"pull round {rnd + 1}: " + ", ".join(f"{k} {v['events_per_s']:.0f}/s" for k, v in one.items()))
    consumers: dict[str, list[float]] = {"notify": [], "count": []}
    for rnd in range(args.rounds):
        for name in consumers:
            run.interference.note(f"{name} consumer round {rnd + 1}")
            consumers[name].append(consumer_drain(name)["us_per_event"])
    exports = []
    for rnd in range(args.rounds):
        run.interference.note(f"export round {rnd + 1}")
        exports.append({"ceiling": ceiling(1000, encode=True), "export": export_run()})
        run.log(f"export round {rnd + 1}: " + ", ".join(f"{k} {v['events_per_s']:.0f}/s"
                                                         for k, v in exports[-1].items()))
    shutil.rmtree(EXPORT_DIR, ignore_errors=True)
    result = {"events": len(events),
              "pull": {"limit": args.limit, "rounds": rounds,
                       **{k: median([r[k]["events_per_s"] for r in rounds]) for k in ("ceiling", "selector", "http")}},
              "consumers": {k: median(v) for k, v in consumers.items()},
              "export": {"rounds": exports, **{k: median([r[k]["events_per_s"] for r in exports])
                                               for k in ("ceiling", "export")}}}
    wrong = [r for r in rounds for k in ("ceiling", "selector", "http") if r[k]["events"] != len(events)]
    wrong += [r for r in exports for k in ("ceiling", "export") if r[k]["events"] != len(events)]
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"ERROR: {len(wrong)} pulls or exports missed or repeated events" if wrong else None)


if __name__ == "__main__":
    sys.exit(main())
