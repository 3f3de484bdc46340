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

    def shown(self, ctx: Context) -> bool:
        """Whether what the fault is there to show has happened yet (a row waiting, a publish that failed). The
        runner holds the fault past fault_s until it has, for at most SHOW_MAX_S more: on a busy machine the
        worker may not have reached the downed part within a fixed window."""
        return True

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

    @staticmethod
    def _unseen(commands) -> list[str]:
        out = []
        if not any(k.startswith("503") for k in commands):
            out.append("no command of the downed shard's users was answered 503 during the fault")
        if commands.get("200", 0) == 0:
            out.append("no command of the other shard's users succeeded during the fault")
        return out

    def shown(self, ctx):
        return ctx.traffic is None or not self._unseen(ctx.traffic.answers("fault"))

    def judge(self, ctx, fault):
        return super().judge(ctx, fault) + self._unseen(fault.commands)


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


# The drills, in the order `manage.py drill` lists them (OpsconsoleConfig.ready registers each).
# The ledger worker kills (`opsconsole.drills.ledger_kill`) come after SnapshotRebalance.
SCENARIOS: tuple[type[Drill], ...] = (CountPartitionDown, RelationShardDown, EventlogFlush, WorkerKill, CacheRedisDown,
                                      SnapshotRebalance)
LATE_SCENARIOS: tuple[type[Drill], ...] = (ClusterNodeDown,)
