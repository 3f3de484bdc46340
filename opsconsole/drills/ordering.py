"""Spec §7's drill 7: relation events delivered out of order, through the event log itself, to the running count
projector and reverse-index projector. A relation's events carry absolute states and versions (PROJ-1, PROJ-2,
REV-2); whatever order the log delivers them in, each projection must end at the fact's state, and an event below
the version a projection already holds must change nothing (no -1 for a late like, no revived sort entry, the
liker listed at the time of the like that made the current version, never an older one's)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from django.conf import settings

from likes_project.waiting import wait_until
from opsconsole.drills.api import DrillApi
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.population import DrillUser, drill_video_create
from opsconsole.drills.scenarios import Context, Drill
from opsconsole.drills.traffic import LIKED, UNLIKED
from relations import routing as relation_routing

CONSUMED_WAIT_S = 60.0  # bounds a broken wait for the projectors to consume what the drill delivered
FINAL_WAIT_S = 30.0  # bounds the wait for the display count (a beat refresh) after the heal


@dataclass(frozen=True)
class Case:
    """One relation's commands (versions 1..n, in order) and the order its events reach the log: `early` first,
    then `late`, each of which is below a version already delivered and must change nothing."""

    label: str
    states: tuple[str, ...]
    early: tuple[int, ...]
    late: tuple[int, ...]


CASES = (
    Case("v2 before v1", (LIKED, UNLIKED), early=(2,), late=(1,)),
    Case("v3 before v1 and v2", (LIKED, UNLIKED, LIKED), early=(3,), late=(1, 2)),
    Case("v1, then v3 skipping v2", (LIKED, UNLIKED, LIKED), early=(1, 3), late=(2,)),
    Case("v1, then v4 skipping v2 and v3", (LIKED, UNLIKED, LIKED, UNLIKED), early=(1, 4), late=(3, 2)),
)
CONSUMERS_JUDGED = ("count", "reverse")


@dataclass
class Relation:
    case: Case
    user: DrillUser
    envelopes: dict[int, dict] = field(default_factory=dict)  # version -> its event as the publisher sends it
    delivered: dict[int, tuple[int, str]] = field(default_factory=dict)  # version -> (partition, entry id)
    fact: tuple = ()  # (state, version, state_changed_at)


class OutOfOrderEvents(Drill):
    """Drill 7. Injects: the outbox publisher of one relation shard (`--alias`, default the last) is paused (its
    runtime switch, audited, held until every process's switch cache expired), four drill users of that shard run
    their commands on a video of the drill's own, and the drill writes their events to the event log itself in a
    forced order: v2 before v1; v3 before v1 and v2; v1 then v3 with v2 missing; v1 then v4 with v2 and v3 missing;
    once the projectors consumed those, the missing lower versions arrive late. The publisher is then resumed and
    sends every event again in order (duplicates the projectors must absorb too).
    Checks: each projector's receipts show the early events applied and every late one stale (the forced order
    really reached them); right after the early events the count projection rows, the bucket sum and the likers list
    (newest first, at the time of the like that made the current version: REV-2) equal the facts, and the late
    events changed none of it; after the heal the displayCount and the likers list equal the facts, no event of the
    video was dead-lettered. Why: events carry absolute states and versions precisely so that delivery order never
    matters (PROJ-1, PROJ-2, REV-2, REV-6); a projector that trusted arrival order would count a late like or revive
    an unliked entry."""

    name = "out-of-order-events"
    spec_numbers = (7,)
    summary = ("v2 before v1 and v4 skipping v2, v3 delivered to the projectors: count and likers equal the facts, "
               "late events change nothing")
    commands_succeed_while = "relation events were delivered out of order"
    default_fault_s = 5.0

    def prepare(self, ctx: Context) -> None:
        from relations.models import OutboxPublisherSwitch

        shards = list(relation_routing.all_aliases())
        ctx.alias = ctx.alias or shards[-1]
        if ctx.alias not in shards:
            raise DrillRefused(f"{ctx.alias!r} is not a relation shard ({', '.join(shards)})")
        if OutboxPublisherSwitch.objects.filter(pk=ctx.alias, paused=True).exists():
            raise DrillRefused(f"the outbox publisher of {ctx.alias} is paused already; the drill would resume it "
                               "at its end (clear the switch first, or name another shard with --alias)")
        self.relations: list[Relation] = []
        self.problems: list[str] = []
        self.verdicts: dict[tuple[int, int, str], str | None] = {}  # (relation, version, consumer) -> outcome
        self.views: dict[str, dict] = {}
        self.video: str | None = None
        self.paused = False

    # --- inject -------------------------------------------------------------------------------------

    def inject(self, ctx: Context) -> str:
        population = ctx.traffic.population
        users = population.users_on(ctx.alias)[:len(CASES)]
        if len(users) < len(CASES):
            raise DrillRefused(f"the drill needs {len(CASES)} users on {ctx.alias}, the population has {len(users)}")
        self.video = drill_video_create(population, "ooo")
        self.relations = [Relation(case, user) for case, user in zip(CASES, users, strict=True)]
        self._publisher(ctx, paused=True)
        try:
            # Every process reads the switch through a cache of SWITCH_CACHE_S: past it, no publisher of this
            # shard claims a row any more (waiting out a documented bound of other processes, not an event).
            threading.Event().wait(float(settings.SWITCH_CACHE_S) + 0.5)
            self._commands(population.run_id)
            if not self.problems:
                self._hold_envelopes(ctx.alias)
            if not self.problems:
                self._deliver("early")
                self.views["early"] = self._view(population.author)
                self._deliver("late")
                self.views["late"] = self._view(population.author)
        finally:
            self._publisher(ctx, paused=False)
        return (f"publisher of {ctx.alias} paused; {len(self.relations)} relations on {self.video} delivered out of "
                f"order ({'; '.join(c.label for c in CASES)}), then resumed; {self._tally()}")

    def _publisher(self, ctx: Context, *, paused: bool) -> None:
        from likes_project.audit.services import system_actor
        from likes_project.switches import switch_set

        if paused or self.paused:
            switch_set(kind="publisher", key=ctx.alias, paused=paused, reason=f"drill {self.name}: hold the "
                       "drill's events so it can deliver them out of order", actor=system_actor("drill"))
            self.paused = paused

    def _commands(self, run_id: str) -> None:
        """The cases' commands through the API, a step of every case at a time, so the like times interleave
        (a liker listed at an older like's time would then be out of place)."""
        api = DrillApi()
        for step in range(max(len(c.states) for c in CASES)):
            for rel in self.relations:
                if step >= len(rel.case.states):
                    continue
                answer = api.like_put(rel.user, self.video, rel.case.states[step], f"drill-{run_id}-ooo-"
                                      f"{rel.user.user_id}-{step}")
                if not answer.ok or answer.body.get("relationVersion") != step + 1:
                    self.problems.append(f"{rel.case.label}: command {rel.case.states[step]} answered "
                                         f"{answer.status} {answer.body}, not v{step + 1}")
                    return

    def _hold_envelopes(self, alias: str) -> None:
        """The cases' events as the publisher would send them, from their outbox rows, all still unpublished."""
        from relations.events import aggregate_key
        from relations.models import OutboxEvent, OutboxStatus
        from relations.services.outbox import ClaimedRow, event_envelope

        for rel in self.relations:
            rows = OutboxEvent.objects.using(alias).filter(aggregate_key=aggregate_key(rel.user.user_id, self.video))
            for row in rows.order_by("relation_version"):
                if row.status != OutboxStatus.NEW:
                    self.problems.append(f"{rel.case.label}: outbox row v{row.relation_version} is {row.status}: "
                                         "published before the pause took effect, the order could not be forced")
                rel.envelopes[row.relation_version] = event_envelope(
                    ClaimedRow(row.id, str(row.event_id), row.payload, row.retry_count))
            if sorted(rel.envelopes) != list(range(1, len(rel.case.states) + 1)):
                self.problems.append(f"{rel.case.label}: outbox holds versions {sorted(rel.envelopes)}")
        self._facts()

    def _facts(self) -> None:
        from relations.models import LikeRelation

        for rel in self.relations:
            row = LikeRelation.objects.using(relation_routing.alias_for_user(rel.user.user_id)).get(
                user_id=rel.user.user_id, video_id=self.video)
            rel.fact = (row.state, row.relation_version, row.state_changed_at)

    def _deliver(self, phase: str) -> None:
        """XADD the phase's events in the case's order (the publisher's own call), nudge every consumer of the
        partitions written (as the publisher's task does), then wait until count and reverse receipted each."""
        from likes_project.eventlog import streams
        from likes_project.eventlog.registry import pass_tasks
        from likes_project.nudge import nudge

        sent = [(rel, v) for rel in self.relations for v in getattr(rel.case, phase)]
        positions = streams.publish_pipeline([rel.envelopes[v] for rel, v in sent])
        for (rel, v), (key, entry_id) in zip(sent, positions, strict=True):
            rel.delivered[v] = (streams.partition_of(key), entry_id)
        for partition in sorted({streams.partition_of(key) for key, _ in positions}):
            for task in pass_tasks():
                nudge(task, partition, debounce_s=0.0)
        if not wait_until(lambda: self._receipts(sent), timeout_s=CONSUMED_WAIT_S, poll_s=0.2):
            missing = [f"{c} {self.relations[i].case.label} v{v}" for (i, v, c), o in self.verdicts.items()
                       if o is None]
            self.problems.append(f"the {phase} events were not all consumed within {CONSUMED_WAIT_S:.0f} s: "
                                 f"{missing[:8]}")

    def _receipts(self, sent) -> bool:
        """Each projector's verdict on each delivered entry, from its receipt (None: not consumed yet)."""
        from counting.selectors.trace import count_evidence_get, reverse_evidence_get

        for rel, v in sent:
            partition, entry_id = rel.delivered[v]
            i, uid = self.relations.index(rel), rel.user.user_id
            for consumer in CONSUMERS_JUDGED:
                if self.verdicts.get((i, v, consumer)) is not None:
                    continue
                evidence = (count_evidence_get(user_id=uid, video_id=self.video, event_id="",
                                               stream_partition=partition, entry_id=entry_id)
                            if consumer == "count" else
                            reverse_evidence_get(user_id=uid, video_id=self.video, stream_partition=partition,
                                                 entry_id=entry_id))
                self.verdicts[(i, v, consumer)] = evidence.receipt.outcome if evidence.receipt else None
        return all(o is not None for o in self.verdicts.values())

    def _view(self, author: DrillUser) -> dict:
        """What the projections hold of the drill's relations: each count projection row and reverse-index state
        row (state, version), the video's bucket sum and frozen buckets, and its likers list as the API serves it
        (userId, likedAt), newest first."""
        from counting.selectors import video_vbuckets_get
        from counting.selectors.trace import count_evidence_get, reverse_evidence_get

        rows = {}
        for rel in self.relations:
            uid = rel.user.user_id
            count = count_evidence_get(user_id=uid, video_id=self.video, event_id="", stream_partition=0, entry_id="")
            reverse = reverse_evidence_get(user_id=uid, video_id=self.video, stream_partition=0, entry_id="")
            rows[rel.case.label] = tuple((r.row.state, r.row.version) if r.row else None for r in (count, reverse))
        buckets = video_vbuckets_get(video_id=self.video)
        answer = DrillApi().likers_page(author, self.video, limit=100)
        likers = ([(i["userId"], i["likedAt"]) for i in answer.body["items"]] if answer.ok
                  else f"{answer.status} {answer.code}")
        return {"rows": rows, "bucket_sum": buckets.routed_sum, "frozen": sum(r.frozen for r in buckets.rows),
                "likers": likers}

    def _expected(self) -> dict:
        from likes_project.cursors import iso_utc

        liked = sorted(((at, rel.user.user_id) for rel in self.relations for state, _v, at in [rel.fact]
                        if state == LIKED), reverse=True)
        return {"rows": {rel.case.label: ((rel.fact[0], rel.fact[1]),) * 2 for rel in self.relations},
                "bucket_sum": len(liked), "frozen": 0, "likers": [(u, iso_utc(at)) for at, u in liked]}

    def _tally(self) -> str:
        parts = []
        for consumer in CONSUMERS_JUDGED:
            for phase, want in (("early", "applied"), ("late", "stale")):
                got = [self.verdicts.get((i, v, consumer)) for i, rel in enumerate(self.relations)
                       for v in getattr(rel.case, phase)]
                parts.append(f"{consumer} {phase} {want} {got.count(want)}/{len(got)}")
        return ", ".join(parts)

    # --- recover and judge ----------------------------------------------------------------------------

    def recover(self, ctx: Context) -> str:
        if self.paused:  # inject broke off before its own `finally` could run
            self._publisher(ctx, paused=False)
        if len(self.views) < 2:
            return f"the publisher of {ctx.alias} runs; the out-of-order delivery did not complete"
        changed = "nothing" if self.views["early"] == self.views["late"] else "SOMETHING"
        return (f"the publisher of {ctx.alias} runs (it sends the drill's events again, in order: duplicates); "
                f"the late events changed {changed}")

    def judge(self, ctx: Context, fault) -> list[str]:
        failures = super().judge(ctx, fault) + self.problems
        if self.problems or not self.views:
            return failures or ["the out-of-order delivery did not take place"]
        for i, rel in enumerate(self.relations):
            for phase, want in (("early", "applied"), ("late", "stale")):
                for v in getattr(rel.case, phase):
                    for consumer in CONSUMERS_JUDGED:
                        got = self.verdicts.get((i, v, consumer))
                        if got != want:
                            failures.append(f"{rel.case.label}: the {consumer} projector's verdict on the {phase} "
                                            f"v{v} was {got}, not {want}")
        expected = self._expected()
        for key in expected:
            if self.views["early"][key] != expected[key]:
                failures.append(f"after the early events, {key} {self.views['early'][key]}; the facts give "
                                f"{expected[key]}")
            if self.views["late"][key] != self.views["early"][key]:
                failures.append(f"the late events changed {key}: {self.views['early'][key]} -> "
                                f"{self.views['late'][key]}")
        return failures + self._final(ctx.traffic.population.author, expected)

    def _final(self, author: DrillUser, expected: dict) -> list[str]:
        """After the heal (the publisher's in-order copies consumed too): the display count and likers list equal
        the facts, and nothing of the video was dead-lettered."""
        from likes_project.eventlog.models import DeadLetter

        api = DrillApi()

        def served():
            count = api.like_count(author, self.video)
            likers = self._view(author)["likers"]
            shown = count.body.get("displayCount") if count.ok else f"{count.status} {count.code}"
            return (shown, likers) if (shown, likers) == (expected["bucket_sum"], expected["likers"]) else None

        failures = []
        if not wait_until(served, timeout_s=FINAL_WAIT_S, poll_s=0.5):
            count = api.like_count(author, self.video)
            failures.append(f"after the heal {self.video} shows displayCount {count.body} and likers "
                            f"{self._view(author)['likers']}; the facts give {expected['bucket_sum']} and "
                            f"{expected['likers']}")
        dead = DeadLetter.objects.filter(video_id=self.video).count()
        if dead:
            failures.append(f"{dead} events of {self.video} were dead-lettered")
        return failures
