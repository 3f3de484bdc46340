"""Spec §7's drills 2 and 3: a backlog made on purpose, before the event log (the outbox publisher of one relation
shard paused) and inside it (one event-log partition unavailable). Commands must keep succeeding through both (the
relation chain first, DEG-1), the backlog must show where an operator looks, and everything must converge exactly
once the fault is undone (the runner's comparison)."""

from __future__ import annotations

from django.conf import settings
from django.utils import timezone

from likes_project.eventlog import streams
from likes_project.redis_client import stream_redis
from opsconsole.drills.checks import backlog_sample, retries_get
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.scenarios import Context, Drill
from relations import routing as relation_routing


class PublisherPaused(Drill):
    """Drill 2: the outbox publisher of one relation shard paused by its runtime switch, as an operator sets it
    (`--alias`, default the last shard). Its rows wait in its outbox while commands commit; the front page's outbox
    panel shows them (its alert fires once the oldest is older than a minute: hold the fault longer than 75 s to
    see it, the gauges being refreshed every 15 s); clearing the switch publishes the backlog in order, each event
    once."""

    name = "publisher-paused"
    spec_numbers = (2,)
    summary = "one relation shard's outbox publisher paused: commands succeed, the backlog shows, then drains once"
    commands_succeed_while = "a relation shard's outbox publisher was paused"

    def prepare(self, ctx: Context) -> None:
        shards = list(relation_routing.all_aliases())
        ctx.alias = ctx.alias or shards[-1]
        if ctx.alias not in shards:
            raise DrillRefused(f"{ctx.alias!r} is not a relation shard ({', '.join(shards)})")
        self.seen: dict = {}

    def _switch(self, paused: bool) -> None:
        from likes_project.audit.services import system_actor
        from likes_project.switches import switch_set

        switch_set(kind="publisher", key=self.alias, paused=paused, reason=f"drill {self.name}",
                   actor=system_actor("drill"))

    def inject(self, ctx: Context) -> str:
        self.alias = ctx.alias
        self._switch(True)
        return f"the outbox publisher of {ctx.alias} paused (switch `publisher` {ctx.alias})"

    def in_effect(self, ctx: Context) -> bool:
        """The switch is set (read from its row); the rows waiting in the shard's outbox are noted."""
        from relations.models import OutboxPublisherSwitch

        waiting = backlog_sample().outbox_pending.get(ctx.alias) or 0
        self.seen["rows"] = max(self.seen.get("rows", 0), waiting)
        return OutboxPublisherSwitch.objects.filter(pk=ctx.alias, paused=True).exists()

    def shown(self, ctx: Context) -> bool:
        return bool(self.seen.get("rows"))

    def recover(self, ctx: Context) -> str:
        from likes_project.observability import gauges_refresh
        from opsconsole.dashboard import front_page

        gauges_refresh()  # what the beat stores every METRICS_GAUGES_EVERY_S, now: the panel reads it
        panel = next(p for p in front_page()["panels"] if p.key == "outbox")
        row = next((r for r in panel.rows if r[0].text == ctx.alias), None)
        self.seen.update(panel_rows=None if row is None else row[2].text, alert=panel.alert)
        self._switch(False)
        return (f"the publisher of {ctx.alias} resumed; before that the outbox panel showed "
                f"{self.seen['panel_rows']} unpublished rows on it (alert: {'yes' if panel.alert else 'no'})")

    def judge(self, ctx: Context, fault) -> list[str]:
        failures = super().judge(ctx, fault)
        if not self.seen.get("rows"):
            failures.append(f"no row waited in {ctx.alias}'s outbox while its publisher was paused")
        if self.seen.get("panel_rows") in (None, "0"):
            failures.append(f"the front page's outbox panel did not show {ctx.alias}'s backlog")
        if ctx.fault_s > 60 + 2 * float(settings.METRICS_GAUGES_EVERY_S) and not self.seen.get("alert"):
            failures.append("the outbox panel raised no alert though the backlog was older than a minute")
        return failures


class EventlogPartitionDown(Drill):
    """Drill 3: one partition of the event log unavailable (its stream key set aside and another value of the
    wrong type put in its place, so every XADD, read and trim of it fails while its entries are kept): publishers
    retry that partition's rows, consumers retry it, the other partitions flow (the skew shows in the backlog);
    the stream is put back in one transaction and everything converges exactly (a row whose publish failed is
    published again; nothing is lost or applied twice). `--alias` names the partition (default 0)."""

    name = "eventlog-partition-down"
    spec_numbers = (3,)
    summary = "one event-log partition unavailable: publishers and consumers retry it, the others flow, exact"
    commands_succeed_while = "an event-log partition was unavailable"

    def prepare(self, ctx: Context) -> None:
        partitions = streams.all_partitions()
        self.partition = int(ctx.alias) if ctx.alias not in (None, "") and str(ctx.alias).isdigit() else 0
        if self.partition not in partitions:
            raise DrillRefused(f"--alias must name an event-log partition (0..{len(partitions) - 1})")
        self.key = streams.stream_key(self.partition)
        self.aside = f"{self.key}:drill-aside"  # the same hash tag: the same Cluster slot, RENAME works
        self.worst: dict = {}
        self.since = timezone.now()

    def inject(self, ctx: Context) -> str:
        r = stream_redis()
        pipe = r.pipeline(transaction=True)
        if r.exists(self.key):
            pipe.rename(self.key, self.aside)
        pipe.set(self.key, "drill: this partition is unavailable")
        pipe.execute()
        return f"event-log partition {self.partition} unavailable ({self.key} set aside, a string in its place)"

    def in_effect(self, ctx: Context) -> bool:
        sample = backlog_sample()
        for name, value in (("outbox", sample.outbox_total),
                            ("lag", max((n or 0 for n in sample.consumer_lag.values()), default=0))):
            self.worst[name] = max(self.worst.get(name, 0), value)
        return stream_redis().type(self.key) in (b"string", "string")

    def shown(self, ctx: Context) -> bool:
        """A publish of the downed partition's rows has failed and been counted for a retry."""
        self.worst["failed_publishes"] = retries_get(ctx.traffic.population, since=self.since).outbox_retries
        return self.worst["failed_publishes"] > 0

    def recover(self, ctx: Context) -> str:
        r = stream_redis()
        pipe = r.pipeline(transaction=True)
        pipe.delete(self.key)
        if r.exists(self.aside):
            pipe.rename(self.aside, self.key)
        pipe.execute()
        return (f"event-log partition {self.partition} back with its entries; during the fault the outbox held up "
                f"to {self.worst.get('outbox', 0)} rows and {self.worst.get('failed_publishes', 0)} publishes "
                "had failed")

    def judge(self, ctx: Context, fault) -> list[str]:
        failures = super().judge(ctx, fault)
        if not self.worst.get("failed_publishes"):
            failures.append(f"no publish to event-log partition {self.partition} failed while it was unavailable")
        return failures

