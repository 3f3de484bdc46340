"""Commands (and the reads a client makes right after them) flowing through the public API while a
fault is injected: a few threads, each driving its own users one command at a time, so the last
acknowledged answer of a (user, video) pair is the state its relation must end in."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import connections

from opsconsole.drills.api import Answer, DrillApi
from opsconsole.drills.population import DrillUser, Population

LIKED, UNLIKED = "LIKED", "UNLIKED"

# (kind, user, answer) -> None when the answer is acceptable in the current phase, else why not.
Rule = Callable[[str, DrillUser, Answer], "str | None"]


def strict(kind: str, user: DrillUser, answer: Answer) -> str | None:
    """Outside a fault every command and every read answers 200."""
    return None if answer.ok else f"{kind} answered {answer.status} {answer.code or '(no JSON envelope)'}"


@dataclass(frozen=True)
class Ack:
    seq: int
    operation_id: str
    state: str
    version: int


@dataclass(frozen=True)
class Failed:
    seq: int
    user: DrillUser
    video_id: str
    operation_id: str
    desired: str
    status: int
    code: str
    phase: str


@dataclass
class PhaseTally:
    commands: Counter = field(default_factory=Counter)  # "200", "503 service_unavailable", ...
    reads: Counter = field(default_factory=Counter)  # "like-count 200", ...
    violations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"commands": dict(self.commands), "reads": dict(self.reads), "violations": self.violations[:20],
                "violationCount": len(self.violations)}


def _label(answer: Answer) -> str:
    return f"{answer.status} {answer.code}".strip() if not answer.ok else "200"


class Traffic:
    """Start/stop the command flow; switch its phase (and the rule answers are judged by) at any time."""

    def __init__(self, population: Population, *, threads: int = 2, rate_per_s: float = 8.0) -> None:
        self.population = population
        self.threads = threads
        self.rate_per_s = rate_per_s
        self.acks: dict[tuple[int, str], Ack] = {}
        self.failed: list[Failed] = []
        self.tallies: dict[str, PhaseTally] = {}
        self.phase = "before"
        self.rule: Rule = strict
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.crashed: list[str] = []
        self.frozen: set[tuple[int, str]] = set()  # pairs that get no further command
        self._hot: tuple[str | None, int] = (None, 0)  # (a video, how many commands in ten go to it)

    # --- control ---------------------------------------------------------------------------------

    def set_phase(self, phase: str, rule: Rule = strict) -> None:
        with self._lock:
            self.phase, self.rule = phase, rule
            self.tallies.setdefault(phase, PhaseTally())

    def start(self, phase: str = "before", rule: Rule = strict) -> None:
        self.set_phase(phase, rule)
        self._stop.clear()
        users = self.population.users
        self._workers = [threading.Thread(target=self._run, args=(users[i::self.threads],), daemon=True,
                                          name=f"drill-traffic-{i}") for i in range(self.threads)]
        for worker in self._workers:
            worker.start()

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=60)
        self._workers = []

    def hot(self, video_id: str | None, share: float) -> None:
        """Send `share` of the commands to `video_id` from now on (None: spread them again)."""
        with self._lock:
            self._hot = (video_id, round(share * 10))

    def last_seq(self) -> int:
        with self._lock:
            return max((a.seq for a in self.acks.values()), default=0)

    def freeze_acked_after(self, seq: int) -> int:
        """Send no further command for the pairs acknowledged after `seq`; returns how many."""
        with self._lock:
            self.frozen |= {key for key, ack in self.acks.items() if ack.seq > seq}
            return len(self.frozen)

    def freeze(self, keys) -> None:
        """Send no further command for the pairs `keys` ((user id, video id)); one already sent still answers."""
        with self._lock:
            self.frozen |= set(keys)

    def acked_on(self, video_id: str) -> dict[tuple[int, str], Ack]:
        """The last acknowledged answer of each pair of `video_id`, as it stands now."""
        with self._lock:
            return {key: ack for key, ack in self.acks.items() if key[1] == video_id}

    def all_frozen(self) -> bool:
        """Every pair had its one command of the fault: the traffic can send nothing more."""
        with self._lock:
            return len(self.frozen) >= len(self.population.users) * len(self.population.videos)

    def answers(self, phase: str) -> dict[str, int]:
        """A copy of the phase's command answers so far, by label (read while the clients run)."""
        with self._lock:
            tally = self.tallies.get(phase)
            return dict(tally.commands) if tally else {}

    def commands_sent(self, phase: str | None = None) -> int:
        with self._lock:
            tallies = [self.tallies[phase]] if phase else list(self.tallies.values())
            return sum(sum(t.commands.values()) for t in tallies if t)

    # --- what the pairs must end as -----------------------------------------------------------------

    def expected(self, resolved: dict[str, Ack] | None = None) -> dict[tuple[int, str], Ack]:
        """Per pair the last acknowledged answer, or a failed command that turned out to be committed
        (`resolved`: operation id -> its stored verdict) if it came later."""
        out = dict(self.acks)
        for f in self.failed:
            ack = (resolved or {}).get(f.operation_id)
            key = (f.user.user_id, f.video_id)
            if ack is not None and (key not in out or out[key].seq < ack.seq):
                out[key] = ack
        return out

    # --- the flow -----------------------------------------------------------------------------------

    def _run(self, users: list[DrillUser]) -> None:
        api = DrillApi()
        videos = self.population.videos
        interval = self.threads / self.rate_per_s
        try:
            skipped = 0
            for n in itertools.count():
                if self._stop.is_set() or not users:
                    return
                started = time.monotonic()
                user = users[n % len(users)]
                video_id = videos[(n // len(users) + user.user_id) % len(videos)]
                hot, in_ten = self._hot
                if hot is not None and n % 10 < in_ten:
                    video_id = hot
                if (user.user_id, video_id) in self.frozen and skipped < len(users) * len(videos):
                    skipped += 1  # the next pair at once; every pair frozen: fall through to the pacing
                    continue
                skipped = 0
                self._one(api, user, video_id)
                # Pacing, not a measurement: keep under the per-relation rate limit whatever the latency.
                self._stop.wait(max(0.0, interval - (time.monotonic() - started)))
        except Exception as exc:  # noqa: BLE001 - a crash of the drill's own client is a FAIL, never silent
            with self._lock:
                self.crashed.append(f"{exc.__class__.__name__}: {exc}")
        finally:
            connections.close_all()  # this thread's connections

    def _judge(self, kind: str, user: DrillUser, answer: Answer) -> tuple[str, PhaseTally]:
        with self._lock:
            phase, rule = self.phase, self.rule
            tally = self.tallies[phase]
        verdict = rule(kind, user, answer)
        with self._lock:
            if kind == "command":
                tally.commands[_label(answer)] += 1
            else:
                tally.reads[f"{kind} {_label(answer)}"] += 1
            if answer.status >= 500 and answer.status != 503:
                verdict = verdict or f"{kind} answered {answer.status}"
            if answer.status >= 400 and not answer.is_envelope:
                verdict = verdict or f"{kind} answered {answer.status} without the JSON error envelope"
            if verdict:
                tally.violations.append(f"[{phase}] user {user.username}: {verdict}")
        return phase, tally

    def _violation(self, tally: PhaseTally, phase: str, text: str) -> None:
        with self._lock:
            tally.violations.append(f"[{phase}] {text}")

    def _one(self, api: DrillApi, user: DrillUser, video_id: str) -> None:
        key = (user.user_id, video_id)
        with self._lock:
            if key in self.frozen:
                return
            if self.phase == "fault":
                # One command per pair while the fault holds: its end state then rests on the event the
                # fault had to carry through (a later command would paper over a lost one, since events
                # carry absolute states).
                self.frozen.add(key)
            current = self.acks.get(key)
            seq = next(self._seq)
        desired = UNLIKED if current is not None and current.state == LIKED else LIKED
        operation_id = f"drill-{self.population.run_id}-{seq}"
        answer = api.like_put(user, video_id, desired, operation_id)
        phase, tally = self._judge("command", user, answer)
        if not answer.ok:
            with self._lock:
                self.failed.append(Failed(seq, user, video_id, operation_id, desired, answer.status, answer.code,
                                          phase))
            return
        ack = Ack(seq, operation_id, answer.body["state"], int(answer.body["relationVersion"]))
        with self._lock:
            self.acks[key] = ack
        # Read-your-write on the fact, and through the batch query with the version just acknowledged.
        read = api.relation_get(user, video_id)
        self._judge("like-relation", user, read)
        if read.ok and (read.body["state"], read.body["relationVersion"]) != (ack.state, ack.version):
            self._violation(tally, phase, f"read-your-write: {user.username}/{video_id} acknowledged "
                                          f"{ack.state} v{ack.version}, read {read.body['state']} "
                                          f"v{read.body['relationVersion']}")
        batch = api.batch_query(user, [video_id], {video_id: ack.version})
        self._judge("batch-query", user, batch)
        if batch.ok:
            item = batch.body["items"][0]
            if (item["myState"], item["relationVersion"]) != (ack.state, ack.version):
                self._violation(tally, phase, f"batch myState: {user.username}/{video_id} acknowledged {ack.state} "
                                              f"v{ack.version}, read {item['myState']} v{item['relationVersion']}")
        self._judge("like-count", user, api.like_count(user, video_id))
