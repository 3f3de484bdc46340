"""The drills (issue 9 §5; issue 12's snapshot-rebalance, T12; issue 13's migration-worker-kill): what each
injects, how answers are judged while it holds, and what the fault must not have caused. The run itself
(population, traffic, sampling, healing, verdict) is `opsconsole.drills.runner`, the same for every drill."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from likes_project.waiting import wait_until
from opsconsole.drills.api import Answer
from opsconsole.drills.checks import leases_held
from opsconsole.drills.faults import ClusterNodeRestart, DatabaseRefusal, DrillRefused, eventlog_flush
from opsconsole.drills.population import DrillUser
from opsconsole.drills.stage import CacheOutage, Stage
from opsconsole.drills.traffic import PhaseTally, Rule, Traffic, strict

READ_KINDS = ("like-relation", "batch-query", "like-count")


@dataclass
class Context:
    stage: Stage
    fault_s: float
    alias: str | None = None
    notes: list[str] = field(default_factory=list)
    traffic: Traffic | None = None


class Drill:
    name = ""
    summary = ""
    spec_numbers: tuple[int, ...] = ()  # the spec §7 drills this runs (registry.SPEC_DRILLS); (): beyond the list
    default_fault_s = 20.0
    pause_at_switch = False  # stop commands for the instant of injecting/undoing (rules differ across it)
    commands_succeed_while = ""  # set: every command must answer 200 while the fault holds ("<the fault>")

    def prepare(self, ctx: Context) -> None:
        """Refuse (DrillRefused) before anything is created when the drill cannot run here."""

    def inject(self, ctx: Context) -> str:
        raise NotImplementedError  # every drill injects something

    def in_effect(self, ctx: Context) -> bool | None:
        """Whether the fault holds right now (None: not observable)."""
        return None

    def recover(self, ctx: Context) -> str:
        raise NotImplementedError  # every drill undoes what it injected

    def rule(self, ctx: Context) -> Rule:
        """How answers are judged while the fault holds (strict: everything 200)."""
        return strict

    def judge(self, ctx: Context, fault: PhaseTally) -> list[str]:
        """Failures of the behaviour during the fault beyond the per-answer rule."""
        if sum(fault.commands.values()) == 0:
            return ["no command was sent while the fault held"]
        failed = {k: v for k, v in fault.commands.items() if k != "200"}
        if self.commands_succeed_while and failed:
            return [f"commands failed while {self.commands_succeed_while}: {failed}"]
        return []


class DatabaseDown(Drill):
    """A database alias of `aliases()` refuses connections (ALLOW_CONNECTIONS false, backends ended)."""

    kind = ""

    def aliases(self) -> list[str]:
        raise NotImplementedError  # each names the aliases it may take down

    def prepare(self, ctx):
        known = self.aliases()
        ctx.alias = ctx.alias or known[-1]
        if ctx.alias not in known:
            raise DrillRefused(f"{ctx.alias!r} is not a {self.kind} ({', '.join(known)})")
        self.fault = DatabaseRefusal(ctx.alias)
        self.fault.check()

    def inject(self, ctx):
        return self.fault.begin()

    def in_effect(self, ctx):
        return self.fault.refusing()

    def recover(self, ctx):
        return self.fault.end()


class CountPartitionDown(DatabaseDown):
    name = "count-partition-down"
    summary = "a count partition refuses connections; commands keep succeeding; projections catch up exactly"
    commands_succeed_while = "a count partition was down"
    kind = "count partition"

    def aliases(self):
        return list(settings.COUNT_PARTITION_ALIASES)


class RelationShardDown(DatabaseDown):
    name = "relation-shard-down"
    summary = "a relation shard refuses connections; its users get 503 envelopes, others are unaffected"
    pause_at_switch = True
    kind = "relation shard"

    def aliases(self):
        return list(settings.RELATION_SHARD_ALIASES)

    def rule(self, ctx) -> Rule:
        def judged(kind: str, user: DrillUser, answer: Answer) -> str | None:
            if user.shard != ctx.alias:
                return strict(kind, user, answer)
            if answer.status == 503 and answer.is_envelope:
                return None
            return f"{kind} on the downed shard answered {answer.status} {answer.code or '(no envelope)'}, not 503"
        return judged

    def judge(self, ctx, fault):
        failures = super().judge(ctx, fault)
        if not any(k.startswith("503") for k in fault.commands):
            failures.append("no command of the downed shard's users was answered 503 during the fault")
        if fault.commands.get("200", 0) == 0:
            failures.append("no command of the other shard's users succeeded during the fault")
        return failures


class EventlogFlush(Drill):
    name = "eventlog-flush"
    summary = "the event-log Redis is flushed mid-stream; everything converges exactly"
    commands_succeed_while = "the event log was flushed"
    default_fault_s = 10.0

    def inject(self, ctx):
        from likes_project.audit.services import system_actor
        from likes_project.eventlog.registry import CONSUMERS
        from likes_project.eventlog.services import consumer_switch_set
        from opsconsole.drills.checks import backlog_sample

        # Mid-stream, with a backlog for certain: the consumers are paused (audited, as the drill) while
        # commands keep flowing, so published entries wait unconsumed; then the flush takes them, and the
        # consumers are resumed at once. Only the lost-tail republisher can bring those events back.
        actor = system_actor("drill")
        since = ctx.traffic.last_seq()
        for consumer in sorted(CONSUMERS):
            consumer_switch_set(consumer=consumer, paused=True, actor=actor,
                                reason="drill eventlog-flush: hold a backlog for the flush to take")
        try:
            def backlog_built():
                sample = backlog_sample()
                return sample if min((n or 0) for n in sample.consumer_lag.values()) >= 20 else None

            sample = wait_until(backlog_built, timeout_s=15) or backlog_sample()
            flushed = eventlog_flush()
            # The pairs whose last command went into the lost backlog get no further command, so their
            # end state rests on the lost events alone (a later command would paper over the loss).
            frozen = ctx.traffic.freeze_acked_after(since)
        finally:
            for consumer in sorted(CONSUMERS):
                consumer_switch_set(consumer=consumer, paused=False, actor=actor, reason="drill eventlog-flush: resume")
        return (f"{flushed} while the consumers were paused; unconsumed entries it took, by consumer: "
                f"{sample.consumer_lag}; {frozen} pairs whose last command was among them get no further command")

    def recover(self, ctx):
        return "nothing to undo: what the flush took, the pipeline must find and send again by itself"


class WorkerKill(Drill):
    name = "worker-kill"  # spec §7 drill 4
    spec_numbers = (4,)
    summary = "the Celery workers are SIGKILLed mid-batch and restarted; exact convergence"
    commands_succeed_while = "the workers were dead"
    default_fault_s = 5.0

    def prepare(self, ctx):
        ctx.stage.workers_check()

    def inject(self, ctx):

        # Mid-batch: wait (bounded) until a publisher or consumer pass holds its lease, then kill at once.
        held = wait_until(leases_held, timeout_s=30) or []
        killed = ctx.stage.workers_kill()
        return f"{killed}; leases held at the kill: {', '.join(held) if held else 'none seen'}"

    def recover(self, ctx):
        restarted = ctx.stage.workers_restart(timeout_s=60)
        if restarted is None:
            ctx.notes.append("no new worker process appeared within 60 s of the kill")
            return "no worker came back within 60 s (is a process supervisor running them?)"
        return restarted


class RedisOutage(Drill):
    """A Redis server goes down and comes back empty (`outage`: check, begin, down, end): commands keep
    succeeding (the outbox holds their events), reads may degrade to 503 `degraded_overloaded` (D26)."""

    pause_at_switch = True
    outage: CacheOutage

    def inject(self, ctx):
        return self.outage.begin()

    def in_effect(self, ctx):
        return self.outage.down()

    def recover(self, ctx):
        return self.outage.end()

    def rule(self, ctx) -> Rule:
        def judged(kind: str, user: DrillUser, answer: Answer) -> str | None:
            if kind != "command" and answer.status == 503 and answer.code == "degraded_overloaded":
                return None  # D26: the bounded database fallback is saturated
            return strict(kind, user, answer)
        return judged


class CacheRedisDown(RedisOutage):
    name = "cache-redis-down"  # spec §7 drill 1
    spec_numbers = (1,)
    summary = "the cache Redis is down, then back empty: reads degrade (D26), commands work, reads end correct"
    commands_succeed_while = "the cache Redis was down"

    def prepare(self, ctx):
        self.outage = ctx.stage.cache_outage(seconds=ctx.fault_s)
        self.outage.check()

    def judge(self, ctx, fault):
        failures = super().judge(ctx, fault)
        for kind in READ_KINDS:
            if fault.reads.get(f"{kind} 200", 0) == 0:
                failures.append(f"no {kind} read was answered (200) from the databases while the cache was down")
        return failures


class ClusterNodeDown(RedisOutage):
    """Issue 16: no replica to promote, so the node comes back empty. Its caches must be detected as lost
    and rebuilt (the per-node sentinels, D93), its stream partitions republished from the outbox (the
    lost-tail check), and counts, likers and myState converge exactly."""

    name = "cluster-node-restart"
    summary = ("one Redis Cluster node (caches, stream partitions) is killed and restarted empty: commands work, "
               "reads degrade, lost caches are rebuilt and lost partitions republished; exact convergence")
    commands_succeed_while = "a Redis Cluster node was down"
    default_fault_s = 10.0

    def prepare(self, ctx):
        self.outage = ClusterNodeRestart(node=ctx.alias)  # --alias host:port names the node (default: the last)
        self.outage.check()


class SnapshotRebalance(Drill):
    """T12: a recovery snapshot is taken while commands flow, and between the stop of dispatch and the cut
    the builder stalls past its lease of one partition, which a real worker then takes (a consumer-group
    rebalance). That snapshot must abort, never seal; the job takes a new one once the partitions are
    whole again, which must seal, pass its own test-restore, and the projections converge exactly."""

    name = "snapshot-rebalance"  # spec §7 drill 8
    spec_numbers = (8,)
    summary = "a partition changes hands during a recovery snapshot's cut; it aborts and a new one seals"
    commands_succeed_while = "a recovery snapshot was being built across a rebalance"
    default_fault_s = 5.0

    def prepare(self, ctx):
        ctx.stage.workers_check()
        self.taken: dict = {}

    def inject(self, ctx):
        from likes_project import leases
        from likes_project.audit.services import system_actor
        from likes_project.eventlog.models import Lease
        from likes_project.opsjobs.services import job_run_inline, job_start
        from reconciliation.jobs import SNAPSHOT_JOB
        from reconciliation.services.recovery import snapshot

        def rebalance(grants: list[leases.LeaseGrant]) -> None:
            snapshot.after_dispatch_stopped = None  # once: the next attempt runs undisturbed
            grant = grants[0]
            leases.lease_release(grant)  # as if the builder stalled past its TTL: the lease is free to take
            moved = wait_until(lambda: Lease.objects.filter(resource=grant.resource).exclude(
                holder=grant.holder).values_list("holder", flat=True).first(), timeout_s=20)
            self.taken = {"resource": grant.resource, "newHolder": moved}

        snapshot.after_dispatch_stopped = rebalance
        try:
            job = job_start(kind=SNAPSHOT_JOB, actor=system_actor("drill"),
                            params={"reason": "drill snapshot-rebalance"})
            job = job_run_inline(job.pk)
        finally:
            snapshot.after_dispatch_stopped = None
        self.aborted = list((job.params or {}).get("aborted", []))
        self.final = (job.params or {}).get("snapshotId")
        return (f"snapshot job {job.pk}: {self.taken.get('resource')} taken by {self.taken.get('newHolder')} during "
                f"the cut; aborted {self.aborted}, then snapshot {self.final}")

    def recover(self, ctx):
        from likes_project.audit.services import system_actor
        from reconciliation.services.recovery import restore

        self.tested = restore.test_restore(int(self.final), actor=system_actor("drill")) if self.final else {}
        return f"test-restore of snapshot {self.final}: {'ok' if self.tested.get('ok') else self.tested}"

    def judge(self, ctx, fault):
        from reconciliation.models import RecoverySnapshot

        failures = super().judge(ctx, fault)
        if not self.taken.get("newHolder"):
            failures.append("no worker took the partition's lease during the cut: the rebalance was not injected")
        rows = dict(RecoverySnapshot.objects.filter(pk__in=[*self.aborted, self.final]).values_list("pk", "status"))
        if not self.aborted or any(rows.get(pk) != "FAILED" for pk in self.aborted):
            failures.append(f"a snapshot taken across the rebalance did not fail: {rows}")
        if rows.get(self.final) != "SEALED":
            failures.append(f"no snapshot sealed after the partitions were whole again: {rows}")
        if not self.tested.get("ok"):
            failures.append(f"the test-restore of the sealed snapshot failed: {self.tested}")
        return failures


class _LedgerWorkerKill(Drill):
    """A move by an approved ledger (a bucket migration, a relation slot move) runs on the workers while commands
    flow; the workers are SIGKILLed in the middle of it and restarted. The sweeper finds the job's worker gone, its
    `abandon` starts the next job, which goes on from the ledger's cursor. The move must end RETIRED, in two jobs
    at least, and the projections converge exactly. A subclass names its ledger (`_ledger`, imported when the drill
    runs) and the aliases it moves between, finds what to move (`_pick`), plans it (`_plan`) and adds its own checks
    (`_judge_move`); the drill reads the ledger's model, job, job parameter and noun from the kit."""

    default_fault_s = 5.0
    aliases_setting = ""  # the settings list of the aliases the ledger moves units between
    holder = ""  # one of them, in refusals: "count partition"
    move = ""  # in refusals: "a bucket migration"
    row_id: int | None = None

    def _ledger(self):
        raise NotImplementedError  # abstract: the drill's ApprovedLedger

    def _pick(self, aliases: list[str]) -> tuple[str | None, str | None, list[int]]:
        raise NotImplementedError  # abstract: the source, the target and the units to move, as routed now

    def _plan(self, *, reason: str, actor):
        raise NotImplementedError  # abstract: the ledger's plan service, for self.units onto self.target

    def _judge_move(self, row) -> list[str]:
        return []

    def prepare(self, ctx):
        ctx.stage.workers_check()
        self.ledger = self._ledger()
        aliases = list(getattr(settings, self.aliases_setting))
        if len(aliases) < 2:
            raise DrillRefused(f"{self.move} needs two {self.holder}s at least")
        self.source, self.target, self.units = self._pick(aliases)
        if not self.units:
            raise DrillRefused(f"no {self.holder} holds {self.ledger.units_name}")

    def describe(self) -> str:
        return f"{len(self.units)} {self.ledger.units_name} {self.source} -> {self.target}"

    def _start(self) -> int:
        from likes_project.audit.services import system_actor

        m = self._plan(reason=f"drill {self.name}", actor=system_actor("drill-planner"))
        return self.ledger.approve(m.pk, actor=system_actor("drill-approver")).pk

    def inject(self, ctx):
        model = self.ledger.model
        missed: list[str] = []
        for _attempt in range(3):
            self.row_id = self._start()

            def started():
                row = model.objects.get(pk=self.row_id)
                return row if (row.copied_rows > 0 or row.state not in ("PREPARE", "COPYING")) else None

            row = wait_until(started, timeout_s=60, poll_s=0.05)
            if row is None or row.state != "RETIRED":
                break
            # A small move can end between two looks: the kill would miss it. Move the units back and try again.
            missed.append(f"{self.ledger.noun} {row.pk} ended before the kill")
            self.source, self.target = self.target, self.source
        at = f"{row.state}, {row.copied_rows} rows copied" if row else "before it started"
        again = f" ({'; '.join(missed)}: moved back and started again)" if missed else ""
        return (f"{self.ledger.noun} {self.row_id} ({self.describe()}) killed at {at}{again}: "
                f"{ctx.stage.workers_kill()}")

    def recover(self, ctx):

        restarted = ctx.stage.workers_restart(timeout_s=60)
        model = self.ledger.model
        done = wait_until(lambda: model.objects.filter(pk=self.row_id, state__in=[
            "RETIRED", "ABORTED", "FAILED"]).first(), timeout_s=240)
        row = model.objects.get(pk=self.row_id)
        return (f"{restarted}; {self.ledger.noun} {row.pk}: {row.state}"
                + ("" if done else " (not finished within 240 s)"))

    def judge(self, ctx, fault):
        from likes_project.opsjobs.models import OpsJob

        failures = super().judge(ctx, fault)
        what = self.ledger.noun
        row = self.ledger.model.objects.get(pk=self.row_id)
        if row.state != "RETIRED":
            failures.append(f"{what} {row.pk} ended {row.state}, not RETIRED: {row.error}")
        jobs = OpsJob.objects.filter(kind=self.ledger.job_kind, **{f"params__{self.ledger.id_param}": row.pk}).count()
        if jobs < 2:
            failures.append(f"{what} {row.pk} ran in {jobs} job(s): it was not resumed after the kill")
        return failures + self._judge_move(row)


class MigrationWorkerKill(_LedgerWorkerKill):
    """MIG-2 after a crash, on real workers: a bucket migration (every bucket of the first count partition onto
    the last) is the move (see _LedgerWorkerKill); afterwards exactly one partition accepts writes for each moved
    bucket."""

    name = "migration-worker-kill"  # spec §7 drill 11
    spec_numbers = (11,)
    summary = "the workers are SIGKILLed during a bucket migration; it resumes from its ledger and ends RETIRED"
    commands_succeed_while = "the workers running a bucket migration were killed"
    aliases_setting, holder, move = "COUNT_PARTITION_ALIASES", "count partition", "a bucket migration"

    def _ledger(self):
        from counting.services.migration.ledger import LEDGER

        return LEDGER

    def _pick(self, aliases):
        from counting import routing

        routing.reset_cache()
        gen = routing.active()
        source = next((a for a in aliases if gen.buckets_on(a)), None)
        target = aliases[-1] if aliases[-1] != source else aliases[0]
        return source, target, (gen.buckets_on(source) if source else [])

    def _plan(self, *, reason, actor):
        from counting.services.migration import ledger

        return ledger.migration_plan(target=self.target, buckets=self.units, reason=reason, actor=actor)

    def _judge_move(self, row) -> list[str]:
        from counting import routing
        from counting.models import CountRouteFence

        routing.reset_cache()
        gen = routing.active()
        for vb in self.units:
            owners = [a for a in settings.COUNT_PARTITION_ALIASES if CountRouteFence.objects.using(a).filter(
                bucket_space_version=gen.space.version, virtual_bucket=vb, route_epoch=gen.routes[vb].epoch,
                state="ACTIVE").exists()]
            if owners != [gen.routes[vb].partition]:
                return [f"bucket {vb}: partitions accepting writes {owners}, routed to {gen.routes[vb]}"]
        return []


class SlotMoveWorkerKill(_LedgerWorkerKill):
    """Issue 16 §3 after a crash, on real workers: a relation slot move (every slot of the first relation shard
    that holds any onto the next) is the move (see _LedgerWorkerKill); afterwards VERIFY passed and every moved
    slot is on the target under the active contract. The comparison reads each user where the contract puts it
    now, and every shard's outbox (the rows written before the move stay on the source and drain there)."""

    name = "slot-move-worker-kill"
    summary = "the workers are SIGKILLed during a relation slot move; it resumes from its ledger and ends RETIRED"
    commands_succeed_while = "the workers running a relation slot move were killed"
    aliases_setting, holder, move = "RELATION_SHARD_ALIASES", "relation shard", "a slot move"

    def _ledger(self):
        from relations.services.slot_moves.ledger import LEDGER

        return LEDGER

    def _pick(self, aliases):
        from relations import routing

        routing.reset_cache()
        contract = routing.active_contract()
        source = next((a for a in aliases if a in contract.slot_aliases), None)
        slots = [s for s in range(contract.logical_slots) if contract.slot_aliases[s] == source]
        return source, next((a for a in aliases if a != source), None), slots

    def _plan(self, *, reason, actor):
        from relations.services.slot_moves import ledger

        return ledger.move_plan(slots=self.units, target=self.target, reason=reason, actor=actor)

    def recover(self, ctx):
        from relations import routing

        out = super().recover(ctx)
        routing.reset_cache()  # this process reads where the contract puts each user now
        return out

    def _judge_move(self, row) -> list[str]:
        from relations import routing

        routing.reset_cache()
        failures = [] if (row.verify_result or {}).get("ok") else [f"slot move {row.pk}: verify {row.verify_result}"]
        contract = routing.active_contract()
        elsewhere = [s for s in self.units if contract.slot_aliases[s] != self.target]
        if elsewhere:
            failures.append(f"slots {elsewhere[:10]} are not on {self.target} under contract v{contract.version}")
        return failures


# The drills, in the order `manage.py drill` lists them (OpsconsoleConfig.ready registers each).
SCENARIOS: tuple[type[Drill], ...] = (CountPartitionDown, RelationShardDown, EventlogFlush, WorkerKill, CacheRedisDown,
                                      SnapshotRebalance, MigrationWorkerKill, SlotMoveWorkerKill, ClusterNodeDown)
