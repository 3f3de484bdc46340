"""Spec §7's drill 14 (REPAIR-3, REPAIR-4, REPAIR-6, REC-3, REC-4, REC-5; T27, T29): a repair from the facts
while the live count consumer keeps applying the drill's commands, and the online coverage rules judged with the
projection equal to, behind and ahead of the source snapshot. The repair's catch-up (the tail after its scan, folded
in by version) and its switch under the cut (the projection rows and buckets set) must overwrite nothing the live
consumer applied, and the consumer nothing the repair set: no acknowledged like lost or counted twice."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from django.conf import settings

from likes_project.waiting import wait_until
from opsconsole.drills.api import Answer, DrillApi
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.population import DrillUser, drill_video_create
from opsconsole.drills.scenarios import Context, Drill
from opsconsole.drills.traffic import LIKED, UNLIKED, Rule, strict

REPAIR_WAIT_S = 120.0  # bounds a broken wait for the workers to run the approved repair
PROJECTED_WAIT_S = 30.0  # bounds a broken wait for the live consumer to project a relation
HOT_SHARE = 0.6  # of the commands sent to the repaired video while its repair runs


@dataclass
class CoverageCase:
    """One online coverage run (REC-4) of the drill's videos: what the projection was against the source, the
    verdict the rules give, and the relation (user, the verdict's words) it must name, if it must fail."""

    name: str
    expected: str  # PASSED or FAILED
    user_id: int | None = None
    reason: str = ""  # FAILED: the words of the relation's verdict; PASSED: of its skipped entry, if one is due
    run_id: int | None = None
    status: str = ""
    rows: list[dict] = field(default_factory=list)  # the relations the run found wrong
    skipped: list[dict] = field(default_factory=list)

    def failures(self) -> list[str]:
        what = f"coverage with the projection {self.name} (run {self.run_id})"
        if self.status != self.expected:
            return [f"{what} was {self.status or 'not run'}, not {self.expected}: "
                    f"{'a false PASS' if self.status == 'PASSED' else 'a false FAIL'} ({self.rows[:3]})"]
        if self.expected == "FAILED":
            named = [r for r in self.rows if r["userId"] == self.user_id and self.reason in r["verdict"]]
            others = [r for r in self.rows if r["userId"] != self.user_id]
            out = [] if named else [f"{what} did not name user {self.user_id} as {self.reason!r}: {self.rows[:3]}"]
            return out + ([f"{what} also failed relations nothing damaged (false FAIL): {others[:3]}"]
                          if others else [])
        if self.reason and not any(s.get("userId") == self.user_id and self.reason in s.get("reason", "")
                                   for s in self.skipped):
            return [f"{what} did not list user {self.user_id} as skipped ({self.reason}): {self.skipped[:3]}"]
        return []


class RepairUnderConsumption(Drill):
    """Drill 14. Injects: one LIKED relation of a drill video (its pair then left alone by the traffic) loses its
    count projection row, its bucket decremented with it (damage by hand, as in the projection itself); an online
    coverage run of the video must FAIL naming it a consumption gap (behind the source, consumed: no false PASS) and
    nothing else (the in-flight commands of the others are waited for: no false FAIL). A repair from the facts is
    requested for that diff (drill-requester) and approved (drill-approver, never the requester); the workers run it
    while most commands go to that video. Then, on a video of the drill's own outside the traffic, coverage with the
    projection equal to the source (PASS; the same version with another state FAILS), ahead of it (the source row
    wound back to the version before, as a source snapshot taken earlier reads it: PASS on the outbox's evidence;
    a projected version no outbox row has FAILS) and behind it (the count consumer paused by its runtime switch,
    audited, a command published but not consumed: PASS with the relation listed as skipped); every row edited is
    put back, the consumer resumed. Checks: the repair SUCCEEDED with its projection layer rebuilt, its own exact run
    PASSED, no live row newer than what it wrote (its report's `newerThanFacts`), commands on the video acknowledged
    while it ran, the lost row back at the fact's version, its diffs FIXED; every coverage verdict as the rules give
    it; then the runner's exact comparison. Why: a repair's baseline read before newer events must never overwrite
    them (REPAIR-4), and an online check must neither pass a gap nor fail a projection that is legitimately ahead or
    in flight (REC-4)."""

    name = "repair-under-consumption"
    spec_numbers = (14,)
    summary = ("a lost projection row found by coverage and repaired from the facts while commands flow; coverage "
               "judged with the projection equal to, behind and ahead of the source")
    default_fault_s = 2.0  # the work is done while injecting; the fault phase only shows commands go on after it

    def prepare(self, ctx: Context) -> None:
        from counting.services.projection import COUNT_CONSUMER
        from likes_project.eventlog.models import ConsumerSwitch
        from reconciliation.models import RepairRequest, RepairStatus

        if ConsumerSwitch.objects.filter(pk=COUNT_CONSUMER, paused=True).exists():
            raise DrillRefused("the count consumer is paused: a repair cannot cut, and the drill would resume it")
        if RepairRequest.objects.filter(status__in=[RepairStatus.APPROVED, RepairStatus.RUNNING]).exists():
            raise DrillRefused("a repair is approved or running; run the drill once it has finished")
        self.problems: list[str] = []
        self.cases: list[CoverageCase] = []
        self.damaged: tuple[int, str, int] | None = None  # (user, video, the fact's version)
        self.repair = None
        self.during = 0  # pairs of the repaired video acknowledged while the repair ran
        self.restored: dict | None = None
        self.undo: list = []  # what recover puts back if inject broke off: callables
        self.paused = False

    def rule(self, ctx: Context) -> Rule:
        def judged(kind: str, user: DrillUser, answer: Answer) -> str | None:
            if kind == "command" and answer.status == 503 and answer.code == "write_barrier":
                return None  # met the repair's (or its exact run's) barrier past RECONCILE_BARRIER_MAX_MS
            return strict(kind, user, answer)
        return judged

    # --- inject -------------------------------------------------------------------------------------

    def inject(self, ctx: Context) -> str:
        # The drill's own phase while it works: commands flow without limit, one meeting the barrier may be 503.
        ctx.traffic.set_phase("repair", self.rule(ctx))
        video = ctx.traffic.population.videos[0]
        self._damage(ctx, video)
        if not self.problems:
            self._find(video)
        if not self.problems:
            self._repair(ctx, video)
        self._coverage_cases(ctx)
        return (f"projection row of user {self.damaged[0] if self.damaged else '?'} on {video} lost with its bucket; "
                f"repair {self.repair.pk if self.repair else '-'} {self.repair.status if self.repair else 'not run'} "
                f"({self._repair_figures()}); coverage runs: "
                + ", ".join(f"{c.name} {c.status or '-'} (run {c.run_id})" for c in self.cases))

    def _repair_figures(self) -> str:
        if not self.repair:
            return ""
        rebuild = (self.repair.result or {}).get("rebuild", {})
        return (f"{self.during} pairs of the video acknowledged while it ran, tail folded {rebuild.get('tailFolded')}, "
                f"newer than its facts {len(rebuild.get('newerThanFacts', []))}, barrier held "
                f"{rebuild.get('barrierHeldMs')} ms")

    def _damage(self, ctx: Context, video: str) -> None:
        """A LIKED pair of `video` the traffic acknowledged, frozen (no further command), projected at the fact's
        version; then its projection row deleted and its bucket decremented."""
        from django.db.models import F

        from counting.models import LikeCountProjection, VideoLikeCountVbucket

        traffic = ctx.traffic
        for _ in range(5):
            liked = wait_until(lambda: sorted(k for k, a in traffic.acked_on(video).items()
                                              if a.state == LIKED and k not in traffic.frozen), timeout_s=30)
            if not liked:
                break
            key = liked[0]
            traffic.freeze([key])
            # A command already past the freeze check completes within its round trip (well under half a second).
            threading.Event().wait(0.5)
            ack = traffic.acked_on(video)[key]
            if ack.state == LIKED and _fact(*key) == (LIKED, ack.version):
                break
        else:
            liked = None
        if not liked:
            self.problems.append(f"no LIKED pair of {video} held still for the damage")
            return
        user_id, version = key[0], ack.version
        gen, alias, vb = _placed(user_id, video)
        row = LikeCountProjection.objects.using(alias).filter(generation=gen.generation, user_id=user_id,
                                                               video_id=video)
        if not wait_until(lambda: row.filter(projected_state=LIKED, projected_version=version).exists(),
                          timeout_s=PROJECTED_WAIT_S):
            self.problems.append(f"user {user_id} {video} LIKED v{version} was not projected within "
                                 f"{PROJECTED_WAIT_S:.0f} s")
            return
        deleted, _ = row.delete()
        VideoLikeCountVbucket.objects.using(alias).filter(generation=gen.generation, video_id=video,
                                                          virtual_bucket=vb).update(active_count=F("active_count") - 1)
        self.damaged = (user_id, video, version)
        if not deleted:
            self.problems.append(f"the projection row of user {user_id} {video} was gone before the damage")

    def _find(self, video: str) -> None:
        user_id = self.damaged[0]
        case = CoverageCase("behind, consumed but not projected", "FAILED", user_id, "consumption gap")
        self.find_run = _coverage(case, [video])
        self.cases.append(case)
        if case.status != "FAILED":
            self.problems.append(f"coverage did not find the lost row: {case.status}")

    def _repair(self, ctx: Context, video: str) -> None:
        """Requested for the found diffs and approved by two system actors; the workers run it while most commands
        go to `video`."""
        from likes_project.audit.services import system_actor
        from reconciliation.services import repair

        diffs = list(self.find_run.diffs.values_list("pk", flat=True))
        req = repair.repair_request(actor=system_actor("drill-requester"), source="facts", diff_ids=diffs,
                                    reason=f"drill {self.name}: a projection row lost by hand")
        traffic = ctx.traffic
        traffic.hot(video, HOT_SHARE)
        try:
            before = traffic.acked_on(video)
            req = repair.repair_approve(repair_id=req.pk, actor=system_actor("drill-approver"))
            self.repair = repair.repair_wait(req.pk, timeout_s=REPAIR_WAIT_S)
            after = traffic.acked_on(video)
        finally:
            traffic.hot(None, 0)
        self.during = sum(1 for k, a in after.items() if before.get(k) != a)
        if self.repair.finished and not (self.repair.result or {}).get("rebuild", {}).get("tailFolded"):
            ctx.notes.append("the repair's catch-up folded nothing this run: no command of the video committed "
                             "between its scan of the facts and its cut (the switch was judged all the same)")
        user_id = self.damaged[0]
        gen, alias, _vb = _placed(user_id, video)
        self.restored = _projected(alias, gen.generation, user_id, video)

    def _coverage_cases(self, ctx: Context) -> None:
        """Equal, ahead and behind on a video of the drill's own: two users' commands through the API (u1 LIKED
        then UNLIKED, u2 LIKED), projected; each case edits one row by hand and puts it back."""
        from counting.services.projection import COUNT_CONSUMER

        population = ctx.traffic.population
        u1, u2 = population.users[0], population.users[-1]
        video = drill_video_create(population, "cov")
        api = DrillApi()
        for i, (user, state) in enumerate(((u1, LIKED), (u1, UNLIKED), (u2, LIKED))):
            answer = api.like_put(user, video, state, f"drill-{population.run_id}-cov-{i}")
            if not answer.ok:
                self.problems.append(f"the coverage video's command {state} answered {answer.status} {answer.code}")
                return
        gen, a1, _ = _placed(u1.user_id, video)
        _gen, a2, _ = _placed(u2.user_id, video)
        if not wait_until(lambda: (_projected(a1, gen.generation, u1.user_id, video) == (UNLIKED, 2)
                                   and _projected(a2, gen.generation, u2.user_id, video) == (LIKED, 1)),
                          timeout_s=PROJECTED_WAIT_S):
            self.problems.append(f"the coverage video's relations were not projected within {PROJECTED_WAIT_S:.0f} s")
            return

        def projection_set(alias, user_id, state, version):
            from counting.models import LikeCountProjection

            LikeCountProjection.objects.using(alias).filter(generation=gen.generation, user_id=user_id,
                                                            video_id=video).update(projected_state=state,
                                                                                   projected_version=version)

        def run(case: CoverageCase, edit=None, put_back=None) -> None:
            if edit:
                self.undo.append(put_back)
                edit()
            try:
                _coverage(case, [video])
            finally:
                if put_back:
                    put_back()
                    self.undo.remove(put_back)
            self.cases.append(case)

        run(CoverageCase("equal", "PASSED"))
        run(CoverageCase("equal, another state at the same version", "FAILED", u2.user_id,
                         "same version, different state"),
            lambda: projection_set(a2, u2.user_id, UNLIKED, 1), lambda: projection_set(a2, u2.user_id, LIKED, 1))
        # The source as a snapshot read before u1's v2 committed reads it: LIKED v1 (the projection holds v2).
        fact = _fact(u1.user_id, video)  # (UNLIKED, 2): put back exactly as it is

        def source_now():
            _fact_set(u1.user_id, video, *fact)

        self.undo.append(source_now)
        _fact_set(u1.user_id, video, LIKED, 1)
        try:
            run(CoverageCase("ahead, with the outbox's evidence", "PASSED"))
            run(CoverageCase("ahead, a version no outbox row has", "FAILED", u1.user_id,
                             "above the source without outbox evidence"),
                lambda: projection_set(a1, u1.user_id, UNLIKED, 7), lambda: projection_set(a1, u1.user_id, UNLIKED, 2))
        finally:
            source_now()
            self.undo.remove(source_now)
        self._behind_paused(api, population, video, u2, a2, gen.generation, COUNT_CONSUMER)

    def _behind_paused(self, api, population, video, user, alias, generation, consumer) -> None:
        """The count consumer paused (its runtime switch, audited); u2's UNLIKED v2 published, not consumed: an
        event in flight, listed as skipped, no diff. Resumed, it must project v2."""
        from reconciliation.services import evidence

        self._consumer(consumer, paused=True)
        try:
            # Every process reads the switch through a cache of SWITCH_CACHE_S: past it no pass dispatches.
            threading.Event().wait(float(settings.SWITCH_CACHE_S) + 0.5)
            answer = api.like_put(user, video, UNLIKED, f"drill-{population.run_id}-cov-behind")
            if not answer.ok:
                self.problems.append(f"the paused case's command answered {answer.status} {answer.code}")
                return
            key = (user.user_id, video, 2)
            published = wait_until(lambda: (evidence.outbox_evidence([key]).get(key) or {}).get("status") == "SENT",
                                   timeout_s=PROJECTED_WAIT_S)
            if not published or _projected(alias, generation, user.user_id, video) != (LIKED, 1):
                self.problems.append("the paused case's event was not published, or was consumed while paused")
            self.cases.append(CoverageCase("behind, in flight (consumer paused)", "PASSED", user.user_id,
                                           "published, not yet consumed"))
            _coverage(self.cases[-1], [video])
        finally:
            self._consumer(consumer, paused=False)
        if not wait_until(lambda: _projected(alias, generation, user.user_id, video) == (UNLIKED, 2),
                          timeout_s=PROJECTED_WAIT_S):
            self.problems.append("the count consumer did not project the paused case's event once resumed")

    def _consumer(self, consumer: str, *, paused: bool) -> None:
        from likes_project.audit.services import system_actor
        from likes_project.eventlog.services import consumer_switch_set

        if paused or self.paused:
            consumer_switch_set(consumer=consumer, paused=paused, actor=system_actor("drill"),
                                reason=f"drill {self.name}: " + ("coverage with the projection behind" if paused
                                                                 else "resume"))
            self.paused = paused

    # --- recover and judge ----------------------------------------------------------------------------

    def recover(self, ctx: Context) -> str:
        from counting.services.projection import COUNT_CONSUMER

        out = []
        for put_back in reversed(self.undo):  # inject broke off between an edit and its undo
            put_back()
            out.append("a row the drill edited put back")
        self.undo = []
        if self.paused:
            self._consumer(COUNT_CONSUMER, paused=False)
            out.append("the count consumer resumed")
        ctx.traffic.hot(None, 0)
        return "; ".join(out) or "nothing left to undo: every edited row was put back, the count consumer runs"

    def judge(self, ctx: Context, fault) -> list[str]:
        from reconciliation.models import CheckDiff, CheckRun

        failures = super().judge(ctx, fault) + self.problems
        for case in self.cases:
            failures += case.failures()
        names = {c.name for c in self.cases}
        if len(names) != 6:
            failures.append(f"coverage cases run: {sorted(names)}; six were due")
        req = self.repair
        if req is None:
            return [*failures, "no repair was run"]
        result = req.result or {}
        rebuild = result.get("rebuild", {})
        if req.status != "SUCCEEDED":
            failures.append(f"repair {req.pk} ended {req.status}: {req.error}")
        if (result.get("layers") or {}).get("projection") != [self.damaged[1]]:
            failures.append(f"repair {req.pk} rebuilt the layers {result.get('layers')}, not the projection of "
                            f"{self.damaged[1]}")
        if rebuild.get("newerThanFacts"):
            failures.append(f"repair {req.pk} found live rows newer than the facts it wrote (it overwrote what the "
                            f"consumer applied): {rebuild['newerThanFacts'][:3]}")
        verify = CheckRun.objects.filter(pk=req.verify_run_id).first()
        if verify is None or verify.status != "PASSED":
            failures.append(f"the repair's exact run was {verify.status if verify else 'not run'}")
        if self.during < 1:
            failures.append("no command of the repaired video was acknowledged while the repair ran")
        if self.restored != (LIKED, self.damaged[2]):
            failures.append(f"the lost row is {self.restored} after the repair, not LIKED v{self.damaged[2]}")
        open_diffs = CheckDiff.objects.filter(repair_id=req.pk).exclude(status="FIXED").count()
        if open_diffs:
            failures.append(f"{open_diffs} diffs of repair {req.pk} are not FIXED")
        return failures


# --- helpers ----------------------------------------------------------------------------------------


def _placed(user_id: int, video_id: str):
    """(the active count generation, the partition and virtual bucket holding this relation)."""
    from counting import routing

    gen = routing.load_generation()
    vb = routing.virtual_bucket(gen.space, video_id, user_id)
    return gen, gen.routes[vb].partition, vb


def _projected(alias: str, generation: int, user_id: int, video_id: str) -> tuple[str, int] | None:
    from counting.models import LikeCountProjection

    row = LikeCountProjection.objects.using(alias).filter(generation=generation, user_id=user_id,
                                                          video_id=video_id).values_list(
        "projected_state", "projected_version").first()
    return tuple(row) if row else None


def _fact(user_id: int, video_id: str) -> tuple[str, int] | None:
    from relations import routing
    from relations.models import LikeRelation

    row = LikeRelation.objects.using(routing.alias_for_user(user_id)).filter(
        user_id=user_id, video_id=video_id).values_list("state", "relation_version").first()
    return tuple(row) if row else None


def _fact_set(user_id: int, video_id: str, state: str, version: int) -> None:
    """By hand, as a source snapshot taken at another moment reads the relation (a video of the drill's own)."""
    from relations import routing
    from relations.models import LikeRelation

    LikeRelation.objects.using(routing.alias_for_user(user_id)).filter(user_id=user_id, video_id=video_id).update(
        state=state, relation_version=version)


def _coverage(case: CoverageCase, videos: list[str]):
    """An online coverage run of `videos`, as `manage.py reconcile --mode coverage` starts it (its ops job, run
    here or on a worker); its verdict, wrong relations and skipped ones recorded in `case`."""
    from likes_project.audit.services import system_actor
    from likes_project.opsjobs.services import job_run_inline, job_start
    from reconciliation.jobs import job_for_mode
    from reconciliation.models import CheckRun
    from reconciliation.services.checks import scope_normalize

    job = job_start(kind=job_for_mode("coverage"), actor=system_actor("drill"),
                    params={"mode": "coverage", "scope": scope_normalize(videos=videos)})
    job = job_run_inline(job.pk, wait_s=60.0)
    run = CheckRun.objects.get(pk=job.params["runId"])
    case.run_id, case.status, case.skipped = run.pk, run.status, list(run.skipped)
    case.rows = [r for d in run.diffs.all() for r in d.detail.get("relations", [])]
    return run
