"""What the checks read, and only read: relation facts by video from every relation shard, the count
projection and the vbuckets by video from every count partition, the display snapshots and count-cache
views, the outbox evidence of a relation version, and the watermarks a run records (REC-7).

Every reader takes its connections as given, so a run can read inside its own snapshot transactions
(exact mode) or on the plain connections (identity, coverage)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db import connections

from counting import routing
from counting.models import DirtyVideo, LikeCountProjection, VideoDisplayCount, VideoLikeCountVbucket
from counting.services.projection import COUNT_CONSUMER
from likes_project.eventlog.checkpoints import checkpoints_get
from relations import routing as relation_routing
from relations.events import aggregate_key
from relations.models import LikeRelation, OutboxArchive, OutboxEvent, RelationVersionFloor

LIKED = "LIKED"


@dataclass(frozen=True)
class Rel:
    state: str
    version: int


# `virtual_bucket + 0 = ANY(routed buckets)`: the routed-bucket list (hundreds of buckets) is a filter, not
# an index condition; as an index condition it makes the planner probe videos x buckets index entries
# (0.2 s a statement for 200 videos and 512 buckets, against 0.015 s filtered; measured by bench/reconcile).
def _t(model) -> str:
    return model._meta.db_table


def source_relations(videos: list[str]) -> dict[tuple[int, str], Rel]:
    """(user, video) -> the relation's state and version, from every relation shard (by the
    relation_video_idx index)."""
    out: dict[tuple[int, str], Rel] = {}
    if not videos:
        return out
    contract = relation_routing.active_contract()
    for alias in settings.RELATION_SHARD_ALIASES:
        # A slot move's rows on a shard that does not own their user (its copy, or the source's kept rows)
        # are not facts here (D94).
        owned, owned_params = relation_routing.owned_filter(alias, contract).sql()
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT user_id, video_id, state, relation_version FROM {_t(LikeRelation)} "
                           f"WHERE video_id = ANY(%s){owned}", [list(videos), *owned_params])
            for user_id, video_id, state, version in cursor.fetchall():
                out[(user_id, video_id)] = Rel(state, version)
    return out


def swept_tombstones(projected: dict[tuple[int, str], Rel], source: dict[tuple[int, str], Rel]) -> set:
    """The relations the projection holds as UNLIKED that have no row in the facts because their tombstone was
    swept past its retention (issue 31 §4): the version is at most its slot's floor on the owning shard, so the
    facts remember it (a new like starts above the floor). Such a relation agrees with the facts: no row is
    UNLIKED, and nothing it held can come back."""
    gone = [k for k, p in projected.items() if k not in source and p.state == "UNLIKED"]
    if not gone:
        return set()
    slots = {user: relation_routing.placement(user) for user in {k[0] for k in gone}}
    floors: dict[tuple[str, int], int] = {}
    for alias in {a for a, _slot in slots.values()}:
        wanted = sorted({slot for a, slot in slots.values() if a == alias})
        for slot, floor in RelationVersionFloor.objects.using(alias).filter(slot__in=wanted).values_list(
                "slot", "floor"):
            floors[(alias, slot)] = floor
    return {k for k in gone if projected[k].version <= floors.get(slots[k[0]], 0)}


def projected_relations(gen: routing.GenerationRoutes, videos: list[str],
                        keys: list[tuple[int, str]] | None = None) -> dict[tuple[int, str], Rel]:
    """(user, video) -> what the count projection of `gen` holds, from the partition each relation's
    bucket is routed to (rows a migration left elsewhere are not the projection's). With `keys`, only
    those relations."""
    out: dict[tuple[int, str], Rel] = {}
    if not videos:
        return out
    for alias in settings.COUNT_PARTITION_ALIASES:
        buckets = gen.buckets_on(alias)
        if not buckets:
            continue
        sql = (f"SELECT user_id, video_id, projected_state, projected_version FROM {_t(LikeCountProjection)} "
               "WHERE generation = %s AND video_id = ANY(%s) AND virtual_bucket + 0 = ANY(%s)")
        args: list = [gen.generation, list(videos), buckets]
        if keys is not None:
            sql += " AND (user_id, video_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))"
            args += [[k[0] for k in keys], [k[1] for k in keys]]
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, args)
            for user_id, video_id, state, version in cursor.fetchall():
                out[(user_id, video_id)] = Rel(state, version)
    return out


@dataclass
class BucketCounts:
    """Per (video, bucket) on its routed partition: LIKED projection rows and the bucket's count."""

    projected: dict[tuple[str, int], int]
    buckets: dict[tuple[str, int], int]
    frozen: set[tuple[str, int]]


def bucket_counts(gen: routing.GenerationRoutes, videos: list[str],
                  bucket_range: tuple[int, int] | None = None) -> BucketCounts:
    """Both sides of REC-1, per partition in one statement each (the projector writes a bucket and its
    projection rows in one local transaction, so two statements of one snapshot agree; the caller
    gives the snapshot)."""
    out = BucketCounts({}, {}, set())
    for alias in settings.COUNT_PARTITION_ALIASES:
        buckets = [vb for vb in gen.buckets_on(alias)
                   if bucket_range is None or bucket_range[0] <= vb <= bucket_range[1]]
        if not buckets or not videos:
            continue
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"SELECT video_id, virtual_bucket, count(*) FROM {_t(LikeCountProjection)} WHERE generation = %s "
                "AND video_id = ANY(%s) AND virtual_bucket + 0 = ANY(%s) AND projected_state = 'LIKED' GROUP BY 1, 2",
                [gen.generation, list(videos), buckets])
            out.projected.update({(v, vb): int(n) for v, vb, n in cursor.fetchall()})
            cursor.execute(
                f"SELECT video_id, virtual_bucket, active_count, frozen FROM {_t(VideoLikeCountVbucket)} "
                "WHERE generation = %s AND video_id = ANY(%s) AND virtual_bucket + 0 = ANY(%s)",
                [gen.generation, list(videos), buckets])
            for v, vb, n, frozen in cursor.fetchall():
                out.buckets[(v, vb)] = int(n)
                if frozen:
                    out.frozen.add((v, vb))
    return out


def pending_display(gen: routing.GenerationRoutes, videos: list[str]) -> set[str]:
    """Videos with a dirty mark: their display snapshot is due to move, so it is not judged now."""
    pending: set[str] = set()
    for alias in settings.COUNT_PARTITION_ALIASES:
        pending |= set(DirtyVideo.objects.using(alias).filter(generation=gen.generation, video_id__in=videos)
                       .values_list("video_id", flat=True))
    return pending


def display_rows(videos: list[str]) -> dict[str, tuple[int, int, int, int]]:
    """video -> (raw_active_count, display_count, snapshot_id, generation) of its display snapshot."""
    return {v: (raw, disp, sid, g) for v, raw, disp, sid, g in VideoDisplayCount.objects.filter(video_id__in=videos)
            .values_list("video_id", "raw_active_count", "display_count", "snapshot_id", "generation")}


def outbox_evidence(keys: list[tuple[int, str, int]]) -> dict[tuple[int, str, int], dict]:
    """(user, video, version) -> what the outbox (or its archive) of the user's shard says of that
    version: {"state", "status", "partition", "entryId"}; absent: no event of that version exists."""
    by_alias: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
    for key in keys:
        by_alias[relation_routing.alias_for_user(key[0])].append(key)
    out: dict[tuple[int, str, int], dict] = {}
    for alias, wanted in by_alias.items():
        aggs = {(aggregate_key(u, v), ver): (u, v, ver) for u, v, ver in wanted}
        for model, status in ((OutboxEvent, None), (OutboxArchive, "ARCHIVED")):
            with connections[alias].cursor() as cursor:
                cursor.execute(
                    f"SELECT aggregate_key, relation_version, payload->>'absoluteState', "
                    f"{'status, stream_partition' if status is None else 'NULL, NULL'}, stream_entry_id "
                    f"FROM {_t(model)} WHERE (aggregate_key, relation_version) IN "
                    "(SELECT * FROM unnest(%s::text[], %s::bigint[]))",
                    [[a for a, _ in aggs], [ver for _, ver in aggs]])
                for agg, ver, state, row_status, partition, entry_id in cursor.fetchall():
                    out[aggs[(agg, ver)]] = {"state": state, "status": status or row_status,
                                             "partition": partition, "entryId": entry_id}
    return out


def source_watermarks() -> dict:
    """Per relation shard: its transaction snapshot and highest outbox id now (sourceCommitSeq)."""
    out = {}
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT pg_current_snapshot()::text, COALESCE(MAX(id), 0) FROM {_t(OutboxEvent)}")
            snap, max_id = cursor.fetchone()
        out[alias] = {"snapshot": snap, "outboxMaxId": int(max_id)}
    return out


def watermarks(gen: routing.GenerationRoutes, *, source: dict | None = None) -> dict:
    """REC-7's watermarks: source shards, the count consumer's offset vector, the bucket space, the
    projection generation and its sealed manifest."""
    return {
        "sourceShards": source if source is not None else source_watermarks(),
        "offsetVector": {str(p): last for p, last in sorted(checkpoints_get(COUNT_CONSUMER).items())},
        "bucketSpaceVersion": gen.space.version,
        "generation": gen.generation,
        "manifestId": gen.manifest_id,
    }


def videos_after(after: str, limit: int, *, include_projection: bool = True,
                 gen: routing.GenerationRoutes | None = None) -> list[str]:
    """The next `limit` distinct video ids after `after`, in order, over every relation shard and (with
    `include_projection`) every count partition's vbuckets: a phantom video the facts never had is
    still visited. Keyset pagination, one indexed range per store."""
    found: set[str] = set()
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT DISTINCT video_id FROM {_t(LikeRelation)} WHERE video_id > %s "
                           "ORDER BY video_id LIMIT %s", [after, limit])
            found |= {r[0] for r in cursor.fetchall()}
    if include_projection and gen is not None:
        for alias in settings.COUNT_PARTITION_ALIASES:
            with connections[alias].cursor() as cursor:
                cursor.execute(f"SELECT DISTINCT video_id FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s "
                               "AND video_id > %s ORDER BY video_id LIMIT %s", [gen.generation, after, limit])
                found |= {r[0] for r in cursor.fetchall()}
    return sorted(found)[:limit]
