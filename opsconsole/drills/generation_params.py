"""Spec §7 drill 10 (T20, T33, BKT-6, REV-4, INV-15): the count projection's hash contract and the reverse index's R
changed while commands flow. A new seed (and, when asked, a new V) must never change the bound bucket space or the
ACTIVE generation's results, a new R never the ACTIVE reverse generation's; the only way to either is a SHADOW
generation built from the facts, caught up, verified and CAS-switched in; counts and likers must be exact after the
switches (the runner's comparison) and an old likers cursor must never be read against the new R."""

from __future__ import annotations

import uuid

from django.db import DatabaseError, transaction

from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.scenarios import Context, Drill


class _RolledBack(Exception):
    """Raised inside the in-place attempt's transaction so that whatever it wrote is rolled back."""


class ReverseShardsChange:
    """The reverse-index half of drill 10: another R through the generation lifecycle's engine, slice by slice, with
    a look between slices (see GenerationParamsChange)."""

    def reverse_prepare(self) -> None:
        from counting import routing
        from counting.services.reverse.rebuild import LIFECYCLE
        from likes_project.generations import building_row

        if building_row(LIFECYCLE) is not None:
            raise DrillRefused("a reverse-index rebuild is running; wait for it to finish")
        self.rev_old = routing.reverse_active()
        # Another R, bounded over repeated runs: twice it up to 16, half of it from there (8 -> 16 -> 8 ...).
        self.shards = self.rev_old.shards * 2 if self.rev_old.shards < 16 else self.rev_old.shards // 2
        self.rev_new: int | None = None
        self.rev_looks = 0
        self.rev_broken: list[str] = []
        self.rev_error = ""
        self.rev_cursor: tuple[str, str] | None = None  # (video, a cursor the old generation issued)
        self.rev_after: dict = {}

    def _page(self, ctx: Context, video: str, cursor: str | None = None):
        from counting.selectors import likers

        author = ctx.traffic.population.author
        return likers.likers_page_list(caller_id=author.user_id, video_id=video, limit=1, cursor=cursor)

    def _old_cursor(self, ctx: Context) -> None:
        """A cursor of the old generation, from the first drill video with more than one liker. The likers index is
        a projection: on a slow machine the traffic's second liker of any video may not be in it yet, so the drill
        waits for one (bounded: without it, the verdict says `n/a` for the old cursor)."""
        from counting.selectors import likers
        from likes_project.waiting import wait_until

        def found() -> bool:
            for video in ctx.traffic.population.videos:
                page = self._page(ctx, video)
                if not page.exhausted:
                    self.rev_cursor = (video, likers.likers_cursor_encode(
                        caller_id=ctx.traffic.population.author.user_id, video_id=video, page=page))
                    return True
            return False

        wait_until(found, timeout_s=30.0, poll_s=0.5)

    def _rev_look(self, ctx: Context) -> None:
        from counting.models import ReverseIndexGeneration

        rows = dict(ReverseIndexGeneration.objects.filter(generation__in=[self.rev_old.generation, self.rev_new])
                    .values_list("generation", "status"))
        if rows.get(self.rev_new) in (None, "ACTIVE", "RETIRED", "FAILED"):
            return  # judged while it is a shadow only
        self.rev_looks += 1
        active = ReverseIndexGeneration.objects.filter(status="ACTIVE").values_list(
            "generation", "hash_algorithm", "hash_seed", "user_id_encoding", "shards").first()
        old = self.rev_old
        if active != (old.generation, old.hash_algorithm, old.hash_seed, old.user_id_encoding, old.shards):
            self.rev_broken.append(f"while reverse generation {self.rev_new} was a shadow the ACTIVE one was {active}")
        served = {video: self._page(ctx, video).generation for video in ctx.traffic.population.videos}
        if any(g != old.generation for g in served.values()):
            self.rev_broken.append(f"likers pages were read from {served} while reverse generation {self.rev_new} was "
                                   f"a shadow, not from {old.generation}")

    def reverse_change(self, ctx: Context) -> str:
        from django.conf import settings

        from counting.services.reverse.rebuild import LIFECYCLE
        from likes_project import leases
        from likes_project.audit.services import system_actor
        from likes_project.errors import DomainError
        from likes_project.eventlog.consumer import holder_id
        from likes_project.generations import RebuildFailed, generation_slice, generation_start

        self._old_cursor(ctx)
        actor = system_actor("drill")
        grant = leases.lease_acquire(resource=LIFECYCLE.lease_resource, holder=holder_id(),
                                     ttl_s=float(getattr(settings, "OPS_JOB_LEASE_S", 60.0)))
        if grant is None:
            self.rev_error = "another reverse-index rebuild holds the lifecycle's lease"
            return f"reverse index R={self.shards}: NOT started ({self.rev_error})"
        try:
            with transaction.atomic(using="default", durable=True):
                self.rev_new = generation_start(LIFECYCLE, actor=actor, params={"shards": self.shards},
                                                grant=grant).generation
            # One chunk a slice, a look between: what readers see while the shadow is built and caught up.
            while not generation_slice(LIFECYCLE, self.rev_new, grant=grant, actor=actor, max_chunks=1):
                self._rev_look(ctx)
        except (DomainError, RebuildFailed) as exc:
            self.rev_error = f"{exc.__class__.__name__}: {exc}"
        finally:
            leases.lease_release(grant)
        return (f"reverse index R {self.rev_old.shards} -> {self.shards} built as shadow generation {self.rev_new} "
                f"while commands flowed, {self.rev_looks} looks while it was a shadow; "
                + (f"NOT switched in: {self.rev_error}" if self.rev_error else "switched in"))

    def reverse_state(self, ctx: Context) -> str:
        from counting import routing
        from counting.selectors.likers import CursorExpired

        now = routing.reverse_active()
        if self.rev_cursor is not None and now.generation != self.rev_old.generation:
            video, cursor = self.rev_cursor
            try:
                self.rev_after["oldCursor"] = f"read as generation {self._page(ctx, video, cursor).generation}"
            except CursorExpired as exc:
                self.rev_after["oldCursor"] = f"{exc.http_status} {exc.code}"
        self.rev_after["served"] = sorted({self._page(ctx, v).generation for v in ctx.traffic.population.videos})
        ctx.notes.append(f"the reverse index is on generation {now.generation} (R={now.shards})"
                         + ("" if now.generation == self.rev_old.generation else
                            f"; generation {self.rev_old.generation} RETIRED (its rows kept, as after every rebuild)"))
        return (f"reverse index on generation {now.generation} (R={now.shards}); a cursor of generation "
                f"{self.rev_old.generation} now answers {self.rev_after.get('oldCursor', 'n/a')}")

    def reverse_judge(self, ctx: Context) -> list[str]:
        from counting.models import ReverseIndexGeneration

        failures = list(dict.fromkeys(self.rev_broken))
        if not self.rev_looks:
            failures.append("no look was taken while the new reverse generation was a shadow")
        if self.rev_error:  # refused by the lifecycle's own checks: the shadow FAILED, the old one must stay ACTIVE
            statuses = dict(ReverseIndexGeneration.objects.filter(
                generation__in=[self.rev_old.generation, self.rev_new]).values_list("generation", "status"))
            if statuses != {self.rev_old.generation: "ACTIVE", self.rev_new: "FAILED"}:
                return [*failures, f"the new R did not switch in ({self.rev_error}) and the reverse generations are "
                                   f"{statuses}"]
            ctx.notes.append(f"the reverse-index rebuild refused to switch its shadow in ({self.rev_error}); it "
                             f"FAILED and generation {self.rev_old.generation} stays ACTIVE, as the drill found it")
            return failures
        statuses = dict(ReverseIndexGeneration.objects.filter(
            generation__in=[self.rev_old.generation, self.rev_new]).values_list("generation", "status"))
        if statuses != {self.rev_old.generation: "RETIRED", self.rev_new: "ACTIVE"}:
            failures.append(f"after the reverse switch the generations are {statuses}")
        if self.rev_after.get("served") != [self.rev_new]:
            failures.append(f"after the switch likers pages come from generations {self.rev_after.get('served')}, "
                            f"not {self.rev_new}")
        if self.rev_cursor is None:
            ctx.notes.append("no drill video had two likers: the old cursor was not tried")
        elif self.rev_after.get("oldCursor") != "410 cursor_expired":
            failures.append(f"a likers cursor of generation {self.rev_old.generation} was "
                            f"{self.rev_after.get('oldCursor')} after the switch, not 410 cursor_expired")
        return failures


class GenerationParamsChange(ReverseShardsChange, Drill):
    """Drill 10: the bucket contract of the count projection is changed the only way the service allows, through
    the bucket-space change's service (the one its ops job runs, here in this process): a new bucket space with a new
    seed (and V when `--alias` names one; the same V by default) and a SHADOW count generation on it, built from the
    facts and caught up while the drill's commands flow, then switched in at a barrier where both generations count
    every video the same. First an edit of the bound bucket space in place is tried (in a transaction always rolled
    back) and must be refused by the database. At every step the change reports while the new generation is still a
    shadow, the drill looks: the ACTIVE generation, its bucket space and its manifest are the ones it started with;
    the display snapshots and the count cache the reads come from still name the old generation, never the shadow;
    a second change is refused; and every drill relation's row in the old generation still has the bucket the old
    contract gives it. After the switch the new generation is ACTIVE on the new contract (its rows bucketed by it),
    the old one RETIRED with its rows as they were, and the exact reconciliation after the switch passed. Then the
    reverse index is rebuilt with another R (twice it below 16, else half) through the one generation lifecycle (the
    engine its ops job runs, here slice by slice in this process): between slices the ACTIVE reverse generation must
    be the old one with its contract, and every likers page must be read from it, never from the shadow; after the
    switch the new R is ACTIVE, pages come from it, and a cursor issued before answers 410 `cursor_expired` (T33).
    The service is left on the new bucket space and the new R, an equally valid state the verdict names. A change the
    service refuses by its own checks after the drill has looked at its shadow (the barrier's counts, the rebuild's
    sample) is a discarded shadow: the service must then be exactly as found, and the verdict notes the refusal."""

    name = "generation-params-change"
    spec_numbers = (10,)
    summary = ("a new count hash seed (or V) and reverse-index R: old generations unchanged, in-place edit refused, "
               "switched only through shadow generations")
    commands_succeed_while = "the bucket contract and R were being changed through shadow generations"
    default_fault_s = 5.0

    def prepare(self, ctx: Context) -> None:
        from counting import routing
        from likes_project.errors import DomainError
        from reconciliation.services.recovery import bucket_space

        routing.reset_cache()
        self.old = routing.load_generation()
        space = self.old.space
        self.vbuckets = int(ctx.alias) if str(ctx.alias or "").isdigit() else space.virtual_buckets
        self.seed = f"drill-{uuid.uuid4().hex[:12]}"
        try:
            bucket_space.change_check(virtual_buckets=self.vbuckets, seed=self.seed)
        except DomainError as exc:
            raise DrillRefused(f"the bucket contract cannot be changed now: {exc}") from None
        self.contract = (space.hash_algorithm, space.hash_seed, space.key_encoding, space.virtual_buckets)
        self.in_place = ""
        self.looks: list[dict] = []
        self.broken: list[str] = []
        self.report: dict = {}
        self.error = ""
        self.before: dict = {}
        self.new_generation: int | None = None
        self.reverse_prepare()

    # --- what the drill reads ---------------------------------------------------------------------------

    def _rows(self, ctx: Context, generation: int) -> dict[tuple[int, str], tuple[int, int]]:
        """(user, video) -> (bucket space version, virtual bucket) of the drill relations' rows in `generation`."""
        from django.conf import settings

        from counting.models import LikeCountProjection

        population = ctx.traffic.population
        users = [u.user_id for u in population.users]
        out = {}
        for alias in settings.COUNT_PARTITION_ALIASES:
            out.update({(u, v): (s, vb) for u, v, s, vb in LikeCountProjection.objects.using(alias).filter(
                generation=generation, user_id__in=users, video_id__in=population.videos).values_list(
                "user_id", "video_id", "bucket_space_version", "virtual_bucket")})
        return out

    def _old_rows_wrong(self, ctx: Context) -> list[str]:
        """The drill relations whose row in the old generation is not bucketed by the old contract, or whose
        bucket changed since the change began."""
        from counting import routing

        wrong = []
        for (u, v), (version, vb) in sorted(self._rows(ctx, self.old.generation).items()):
            bound = routing.virtual_bucket(self.old.space, v, u)
            if (version, vb) != (self.old.space.version, bound) or self.before.get((u, v), (version, vb)) != (
                    version, vb):
                wrong.append(f"user {u} video {v}: v{version} bucket {vb}, the old contract gives {bound}")
        return wrong

    def _in_place(self) -> str:
        """An edit of the bound bucket space in place (its seed and V): the database must refuse it. Rolled back
        whatever happens, so even a missing guard changes nothing another process can see."""
        from counting.models import CountBucketSpace

        try:
            with transaction.atomic(using="default"):
                n = CountBucketSpace.objects.filter(version=self.old.space.version).update(
                    hash_seed=self.seed, virtual_buckets=self.vbuckets + 1)
                raise _RolledBack(n)
        except _RolledBack as done:
            return f"NOT refused ({done.args[0]} row updated; rolled back by the drill)"
        except DatabaseError as exc:
            # Only the database's own guard counts as a refusal; an edit that could not even be sent (a store that
            # did not answer) proves nothing.
            said = str(exc).splitlines()[0][:120]
            return f"refused ({said})" if "Cannot update or delete rows" in said else f"not tried: {said}"

    def _look(self, ctx: Context, line: str) -> None:
        """One look while the change reports `line`: judged only while the new generation is still a shadow."""
        from counting.models import CountCacheGeneration, CountProjectionGeneration, VideoDisplayCount
        from likes_project.errors import DomainError
        from reconciliation.services.recovery import bucket_space

        newest = CountProjectionGeneration.objects.filter(generation__gt=self.old.generation, scratch=False).order_by(
            "-generation").first()
        if newest is None or newest.status != "SHADOW":
            return
        self.new_generation = newest.generation
        look: dict = {"at": line[:80]}
        active = CountProjectionGeneration.objects.filter(status="ACTIVE").values_list(
            "generation", "bucket_space_version", "active_manifest_id").first()
        if active != (self.old.generation, self.old.space.version, self.old.manifest_id):
            self.broken.append(f"while generation {newest.generation} was a shadow the ACTIVE one was {active}")
        served = dict(VideoDisplayCount.objects.filter(video_id__in=ctx.traffic.population.videos).values_list(
            "video_id", "generation"))
        look["displayGenerations"] = sorted(set(served.values()))
        if newest.generation in served.values():
            self.broken.append(f"display snapshots of generation {newest.generation} were served while it was a "
                               f"shadow: {served}")
        cache = CountCacheGeneration.objects.filter(status="ACTIVE").values_list("projection_generation",
                                                                                 flat=True).first()
        if cache == newest.generation:
            self.broken.append(f"the ACTIVE count cache was built on shadow generation {newest.generation}")
        try:
            bucket_space.change_check(virtual_buckets=self.vbuckets, seed=None)
            self.broken.append(f"a second change was allowed while generation {newest.generation} was a shadow")
        except DomainError as exc:
            look["secondChange"] = exc.code
        wrong = self._old_rows_wrong(ctx)
        if wrong:
            self.broken.append(f"old generation {self.old.generation}'s rows changed while the shadow was built: "
                               f"{wrong[:3]}")
        self.looks.append(look)

    # --- the drill ----------------------------------------------------------------------------------------

    def inject(self, ctx: Context) -> str:
        return self._count_change(ctx) + " | " + self.reverse_change(ctx)

    def _count_change(self, ctx: Context) -> str:
        from likes_project.audit.services import system_actor
        from likes_project.errors import DomainError
        from reconciliation.services.recovery import bucket_space
        from reconciliation.services.recovery.generation import RestoreFailed

        self.before = self._rows(ctx, self.old.generation)
        self.in_place = self._in_place()

        def say(line: str) -> None:
            try:
                self._look(ctx, line)
            except DatabaseError as exc:  # a look that could not read is reported, the change goes on
                self.broken.append(f"a look during the change could not read: {exc.__class__.__name__}: {exc}")

        try:
            self.report = bucket_space.bucket_space_change(virtual_buckets=self.vbuckets, seed=self.seed,
                                                           actor=system_actor("drill"), say=say)
        except (DomainError, RestoreFailed) as exc:
            self.error = f"{exc.__class__.__name__}: {exc}"
        return (f"edit of bucket space v{self.old.space.version} in place: {self.in_place}; new bucket space "
                f"(seed {self.seed!r}, V={self.vbuckets}) built as shadow generation {self.new_generation} while "
                f"commands flowed, {len(self.looks)} looks while it was a shadow; "
                + (f"switched in: {self._switched()}" if not self.error else f"NOT switched in: {self.error}"))

    def _switched(self) -> str:
        r = self.report
        return (f"generation {r.get('generation')} ACTIVE on bucket space v{r.get('bucketSpaceVersion')}, "
                f"{r.get('videosCompared')} videos ({r.get('likesAtBarrier')} likes) counted the same at the barrier, "
                f"exact run {(r.get('exactRun') or {}).get('status')}")

    def recover(self, ctx: Context) -> str:
        from counting import routing
        from counting.models import CountProjectionGeneration

        routing.reset_cache()  # this process reads the new routes from now on
        now = routing.load_generation()
        shadows = list(CountProjectionGeneration.objects.filter(status="SHADOW", scratch=False).values_list(
            "generation", flat=True))
        state = (f"the service is on generation {now.generation}, bucket space v{now.space.version} (seed "
                 f"{now.space.hash_seed!r}, V={now.space.virtual_buckets})")
        ctx.notes.append(state + ("" if now.generation == self.old.generation else
                                  f"; generation {self.old.generation} RETIRED (its rows are dropped after the "
                                  "observation period)"))
        return (state + (f"; shadow generations left: {shadows}" if shadows else "; no shadow generation left")
                + "; " + self.reverse_state(ctx))

    def judge(self, ctx: Context, fault) -> list[str]:
        from counting import routing
        from counting.models import CountBucketSpace, CountProjectionGeneration

        failures = super().judge(ctx, fault) + self.reverse_judge(ctx)
        if not self.in_place.startswith("refused"):
            failures.append(f"an edit of the bound bucket space in place was {self.in_place}")
        failures += list(dict.fromkeys(self.broken))  # each look may see the same breach: once each
        if not self.looks:
            failures.append("no look was taken while the new generation was a shadow")
        bound = CountBucketSpace.objects.get(version=self.old.space.version)
        if (bound.hash_algorithm, bound.hash_seed, bound.key_encoding, bound.virtual_buckets) != self.contract:
            failures.append(f"bucket space v{bound.version} changed: {bound}")
        wrong = self._old_rows_wrong(ctx)
        if wrong:
            failures.append(f"old generation {self.old.generation}'s rows changed: {wrong[:3]}")
        if self.error:
            return failures + self._discarded(ctx)
        statuses = dict(CountProjectionGeneration.objects.filter(
            generation__in=[self.old.generation, self.report["generation"]]).values_list("generation", "status"))
        if statuses != {self.old.generation: "RETIRED", self.report["generation"]: "ACTIVE"}:
            failures.append(f"after the switch the generations are {statuses}")
        new = routing.load_generation(self.report["generation"])
        if (new.space.hash_seed, new.space.virtual_buckets) != (self.seed, self.vbuckets):
            failures.append(f"the new generation's bucket space is {new.space}, not seed {self.seed!r} V="
                            f"{self.vbuckets}")
        rows = self._rows(ctx, new.generation)
        rebucketed = [k for k, (version, vb) in rows.items()
                      if (version, vb) != (new.space.version, routing.virtual_bucket(new.space, k[1], k[0]))]
        if rebucketed or not rows:
            failures.append(f"the new generation's drill rows are not bucketed by its contract: {rebucketed[:3]} "
                            f"({len(rows)} rows)")
        moved = sum(1 for (u, v), (_version, vb) in rows.items() if routing.virtual_bucket(self.old.space, v, u) != vb)
        ctx.notes.append(f"{moved} of {len(rows)} drill relations have another bucket under the new contract")
        if (self.report.get("exactRun") or {}).get("status") != "PASSED":
            failures.append(f"the exact reconciliation after the switch: {self.report.get('exactRun')}")
        return failures

    def _discarded(self, ctx: Context) -> list[str]:
        """The service refused to switch the shadow in (a disagreement it found itself, after the drill looked at
        the shadow): then it must have discarded the shadow and be as the drill found it. Noted for the record, so
        that a change that cannot complete under this load is seen."""
        from counting.models import CountProjectionGeneration

        active = CountProjectionGeneration.objects.filter(status="ACTIVE").values_list(
            "generation", "bucket_space_version", "active_manifest_id").first()
        shadows = list(CountProjectionGeneration.objects.filter(status="SHADOW", scratch=False).values_list(
            "generation", flat=True))
        if active != (self.old.generation, self.old.space.version, self.old.manifest_id) or shadows:
            return [f"the change did not switch in ({self.error}) and the service is not as found: ACTIVE {active}, "
                    f"shadows {shadows}"]
        ctx.notes.append(f"the service refused to switch the shadow generation in ({self.error}); it was discarded "
                         f"and the service is as the drill found it (generation {self.old.generation})")
        return []
