"""What other teams read (issue 31): `bench/run.sh downstream`. A backlog of `--events` crafted relation events on the
log; then, in this one process:
1. the pull of a subscription, page after page to the end, through its selector (`subscription_read`, what the
   endpoint runs) and over HTTP (a real gunicorn, one worker), against the raw ceiling: XRANGE of every partition,
   `--limit` entries a round trip, decoded, nothing else;
2. the `notify` consumer draining the same backlog, against the `count` consumer on it (the baseline), in
   microseconds per event.
Every pull reads each event exactly once (checked)."""

from __future__ import annotations

import json
import sys
import time
import urllib.request

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


def _subscription():
    from likes_project.audit.services import Actor
    from likes_project.eventlog.models import ConsumerCheckpoint
    from likes_project.subscriptions import services
    from likes_project.subscriptions.models import Subscription

    Subscription.objects.filter(name=SUB).delete()
    ConsumerCheckpoint.objects.filter(consumer=f"sub:{SUB}").delete()
    return services.subscription_create(name=SUB, owner="bench", purpose="bench", start_from="earliest",
                                        fields=["userPseudonym", "videoId", "state", "relationVersion",
                                                "stateChangedAt"], actor=Actor("bench", "cli"))


def ceiling(limit: int) -> dict:
    """XRANGE every partition to its end, `limit` a round trip, each entry's JSON decoded."""
    from likes_project.eventlog import streams
    t0, n = time.monotonic(), 0
    for p in streams.all_partitions():
        last = "0-0"
        while batch := streams.read_after(p, last, limit):
            n, last = n + len(batch), batch[-1].entry_id
    return {"events": n, "seconds": round(time.monotonic() - t0, 3), "events_per_s": n / (time.monotonic() - t0)}


def selector_pull(sub, limit: int) -> dict:
    from likes_project.subscriptions.selectors import subscription_read
    t0, ids, cursor = time.monotonic(), set(), None
    while (page := subscription_read(sub, cursor=cursor, limit=limit)).events:
        ids.update(e["eventId"] for e in page.events)
        cursor = page.next_cursor
    seconds = time.monotonic() - t0
    return {"events": len(ids), "seconds": round(seconds, 3), "events_per_s": len(ids) / seconds}


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
    seconds = time.monotonic() - t0
    return {"events": len(ids), "seconds": round(seconds, 3), "events_per_s": len(ids) / seconds}


def consumer_drain(name: str) -> dict:
    """One consumer over every partition until nothing is left; microseconds per event."""
    from counting.notifications.projector import NotifyProjector
    from counting.services.projection import CountProjector
    from likes_project.eventlog import streams
    from likes_project.eventlog.consumer import consume_partition
    projector = {"notify": NotifyProjector, "count": CountProjector}[name]
    consumer_reset(name)
    t0, applied = time.monotonic(), 0
    for p in streams.all_partitions():
        while (r := consume_partition(projector(), partition=p, ignore_backoff=True)).dispatched:
            applied += r.dispatched
    seconds = time.monotonic() - t0
    return {"events": applied, "seconds": round(seconds, 3), "us_per_event": 1e6 * seconds / max(applied, 1)}


def _reset_notify() -> None:
    from counting.notifications.models import NotifyRelation, NotifyWindow, NotifyWindowLiker
    for model in (NotifyWindowLiker, NotifyWindow, NotifyRelation):
        model.objects.all().delete()


def report(result: dict) -> list[str]:
    pull, cons = result["pull"], result["consumers"]
    return [f"**1. Pulling a subscription to the end**, {result['events']:,} events, {pull['limit']} a page, median "
            f"of {len(pull['rounds'])} rounds\n\n" + md_table(
                ["path", "events/s:", "÷ ceiling:"],
                [["raw XRANGE + JSON decode (ceiling)", fmt(pull["ceiling"], 0), "1.00"],
                 ["subscription_read (the endpoint's selector)", fmt(pull["selector"], 0),
                  ratio(pull["selector"], pull["ceiling"], 2)],
                 ["HTTP, gunicorn 1 worker", fmt(pull["http"], 0), ratio(pull["http"], pull["ceiling"], 2)]]),
            "**2. The notify consumer per event**, against the count consumer on the same backlog (median)\n\n" +
            md_table(["consumer", "µs/event:", "events/s:"],
                     [[k, fmt(v, 1), fmt(1e6 / v, 0)] for k, v in cons.items()])]


def headline(result: dict) -> dict:
    pull, cons = result["pull"], result["consumers"]
    return {"goal": "pull near the XRANGE ceiling; notifications cheaper than counts per event",
            "figure": f"pull {fmt(pull['selector'], 0)} events/s (HTTP {fmt(pull['http'], 0)}); notify "
                      f"{fmt(cons['notify'], 1)} µs/event",
            "ceiling": f"XRANGE {fmt(pull['ceiling'], 0)} events/s; count consumer {fmt(cons['count'], 1)} µs/event",
            "ratio": f"{ratio(pull['selector'], pull['ceiling'], 2)}; notify ÷ count "
                     f"{ratio(cons['notify'], cons['count'], 2)}"}


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main(argv=None) -> int:
    run = driver.start(NAME, argv, __doc__, OPTIONS, seed=20261206)
    args = run.args
    streams_reset()
    events = backlog_events(seed=args.seed, events=args.events, users=args.users, videos=args.videos, kind="uniform",
                            rnd=0, video_prefix=VIDEO_PREFIX, user_base=USER_BASE)
    snapshots_insert("SELECT unnest(%s::text[])", [sorted({e["videoId"] for e in events})], author_id=author_id())
    publish(events)
    created = _subscription()
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
        _reset_notify()
        for name in consumers:
            run.interference.note(f"{name} consumer round {rnd + 1}")
            consumers[name].append(consumer_drain(name)["us_per_event"])
    result = {"events": len(events),
              "pull": {"limit": args.limit, "rounds": rounds,
                       **{k: _median([r[k]["events_per_s"] for r in rounds]) for k in ("ceiling", "selector", "http")}},
              "consumers": {k: _median(v) for k, v in consumers.items()}}
    wrong = [r for r in rounds for k in ("ceiling", "selector", "http") if r[k]["events"] != len(events)]
    return driver.finish(run, result, report=report, headline=headline,
                         failure=f"ERROR: {len(wrong)} pulls did not read every event once" if wrong else None)


if __name__ == "__main__":
    sys.exit(main())
