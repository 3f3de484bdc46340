"""Spec §7's drills 5 and 6: the relation cache's and the count cache's Redis keys flushed while commands flow (test
matrix T6 and T16). Only the cache role's keys of this service go (a SCAN of the cache's key pattern on every server
of the role, each key UNLINKed), never the event log or the broker: in a deployment where either shares the cache's
Redis database the drills are refused, since a real flush there would take them too (that is `eventlog-flush`).

Both drills rely on the service to notice the loss by itself (the beat's loss checks find the ACTIVE generation's
sentinel gone and start a rebuild job); neither drill rebuilds anything. Reads may answer 503 `degraded_overloaded`
while the databases take the misses (D26), as in `cache-redis-down`; commands must all succeed."""

from __future__ import annotations

import threading

from django.conf import settings
from django.db import connections

from likes_project import metrics
from likes_project.redis_client import cache_redis, role_nodes
from likes_project.waiting import wait_until
from opsconsole.drills.api import DrillApi
from opsconsole.drills.faults import DrillRefused, redis_roles_sharing
from opsconsole.drills.scenarios import Context, Drill, RedisOutage
from opsconsole.drills.traffic import LIKED, UNLIKED

WATCH_POLL_S = 0.05  # the count consumer's checkpoints are watched this often while drill 6 holds
REBUILD_WAIT_S = 180.0  # the longest a drill waits after its fault for the service's own rebuild
PROBE_STATES = (LIKED, UNLIKED, LIKED)  # a probe relation's commands: it ends LIKED v3
SHOWN = 5  # examples quoted in a failure line


def cache_keys_flush(pattern: str) -> int:
    """UNLINK every key of the cache role matching `pattern`, on every server of the role (the one server, or each
    primary of a Cluster); returns how many. One key per command: a Cluster node refuses a multi-key command across
    slots."""
    deleted = 0
    for node in role_nodes(cache_redis()):
        batch: list[bytes] = []
        for key in node.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += _unlink(node, batch)
                batch = []
        deleted += _unlink(node, batch)
    return deleted


def _unlink(node, keys: list[bytes]) -> int:
    pipe = node.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    return sum(int(n) for n in pipe.execute()) if keys else 0


def probe_relations(ctx: Context, name: str, states: tuple[str, ...]) -> list:
    """A video of the drill's own (`drill-<run>-<name>`, outside the population's: the runner's comparison never
    counts it) on which the first drill user of each shard sends `states` through the API; (user, video) each."""
    from opsconsole.drills.population import DRILL_ACTOR
    from relations.services.videos import video_snapshot_upsert

    population = ctx.traffic.population
    video_id = f"drill-{population.run_id}-{name}"
    video_snapshot_upsert(video_id=video_id, author_id=population.author.user_id, visibility="public",
                          status="active", version=None, actor=DRILL_ACTOR)
    users = [members[0] for _shard, members in sorted(population.by_shard.items()) if members]
    api = DrillApi()
    for user in users:
        for n, desired in enumerate(states):
            answer = api.like_put(user, video_id, desired, f"drill-{population.run_id}-{name}-{user.user_id}-{n}")
            if not answer.ok:
                raise RuntimeError(f"a {name} command ({desired}) answered {answer.status} {answer.code}")
    return [(user, video_id) for user in users]


class _CacheFlush(Drill):
    """What both flushes share: the refusal, the flush, the bounded wait for the service's new generation and the
    checks of the reads while the cache is empty. A subclass names its key pattern and its generation model."""

    default_fault_s = 20.0
    rule = RedisOutage.rule  # reads may degrade to 503 degraded_overloaded (D26); commands strict
    read_kinds: tuple[str, ...] = ()  # the reads that must have been answered (200) from the databases meanwhile
    what = ""  # "relation cache", in messages

    def _pattern(self) -> str:
        raise NotImplementedError  # abstract: the cache's key pattern (its app's cache module builds it)

    def _model(self):
        raise NotImplementedError  # abstract: the cache's durable generation model

    def prepare(self, ctx: Context) -> None:
        shared = [role for role, where in redis_roles_sharing(settings.REDIS_URL).items()
                  if role != "cache" and where == "same database"]
        if shared:
            raise DrillRefused(f"{self.name} is the loss of the cache role's keys alone, but the "
                               f"{' and the '.join(shared)} live in the cache's Redis database too (a real flush "
                               "would take them as well: that is eventlog-flush); point REDIS_URL at a Redis "
                               "database of its own to run this drill")
        self.old_gen, self.new_gen, self.flushed = self._active(), None, 0
        if self.old_gen is None:
            raise DrillRefused(f"the {self.what} has no ACTIVE generation to lose (migrate_all bootstraps one)")

    def _active(self) -> int | None:
        return self._model().objects.filter(status="ACTIVE").values_list("generation", flat=True).first()

    def _flush(self) -> str:
        self.old_gen = self._active()  # the one that loses its keys (a rebuild may have run since prepare)
        self.flushed = cache_keys_flush(self._pattern())
        return f"{self.flushed} {self.what} keys ({self._pattern()}) deleted from the cache Redis"

    def _rebuilt(self, ctx: Context) -> str:
        """Wait (bounded) for the service to detect the loss and activate a new generation; a rebuild that failed
        on the way (the next loss check starts another) is noted with its reason."""
        if not self.flushed:
            return f"no {self.what} key was flushed: no rebuild to wait for"

        def newer() -> int | None:
            active = self._active()
            return active if active is not None and active > self.old_gen else None

        self.new_gen = wait_until(newer, timeout_s=REBUILD_WAIT_S, poll_s=0.25)
        ctx.notes += [f"{self.what} generation {g} ended {status} on the way: {reason}" for g, status, reason in
                      self._model().objects.filter(generation__gt=self.old_gen).exclude(
                          status__in=("ACTIVE", "RETIRED")).values_list("generation", "status", "failure_reason")]
        if self.new_gen is None:
            return (f"no new {self.what} generation became ACTIVE within {REBUILD_WAIT_S:.0f} s "
                    f"(still g{self._active()})")
        return f"the service rebuilt the {self.what}: generation {self.old_gen} -> {self.new_gen} ACTIVE"

    def judge(self, ctx: Context, fault) -> list[str]:
        failures = super().judge(ctx, fault)
        if not self.flushed:
            failures.append(f"the flush deleted no {self.what} key: nothing was injected")
        for kind in self.read_kinds:
            if fault.reads.get(f"{kind} 200", 0) == 0:
                failures.append(f"no {kind} read was answered (200) while the {self.what} was empty")
        row = self._model().objects.filter(generation=self.new_gen).first() if self.new_gen else None
        if row is None:
            failures.append(f"the {self.what} flush was not followed by a new generation within {REBUILD_WAIT_S:.0f} s "
                            f"(the loss check must detect it and rebuild)")
        else:
            old = self._model().objects.filter(generation=self.old_gen).values_list("status", flat=True).first()
            if old != "RETIRED":
                failures.append(f"the flushed {self.what} generation {self.old_gen} is {old}, not RETIRED")
            if row.previous_generation != self.old_gen:
                failures.append(f"{self.what} generation {row.generation} was built after g{row.previous_generation}, "
                                f"not after the flushed g{self.old_gen}")
        return failures


class RelationCacheFlush(_CacheFlush):
    """Drill 5 (T6, RCACHE-3/-5/-7): every relation-cache key is flushed while commands flow, and late, stale cache
    writes are injected at once: a late redelivery of each probe relation's v1 and v2 events to the relation-cache
    projector (the drill's own relations, one per relation shard, made LIKED v3 through the API on a video of its
    own), right after the flush and again once the service has rebuilt the cache, plus a write of the flushed (old)
    generation after that rebuild. The durable version floor must refuse the low versions (it stays at v3 in the
    ACTIVE generation, old and new), the old generation's write must be refused by the script's generation check, no
    read may ever show a stale state, reads fall back to the databases meanwhile (DEG-1 step 4, RCACHE-4), and the
    loss check must build a new generation from the facts that holds v3."""

    name = "relation-cache-flush"
    spec_numbers = (5,)
    summary = ("the relation cache's keys flushed, late v1/v2 and old-generation writes injected: refused by the "
               "version floor and the generation check; reads from the DB; a new generation built")
    commands_succeed_while = "the relation cache was flushed"
    read_kinds = ("like-relation", "batch-query")
    what = "relation cache"

    def _pattern(self):
        from relations import cache

        return cache.relation_key_pattern()

    def _model(self):
        from relations.models import RelationCacheGeneration

        return RelationCacheGeneration

    def prepare(self, ctx):
        super().prepare(ctx)
        self.probes: list = []  # (user, video id)
        self.backfills, self.not_applied, self.floors_low, self.stale_reads = [], [], [], []  # lines of evidence
        self.probe_reads = 0
        self.old_writes: list[int] = []
        self.during_done = False
        self.fallback_from = self.fallback_reads = 0.0

    def inject(self, ctx):
        from relations import cache

        # The probes, once the relation cache holds them at v3 (their durable floors too).
        self.probes = probe_relations(ctx, "probe", PROBE_STATES)
        generation = self._active()
        if not wait_until(lambda: all(cache.relation_cache_read(generation, u.user_id, [v]).get(v) == (LIKED, 3)
                                      for u, v in self.probes), timeout_s=60, poll_s=0.2):
            raise RuntimeError("the probe relations did not reach the relation cache within 60 s (is the worker "
                               "running?)")
        self.fallback_from = metrics.value("likes_db_fallback_reads_total", store="relation")
        flushed = self._flush()
        self._backfill("right after the flush")
        return (f"{flushed}; then the late v1 and v2 events of {len(self.probes)} probe relations (LIKED v3) "
                f"redelivered to the relation-cache projector")

    def _backfill(self, when: str) -> None:
        """Redeliver each probe's v1 and v2 events (their outbox rows, as published) to the relation-cache
        projector, then read the durable floors of the ACTIVE generation: they must still be v3."""
        from likes_project.eventlog.streams import StreamEntry
        from relations import events, routing
        from relations.models import OutboxEvent
        from relations.services.outbox import ClaimedRow, event_envelope
        from relations.services.relation_cache import RELCACHE_CONSUMER, RelationCacheProjector

        entries = []
        for user, video_id in self.probes:
            rows = OutboxEvent.objects.using(routing.alias_for_user(user.user_id)).filter(
                aggregate_key=events.aggregate_key(user.user_id, video_id), relation_version__lt=3,
            ).exclude(stream_entry_id="").order_by("relation_version")
            entries += [StreamEntry(r.stream_partition, r.stream_key, r.stream_entry_id,
                                    event_envelope(ClaimedRow(r.id, str(r.event_id), r.payload, r.retry_count)))
                        for r in rows]
        projector = RelationCacheProjector()
        result = projector.apply(entries, consumer=RELCACHE_CONSUMER, partition=entries[0].partition if entries else 0,
                                 token=0)
        if result.failed or len(entries) < 2 * len(self.probes):
            self.not_applied.append(f"{when}: {len(entries)} late events found, failed {dict(result.failed)}")
        active = self._active()
        for user, video_id in self.probes:
            if (floor := self._floor(active, user, video_id)) != (LIKED, 3):
                self.floors_low.append(f"{when}: g{active} floor of {user.user_id}:{video_id} is {floor}, not LIKED v3")
        self.backfills.append(f"{when}: {len(entries)} late events applied (ACTIVE g{active})")

    @staticmethod
    def _floor(generation: int, user, video_id: str) -> tuple[str, int] | None:
        from relations import routing
        from relations.models import LikeRelationCacheProjection

        return LikeRelationCacheProjection.objects.using(routing.alias_for_user(user.user_id)).filter(
            cache_generation=generation, user_id=user.user_id, video_id=video_id).values_list(
            "state", "relation_version").first()

    def in_effect(self, ctx):
        """The probes read through the API (never stale); once a rebuild is building, the late events once more."""
        from likes_project.generations import BUILDING

        self._read_probes("while flushed")
        if not self.during_done and self._model().objects.filter(status__in=BUILDING).exists():
            self.during_done = True
            self._backfill("during the rebuild")
        return None

    def _read_probes(self, when: str) -> None:
        api = DrillApi()
        for user, video_id in self.probes:
            one = api.relation_get(user, video_id)
            batch = api.batch_query(user, [video_id])
            seen = [(one.body["state"], one.body["relationVersion"])] if one.ok else []
            if batch.ok:
                item = batch.body["items"][0]
                seen.append((item["myState"], item["relationVersion"]))
            self.probe_reads += len(seen)
            self.stale_reads += [f"{when}: {user.username}/{video_id} read {s} v{v}" for s, v in seen
                                 if (s, v) != (LIKED, 3)]

    def recover(self, ctx):
        from relations import cache

        self.fallback_reads = metrics.value("likes_db_fallback_reads_total", store="relation") - self.fallback_from
        rebuilt = self._rebuilt(ctx)
        if self.new_gen is None:
            return rebuilt
        self._backfill("after the rebuild")
        # A write task created under the flushed generation, arriving late: the script must refuse it.
        self.old_writes = cache.relation_cache_write(self.old_gen, [(u.user_id, v, UNLIKED, 2) for u, v in self.probes])
        self._read_probes("after the rebuild")
        return (f"{rebuilt}; late v1/v2 events redelivered again; a late write of g{self.old_gen} answered "
                f"{self.old_writes} (-1: refused); {self.fallback_reads:.0f} relation reads fell back to the database "
                f"during the fault")

    def judge(self, ctx, fault):
        from relations import cache

        failures = super().judge(ctx, fault)
        ctx.notes += [f"stale backfill {line}" for line in self.backfills]
        if not self.during_done:
            ctx.notes.append("the rebuild was not seen building while the fault held: no backfill during it")
        if self.not_applied:
            failures.append(f"the late events were not all redelivered: {self.not_applied[:SHOWN]}")
        if self.floors_low:
            failures.append(f"a low-version backfill lowered the durable version floor: {self.floors_low[:SHOWN]}")
        if self.stale_reads:
            failures.append(f"{len(self.stale_reads)} probe reads showed a stale state: {self.stale_reads[:SHOWN]}")
        if not self.probe_reads:
            failures.append("the probe relations were never read while the cache was flushed")
        if self.fallback_reads <= 0:
            failures.append("no relation read fell back to the database while the cache was flushed")
        if self.new_gen is None:
            return failures
        if not self.old_writes or any(v != -1 for v in self.old_writes):
            failures.append(f"a late write of the flushed generation g{self.old_gen} was not refused: "
                            f"{self.old_writes}")
        held = {}
        for user, video_id in self.probes:
            cached = cache.relation_cache_read(self.new_gen, user.user_id, [video_id]).get(video_id)
            floor = self._floor(self.new_gen, user, video_id)
            if (cached, floor) != ((LIKED, 3), (LIKED, 3)):
                held[f"{user.user_id}:{video_id}"] = {"cache": cached, "floor": floor}
        if held:
            failures.append(f"the new generation g{self.new_gen} does not hold the probes at LIKED v3: {held}")
        if not cache.relation_sentinel_present(self.new_gen):
            failures.append(f"the new generation g{self.new_gen} has no sentinel (its content is not marked whole)")
        return failures


class CountCacheFlush(_CacheFlush):
    """Drill 6 (T16, CCACHE-3/-4): every count-cache key (views, buckets, registry, sentinels) is flushed while
    commands flow. Count reads must keep answering from the durable display snapshot; the loss check must build a
    new count-cache generation from the current durable buckets and snapshots (its bucket keys and views of the
    drill's videos, and of a quiet video of its own that no writer touches after the flush, equal the durable routed
    rows and snapshots), never by rolling the projection back: no durable bucket version, projected version or
    display snapshot id of those videos (sampled every second) nor count-consumer checkpoint (watched 20 times a
    second) may go backwards, from before the flush until after the rebuild. A late refresh of the flushed generation
    must be refused. The exact counts afterwards are the runner's comparison."""

    name = "count-cache-flush"
    spec_numbers = (6,)
    summary = ("the count cache's keys flushed: reads from the durable snapshot, a new generation built from the "
               "durable buckets, the projection never rolled back, counts exact")
    commands_succeed_while = "the count cache was flushed"
    read_kinds = ("like-count",)
    what = "count cache"

    def _pattern(self):
        from counting import cache

        return cache.key_pattern()

    def _model(self):
        from counting.models import CountCacheGeneration

        return CountCacheGeneration

    def prepare(self, ctx):
        super().prepare(ctx)
        self.last, self.old_refresh, self.regressions = {}, {}, []
        self.samples = self.watched = 0
        self._watching = threading.Event()
        self._watcher: threading.Thread | None = None
        self.quiet: str | None = None

    def _videos(self, ctx: Context) -> list[str]:
        return [*ctx.traffic.population.videos, *filter(None, [self.quiet])]

    def _quiet_video(self, ctx: Context) -> str:
        """A video of the drill's own, liked once by the first drill user of each shard and then left alone: no
        live writer touches its keys after the flush, so only the rebuild's copy of the durable store can put them
        in the new generation. Returned once its durable display snapshot counts every like."""
        from counting.models import VideoDisplayCount

        probes = probe_relations(ctx, "quiet", (LIKED,))
        counted = VideoDisplayCount.objects.filter(video_id=(video_id := probes[0][1]), display_count=len(probes))
        if not wait_until(counted.exists, timeout_s=60, poll_s=0.2):
            raise RuntimeError(f"the quiet video's {len(probes)} likes were not counted within 60 s (is the worker "
                               "running?)")
        return video_id

    def inject(self, ctx):
        self.quiet = self._quiet_video(ctx)
        self._sample(ctx)
        # A rollback re-consumed at once would show in a 1 s sample only by luck: the count consumer's checkpoints
        # (one cheap query) are watched 20 times a second from before the flush until the new generation is active.
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="drill-checkpoint-watch")
        self._watcher.start()
        return f"{self._flush()} (the drill's videos and a quiet one of its own, {self.quiet}, among them)"

    def _checkpoints(self) -> dict:
        from counting.services.projection import COUNT_CONSUMER
        from likes_project.eventlog import streams
        from likes_project.eventlog.checkpoints import checkpoints_get

        return {("checkpoint", p): streams.entry_id_key(last) for p, last in checkpoints_get(COUNT_CONSUMER).items()}

    def _watch(self) -> None:
        try:
            last = self._checkpoints()
            while not self._watching.wait(WATCH_POLL_S):
                now = self._checkpoints()
                self.watched += 1
                self.regressions += [f"{'/'.join(map(str, key))}: {before} -> {now.get(key)}"
                                     for key, before in last.items() if now.get(key) is None or now[key] < before]
                last = now
        except Exception as exc:  # noqa: BLE001 - the watcher's own failure is a FAIL of the drill, never silent
            self.regressions.append(f"the checkpoint watch broke off: {exc.__class__.__name__}: {exc}")
        finally:
            connections.close_all()  # this thread's connections

    def _durable(self, ctx: Context) -> dict:
        """The durable values of the drill's videos that may only move forwards: (kind, key) -> comparable."""
        from counting import routing
        from counting.models import LikeCountProjection, VideoDisplayCount, VideoLikeCountVbucket

        videos = self._videos(ctx)
        generation = routing.active().generation
        out: dict = {}
        for alias in settings.COUNT_PARTITION_ALIASES:
            for v, vb, count, version in VideoLikeCountVbucket.objects.using(alias).filter(
                    generation=generation, video_id__in=videos).values_list(
                    "video_id", "virtual_bucket", "active_count", "bucket_version"):
                out[("bucket", alias, v, vb)] = (version, count)
            for u, v, version in LikeCountProjection.objects.using(alias).filter(
                    generation=generation, video_id__in=videos).values_list("user_id", "video_id", "projected_version"):
                out[("projection", alias, u, v)] = (version,)
        for v, snapshot_id in VideoDisplayCount.objects.filter(video_id__in=videos).values_list("video_id",
                                                                                                 "snapshot_id"):
            out[("snapshot", v)] = (snapshot_id,)
        return {**out, **self._checkpoints()}

    def _sample(self, ctx: Context) -> None:
        now = self._durable(ctx)
        self.samples += 1
        for key, before in self.last.items():
            after = now.get(key)
            # A bucket's count may fall (an unlike), but only with a higher version: same version, same count.
            if after is None or after < before or (key[0] == "bucket" and after[0] == before[0] and after != before):
                self.regressions.append(f"{'/'.join(map(str, key))}: {before} -> {after}")
        self.last = now

    def in_effect(self, ctx):
        self._sample(ctx)
        return None

    def recover(self, ctx):
        from counting.services.count_cache.layers import count_cache_buckets_refresh

        try:
            rebuilt = self._rebuilt(ctx)
            self._sample(ctx)
        finally:
            self._watching.set()
            if self._watcher is not None:
                self._watcher.join(timeout=10)
        if self.new_gen is None:
            return rebuilt
        # A refresh task of the flushed generation, arriving late: the registry check must refuse it.
        report = count_cache_buckets_refresh(video_ids=self._videos(ctx), generation=self.old_gen)
        self.old_refresh = report.verdicts.get(self.old_gen, {})
        return f"{rebuilt}; a late refresh of g{self.old_gen}'s buckets answered {self.old_refresh}"

    def _new_gen_vs_durable(self, ctx: Context) -> list[str]:
        """The new generation's bucket keys and views of the drill's videos against the durable rows the active
        manifest routes and the durable snapshots: empty when they agree."""
        from counting import cache, routing
        from counting.models import VideoDisplayCount, VideoLikeCountVbucket

        videos = self._videos(ctx)
        routing.reset_cache()
        gen = routing.active()
        durable = {}
        for alias in settings.COUNT_PARTITION_ALIASES:
            rows = VideoLikeCountVbucket.objects.using(alias).filter(
                generation=gen.generation, video_id__in=videos, virtual_bucket__in=gen.buckets_on(alias),
            ).values_list("video_id", "virtual_bucket", "active_count", "bucket_version")
            durable.update({(v, vb): (c, ver, gen.routes[vb].epoch) for v, vb, c, ver in rows})
        cached = cache.buckets_read(self.new_gen, sorted(durable))
        diffs = [f"bucket {v}/vb-{vb}: durable {d}, g{self.new_gen} {cached.get((v, vb))}"
                 for (v, vb), d in sorted(durable.items()) if cached.get((v, vb)) != d]
        views = cache.views_read(self.new_gen, videos)
        for v, display, snapshot_id in VideoDisplayCount.objects.filter(video_id__in=videos).values_list(
                "video_id", "display_count", "snapshot_id"):
            got = views.get(v)
            if got is None or got[:2] != (display, snapshot_id):
                diffs.append(f"view {v}: durable {display} (snapshot {snapshot_id}), g{self.new_gen} {got}")
        return diffs

    def judge(self, ctx, fault):
        from counting import routing

        failures = super().judge(ctx, fault)
        self._sample(ctx)
        if self.regressions:
            failures.append(f"the durable projection went backwards during or after the flush "
                            f"({len(self.regressions)}): {self.regressions[:SHOWN]}")
        if self.new_gen is None:
            return failures
        if self.old_refresh.get("OK"):
            failures.append(f"a late refresh of the flushed generation g{self.old_gen} was accepted: "
                            f"{self.old_refresh}")
        row = self._model().objects.get(generation=self.new_gen)
        routing.reset_cache()
        if row.projection_generation != routing.active().generation or not row.rows_written:
            failures.append(f"count-cache generation {row.generation} was not built from the current durable buckets: "
                            f"projection generation {row.projection_generation}, {row.rows_written} rows written")
        # The live writers put a change into the new generation just after its durable commit: a bounded wait.
        wait_until(lambda: not self._new_gen_vs_durable(ctx), timeout_s=15, poll_s=0.5)
        diffs = self._new_gen_vs_durable(ctx)
        if diffs:
            failures.append(f"the new generation g{self.new_gen} differs from the durable store ({len(diffs)}): "
                            f"{diffs[:SHOWN]}")
        ctx.notes.append(f"{self.samples} samples of the drill's durable count values and {self.watched} of the count "
                         f"consumer's checkpoints{', none going backwards' if not self.regressions else ''}")
        return failures
