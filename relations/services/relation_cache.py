"""The relation cache (RCACHE-1 … RCACHE-10): durable generations, the durable version floor, the
projector that writes Redis only from that floor, reader repair hints, loss detection and the
dirty-data sampler. The whole-cache rebuild is `relation_cache_rebuild` (on the one generation
lifecycle)."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.utils import timezone
from redis.exceptions import RedisError

from likes_project import metrics
from likes_project.audit.services import system_actor
from likes_project.eventlog.consumer import ApplyResult, Retryable
from likes_project.eventlog.retry import retryable_from
from likes_project.eventlog.streams import StreamEntry
from likes_project.generations import LIVE, GenerationStatus, RebuildRunning
from relations import cache, routing
from relations.events import validate_event
from relations.models import LikeRelation, LikeRelationCacheProjection, RelationCacheGeneration, RelationState

logger = logging.getLogger(__name__)

RELCACHE_CONSUMER = "relcache"
REBUILD_JOB = "relcache.rebuild"


# --- generations -------------------------------------------------------------------------------


def cache_generations_mirror(*, sentinel_for: int | None = None) -> None:
    """Copy the durable statuses into Redis (the write script's registry). `sentinel_for` marks a
    generation whose content is known to be whole (on bootstrap and on activation); the sentinel is
    never recreated otherwise, so a flush stays detectable."""
    statuses = dict(RelationCacheGeneration.objects.filter(status__in=LIVE).values_list("generation", "status"))
    cache.relation_generations_mirror(statuses, [sentinel_for] if sentinel_for else [])


def cache_generation_bootstrap() -> RelationCacheGeneration:
    """Generation 1, ACTIVE, when no generation exists yet (an empty cache is a valid start: every
    miss reads the facts). Idempotent."""
    existing = RelationCacheGeneration.objects.order_by("-generation").first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic(using="default", durable=True):
            gen = RelationCacheGeneration.objects.create(generation=1, status=GenerationStatus.ACTIVE,
                                                 activated_at=timezone.now())
    except IntegrityError:
        gen = RelationCacheGeneration.objects.get(generation=1)
    try:
        cache_generations_mirror(sentinel_for=gen.generation if gen.status == GenerationStatus.ACTIVE else None)
    except RedisError as exc:
        logger.warning("relation cache registry not mirrored (Redis: %s); the detector retries", exc)
    return gen


def live_generations() -> list[int]:
    """Generations the projector writes: the ACTIVE one and a building one (tail capture)."""
    return sorted(RelationCacheGeneration.objects.filter(status__in=LIVE).values_list("generation", flat=True))


# --- the durable floor and Redis writes --------------------------------------------------------


_FLOOR_UPSERT = """
INSERT INTO {t} AS f (cache_generation, user_id, video_id, state, relation_version, updated_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (cache_generation, user_id, video_id) DO UPDATE
   SET state = EXCLUDED.state, relation_version = EXCLUDED.relation_version, updated_at = EXCLUDED.updated_at
 WHERE f.relation_version < EXCLUDED.relation_version
"""


def floors_advance(*, alias: str, generations: list[int], facts: list[tuple[int, str, str, int]]
                   ) -> dict[tuple[int, int, str], tuple[str, int]]:
    """CAS-advance the durable floor of each (user, video) in every generation to the given
    (state, version) when higher, and return the floor as it now stands. One local transaction on
    the users' relation shard; versions decide, so any order of callers converges (RCACHE-3, -5)."""
    now = timezone.now()
    table = LikeRelationCacheProjection._meta.db_table
    rows = [(g, u, v, s, ver, now) for g in generations for (u, v, s, ver) in sorted(facts)]
    if not rows:
        return {}
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        cursor.executemany(_FLOOR_UPSERT.format(t=table), rows)
        keys = sorted({(u, v) for (u, v, _s, _ver) in facts})
        cursor.execute(
            f"SELECT cache_generation, user_id, video_id, state, relation_version FROM {table} "
            "WHERE cache_generation = ANY(%s) AND (user_id, video_id) IN "
            "(SELECT * FROM unnest(%s::bigint[], %s::text[]))",
            [generations, [k[0] for k in keys], [k[1] for k in keys]],
        )
        return {(g, u, v): (s, ver) for g, u, v, s, ver in cursor.fetchall()}


def floors_to_redis(floors: dict[tuple[int, int, str], tuple[str, int]]) -> None:
    """Write Redis only from the durable floor (RCACHE-3); raises RedisError to the caller."""
    by_gen: dict[int, list[tuple[int, str, str, int]]] = defaultdict(list)
    for (g, u, v), (s, ver) in sorted(floors.items()):
        by_gen[g].append((u, v, s, ver))
    for g, entries in by_gen.items():
        verdicts = cache.relation_cache_write(g, entries)
        refused = sum(1 for x in verdicts if x == -1)
        if refused:
            metrics.inc("likes_relcache_generation_refused_total", refused)


class RelationCacheProjector:
    """Consumer `relcache` on the shared framework: events -> durable floor -> Redis."""

    name = RELCACHE_CONSUMER

    def validate(self, entry: StreamEntry) -> None:
        validate_event(entry.event)

    def apply(self, entries: list[StreamEntry], *, consumer: str, partition: int, token: int) -> ApplyResult:
        result = ApplyResult()
        generations = live_generations()
        if not generations:
            raise_all = Retryable("no live relation cache generation")
            result.failed = {e.entry_id: raise_all for e in entries}
            return result
        by_alias: dict[str, list[StreamEntry]] = defaultdict(list)
        for entry in entries:
            by_alias[routing.alias_for_user(entry.event["userId"])].append(entry)
        for alias, group in sorted(by_alias.items()):
            latest: dict[tuple[int, str], tuple[str, int]] = {}
            for e in group:
                key = (e.event["userId"], e.event["videoId"])
                version = e.event["relationVersion"]
                if key not in latest or latest[key][1] < version:
                    latest[key] = (e.event["absoluteState"], version)
            facts = [(u, v, s, ver) for (u, v), (s, ver) in latest.items()]
            try:
                floors = floors_advance(alias=alias, generations=generations, facts=facts)
                floors_to_redis(floors)
            except (DatabaseError, RedisError) as exc:
                # Redis or the shard is down: the floor keeps what it committed; the replay rewrites
                # Redis from it (RCACHE-8). Never "done" without the Redis write.
                result.failed.update({e.entry_id: retryable_from(exc) for e in group})
                continue
            result.done |= {e.entry_id for e in group}
            result.applied += len(group)
        return result


# --- reader repair hints (RCACHE-4 step 5-6, RCACHE-6) ------------------------------------------


def _facts_get(alias: str, user_id: int, video_ids: list[str]) -> dict[str, tuple[str, int]]:
    """The user's relation facts for these videos, read from the shard primary (a repair never reads a replica)."""
    return {v: (s, ver) for v, s, ver in LikeRelation.objects.using(alias)
            .filter(user_id=user_id, video_id__in=video_ids).values_list("video_id", "state", "relation_version")}


def _facts_to_cache(alias: str, generation: int, user_id: int, found: dict[str, tuple[str, int]]) -> int:
    if not found:
        return 0
    floors = floors_advance(alias=alias, generations=[generation],
                            facts=[(user_id, v, s, ver) for v, (s, ver) in found.items()])
    floors_to_redis(floors)
    return len(floors)


def relation_cache_repair(*, user_id: int, video_ids: list[str]) -> int:
    """Regenerate cache entries of the ACTIVE generation for a reader's misses. A relation with a fact
    goes through the durable floor (advanced from the fact, then Redis from the floor), so a stale hint
    is harmless (RCACHE-5). A relation with no fact gets an explicit UNLIKED v0 entry in Redis only,
    never a durable floor row: a feed of random ids must not grow the floor table forever, and a floor
    at v0 would reject nothing anyway.

    Why the v0 entry can never shadow a later like: it is written first and the facts are read again
    after it. A like that committed before that second read is seen by it and written through the floor
    (v1 or above replaces v0 in the script); one that commits after it is projected after the v0 write,
    and the script lets its higher version in. Either way the like's value lands after the v0 entry.
    Returns the entries written (refusals by the script included)."""
    active = RelationCacheGeneration.objects.filter(status=GenerationStatus.ACTIVE).first()
    if active is None or not video_ids:
        return 0
    g = active.generation
    alias = routing.alias_for_user(user_id)
    wanted = sorted(set(video_ids))
    found = _facts_get(alias, user_id, wanted)
    written = _facts_to_cache(alias, g, user_id, found)
    absent = [v for v in wanted if v not in found]
    if absent:
        cache.relation_cache_write(g, [(user_id, v, RelationState.UNLIKED.value, 0) for v in absent])
        late = _facts_get(alias, user_id, absent)  # after the v0 write: see the ordering argument above
        if late:
            metrics.inc("likes_relcache_negative_overtaken_total", len(late))
        written += len(absent) - len(late) + _facts_to_cache(alias, g, user_id, late)
    metrics.inc("likes_relcache_repairs_total", written)
    return written


REPAIR_TAKE = 200  # hinted ids repaired per round (one facts query, one floor transaction)
REPAIR_ROUNDS = 5


def relation_cache_repair_hinted(*, user_id: int) -> int:
    """Repair what readers hinted for this user (`relations.cache.relation_hints_add`): take the ids
    out of the user's hint set and repair them, round after round until the set is empty. After the
    last round with a set still not empty it sends itself again, because readers only send a message
    when they find the set empty.

    Idempotency: a duplicate message finds the set empty (or repairs what is there): harmless."""
    from likes_project.nudge import nudge
    from relations.selectors import REPAIR_TASK

    repaired = 0
    for _ in range(REPAIR_ROUNDS):
        taken = cache.relation_hints_take(user_id, REPAIR_TAKE)
        if taken:
            repaired += relation_cache_repair(user_id=user_id, video_ids=taken)
        if len(taken) < REPAIR_TAKE:
            return repaired
    nudge(REPAIR_TASK, user_id, debounce_s=0.0)
    return repaired


# --- loss detection (RCACHE-7) ------------------------------------------------------------------


def relation_cache_check_loss() -> str:
    """Detect a flushed relation cache (the ACTIVE generation's sentinel is gone) and start a rebuild
    job. Returns what it found: ok | rebuild_started | busy | no_active | registry_restored."""
    active = RelationCacheGeneration.objects.filter(status=GenerationStatus.ACTIVE).first()
    if active is None:
        return "no_active"
    if cache.relation_sentinel_present(active.generation):
        if not cache.relation_registry_present():
            cache_generations_mirror()
            return "registry_restored"
        return "ok"
    metrics.inc("likes_relcache_loss_detected_total")
    logger.error("ALERT relation cache generation %s lost its sentinel: starting a rebuild", active.generation)
    from likes_project.opsjobs.services import job_start

    try:
        job_start(kind=REBUILD_JOB, actor=system_actor("relcache-loss-detector"))
    except RebuildRunning:
        return "busy"
    return "rebuild_started"


@dataclass
class SampleReport:
    sampled: int = 0
    stale: int = 0
    ahead: int = 0
    repaired: int = 0


def relation_cache_sample_check(*, per_shard: int | None = None) -> SampleReport:
    """Dirty-data sampler (consistency-techniques D1): compare cached relations of the ACTIVE
    generation with the facts for a random sample, and repair any stale one through the projection
    side (floor, then Redis). A cached version above the fact is impossible by construction; it is
    alerted, not silently rewritten."""
    report = SampleReport()
    active = RelationCacheGeneration.objects.filter(status=GenerationStatus.ACTIVE).first()
    if active is None:
        return report
    n = per_shard or max(1, settings.RELATION_CACHE_SAMPLE_SIZE // max(1, len(routing.all_aliases())))
    for alias in routing.all_aliases():
        with connections[alias].cursor() as cursor:
            # ORDER BY random() reads the whole table: fine at this sample rate and table size; a large
            # deployment would switch to TABLESAMPLE SYSTEM.
            cursor.execute(
                f"SELECT user_id, video_id, relation_version FROM {LikeRelation._meta.db_table} "
                "ORDER BY random() LIMIT %s", [n])
            rows = cursor.fetchall()
        by_user: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for user_id, video_id, version in rows:
            by_user[user_id].append((video_id, version))
        for user_id, items in by_user.items():
            cached = cache.relation_cache_read(active.generation, user_id, [v for v, _ in items])
            stale = []
            for video_id, version in items:
                report.sampled += 1
                hit = cached.get(video_id)
                if hit is None:
                    continue  # a miss is not dirty data: readers go to the facts
                if hit[1] < version:
                    stale.append(video_id)
                elif hit[1] > version:
                    report.ahead += 1
                    logger.error("ALERT relation cache g%s holds v%s above the fact v%s for %s:%s",
                                 active.generation, hit[1], version, user_id, video_id)
            if stale:
                report.stale += len(stale)
                report.repaired += relation_cache_repair(user_id=user_id, video_ids=stale)
    metrics.inc("likes_relcache_sampled_total", report.sampled)
    metrics.inc("likes_relcache_dirty_total", report.stale)
    return report
