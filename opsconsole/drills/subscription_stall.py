"""The subscription-stall drill (issue 31 §1): a downstream subscription stops reading while commands keep
flowing and the log grows. The internal consumers must keep flowing (the run's own heal check), the stalled
subscription must hold trimming and archiving back (the log's lowest position is its own), its lag alert must
fire, and after the stall it must read everything the drill's users did, with no gap in any relation's versions.
The drill's subscription is retired at the end, so it never holds a deployment's log afterwards."""

from __future__ import annotations

import uuid

from opsconsole.drills.scenarios import Context, Drill

FIELDS = ["userId", "videoId", "state", "relationVersion", "stateChangedAt"]


class SubscriptionStall(Drill):
    name = "subscription-stall"
    summary = "a subscription stops reading while the log grows; trimming holds, its alert fires, it catches up"
    commands_succeed_while = "a subscription was stalled"
    default_fault_s = 20.0

    def prepare(self, ctx: Context) -> None:
        from likes_project.audit.services import system_actor
        from likes_project.subscriptions import services

        # From now on (before the drill's users exist): every event of theirs is one it must read. Its alert
        # fires past half of the stall; it never falls behind its retention (24 h by default) within a drill.
        self.sub_name = f"drill-stall-{uuid.uuid4().hex[:8]}"
        self.created = services.subscription_create(
            name=self.sub_name, owner="drills", purpose="drill subscription-stall", fields=FIELDS,
            start_from="latest", actor=system_actor("drill"), alert_lag_s=max(0.5, ctx.fault_s / 2))

    def inject(self, ctx: Context) -> str:
        return f"subscription {self.sub_name} stops reading (its position stays where it was)"

    def in_effect(self, ctx: Context) -> bool | None:
        return self._lag() > 0

    def _lag(self) -> float:
        from likes_project.subscriptions import services

        return services.lag_seconds(services.acked_positions(services.subscription_get(self.sub_name)))

    def recover(self, ctx: Context) -> str:
        """Before it reads again: the log's lowest position is the stalled one's on every partition it has not
        read (trimming and archiving hold there), the service's own trim leaves its unread entries, and the lag
        check raises its alert."""
        from django.conf import settings

        from likes_project.eventlog import streams
        from likes_project.eventlog.checkpoints import lowest_by_partition
        from likes_project.eventlog.services import streams_trim
        from likes_project.subscriptions import services

        sub = services.subscription_get(self.sub_name)
        acked = services.acked_positions(sub)
        streams_trim(retention_s=settings.OUTBOX_RETENTION_HOURS * 3600)  # what the beat runs
        lows = lowest_by_partition()
        self.not_held = [p for p, pos in acked.items()
                         if streams.read_after(p, pos, 1) and streams.entry_id_key(lows[p]) > streams.entry_id_key(pos)]
        lag = self._lag()
        self.alerted = self.sub_name in services.subscriptions_lag_check().alerts
        return (f"after a stall of about {lag:.1f} s of lag: the log held at its position on every partition"
                f"{'' if not self.not_held else f' EXCEPT {self.not_held}'}; lag alert "
                f"{'fired' if self.alerted else 'did NOT fire'}; it reads again")

    def judge(self, ctx: Context, fault) -> list[str]:
        failures = super().judge(ctx, fault)
        if self.not_held:
            failures.append(f"the log did not hold at the stalled subscription's position: partitions {self.not_held}")
        if not self.alerted:
            failures.append("the stalled subscription's lag alert did not fire")
        try:
            failures += self._caught_up(ctx)
        finally:
            self._retire()
        return failures

    def _caught_up(self, ctx: Context) -> list[str]:
        """Read it to the end (as its downstream would, acknowledging each page) and compare each drill relation's
        versions with the facts: every version from 1 to the current one, none missing."""
        from likes_project.subscriptions import selectors, services
        from relations import selectors as relation_selectors

        sub = services.subscription_get(self.sub_name)
        seen: dict[tuple[int, str], set[int]] = {}
        cursor = None
        while True:
            page = selectors.subscription_read(sub, cursor=cursor, limit=500)
            for event in page.events:
                seen.setdefault((event["userId"], event["videoId"]), set()).add(event["relationVersion"])
            at = selectors.cursor_decode(sub, page.next_cursor)
            services.subscription_ack(sub=sub, positions=at.partitions, notices=at.notices)
            cursor = page.next_cursor
            if not page.events:
                break
        population = ctx.traffic.population
        gaps = []
        for user in population.users:
            for video_id in population.videos:
                version = relation_selectors.relation_get(user_id=user.user_id, video_id=video_id).relation_version
                versions = seen.get((user.user_id, video_id), set())
                if versions != set(range(1, version + 1)):
                    gaps.append(f"{user.user_id}:{video_id} facts v{version}, read {sorted(versions)[:8]}")
        return [f"the subscription missed versions after its stall ({len(gaps)} relations): {gaps[:5]}"] if gaps else []

    def _retire(self) -> None:
        from likes_project.audit.services import system_actor
        from likes_project.subscriptions import services

        services.subscription_move(name=self.sub_name, move="retire", actor=system_actor("drill"),
                                   reason="drill subscription-stall: done")
