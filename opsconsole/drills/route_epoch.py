"""Spec §7's drill 12 (T23; ROUTE-5, MIG-2, MIG-3, INV-11, INV-12): an old-epoch write after the route CAS. A bucket
migration of a few buckets holding the drill's own relations runs on the workers while commands flow; right after its
cutover's CAS, a count-projector pass whose routes were cached before the CAS sends the drill's newest events to the
source partition at the old epoch. The source's fence must refuse them (ROUTE_EPOCH_MISMATCH, nothing written there,
nothing acknowledged), the same pass, its routes refreshed, must land them at the target under the new epoch by
relation version (a late lower version ignored), one partition alone accepts writes for each moved bucket, and every
count ends exact (the runner's comparison)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from likes_project.waiting import wait_until
from opsconsole.drills.api import DrillApi
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.population import DrillUser, drill_video_create
from opsconsole.drills.scenarios import Context, Drill
from opsconsole.drills.traffic import LIKED, UNLIKED

PROBES = 4  # drill relations whose events are sent at the old epoch
CAS_WAIT_S = 180.0  # bounds a broken wait for the migration's cutover (its job runs on the workers)
PUBLISHED_WAIT_S = 30.0  # bounds the wait for the publisher to write the probes' events to the log
LEASE_WAIT_S = 30.0  # bounds the wait for a count-consumer lease between two live passes
LEASE_TTL_S = 60.0  # the drill's pass holds its leases a second or two; a dead drill's expire by themselves
DONE_WAIT_S = 240.0  # bounds the wait for the migration's VERIFY after the drill's pass
FINAL_WAIT_S = 30.0  # bounds the wait for the probe video's display count (a beat refresh) after the heal
TERMINAL = ("RETIRED", "ABORTED", "FAILED")


@dataclass
class Probe:
    """One drill relation (a drill user and the drill's probe video) in a moved bucket."""

    user: DrillUser
    vb: int
    stream_partition: int
    entries: dict = field(default_factory=dict)  # relation version -> its StreamEntry


def _routes():
    """The active generation's routes, read again (not this process's cached copy)."""
    from counting import routing

    routing.reset_cache()
    return routing.active()


def _writers(gen, buckets: list[int]) -> dict[int, list[tuple[str, int]]]:
    """Per bucket, every (partition, epoch) whose route fence is ACTIVE: the partitions that accept writes for it."""
    from counting.models import CountRouteFence

    out: dict[int, list[tuple[str, int]]] = {vb: [] for vb in buckets}
    for alias in settings.COUNT_PARTITION_ALIASES:
        for vb, epoch in CountRouteFence.objects.using(alias).filter(
                bucket_space_version=gen.space.version, virtual_bucket__in=buckets, state="ACTIVE").values_list(
                "virtual_bucket", "route_epoch"):
            out[vb].append((alias, epoch))
    return out


class OldEpochWrite(Drill):
    """Drill 12. Injects: a video of the drill's own liked by four drill users (v1, applied at the source); a bucket
    migration, planned (drill-planner) and approved (drill-approver) onto the count partition holding the fewest
    buckets, of their buckets and one bucket of each population video (so the runner's traffic crosses the cutover),
    run by the workers; right after the route CAS the drill takes the count consumer's leases of the probes' stream
    partitions (a pass, as the live projector's), the probes unlike (v2), and that pass sends their v1 and v2 entries
    with the routes of the manifest before the CAS, to the source partitions at the old epoch E, then refreshes its
    routes and sends them again.
    Checks: every old-epoch write is refused by the source's route fence (ROUTE_EPOCH_MISMATCH, left unacknowledged),
    the source's copy of the drill's rows in the moved buckets is untouched from the CAS to the end, the retry lands
    every v2 at the target under epoch E+1 (its receipt and row there, in the relation's one bucket: INV-11) and
    ignores every v1 (MIG-3), exactly one partition accepts writes for each moved bucket right after the CAS and at
    the end (INV-12), the migration ends RETIRED, the probe video's count equals the facts, and the runner's exact
    comparison holds. Why: a projector caches routes for seconds; only the partition fences stop such a pass from
    writing a copy nobody reads any more (a lost update), and it must then go where the route now leads (ROUTE-5).
    Nothing is undone: the move is a legitimate scale operation, and the verdict says where the buckets now live."""

    name = "old-epoch-write"
    spec_numbers = (12,)
    summary = ("right after a bucket migration's route CAS, old-epoch writes sent to the source: refused there, "
               "retried at the target by version; one writer per bucket")
    commands_succeed_while = "buckets of the drill's videos migrated and old-epoch writes were sent to their source"
    default_fault_s = 5.0

    def prepare(self, ctx: Context) -> None:
        from counting.models import BucketMigration

        if len(settings.COUNT_PARTITION_ALIASES) < 2:
            raise DrillRefused("a bucket migration needs two count partitions at least")
        busy = list(BucketMigration.objects.exclude(state__in=TERMINAL).values_list("pk", "state"))
        if busy:
            raise DrillRefused(f"a bucket migration is in flight already ({busy}): finish or abort it first")
        ctx.stage.workers_check()
        self.problems: list[str] = []
        self.probes: list[Probe] = []
        self.migration_id: int | None = None
        self.moving: list[int] = []
        self.target = ""
        self.video = ""
        self.videos: list[str] = []
        self.stale = None  # the routes before the CAS
        self.fresh = None  # the routes the drill's pass refreshed to
        self.cas_seen_s: float | None = None
        self.sent_s: float | None = None
        self.writers: dict[str, dict] = {}
        self.copies: dict[str, dict] = {}
        # Keyed by (stream partition, entry id): one publish writes several partitions in one millisecond, and the
        # entry ids repeat across them.
        self.refused: dict[tuple[int, str], Exception] = {}
        self.unrefused: set[tuple[int, str]] = set()
        self.retried = {"applied": 0, "stale": 0, "duplicates": 0, "failed": {}}

    # --- inject -------------------------------------------------------------------------------------

    def inject(self, ctx: Context) -> str:
        from counting import routing
        from counting.services.migration import ledger
        from likes_project.audit.services import system_actor
        from likes_project.eventlog import streams
        from relations.events import aggregate_key

        population = ctx.traffic.population
        self.stale = gen = _routes()
        self.target = min(settings.COUNT_PARTITION_ALIASES, key=lambda a: (len(gen.buckets_on(a)), a))
        self.video = drill_video_create(population, "epoch")
        self.videos = [self.video, *population.videos]
        for user in population.users:
            vb = routing.virtual_bucket(gen.space, self.video, user.user_id)
            if gen.routes[vb].partition != self.target and len(self.probes) < PROBES:
                self.probes.append(Probe(user, vb, streams.partition_for(aggregate_key(user.user_id, self.video))))
        self.moving = sorted({p.vb for p in self.probes} | self._traffic_buckets(gen, population))
        if len(self.probes) < PROBES:
            raise DrillRefused(f"only {len(self.probes)} drill relations hash to buckets off {self.target}")

        # v1, applied at the sources before the move (the copy carries it to the target).
        positions = {p.stream_partition: streams.last_generated_id(p.stream_partition) for p in self.probes}
        self._commands(population.run_id, LIKED, 1)
        if (not self.problems and self._published(positions, 1)
                and not wait_until(lambda: self._receipted(gen, 1), timeout_s=PUBLISHED_WAIT_S, poll_s=0.2)):
            self.problems.append("the probes' likes were not applied at their source partitions in time")
        if self.problems:
            return f"the drill's probes could not be set up: {'; '.join(self.problems)}"

        m = ledger.migration_plan(target=self.target, buckets=self.moving, reason=f"drill {self.name}: move buckets "
                                  "of the drill's videos and write to their source at the old epoch",
                                  actor=system_actor("drill-planner"))
        self.migration_id = m.pk
        ledger.migration_approve(migration_id=m.pk, actor=system_actor("drill-approver"))
        m = self._wait_for_cas()
        if m is None:
            return f"migration {self.migration_id} of buckets {self.moving}: {'; '.join(self.problems)}"
        self.cas_seen_s = round((timezone.now() - m.cutover_at).total_seconds(), 2)
        self.writers["cas"] = _writers(_routes(), self.moving)
        self.copies["cas"] = self._source_copies(m)
        self._lagging_pass(population.run_id, m)
        self.copies["pass"] = self._source_copies(m)
        return self._told(m)

    def _traffic_buckets(self, gen, population) -> set[int]:
        """Per population video, the bucket of its first relation off the target: the runner's traffic crosses the
        cutover there."""
        from counting import routing

        out = set()
        for video in population.videos:
            for user in population.users:
                vb = routing.virtual_bucket(gen.space, video, user.user_id)
                if gen.routes[vb].partition != self.target:
                    out.add(vb)
                    break
        return out

    def _commands(self, run_id: str, state: str, version: int) -> None:
        api = DrillApi()
        for probe in self.probes:
            operation_id = f"drill-{run_id}-epoch-{probe.user.user_id}-v{version}"
            answer = api.like_put(probe.user, self.video, state, operation_id)
            if not answer.ok or answer.body.get("relationVersion") != version:
                self.problems.append(f"{probe.user.username}: {state} answered {answer.status} {answer.body}, "
                                     f"not v{version}")

    def _published(self, positions: dict[int, str], version: int) -> bool:
        """Each probe's event at `version` read from the log after `positions` (moved on as they are read)."""
        from likes_project.eventlog import streams

        def found() -> bool:
            for partition in positions:
                wanted = {p.user.user_id: p for p in self.probes
                          if p.stream_partition == partition and version not in p.entries}
                while wanted:
                    batch = streams.read_after(partition, positions[partition], 500)
                    if not batch:
                        break
                    for entry in batch:
                        probe = wanted.get(entry.event.get("userId"))
                        if probe and (entry.event.get("videoId"), entry.event.get("relationVersion")) == (
                                self.video, version):
                            probe.entries[version] = entry
                            del wanted[probe.user.user_id]
                    positions[partition] = batch[-1].entry_id
            return all(version in p.entries for p in self.probes)

        if wait_until(found, timeout_s=PUBLISHED_WAIT_S, poll_s=0.1):
            return True
        self.problems.append(f"the probes' v{version} events were not in the log within {PUBLISHED_WAIT_S:.0f} s")
        return False

    def _receipted(self, gen, version: int, alias: str | None = None) -> bool:
        """Every probe's `version` event has a count receipt on `alias` (default: where `gen` routes its bucket)."""
        from counting.models import CountEventReceipt

        return all(CountEventReceipt.objects.using(alias or gen.routes[p.vb].partition).filter(
            generation=gen.generation, event_id=str(p.entries[version].event["eventId"])).exists() for p in self.probes)

    def _wait_for_cas(self):
        """The migration once the active pointer names its manifest (polled: the CAS is the worker's); None when it
        ended or stalled before."""
        from counting.models import BucketMigration, CountProjectionGeneration

        def switched():
            # The pointer first: the CAS moves it and sets `cutover_at` in one commit, so a row read after a moved
            # pointer has its `cutover_at` (read the other way round, a CAS between the two reads looks like none).
            pointer = CountProjectionGeneration.objects.filter(generation=self.stale.generation).values_list(
                "active_manifest_id", flat=True).first()
            m = BucketMigration.objects.get(pk=self.migration_id)
            return m if (pointer != self.stale.manifest_id or m.state in TERMINAL) else None

        m = wait_until(switched, timeout_s=CAS_WAIT_S, poll_s=0.02)
        if m is None or m.cutover_at is None:
            why = f"no route CAS within {CAS_WAIT_S:.0f} s" if m is None else "the active manifest moved, not by it"
            m = BucketMigration.objects.get(pk=self.migration_id)
            self.problems.append(f"{why}: migration {m.pk} is {m.state} {m.error or ''}".strip())
            return None
        return m

    def _source_copies(self, m) -> dict:
        """The rows of the drill's videos in the moved buckets on their source partitions (kept there, read-only,
        until the retention): (alias, table, key) -> values, with the trigger's change_seq (any write moves it)."""
        from counting.models import LikeCountProjection, VideoLikeCountVbucket

        out = {}
        for alias in sorted(set(m.source_partitions.values())):
            vbs = [vb for vb in self.moving if m.source_partitions[str(vb)] == alias]
            common = {"generation": m.generation, "virtual_bucket__in": vbs, "video_id__in": self.videos}
            for user, video, *values in LikeCountProjection.objects.using(alias).filter(**common).values_list(
                    "user_id", "video_id", "projected_state", "projected_version", "change_seq"):
                out[(alias, "projection", user, video)] = tuple(values)
            for video, vb, *values in VideoLikeCountVbucket.objects.using(alias).filter(**common).values_list(
                    "video_id", "virtual_bucket", "active_count", "bucket_version", "frozen", "change_seq"):
                out[(alias, "bucket", video, vb)] = tuple(values)
        return out

    def _lagging_pass(self, run_id: str, m) -> None:
        """A count-consumer pass holding the probes' partitions' leases (the live passes wait meanwhile), with the
        routes of before the CAS: the probes' v2 committed and published after the CAS, it sends their v1 and v2 to
        the old routes, then, refused, refreshes its routes and sends them again (ROUTE-5)."""
        from counting.models import CountProjectionGeneration
        from counting.services.projection import COUNT_CONSUMER, apply_entries
        from likes_project import leases
        from likes_project.eventlog import streams
        from likes_project.eventlog.consumer import consumer_resource

        grants = {}
        try:
            for partition in sorted({p.stream_partition for p in self.probes}):
                grants[partition] = wait_until(lambda p=partition: leases.lease_acquire(
                    resource=consumer_resource(COUNT_CONSUMER, p), holder=f"drill-{run_id}-{self.name}",
                    ttl_s=LEASE_TTL_S), timeout_s=LEASE_WAIT_S, poll_s=0.02)
                if grants[partition] is None:
                    self.problems.append(f"the count consumer's lease of stream partition {partition} was never free")
                    return
            positions = {p: streams.last_generated_id(p) for p in grants}
            self._commands(run_id, UNLIKED, 2)
            if self.problems or not self._published(positions, 2):
                return
            pointer = CountProjectionGeneration.objects.filter(generation=m.generation).values_list(
                "active_manifest_id", flat=True).first()
            if pointer != m.target_manifest_id:
                self.problems.append(f"the active manifest was {pointer}, not the migration's {m.target_manifest_id}, "
                                     "when the old-epoch writes were to be sent")
                return
            self.sent_s = round((timezone.now() - m.cutover_at).total_seconds(), 2)
            batches = {part: sorted((e for p in self.probes if p.stream_partition == part for e in p.entries.values()),
                                    key=lambda e: e.sort_key) for part in grants}
            for part, entries in batches.items():
                result = apply_entries(self.stale, entries, consumer=COUNT_CONSUMER, partition=part,
                                       token=grants[part].token)
                self.refused.update({(part, eid): exc for eid, exc in result.failed.items()})
                self.unrefused |= {(part, eid) for eid in result.done}
            self.fresh = _routes()
            for part, entries in batches.items():
                result = apply_entries(self.fresh, entries, consumer=COUNT_CONSUMER, partition=part,
                                       token=grants[part].token)
                for key in ("applied", "stale", "duplicates"):
                    self.retried[key] += getattr(result, key)
                self.retried["failed"].update({(part, k): f"{v.__class__.__name__}: {v}"
                                                for k, v in result.failed.items()})
        finally:
            for grant in grants.values():
                if grant is not None:
                    leases.lease_release(grant)

    def _told(self, m) -> str:
        from counting.services.migration.ledger import buckets_label
        from counting.services.projection import RouteEpochMismatch

        sent, n = sum(len(p.entries) for p in self.probes), len(self.probes)
        ignored = self.retried["stale"] + self.retried["duplicates"]
        fenced = sum(isinstance(e, RouteEpochMismatch) for e in self.refused.values())
        if self.sent_s is None:
            return (f"migration {m.pk} of buckets {buckets_label(self.moving)} -> {self.target}: CAS seen "
                    f"{self.cas_seen_s} s after its commit; no old-epoch write sent: {'; '.join(self.problems)}")
        return (f"migration {m.pk} of buckets {buckets_label(self.moving)} "
                f"{'/'.join(sorted(set(m.source_partitions.values())))} -> {self.target}: CAS to manifest "
                f"{m.target_manifest_id} seen {self.cas_seen_s} s after its commit; {sent} old-epoch writes "
                f"({n} v2 committed after the CAS, {n} late v1) sent {self.sent_s} s after "
                f"the CAS with the routes of manifest {self.stale.manifest_id}: {fenced}/{sent} refused "
                f"ROUTE_EPOCH_MISMATCH; retried with the refreshed routes (manifest {self.fresh.manifest_id}): "
                f"{self.retried['applied']} applied at {self.target}, {ignored} ignored by version, "
                f"{len(self.retried['failed'])} failed")

    # --- while it holds, recover, judge -------------------------------------------------------------

    def in_effect(self, ctx: Context) -> bool | None:
        """The moved buckets route to the target (the move is the drill's lasting change)."""
        if self.migration_id is None or self.sent_s is None:
            return None
        gen = _routes()
        return all(gen.routes[vb].partition == self.target for vb in self.moving)

    def recover(self, ctx: Context) -> str:
        from counting.models import BucketMigration
        from counting.services.migration import ledger
        from counting.services.migration.ledger import buckets_label
        from likes_project.audit.services import system_actor

        if self.migration_id is None:
            return "nothing to undo: no migration was started"
        m = BucketMigration.objects.get(pk=self.migration_id)
        if m.state == "AWAITING_APPROVAL":  # the approval broke off: never leave a plan behind to block others
            ledger.migration_abort(migration_id=m.pk, actor=system_actor("drill-approver"),
                                   reason=f"drill {self.name}: the approval did not go through")
        done = wait_until(lambda: BucketMigration.objects.filter(pk=self.migration_id, state__in=TERMINAL).first(),
                          timeout_s=DONE_WAIT_S)
        m = BucketMigration.objects.get(pk=self.migration_id)
        gen = _routes()
        self.writers["end"] = _writers(gen, self.moving)
        self.copies["end"] = self._source_copies(m)
        where = sorted({(gen.routes[vb].partition, gen.routes[vb].epoch) for vb in self.moving})
        return (f"nothing undone (a bucket move is a legitimate scale operation; a reverse migration moves them back): "
                f"migration {m.pk} {m.state}{'' if done else f' (not finished within {DONE_WAIT_S:.0f} s)'}; "
                f"buckets {buckets_label(self.moving)} now live on "
                f"{', '.join(f'{a} at epoch {e}' for a, e in where)} (manifest {gen.manifest_id}); the source copy "
                f"on {', '.join(sorted(set(m.source_partitions.values())))} is kept until {m.source_cleanup_after}")

    def judge(self, ctx: Context, fault) -> list[str]:
        from counting.models import BucketMigration

        failures = super().judge(ctx, fault) + self.problems
        if self.migration_id is None or self.sent_s is None:
            return failures or ["no old-epoch write was sent after the route CAS"]
        m = BucketMigration.objects.get(pk=self.migration_id)
        if m.state != "RETIRED" or not (m.verify_result or {}).get("ok"):
            failures.append(f"migration {m.pk} ended {m.state} (verify {m.verify_result}), not RETIRED: {m.error}")
        failures += self._judge_fence(m) + self._judge_retry(m)
        for at, writers in self.writers.items():
            wrong = {vb: w for vb, w in writers.items() if w != [(self.fresh.routes[vb].partition,
                                                                  self.fresh.routes[vb].epoch)]}
            if wrong:
                failures.append(f"{'right after the CAS' if at == 'cas' else 'at the end'} not exactly one partition "
                                f"accepted writes at the routed epoch (INV-12): {dict(list(wrong.items())[:5])}")
        return failures + self._judge_count(ctx)

    def _judge_fence(self, m) -> list[str]:
        """ROUTE-5 at the source: every old-epoch write refused by the route fence, nothing written there."""
        from counting.models import CountEventReceipt
        from counting.services.projection import RouteEpochMismatch

        failures = []
        entries = [e for p in self.probes for e in p.entries.values()]
        wrong = {(e.partition, e.entry_id): f"{exc.__class__.__name__}: {exc}" if exc else "accepted" for e in entries
                 if not isinstance(exc := self.refused.get((e.partition, e.entry_id)), RouteEpochMismatch)}
        if wrong:
            failures.append(f"{len(wrong)} of {len(entries)} old-epoch writes were not refused with "
                            f"ROUTE_EPOCH_MISMATCH by the source (first: {next(iter(wrong.items()))})")
        if self.unrefused:
            failures.append(f"the source accepted {len(self.unrefused)} old-epoch writes after the route CAS")
        for p in self.probes:
            source = m.source_partitions[str(p.vb)]
            if CountEventReceipt.objects.using(source).filter(generation=m.generation,
                                                              event_id=str(p.entries[2].event["eventId"])).exists():
                failures.append(f"{source} holds a receipt of {p.user.username}'s v2, sent there after the CAS")
        before = self.copies.get("cas", {})
        for at in ("pass", "end"):
            after = self.copies.get(at, {})
            changed = sorted(str(k) for k, v in after.items() if before.get(k, v) != v
                             or (k not in before and not (k[1] == "bucket" and v[:3] == (0, 0, False))))
            if changed:
                failures.append(f"the source copy of the moved buckets was written after the CAS (seen "
                                f"{'after the old-epoch writes' if at == 'pass' else 'at the end'}): {changed[:5]}")
        return failures

    def _judge_retry(self, m) -> list[str]:
        """The retry with the refreshed routes: every v2 applied at the target under E+1 in its one bucket, every
        late v1 ignored by version (MIG-3)."""
        from counting.models import CountEventReceipt, LikeCountProjection

        failures = []
        if self.retried["failed"]:
            failures.append(f"the retry with the refreshed routes failed: {list(self.retried['failed'].items())[:3]}")
        if self.retried["applied"] != len(self.probes):
            failures.append(f"the retry applied {self.retried['applied']} events, not the {len(self.probes)} v2")
        if self.retried["stale"] + self.retried["duplicates"] != len(self.probes):
            failures.append(f"the retry did not ignore the {len(self.probes)} late v1 by version: {self.retried}")
        for p in self.probes:
            route, epoch = self.fresh.routes[p.vb], self.stale.routes[p.vb].epoch + 1
            if (route.partition, route.epoch) != (self.target, epoch):
                failures.append(f"bucket {p.vb} is routed to {route}, not {self.target} at epoch {epoch}")
            if not CountEventReceipt.objects.using(self.target).filter(
                    generation=m.generation, event_id=str(p.entries[2].event["eventId"])).exists():
                failures.append(f"{self.target} holds no receipt of {p.user.username}'s v2")
            row = LikeCountProjection.objects.using(self.target).filter(
                generation=m.generation, user_id=p.user.user_id, video_id=self.video).values_list(
                "projected_state", "projected_version", "virtual_bucket").first()
            if row != (UNLIKED, 2, p.vb):
                failures.append(f"{self.target}'s row of {p.user.username} is {row}, not (UNLIKED, 2, bucket {p.vb})")
        return failures

    def _judge_count(self, ctx: Context) -> list[str]:
        """The probe video (the runner compares the population's): its displayed count equals the facts, 0."""
        api = DrillApi()
        author = ctx.traffic.population.author

        def shown():
            answer = api.like_count(author, self.video)
            return answer.body.get("displayCount") if answer.ok else f"{answer.status} {answer.code}"

        if wait_until(lambda: shown() == 0, timeout_s=FINAL_WAIT_S, poll_s=0.5):
            return []
        return [f"{self.video} shows displayCount {shown()} after the heal; every probe unliked it: 0"]
