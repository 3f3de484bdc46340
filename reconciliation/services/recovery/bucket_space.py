"""A change of the bucket contract itself (BKT-6, T20; issue 13 §5): a new bucket space, and a SHADOW count
generation on it built from the relation facts, caught up, verified, then CAS-switched in the way a restore
is (`generation.generation_switch`). Bucket space v1 is never edited (a database trigger refuses it).

  create:  bucket space v(N+1) (V, seed), its sealed epoch-1 manifest over the partitions the active
           manifest uses, its materialised routes and partition fences, and generation G+1 (SHADOW)
  start:   every stream partition's head S[p], read BEFORE the facts (a change committed later is
           published after S[p], so the replay covers it; one already in the facts is absorbed by version)
  build:   each relation shard's facts in key order -> the projection rows of G+1 on the partitions its
           manifest routes them to; the buckets counted from those rows; every video marked dirty
  catch up: the stream replayed from S[p] through the projector's own group transaction (`live=False`), up to the
           live consumer's checkpoints and never past them (the barrier compares both generations there)
  verify:  identity over the whole generation and online coverage against the facts; then at the switch
           barrier (the live consumer's leases held, both generations at exactly T[p]) every video's count
           in G+1 must equal its count in G, else nothing is switched
  switch:  G RETIRED, G+1 ACTIVE in one transaction, the generation fences moved; then the exact
           reconciliation over the new active generation (kind after_migration) and a count-cache rebuild
           (its bucket keys are per bucket of the old space)
"""

from __future__ import annotations

import time
from collections import defaultdict

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Max
from django.utils import timezone

from counting import routing
from counting.models import (
    BucketMigration,
    CountBucketSpace,
    CountProjectionGeneration,
    DirtyVideo,
    LikeCountProjection,
    ProjectionGenerationStatus,
    VideoLikeCountVbucket,
)
from counting.models.migration import TERMINAL
from counting.services import manifests
from counting.services.bootstrap import fences_ensure
from likes_project import leases
from likes_project.audit.services import Actor, audit_record
from likes_project.errors import Conflict, InvalidInput
from likes_project.eventlog import streams
from reconciliation.services.cut import published_and_consumed
from reconciliation.services.recovery import generation as recovery_generation
from reconciliation.services.recovery import restore
from reconciliation.services.recovery.generation import RestoreFailed
from relations.models import LikeRelation

PERMISSION = "counting.approve_bucketmigration"
LEASE = "recovery:restore"  # one generation replacement at a time: a restore or a bucket-space change
MAX_VIRTUAL_BUCKETS = 1 << 16
_FACTS_BATCH = 5000


class BucketSpaceRefused(Conflict):
    code = "bucket_space_refused"


def change_check(*, virtual_buckets, seed: str | None) -> None:
    """Refuse, before anything is written, a bad request or one that cannot run now."""
    if isinstance(virtual_buckets, bool) or not isinstance(virtual_buckets, int) or \
            not 1 <= virtual_buckets <= MAX_VIRTUAL_BUCKETS:
        raise InvalidInput(f"The number of virtual buckets is a whole number from 1 to {MAX_VIRTUAL_BUCKETS}.",
                           code="invalid_vbuckets")
    seed = (seed or "").strip()
    if seed and (len(seed) > 64 or not seed.isprintable()):
        raise InvalidInput("The seed is at most 64 printable characters.", code="invalid_seed")
    open_migrations = list(BucketMigration.objects.exclude(state__in=TERMINAL).values_list("pk", flat=True))
    if open_migrations:
        raise BucketSpaceRefused(f"bucket migrations {open_migrations} are not finished; finish or abort them first.")
    if CountProjectionGeneration.objects.filter(status=ProjectionGenerationStatus.SHADOW, scratch=False).exists():
        raise BucketSpaceRefused("another count generation is being built (a restore or a bucket-space change).")


def space_create(*, virtual_buckets: int, seed: str | None, actor: Actor) -> tuple[CountBucketSpace, int]:
    """The new bucket space, its manifest, routes and fences, and its SHADOW generation. Returns (space,
    generation). Refused while a migration is unfinished or another generation is being built."""
    change_check(virtual_buckets=virtual_buckets, seed=seed)
    seed = (seed or "").strip()
    routing.reset_cache()
    old = routing.active()
    partitions = sorted({r.partition for r in old.routes}, key=settings.COUNT_PARTITION_ALIASES.index)
    with transaction.atomic(using="default", durable=True):
        version = (CountBucketSpace.objects.aggregate(m=Max("version"))["m"] or 0) + 1
        space = CountBucketSpace.objects.create(
            version=version, hash_algorithm=old.space.hash_algorithm,
            hash_seed=seed or f"likes-count-bucket-v{version}", key_encoding=old.space.key_encoding,
            virtual_buckets=virtual_buckets)
        items = [(vb, partitions[vb % len(partitions)], 1) for vb in range(virtual_buckets)]
        manifest = manifests.manifest_seal(bucket_space_version=version, virtual_buckets=virtual_buckets, items=items)
        manifests.routes_materialize(bucket_space_version=version, items=items)
        top = CountProjectionGeneration.objects.select_for_update().aggregate(m=Max("generation"))["m"] or 0
        gen = CountProjectionGeneration.objects.create(generation=top + 1, bucket_space_version=version,
                                                       active_manifest_id=manifest.pk,
                                                       status=ProjectionGenerationStatus.SHADOW)
        audit_record(actor=actor, action="bucket_space.create", target_type="bucket_space", target_id=str(version),
                     params={"virtualBuckets": virtual_buckets, "seed": space.hash_seed, "generation": gen.generation,
                             "manifestId": manifest.pk, "partitions": partitions, "replaces": old.generation})
    new = routing.load_generation(gen.generation)
    for alias in partitions:
        fences_ensure(alias=alias, gen=new)
    return space, gen.generation


def _facts_into(new: routing.GenerationRoutes, say) -> int:
    """Every relation fact of every shard as a projection row of `new` (by version), then its buckets."""
    p_t, b_t = LikeCountProjection._meta.db_table, VideoLikeCountVbucket._meta.db_table
    now = timezone.now()
    rows_total = 0
    for shard in settings.RELATION_SHARD_ALIASES:
        after = 0
        while True:
            batch = list(LikeRelation.objects.using(shard).filter(pk__gt=after).order_by("pk").values_list(
                "pk", "user_id", "video_id", "state", "relation_version")[:_FACTS_BATCH])
            if not batch:
                break
            after = batch[-1][0]
            by_alias: dict[str, list[tuple]] = defaultdict(list)
            for _pk, u, v, state, version in batch:
                vb = routing.virtual_bucket(new.space, v, u)
                by_alias[new.routes[vb].partition].append((u, v, state, version, vb))
            for alias, rows in by_alias.items():
                with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
                    cursor.execute(
                        f"INSERT INTO {p_t} AS p (generation, user_id, video_id, projected_state, projected_version, "
                        "bucket_space_version, virtual_bucket, updated_at) SELECT %s, u, v, s, ver, %s, vb, %s FROM "
                        "unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::int[]) AS t(u, v, s, ver, vb) "
                        "ON CONFLICT (generation, user_id, video_id) DO UPDATE SET projected_state = "
                        "EXCLUDED.projected_state, projected_version = EXCLUDED.projected_version, updated_at = "
                        "EXCLUDED.updated_at WHERE p.projected_version < EXCLUDED.projected_version",
                        [new.generation, new.space.version, now, *[[r[i] for r in rows] for i in range(5)]])
            rows_total += len(batch)
        say(f"facts of {shard} projected into generation {new.generation} ({rows_total} relations so far)")
    for alias in sorted({r.partition for r in new.routes}):
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 0")  # one aggregate over the whole new generation
            cursor.execute(
                f"INSERT INTO {b_t} (generation, video_id, virtual_bucket, bucket_space_version, active_count, "
                "bucket_version, frozen, updated_at) SELECT generation, video_id, virtual_bucket, %s, count(*) FILTER "
                f"(WHERE projected_state = 'LIKED'), 1, false, %s FROM {p_t} WHERE generation = %s "
                "GROUP BY generation, video_id, virtual_bucket",
                [new.space.version, now, new.generation])
            cursor.execute(
                f"INSERT INTO {DirtyVideo._meta.db_table} (generation, video_id, source_partition, dirty_seq, "
                f"first_dirty_at, last_dirty_at) SELECT DISTINCT %s, video_id, 0, 1, %s, %s FROM {b_t} WHERE "
                "generation = %s ON CONFLICT DO NOTHING", [new.generation, now, now, new.generation])
            for model in (LikeCountProjection, VideoLikeCountVbucket):
                cursor.execute(f"ANALYZE {model._meta.db_table}")
    return rows_total


def generation_counts(gen: routing.GenerationRoutes) -> dict[str, int]:
    """video -> Σ of its buckets in `gen`, each bucket read on the partition the generation routes it to."""
    out: dict[str, int] = defaultdict(int)
    for alias in settings.COUNT_PARTITION_ALIASES:
        mine = gen.buckets_on(alias)
        if not mine:
            continue
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 0")  # every video of a generation
            cursor.execute(f"SELECT video_id, sum(active_count) FROM {VideoLikeCountVbucket._meta.db_table} WHERE "
                           "generation = %s AND virtual_bucket = ANY(%s) GROUP BY video_id", [gen.generation, mine])
            for v, n in cursor.fetchall():
                out[v] += int(n)
    return {v: n for v, n in out.items() if n}


def bucket_space_change(*, virtual_buckets: int, seed: str | None, actor: Actor, say=lambda _m: None) -> dict:
    """The whole change, in this process (the job's one slice). Returns its report; raises before the
    switch when anything disagrees (the new generation is then abandoned and the old one stays ACTIVE)."""
    from reconciliation.services.repair import exact_verify

    lease = leases.lease_acquire(resource=LEASE, holder=f"bucket-space-{time.time_ns()}", ttl_s=7200.0)
    if lease is None:
        raise BucketSpaceRefused("a restore or another bucket-space change is running")
    started = time.monotonic()
    try:
        old = routing.active()
        space, generation = space_create(virtual_buckets=virtual_buckets, seed=seed, actor=actor)
        new = routing.load_generation(generation)
        report: dict = {"bucketSpaceVersion": space.version, "virtualBuckets": space.virtual_buckets,
                        "seed": space.hash_seed, "generation": generation, "previousGeneration": old.generation}
        say(f"bucket space v{space.version} (V={space.virtual_buckets}) and generation {generation} created")
        try:
            positions = {p: streams.last_generated_id(p) for p in streams.all_partitions()}
            report["startOffsets"] = dict(positions)
            report["facts"] = _facts_into(new, say)
            trimmed = [p for p in positions if streams.entry_id_key(streams.retention(p).trimmed_below)
                       > streams.entry_id_key(positions[p])]
            if trimmed:
                raise RestoreFailed(f"the stream was trimmed past the build's start on partitions {trimmed}")
            # Every fact read above is published and consumed by the live generation before the barrier
            # comparison: both generations then hold the same versions at the same stream positions.
            report["drainedTo"] = {str(p): o for p, o in published_and_consumed(
                time.monotonic() + settings.RECONCILE_DRAIN_MAX_S).items()}
            # The shadow chases the live consumer, never passes it: at the barrier both must be at its checkpoints T
            # (replayed to the stream heads it could be past T, and the counts would differ by what lies between).
            # One replay reaches where the live consumer is now; what it consumes meanwhile, the switch replays under
            # its leases.
            report["replayed"] = recovery_generation._replay(new, positions, token=lease.token,
                                                             until=recovery_generation.live_checkpoints(positions))
            identity = recovery_generation.identity_problems(new)
            coverage, checked = recovery_generation.coverage_problems(new, positions, say)
            report |= {"identityDiffs": identity, "coverageDiffs": coverage, "coverageChecked": checked}
            if identity or coverage:
                raise RestoreFailed(f"the new generation disagrees with the facts: {len(identity)} identity "
                                            f"and {len(coverage)} coverage diffs")

            def same_counts(_positions) -> dict:
                before, after = generation_counts(old), generation_counts(new)
                differ = sorted(v for v in set(before) | set(after) if before.get(v, 0) != after.get(v, 0))
                if differ:
                    raise RestoreFailed(f"at the switch barrier {len(differ)} videos count differently in "
                                                f"generation {new.generation} (first {differ[:5]})")
                return {"videosCompared": len(before), "likesAtBarrier": sum(before.values())}

            report |= recovery_generation.generation_switch(
                old, new, positions, token=lease.token, actor=actor, say=say,
                what=f"bucket space v{space.version}", audit_action="bucket_space.activate",
                audit_params={"bucketSpaceVersion": space.version}, at_barrier=same_counts)
        except BaseException:
            restore._abandon(generation, actor=actor)
            raise
    finally:
        leases.lease_release(lease)
    run = exact_verify([], repair_id=None, actor=actor, kind="after_migration")
    report["exactRun"] = {"runId": run.pk, "status": run.status, "diffs": run.diffs_found,
                          "refusedBecause": run.refused_because or None}
    report["cacheRebuildJob"] = _count_cache_rebuild(actor)
    report["ms"] = round((time.monotonic() - started) * 1000.0, 3)
    say(f"switched to bucket space v{space.version}: exact run {run.pk} {run.status}")
    return report


def _count_cache_rebuild(actor: Actor) -> int | None:
    """The count cache's bucket keys belong to the old space: rebuild it on the new one (on the workers)."""
    from counting.services.count_cache.layers import REBUILD_JOB
    from likes_project.opsjobs.services import job_start

    try:
        return job_start(kind=REBUILD_JOB, actor=actor, params={}).pk
    except Conflict:  # a rebuild is already running; it pins the manifest it started on, the loss check follows
        return None
