"""Drill 13, hot-video skew (spec §7, issue 32 §2): one video takes most of the writes while commands flow. The
hot-spot figures the live projector records must show it as the hottest video; when one count partition takes more
than HOTSPOT_MOVE_SUGGEST_SHARE of the writes the suggested bucket move is planned and approved (two system actors,
as the ledger drills do) and runs on the workers under the load; afterwards the source partition's share of the hot
video's buckets has fallen and every count is exact (the runner's comparison). When no partition is past the share,
the virtual buckets already spread the video (the note says how): nothing moves and the command path must still
answer every command (DEG-2: the relation chain first)."""

from __future__ import annotations

from collections import Counter

from django.conf import settings

from likes_project.waiting import wait_until
from opsconsole.drills.faults import DrillRefused
from opsconsole.drills.scenarios import Context, Drill

HOT_SHARE = 0.8  # of the commands, on the hot video, while the fault holds


class HotVideoSkew(Drill):
    name = "hot-video-skew"
    summary = "one video takes most writes; the hot-spot panel's suggested bucket move runs, skew falls, counts exact"
    commands_succeed_while = "one video took most of the writes"
    default_fault_s = 20.0

    def prepare(self, ctx: Context) -> None:
        ctx.stage.workers_check()
        if len(settings.COUNT_PARTITION_ALIASES) < 2:
            raise DrillRefused("a bucket move needs two count partitions at least")
        self.move_id = None
        self.suggestion = None
        self.figures_failed = False
        self.shares: dict[str, float] = {}

    def _hot_video(self, ctx: Context) -> str:
        return ctx.traffic.population.videos[0]

    def _hot_buckets(self, ctx: Context) -> list[int]:
        """The virtual bucket of each of the hot video's drill relations (one per drill user)."""
        from counting import routing

        gen = routing.active()
        video = self._hot_video(ctx)
        return [routing.virtual_bucket(gen.space, video, u.user_id) for u in ctx.traffic.population.users]

    def _route_share(self, ctx: Context, partition: str) -> float:
        """The share of the hot video's drill relations whose bucket is routed to `partition` now."""
        from counting import routing

        routing.reset_cache()
        gen = routing.active()
        owners = Counter(gen.routes[vb].partition for vb in self._hot_buckets(ctx))
        return owners[partition] / max(1, sum(owners.values()))

    def inject(self, ctx: Context) -> str:
        from counting import hotspots
        from counting.services.migration.ledger import LEDGER, migration_plan
        from likes_project.audit.services import system_actor

        video = self._hot_video(ctx)
        ctx.traffic.hot(video, HOT_SHARE)

        hot_buckets = set(self._hot_buckets(ctx))

        def figures():
            """The window once the video is the hottest and, on the partition a move would relieve, its hottest
            bucket is one of the video's and strictly hotter than any other: until then the top buckets are ties
            of the earlier even traffic, ranked by name, and a move of them would not touch the hot video."""
            window = hotspots.read(60)
            if not window.videos or window.videos[0][0] != video:
                return None
            source = max(window.partitions, key=lambda p: (window.partitions[p], p))
            ranked = window.buckets.get(source, [])
            hot = max((n for vb, n in ranked if vb in hot_buckets), default=0)
            return window if hot > max((n for vb, n in ranked if vb not in hot_buckets), default=0) else None

        window = wait_until(figures, timeout_s=30, poll_s=0.5)
        if window is None:
            ctx.notes.append("the hot-spot figures never showed the hot video and its buckets as the hottest")
            self.figures_failed = True
            return f"{video} takes {HOT_SHARE:.0%} of the commands; the figures did not show it within 30 s"
        self.shares = {p: round(window.share(p), 2) for p in window.partitions}
        self.suggestion = hotspots.suggest(window, busy=LEDGER.units_in_flight())
        if self.suggestion is None:
            ctx.notes.append(f"no count partition past HOTSPOT_MOVE_SUGGEST_SHARE "
                             f"({settings.HOTSPOT_MOVE_SUGGEST_SHARE:.0%}): shares {self.shares}; the video's writes "
                             f"spread over {sum(len(b) for b in window.buckets.values())} buckets, nothing to move")
            return f"{video} takes {HOT_SHARE:.0%} of the commands; shares {self.shares}: no move suggested"
        s = self.suggestion
        self.before = self._route_share(ctx, s.source)
        m = migration_plan(target=s.target, buckets=s.buckets, reason=f"drill {self.name}: {s.source} took "
                           f"{s.source_share:.0%} of the writes", actor=system_actor("drill-planner"))
        self.move_id = LEDGER.approve(m.pk, actor=system_actor("drill-approver")).pk
        return (f"{video} takes {HOT_SHARE:.0%} of the commands; shares {self.shares}: suggested and approved "
                f"migration {self.move_id} of buckets {s.buckets_text} {s.source} -> {s.target}")

    def recover(self, ctx: Context) -> str:
        from counting.models import BucketMigration

        ctx.traffic.hot(None, 0.0)
        if self.move_id is None:
            return "the hot video cools down"
        done = wait_until(lambda: BucketMigration.objects.filter(pk=self.move_id, state__in=[
            "RETIRED", "ABORTED", "FAILED"]).first(), timeout_s=240)
        row = BucketMigration.objects.get(pk=self.move_id)
        self.after = self._route_share(ctx, self.suggestion.source)
        source = self.suggestion.source
        return (f"migration {row.pk}: {row.state}" + ("" if done else " (not finished within 240 s)")
                + f"; {source}'s share of the hot video's buckets {self.before:.0%} -> {self.after:.0%}")

    def judge(self, ctx: Context, fault) -> list[str]:
        from counting.models import BucketMigration

        failures = super().judge(ctx, fault)
        if self.figures_failed:
            failures.append("the hot-spot figures did not show the hot video as the hottest")
        if self.move_id is not None:
            row = BucketMigration.objects.get(pk=self.move_id)
            if row.state != "RETIRED":
                failures.append(f"migration {row.pk} ended {row.state}, not RETIRED: {row.error}")
            if not self.after < self.before:
                failures.append(f"the skew did not fall: {self.suggestion.source} holds {self.after:.0%} of the hot "
                                f"video's buckets, {self.before:.0%} before")
        return failures
