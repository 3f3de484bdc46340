"""The bulk loader of a history: relations by COPY into every store as the service leaves them (docs/benchmarks.md,
"The load"), what derives from them, VACUUM and ANALYZE; `unload` removes it."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime

from bench.harness import checks, seed
from bench.harness.driver import pg_conninfo
from bench.harness.seed import table

log = seed.make_log("load")
CHUNK = 20_000  # relations generated and sent a round
COLUMNS = {"rel": "user_id, video_id, state, relation_version, last_operation_id, state_changed_at, created_at, "
                  "updated_at",
           "cmd": "user_id, operation_id, video_id, desired_state, result_state, result_version, changed, base_version,"
                  " device_id, client_sequence, created_at",
           "out": "event_id, aggregate_key, relation_version, event_type, schema_version, payload, xact_id, status, "
                  "retry_count, next_retry_at, claimed_by, claim_expires_at, last_error, stream_key, stream_entry_id, "
                  "stream_partition, stream_entry_ms, stream_entry_seq, created_at, published_at",
           "proj": "generation, user_id, video_id, projected_state, projected_version, bucket_space_version, "
                   "virtual_bucket, updated_at",
           "rproj": "generation, video_id, user_id, relation_version, state, liked_at, reverse_shard, updated_at",
           "sort": "generation, video_id, reverse_shard, liked_at, user_id"}


class Clock:
    """Millisecond epoch -> the text COPY and the event payload want, the seconds part cached."""

    def __init__(self):
        self.cache: dict[int, tuple[str, str]] = {}

    def _sec(self, s: int) -> tuple[str, str]:
        if (hit := self.cache.get(s)) is None:
            if len(self.cache) > 50_000:
                self.cache.clear()
            d = datetime.fromtimestamp(s, UTC)
            hit = self.cache[s] = (d.strftime("%Y-%m-%d %H:%M:%S"), d.strftime("%Y-%m-%dT%H:%M:%S"))
        return hit

    def pg(self, ms: int) -> str:
        return f"{self._sec(ms // 1000)[0]}.{ms % 1000:03d}+00"

    def iso(self, ms: int) -> str:  # datetime.isoformat() with "Z", as relations.events.event_payload writes it
        return f"{self._sec(ms // 1000)[1]}.{ms % 1000:03d}000Z"


class Copies:
    """One connection and COPY a (alias, table); a failure before `commit` closes them, aborting every COPY."""

    def __init__(self, stack: contextlib.ExitStack):
        self.stack, self.copies, self.conns, self.xids, self.rows = stack, {}, {}, {}, Counter()

    def open(self, alias: str, name: str, columns: str) -> None:
        import psycopg
        conn = psycopg.connect(**pg_conninfo(alias), connect_timeout=10)
        self.stack.callback(conn.close)
        cur = conn.cursor()
        cur.execute("SET statement_timeout = 0")
        # The outbox rows' xact_id: the outbox's connection is the last one opened on a shard.
        self.xids[alias] = cur.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
        manager = cur.copy(f"COPY {name} ({columns}) FROM STDIN")
        self.conns[(alias, name)], self.copies[(alias, name)] = (conn, manager), manager.__enter__()

    def write(self, buffers: dict) -> None:
        for key, lines in buffers.items():
            if lines:
                self.copies[key].write("".join(lines))
                self.rows[key] += len(lines)

    def commit(self) -> None:
        for conn, manager in self.conns.values():
            manager.__exit__(None, None, None)
            conn.commit()


def copy_relations(relations, *, base_ms: int, step_ms: int, prefix: str) -> tuple[int, Counter, dict[int, int], dict]:
    """COPY `relations` ((idx, user id, video, state, version)) and their rows, version k of relation idx changed at
    base_ms + idx * step_ms + k; (relations, LIKED per video added, stream partition -> last ms, rows per table)."""
    from django.conf import settings

    from counting import routing as count_routing
    from counting.models import LikeCountProjection, LikeReverseProjection, LikeReverseSort
    from likes_project.eventlog import streams
    from likes_project.hashing import length_prefixed_utf8, stable_hash
    from relations import routing
    from relations.models import LikeCommand, LikeRelation, OutboxEvent
    gen, rgen, contract, clock = count_routing.active(), count_routing.reverse_active(), streams.active_contract(), \
        Clock()
    space, routes = gen.space, [r.partition for r in gen.routes]
    t = {"rel": table(LikeRelation), "cmd": table(LikeCommand), "out": table(OutboxEvent),
         "proj": table(LikeCountProjection), "rproj": table(LikeReverseProjection), "sort": table(LikeReverseSort)}
    key_prefix, liked, heads, placed, n, t0 = f"{settings.LIKES_REDIS_PREFIX}:events:", Counter(), {}, {}, 0, \
        time.monotonic()
    with contextlib.ExitStack() as stack:
        copies = Copies(stack)
        for kinds, aliases in ((("rel", "cmd", "out"), settings.RELATION_SHARD_ALIASES),
                               (("proj", "rproj", "sort"), settings.COUNT_PARTITION_ALIASES)):
            for alias in aliases:
                for kind in kinds:
                    copies.open(alias, t[kind], COLUMNS[kind])
        buffers: dict = defaultdict(list)
        for idx, uid, vid, state, ver in relations:
            if uid not in placed:  # the user's relation shard and reverse shard
                placed[uid] = (routing.alias_for_user(uid), rgen.shard_of(uid))
            ralias, shard = placed[uid]
            t_base = base_ms + idx * step_ms
            agg, last_pg = f"{uid}:{vid}", clock.pg(t_base + ver)
            part = streams.partition_for(agg, contract)
            buffers[(ralias, t["rel"])].append(f"{uid}\t{vid}\t{state}\t{ver}\t{prefix}{idx}-{ver}\t{last_pg}\t"
                                               f"{clock.pg(t_base + 1)}\t{last_pg}\n")
            for k in range(1, ver + 1):
                s_k, prev = ("LIKED", "UNLIKED") if k % 2 else ("UNLIKED", "LIKED")
                op, pg_k, eid = f"{prefix}{idx}-{k}", clock.pg(t_base + k), str(uuid.uuid4())
                buffers[(ralias, t["cmd"])].append(f"{uid}\t{op}\t{vid}\t{s_k}\t{s_k}\t{k}\tt\t\\N\t\t\\N\t{pg_k}\n")
                payload = (f'{{"eventId": "{eid}", "eventType": "LikeRelationChanged", "schemaVersion": 1, '
                           f'"aggregateKey": "{agg}", "relationVersion": {k}, "absoluteState": "{s_k}", '
                           f'"previousState": "{prev}", "previousVersion": {k - 1}, "userId": {uid}, "videoId": '
                           f'"{vid}", "sourceShard": "{ralias}", "operationId": "{op}", "stateChangedAt": '
                           f'"{clock.iso(t_base + k)}"}}')
                buffers[(ralias, t["out"])].append(
                    f"{eid}\t{agg}\t{k}\tLikeRelationChanged\t1\t{payload}\t{copies.xids[ralias]}\tSENT\t0\t{pg_k}\t\t"
                    f"\\N\t\t{key_prefix}{{{part}}}\t{t_base + k}-0\t{part}\t{t_base + k}\t0\t{pg_k}\t"
                    f"{clock.pg(t_base + k + 20)}\n")
            heads[part] = max(heads.get(part, 0), t_base + ver)
            vb = stable_hash(space.hash_algorithm, space.hash_seed,
                             length_prefixed_utf8(vid, str(uid))) % space.virtual_buckets
            seen_pg, palias = clock.pg(t_base + ver + 30), rgen.placement[shard]
            buffers[(routes[vb], t["proj"])].append(f"{gen.generation}\t{uid}\t{vid}\t{state}\t{ver}\t{space.version}"
                                                    f"\t{vb}\t{seen_pg}\n")
            buffers[(palias, t["rproj"])].append(f"{rgen.generation}\t{vid}\t{uid}\t{ver}\t{state}\t"
                                                 f"{last_pg if state == 'LIKED' else chr(92) + 'N'}\t{shard}\t"
                                                 f"{seen_pg}\n")
            if state == "LIKED":
                buffers[(palias, t["sort"])].append(f"{rgen.generation}\t{vid}\t{shard}\t{last_pg}\t{uid}\n")
                liked[vid] += 1
            n += 1
            if n % CHUNK == 0:
                copies.write(buffers)
                buffers.clear()
                if n % 500_000 == 0:
                    log(f"  ... {n:,} relations sent ({n / (time.monotonic() - t0):,.0f}/s)")
        copies.write(buffers)
        copies.commit()
    by_table: Counter = Counter()
    for (_alias, name), k in copies.rows.items():
        by_table[name] += k
    return n, liked, heads, dict(by_table)


def _each_partition(sql: str, params) -> dict[str, int]:
    from django.db import connections, transaction
    out = {}
    for alias in seed.partitions():
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute("SET LOCAL work_mem = '256MB'")
            cur.execute(sql, params(alias) if callable(params) else params)
            out[alias] = cur.rowcount
    return out


def derive(heads: dict[int, int], seq_before: dict[str, int], prefix: str) -> dict:
    """The vbuckets of the rows this load added (added to the stored ones), the displays and recent likers of the
    videos of `prefix`, every consumer's checkpoint past the loaded events."""
    from counting import routing
    from counting.models import LikeCountProjection, LikeReverseRecent, LikeReverseSort, VideoLikeCountVbucket
    from counting.services.reverse.projector import RECENT_KEEP
    from likes_project.eventlog.models import ConsumerCheckpoint
    from likes_project.eventlog.registry import CONSUMERS
    from likes_project.eventlog.streams import entry_id_key
    g, rg = routing.active().generation, routing.reverse_active().generation
    buckets = _each_partition(
        f"INSERT INTO {table(VideoLikeCountVbucket)} AS b (generation, video_id, virtual_bucket, bucket_space_version, "
        "active_count, bucket_version, frozen, updated_at) SELECT generation, video_id, virtual_bucket, "
        "bucket_space_version, count(*) FILTER (WHERE projected_state = 'LIKED'), sum(projected_version), false, "
        f"max(updated_at) FROM {table(LikeCountProjection)} WHERE generation = %s AND change_seq > %s GROUP BY 1, 2, 3,"
        " 4 ON CONFLICT (generation, video_id, virtual_bucket) DO UPDATE SET active_count = b.active_count + "
        "EXCLUDED.active_count, bucket_version = b.bucket_version + EXCLUDED.bucket_version, updated_at = "
        "greatest(b.updated_at, EXCLUDED.updated_at)", lambda alias: [g, seq_before[alias]])
    sums = checks.bucket_sums(prefix)
    displays = seed.displays_upsert(dict(sums))
    _each_partition(f"DELETE FROM {table(LikeReverseRecent)} WHERE generation = %s AND video_id LIKE %s",
                    [rg, prefix + "%"])
    recent = _each_partition(
        f"INSERT INTO {table(LikeReverseRecent)} (generation, video_id, user_id, liked_at) SELECT generation, "
        "video_id, user_id, liked_at FROM (SELECT generation, video_id, user_id, liked_at, row_number() OVER "
        f"(PARTITION BY video_id ORDER BY liked_at DESC, user_id DESC) AS rn FROM {table(LikeReverseSort)} WHERE "
        "generation = %s AND video_id LIKE %s) s WHERE rn <= %s", [rg, prefix + "%", RECENT_KEEP])
    for consumer in CONSUMERS:
        for part, ms in sorted(heads.items()):
            cp, _ = ConsumerCheckpoint.objects.get_or_create(consumer=consumer, partition=part)
            if entry_id_key(cp.last_done_id) < (ms, 0):
                cp.last_done_id = f"{ms}-0"
                cp.save(update_fields=["last_done_id"])
    return {"vbuckets_upserted": buckets, "displays": displays, "recent": recent, "sums": sums}


def vacuum_all(bound_s: float = 900.0) -> dict:
    """VACUUM (ANALYZE), CHECKPOINT, no autovacuum worker left: the steady state, no maintenance while measuring."""
    from django.conf import settings

    from likes_project.waiting import wait_until
    t0 = time.monotonic()
    for alias, name in loaded_tables():
        seed.rows(alias, f"VACUUM (ANALYZE) {name}", slow=True)
    t_vacuum = time.monotonic() - t0
    try:
        seed.rows("default", "CHECKPOINT", slow=True)
    except Exception as exc:  # not a superuser: the checkpointer's own schedule then
        log(f"  CHECKPOINT refused ({exc.__class__.__name__})")
    names = [cfg["NAME"] for cfg in settings.DATABASES.values()]  # this run's databases only
    wait_until(lambda: not seed.rows("default", "SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                                     "'autovacuum worker' AND datname = ANY(%s)", [names])[0][0],
               timeout_s=bound_s, poll_s=1.0)
    return {"vacuum_s": round(t_vacuum, 1), "checkpoint_and_wait_s": round(time.monotonic() - t0 - t_vacuum, 1)}


def loaded_tables() -> list[tuple[str, str]]:
    """(alias, table) of every table the load writes."""
    from counting import models as cm
    from relations import models as rm
    return ([(a, table(m)) for a in seed.shards() for m in (rm.LikeRelation, rm.LikeCommand, rm.OutboxEvent)]
            + [(a, table(m)) for a in seed.partitions() for m in (
                cm.LikeCountProjection, cm.VideoLikeCountVbucket, cm.LikeReverseProjection, cm.LikeReverseSort,
                cm.LikeReverseRecent)]
            + [("default", table(rm.VideoSnapshot)), ("default", table(cm.VideoDisplayCount)),
               ("default", "auth_user")])


def disk_used() -> dict:
    """The size of every bench database and of each loaded table (over the databases that hold it), in bytes."""
    from django.conf import settings
    databases, tables = {}, Counter()
    for alias in settings.DATABASES:
        databases.update(seed.rows(alias, "SELECT current_database(), pg_database_size(current_database())"))
    for alias, name in loaded_tables():
        tables[name] += seed.rows(alias, "SELECT pg_total_relation_size(%s::regclass)", [name])[0][0]
    return {"databases": databases, "total": sum(databases.values()), "tables": dict(tables)}


def load(relations, *, prefix: str, base_ms: int, step_ms: int) -> dict:
    """copy_relations, derive, vacuum_all; what was written, the steps' seconds, the check of Σ routed vbuckets."""
    from django.db import connections
    t0, steps = time.monotonic(), {}
    before = checks.bucket_sums(prefix)
    seq_before = {alias: int(last) - (not called) for alias in seed.partitions()  # rows above it are this load's
                  for last, called in seed.rows(alias, "SELECT last_value, is_called FROM count_change_seq")}
    connections.close_all()
    t = time.monotonic()
    n, liked, heads, rows = copy_relations(relations, base_ms=base_ms, step_ms=step_ms, prefix=prefix)
    steps["copy"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    derived = derive(heads, seq_before, prefix)
    sums = derived.pop("sums")
    wrong = [v for v in set(sums) | set(liked) | set(before) if sums.get(v, 0) != before.get(v, 0) + liked.get(v, 0)]
    steps["derive"] = round(time.monotonic() - t, 1)
    steps["maintenance"] = vacuum_all()
    log(f"loaded {n:,} relations in {time.monotonic() - t0:.1f}s ({steps}); {len(wrong)} videos whose buckets do not "
        "add up")
    return {"steps": steps, "relations": n, "rows": rows, **derived, "bucket_mismatches": len(wrong),
            "bucket_mismatch_sample": sorted(wrong)[:10]}


def unload(prefix: str) -> None:
    """What a load of the videos of `prefix` wrote: seed.reset_all, the reverse index, the streams, the floors, the
    consumers' checkpoints, the videos' snapshots, the users named `prefix`* without a token."""
    from django.conf import settings
    from django.db import connections

    from counting.models import (
        LikeReverseProjection,
        LikeReverseRecent,
        LikeReverseSort,
        ReverseEventReceipt,
        VideoDisplayCount,
    )
    from likes_project.eventlog.registry import CONSUMERS
    from relations.models import LikeRelationCacheProjection, VideoSnapshot
    from relations.services.relation_cache import cache_generations_mirror
    seed.reset_all()
    seed.truncate(settings.COUNT_PARTITION_ALIASES, LikeReverseProjection, LikeReverseSort, ReverseEventReceipt,
                  LikeReverseRecent)
    seed.truncate(seed.shards(), LikeRelationCacheProjection)
    seed.streams_reset()
    for consumer in CONSUMERS:
        seed.consumer_reset(consumer)
    with connections["default"].cursor() as cur:
        cur.execute("SET statement_timeout = 0")
        for model in (VideoDisplayCount, VideoSnapshot):
            cur.execute(f"DELETE FROM {table(model)} WHERE video_id LIKE %s", [prefix + "%"])
        cur.execute("DELETE FROM auth_user WHERE username LIKE %s AND NOT EXISTS (SELECT 1 FROM authtoken_token t "
                    "WHERE t.user_id = auth_user.id)", [prefix + "%"])
    cache_generations_mirror()  # the flush dropped the relation cache's registry: writes need it back
    connections.close_all()
