"""Drill 13, hot-video skew (spec §7, issue 32 §2): one video takes most of the writes while commands flow. The
hot-spot figures the live projector records must show it as the hottest video; when one count partition takes more
than HOTSPOT_MOVE_SUGGEST_SHARE of the writes, and the hot video's bucket is the hottest of that partition, the
suggested bucket move is planned and approved (two system actors, as the ledger drills do) and runs on the workers
under the load; afterwards the source partition's share of the hot video's buckets has fallen and every count is
exact (the runner's comparison).

With moves unavailable (one count partition, no partition past the share, or the plan refused) the degradation plan
of DEG-2 must hold instead: every command answers (the relation chain first), the hot video's display is refreshed
at most every COUNT_HOT_REFRESH_S once the figures call it hot (COUNT_HOT_WRITES_PER_MINUTE; the drill and the
workers must run with the same settings), and no cold video's dirty mark waits past COLD_WAIT_MAX_S (cold never
starved)."""

from __future__ import annotations

import itertools
from collections import Counter

from django.conf import settings
from django.utils import timezone

from likes_project.errors import DomainError
from likes_project.waiting import wait_until
from opsconsole.drills.scenarios import Context, Drill

HOT_SHARE = 0.8  # of the commands, on the hot video, while the fault holds
COLD_WAIT_MAX_S = 4.0  # the longest a cold video's dirty mark may wait while the hot one is throttled


class HotVideoSkew(Drill):
    name = "hot-video-skew"
    spec_numbers = (13,)
    summary = ("one video takes most writes; the hot-spot panel's suggested bucket move runs, skew falls, counts exact "
               "(no move possible: the hot video's display slowed, cold ones never starved)")
    commands_succeed_while = "one video took most of the writes"
    default_fault_s = 20.0

    def prepare(self, ctx: Context) -> None:
        ctx.stage.workers_check()
        self.move_id = None
        self.suggestion = None
        self.figures_failed = False
        self.shares: dict[str, float] = {}
        self.degraded: str | None = None  # why no move runs: the degradation plan is judged instead
        self.hot_since = None  # when the figures first called the video hot (the throttle applies from there)
        self.refreshes: set = set()  # the hot video's display snapshot times seen while the fault held
        self.cold_waits: dict[str, float] = {}

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
            self.degraded = ("one count partition: nowhere to move buckets to"
                             if len(settings.COUNT_PARTITION_ALIASES) < 2 else
                             f"no count partition past HOTSPOT_MOVE_SUGGEST_SHARE "
                             f"({settings.HOTSPOT_MOVE_SUGGEST_SHARE:.0%})")
            return self._degrade(ctx, f"shares {self.shares}: no move suggested")
        s = self.suggestion
        self.before = self._route_share(ctx, s.source)
        try:
            m = migration_plan(target=s.target, buckets=s.buckets, reason=f"drill {self.name}: {s.source} took "
                               f"{s.source_share:.0%} of the writes", actor=system_actor("drill-planner"))
            self.move_id = LEDGER.approve(m.pk, actor=system_actor("drill-approver")).pk
        except DomainError as exc:
            self.degraded = f"the suggested move was refused ({exc.code}: {exc})"
            return self._degrade(ctx, f"shares {self.shares}: suggested move refused")
        return (f"{video} takes {HOT_SHARE:.0%} of the commands; shares {self.shares}: suggested and approved "
                f"migration {self.move_id} of buckets {s.buckets_text} {s.source} -> {s.target}")

    def _degrade(self, ctx: Context, what: str) -> str:
        ctx.notes.append(f"no bucket move: {self.degraded}; the degradation plan (DEG-2) is judged instead")
        return f"{self._hot_video(ctx)} takes {HOT_SHARE:.0%} of the commands; {what}: degradation plan"

    def in_effect(self, ctx: Context) -> bool | None:
        """Under the degradation plan: note the hot video's display snapshot times, and when the figures first
        called it hot."""
        from counting import hotspots
        from counting.models import VideoDisplayCount

        if self.degraded is None:
            return None
        video = self._hot_video(ctx)
        if self.hot_since is None and video in hotspots.hot_videos(60, settings.COUNT_HOT_WRITES_PER_MINUTE):
            self.hot_since = timezone.now()
        at = VideoDisplayCount.objects.filter(video_id=video).values_list("generated_at", flat=True).first()
        if at is not None:
            self.refreshes.add(at)
        return None

    def _cold_waits(self, ctx: Context) -> dict[str, float]:
        """Each cold drill video's oldest dirty mark, in seconds, over the count partitions."""
        from counting import routing
        from counting.models import DirtyVideo

        generation, now, waits = routing.active().generation, timezone.now(), {}
        for alias in settings.COUNT_PARTITION_ALIASES:
            for video, at in DirtyVideo.objects.using(alias).filter(
                    generation=generation, video_id__in=ctx.traffic.population.videos[1:]).values_list(
                    "video_id", "first_dirty_at"):
                waits[video] = max(waits.get(video, 0.0), round((now - at).total_seconds(), 1))
        return waits

    def _throttle_gaps(self) -> list[float]:
        """The gaps between the hot video's display refreshes once the figures called it hot."""
        times = sorted(at for at in self.refreshes if self.hot_since and at >= self.hot_since)
        return [round((b - a).total_seconds(), 2) for a, b in itertools.pairwise(times)]

    def recover(self, ctx: Context) -> str:
        from counting.models import BucketMigration

        if self.degraded is not None:
            self.cold_waits = self._cold_waits(ctx)  # while the hot video still takes its share
        ctx.traffic.hot(None, 0.0)
        if self.move_id is None:
            gaps = self._throttle_gaps()
            return (f"the hot video cools down; its display refreshed {len(self.refreshes)} times while held, "
                    f"gaps once hot {gaps or 'none'} s; cold videos' oldest dirty mark "
                    f"{max(self.cold_waits.values(), default=0.0)} s")
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
        if self.degraded is not None:
            starved = {v: w for v, w in self.cold_waits.items() if w > COLD_WAIT_MAX_S}
            if starved:
                failures.append(f"cold videos starved behind the hot one (dirty marks older than "
                                f"{COLD_WAIT_MAX_S} s): {starved}")
            fast = [g for g in self._throttle_gaps() if g < settings.COUNT_HOT_REFRESH_S]
            if fast:
                failures.append(f"the hot video's display was refreshed {fast} s apart, under COUNT_HOT_REFRESH_S "
                                f"({settings.COUNT_HOT_REFRESH_S} s): the refresh was not slowed")
        if self.move_id is not None:
            row = BucketMigration.objects.get(pk=self.move_id)
            if row.state != "RETIRED":
                failures.append(f"migration {row.pk} ended {row.state}, not RETIRED: {row.error}")
            if not self.after < self.before:
                failures.append(f"the skew did not fall: {self.suggestion.source} holds {self.after:.0%} of the hot "
                                f"video's buckets, {self.before:.0%} before")
        return failures
