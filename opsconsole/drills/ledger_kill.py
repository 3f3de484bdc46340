"""The drills that kill the workers in the middle of an approved ledger's move (issue 13's migration-worker-kill,
spec §7 drill 11; issue 16's slot-move-worker-kill): a bucket migration or a relation slot move must resume from its
ledger after the kill and end RETIRED. The run itself is `opsconsole.drills.runner`, as for every drill."""

from __future__ import annotations

from django.conf import settings

from likes_project.waiting import wait_until
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.scenarios import Drill


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
    # A drill moves this many units of the source at most: enough for many copy windows and for the traffic to cross
    # the move, few enough that a drill on a live deployment moves a slice of a holder, not half the data (and the
    # suite's run of it takes seconds: every bucket of a partition took 20 s more).
    max_units = 64

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
        self.source, self.target, units = self._pick(aliases)
        if not units:
            raise DrillRefused(f"no {self.holder} holds {self.ledger.units_name}")
        self.held = len(units)
        self.units = units[:self.max_units]

    def describe(self) -> str:
        return f"{len(self.units)} of {self.held} {self.ledger.units_name} {self.source} -> {self.target}"

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
    """MIG-2 after a crash, on real workers: a bucket migration (up to `max_units` buckets of the first count
    partition onto the last) is the move (see _LedgerWorkerKill); afterwards exactly one partition accepts writes
    for each moved bucket."""

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
    """Issue 16 §3 after a crash, on real workers: a relation slot move (up to `max_units` slots of the first
    relation shard that holds any onto the next) is the move (see _LedgerWorkerKill); afterwards VERIFY passed and
    every moved slot is on the target under the active contract. The comparison reads each user where the contract
    puts it now, and every shard's outbox (the rows written before the move stay on the source and drain there)."""

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
