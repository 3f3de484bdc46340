"""What a soak does when, drawn from its seed (issue 33 §1): the fault windows (random start, length and overlap) and
each client's decisions. The same seed gives the same schedule and the same decisions (the order in which threads
interleave is the machine's), so a failing seed is a bug report."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass

# name -> (shortest, longest) seconds the fault holds. Every fault the drills know that can overlap others, plus a
# store that hangs instead of refusing.
FAULTS: dict[str, tuple[float, float]] = {
    "relation-shard-down": (3.0, 8.0),  # a relation shard refuses connections (ALLOW_CONNECTIONS false)
    "count-partition-down": (3.0, 10.0),  # a count partition refuses connections
    "eventlog-flush": (0.0, 0.0),  # FLUSHDB of the event log: an instant, then the lost tail is republished
    "cache-hang": (2.0, 6.0),  # the cache Redis hangs (CLIENT PAUSE ALL): every call waits out its timeout
    "pg-hang": (2.0, 6.0),  # the second PostgreSQL server hangs (SIGSTOP of its processes), then SIGCONT
    "worker-kill": (0.0, 0.0),  # SIGKILL to the Celery workers mid-batch; their supervisor restarts them
    "beat-stopped": (5.0, 15.0),  # beat killed: no sweeper, lost-tail check or scheduled job until it is back
    # Operations started mid-soak (held: the soak waits for their end when the window closes).
    "bucket-move": (5.0, 15.0),  # a bucket migration planned, approved and run by the workers
    "slot-move": (5.0, 15.0),  # a relation slot move planned, approved and run by the workers
    "snapshot": (5.0, 15.0),  # a recovery snapshot job
    "reconcile": (3.0, 10.0),  # an exact reconciliation job of the soak's videos
}
SIGNALLED = ("worker-kill", "beat-stopped")  # faults that signal processes: only those the stage started
# Faults run only when --faults names them: pg-hang stops a whole server, which the suite's other workers share.
NAMED_ONLY = ("pg-hang",)
TRAFFIC = ("uniform", "hot", "toggler", "flipper")  # spec TEST-2's four groups


@dataclass(frozen=True)
class Window:
    fault: str
    start_s: float
    length_s: float
    target: str  # the alias a database fault takes down ("" otherwise)

    def as_dict(self) -> dict:
        return asdict(self)


def faults_parse(text: str | None, *, signals: bool = True) -> list[str]:
    """The faults a list names (default: every fault but NAMED_ONLY, those of SIGNALLED only when `signals`)."""
    names = ([n for n in FAULTS if (signals or n not in SIGNALLED) and n not in NAMED_ONLY] if not text
             else [n.strip() for n in text.split(",") if n.strip()])
    unknown = [n for n in names if n not in FAULTS]
    if unknown or not names:
        raise ValueError(f"unknown faults {unknown}; the soak knows: {', '.join(FAULTS)}")
    return names


def traffic_parse(text: str | None) -> list[str]:
    names = list(TRAFFIC) if not text else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in TRAFFIC]
    if unknown or not names:
        raise ValueError(f"unknown traffic groups {unknown}; the groups are: {', '.join(TRAFFIC)}")
    return names


def schedule_draw(seed: int, *, duration_s: float, faults: list[str], targets: dict[str, list[str]]) -> list[Window]:
    """About one fault every 6 s of the run, each of `faults` at least once when the run is long enough, starting
    after a quiet fifth of the run and ending before its last fifth (the heal is judged after the run). Windows of
    different faults may overlap; one fault never overlaps itself. `targets`: the aliases a fault may take down."""
    rng = random.Random(f"soak-schedule-{seed}")
    first, last = duration_s * 0.2, duration_s * 0.8
    count = max(1, int((last - first) / 6.0))
    names = [faults[i % len(faults)] for i in range(max(count, len(faults) if duration_s >= 45 else count))]
    rng.shuffle(names)
    out: list[Window] = []
    for name in names:
        low, high = FAULTS[name]
        for _attempt in range(20):
            length = round(rng.uniform(low, high), 1)
            start = round(rng.uniform(first, max(first, last - length)), 1)
            if all(w.fault != name or start >= w.start_s + w.length_s + 1 or start + length + 1 <= w.start_s
                   for w in out):
                break
        else:
            continue  # no room left for another window of this fault
        choices = targets.get(name) or [""]
        out.append(Window(name, start, length, choices[rng.randrange(len(choices))]))
    return sorted(out, key=lambda w: (w.start_s, w.fault))


@dataclass(frozen=True)
class Decision:
    """One client step: the video (an index into the soak's videos) and the state it wants."""

    video: int
    liked: bool


def decisions(seed: int, client: str, group: str, *, videos: int, own: int) -> random.Random:
    """The random source of one client's decisions (see `next_decision`), from the seed and the client's name."""
    return random.Random(f"soak-{seed}-{group}-{client}-{videos}-{own}")


def next_decision(rng: random.Random, group: str, *, videos: int, own: int,
                  seen: Callable[[int], bool | None]) -> Decision:
    """`uniform`: any video, like 55 % / unlike 30 % / the state it already has 15 % (a no-op target). `hot`: video 0,
    the same mix. `toggler`: one of its 3 videos, a coin's state (abusive toggling). `flipper`: its own one relation
    (`own`), always flipped. `seen(video)`: what the client last saw of the video (None: nothing)."""
    if group == "flipper":
        return Decision(own, not seen(own))
    if group == "toggler":
        return Decision((own + rng.randrange(3)) % videos, rng.random() < 0.5)
    video = 0 if group == "hot" else rng.randrange(videos)
    roll, now = rng.random(), seen(video)
    if roll < 0.15 and now is not None:
        return Decision(video, now)
    return Decision(video, roll < 0.70)
