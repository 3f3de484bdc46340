"""The data set of the reconciliation and snapshot benchmarks, written straight into every layer in bulk SQL as the
pipeline leaves it (its shape: docs/benchmarks.md, "Reconciliation and repair"); the SQL hashes are checked against
the Python routing on a sample afterwards."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass

from bench.harness.seed import author_id, make_log, partitions, rows, snapshots_insert, table, users_sql, vacuum
from bench.harness.seed import shards as seed_shards

log = make_log("seed")
SEED_VIDEO_PREFIX, SEED_HOT_VIDEO, SEED_USER_PREFIX = "bench-rec-v", "bench-rec-hot", "bench-r"

# stable_hash(algorithm sha256-be64) mod n, in SQL: the first 8 bytes of sha256(seed || 0x1f || key) read as an
# unsigned big-endian integer (`prefix` = seed || 0x1f). A session-local (pg_temp) function: nothing is added to
# the bench schemas. Not STRICT, so the planner inlines it (twice as fast).
_HASH_FN = """
CREATE OR REPLACE FUNCTION pg_temp.bench_hmod(prefix bytea, key bytea, n int) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
  SELECT mod(mod(('x' || encode(substring(sha256(prefix || key) FROM 1 FOR 8), 'hex'))::bit(64)::bigint::numeric
                 + 18446744073709551616, 18446744073709551616), n)::int
$$
"""

# Every relation of the data set: idx, user index k, video id, version.
_GEN_SQL = """
SELECT i::bigint * %(per)s + j AS idx, mod(i::bigint * %(per)s + j, %(users)s)::int AS k,
       %(vprefix)s || lpad(i::text, 6, '0') AS v,
       CASE WHEN mod(i * 31 + j * 17, 20) < 17 THEN 1 WHEN mod(i * 31 + j * 17, 20) < 19 THEN 2 ELSE 3 END AS ver
  FROM generate_series(0, %(videos)s - 1) AS i, generate_series(0, %(per)s - 1) AS j
UNION ALL
SELECT %(videos)s::bigint * %(per)s + j, j::int, %(hot_video)s, 1 FROM generate_series(0, %(hot)s - 1) AS j
"""

# The time of version `ver` of relation `idx`: a millisecond of its own (so entry ids are unique and in order).
_TS = "to_timestamp((%(base_ms)s + {idx} * 4 + {ver}) / 1000.0)"
_LP_KEY = ("int4send(octet_length(convert_to({v}, 'UTF8'))) || convert_to({v}, 'UTF8') || "
           "int4send(octet_length({u}::text)) || convert_to({u}::text, 'UTF8')")


@dataclass(frozen=True)
class Plan:
    videos: int
    per_video: int
    hot: int
    users: int

    @property
    def relations(self) -> int:
        return self.videos * self.per_video + self.hot

    def video_ids(self) -> list[str]:
        return [video_id(i) for i in range(self.videos)]


def video_id(i: int) -> str:
    return f"{SEED_VIDEO_PREFIX}{i:06d}"


def plan_for(*, relations: int, hot: int, per_video: int) -> Plan:
    """`relations` in all: the hot video's `hot`, the rest in videos of `per_video`."""
    hot = min(hot, relations // 2)
    videos = max(1, (relations - hot) // per_video)
    return Plan(videos=videos, per_video=per_video, hot=hot, users=max(hot, 20 * per_video, 1000))


def expected_version(plan: Plan, i: int, j: int) -> int:
    m = (i * 31 + j * 17) % 20
    return 1 if m < 17 else 2 if m < 19 else 3


def _prefix(seed: str) -> bytes:
    return seed.encode("utf-8") + b"\x1f"


def users_ensure(n: int) -> list[int]:
    """`n` Django users bench-r0000000 ... (bulk, idempotent); their ids in name order."""
    ids = users_sql(SEED_USER_PREFIX, n)
    if len(ids) != n:
        raise RuntimeError(f"expected {n} seed users, found {len(ids)}")
    return ids


def _session(cur, uids: list[int]) -> None:
    """The seed transaction's setup: no statement timeout (the settings' 5 s is for requests), the hash
    function, and the users (index k -> user id)."""
    cur.execute("SET LOCAL statement_timeout = 0")
    cur.execute(_HASH_FN)
    cur.execute("CREATE TEMP TABLE _seed_users (k int PRIMARY KEY, u bigint NOT NULL) ON COMMIT DROP")
    cur.execute("INSERT INTO _seed_users SELECT k - 1, u FROM unnest(%s::bigint[]) WITH ORDINALITY AS t(u, k)",
                [uids])


def _params(plan: Plan, base_ms: int) -> dict:
    return {"per": plan.per_video, "users": plan.users, "videos": plan.videos, "hot": plan.hot,
            "vprefix": SEED_VIDEO_PREFIX, "hot_video": SEED_HOT_VIDEO, "base_ms": base_ms}


def _seed_shard(alias: str, plan: Plan, uids: list[int], base_ms: int) -> dict:
    """The relation rows of the users on `alias` and their outbox rows (SENT)."""
    from django.conf import settings
    from django.db import connections, transaction

    from likes_project.eventlog import streams
    from relations import routing as relation_routing
    from relations.models import LikeRelation, OutboxEvent
    contract = relation_routing.active_contract()
    stream = streams.active_contract()
    p = {**_params(plan, base_ms), "alias": alias, "slots": list(contract.slot_aliases),
         "shard_prefix": _prefix(contract.hash_seed), "n_slots": contract.logical_slots,
         "stream_prefix": _prefix(stream.hash_seed),
         "partitions": stream.partitions, "key_prefix": f"{settings.LIKES_REDIS_PREFIX}:events:"}
    ts = _TS.format(idx="r.idx", ver="r.ver")
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        _session(cur, uids)
        cur.execute("DELETE FROM _seed_users WHERE (%(slots)s::text[])[pg_temp.bench_hmod(%(shard_prefix)s, "
                    "convert_to(u::text, 'UTF8'), %(n_slots)s) + 1] <> %(alias)s", p)
        cur.execute(f"CREATE TEMP TABLE _seed_rel ON COMMIT DROP AS SELECT r.idx, su.u, r.v, r.ver "
                    f"FROM ({_GEN_SQL}) AS r JOIN _seed_users su ON su.k = r.k", p)
        cur.execute(
            f"INSERT INTO {table(LikeRelation)} (user_id, video_id, state, relation_version, last_operation_id, "
            "state_changed_at, created_at, updated_at) "
            f"SELECT r.u, r.v, CASE WHEN mod(r.ver, 2) = 1 THEN 'LIKED' ELSE 'UNLIKED' END, r.ver, "
            f"'seed-' || r.idx || '-' || r.ver, {ts}, {_TS.format(idx='r.idx', ver='1')}, {ts} "
            "FROM _seed_rel r ORDER BY r.idx", p)
        relations = cur.rowcount
        cur.execute(
            f"""WITH e AS MATERIALIZED (
                  SELECT gen_random_uuid() AS eid, r.u, r.v, r.u || ':' || r.v AS agg, k AS ver,
                         %(base_ms)s + r.idx * 4 + k AS ms, r.idx,
                         pg_temp.bench_hmod(%(stream_prefix)s, convert_to(r.u || ':' || r.v, 'UTF8'), %(partitions)s)
                           AS part
                    FROM _seed_rel r CROSS JOIN LATERAL generate_series(1, r.ver) AS k)
                INSERT INTO {table(OutboxEvent)} (event_id, aggregate_key, relation_version, event_type, schema_version,
                    payload, xact_id, status, retry_count, next_retry_at, claimed_by, claim_expires_at, last_error,
                    stream_key, stream_entry_id, stream_partition, stream_entry_ms, stream_entry_seq, created_at,
                    published_at)
                SELECT e.eid, e.agg, e.ver, 'LikeRelationChanged', 1,
                       jsonb_build_object(
                         'eventId', e.eid::text, 'eventType', 'LikeRelationChanged', 'schemaVersion', 1,
                         'aggregateKey', e.agg, 'relationVersion', e.ver,
                         'absoluteState', CASE WHEN mod(e.ver, 2) = 1 THEN 'LIKED' ELSE 'UNLIKED' END,
                         'previousState', CASE WHEN mod(e.ver, 2) = 1 THEN 'UNLIKED' ELSE 'LIKED' END,
                         'previousVersion', e.ver - 1, 'userId', e.u, 'videoId', e.v, 'sourceShard', %(alias)s,
                         'operationId', 'seed-' || e.idx || '-' || e.ver,
                         'stateChangedAt', to_char(to_timestamp(e.ms / 1000.0) AT TIME ZONE 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
                       pg_current_xact_id()::text::bigint, 'SENT', 0, to_timestamp(e.ms / 1000.0), '', NULL, '',
                       %(key_prefix)s || '{{' || e.part || '}}', e.ms || '-0', e.part, e.ms, 0,
                       to_timestamp(e.ms / 1000.0), to_timestamp((e.ms + 20) / 1000.0)
                  FROM e ORDER BY e.ms""", p)
        events = cur.rowcount
        cur.execute(f"SELECT stream_partition, max(stream_entry_ms), count(*) FROM {table(OutboxEvent)} "
                    "WHERE status = 'SENT' GROUP BY 1")
        heads = {int(part): (int(ms), int(n)) for part, ms, n in cur.fetchall()}
    vacuum(alias, LikeRelation, OutboxEvent, analyze_only=True)
    return {"relations": relations, "events": events, "heads": heads}


def _seed_partition(alias: str, plan: Plan, uids: list[int], base_ms: int, gen) -> dict:
    """The projection rows routed to `alias` and their vbuckets."""
    from django.db import connections, transaction

    from counting.models import LikeCountProjection, VideoLikeCountVbucket
    p = {**_params(plan, base_ms), "alias": alias, "routes": [r.partition for r in gen.routes],
         "bucket_prefix": _prefix(gen.space.hash_seed), "vbuckets": gen.space.virtual_buckets, "g": gen.generation,
         "bsv": gen.space.version}
    key = _LP_KEY.format(v="r.v", u="su.u")
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        _session(cur, uids)
        cur.execute(f"CREATE TEMP TABLE _seed_proj ON COMMIT DROP AS SELECT * FROM ("
                    f"SELECT r.idx, su.u, r.v, r.ver, pg_temp.bench_hmod(%(bucket_prefix)s, {key}, %(vbuckets)s) AS vb "
                    f"FROM ({_GEN_SQL}) AS r JOIN _seed_users su ON su.k = r.k) AS x "
                    "WHERE (%(routes)s::text[])[x.vb + 1] = %(alias)s", p)
        cur.execute(
            f"INSERT INTO {table(LikeCountProjection)} (generation, user_id, video_id, projected_state, "
            "projected_version, bucket_space_version, virtual_bucket, updated_at) "
            "SELECT %(g)s, r.u, r.v, CASE WHEN mod(r.ver, 2) = 1 THEN 'LIKED' ELSE 'UNLIKED' END, r.ver, %(bsv)s, "
            f"r.vb, {_TS.format(idx='r.idx', ver='r.ver')} FROM _seed_proj r ORDER BY r.idx", p)
        projected = cur.rowcount
        cur.execute(
            f"INSERT INTO {table(VideoLikeCountVbucket)} (generation, video_id, virtual_bucket, bucket_space_version, "
            "active_count, bucket_version, frozen, updated_at) "
            "SELECT %(g)s, r.v, r.vb, %(bsv)s, count(*) FILTER (WHERE mod(r.ver, 2) = 1), sum(r.ver), false, "
            f"max({_TS.format(idx='r.idx', ver='r.ver')}) FROM _seed_proj r GROUP BY r.v, r.vb ORDER BY r.v, r.vb", p)
        buckets = cur.rowcount
    vacuum(alias, LikeCountProjection, VideoLikeCountVbucket, analyze_only=True)
    return {"projected": projected, "buckets": buckets}


def _seed_default(plan: Plan, base_ms: int, gen, heads: dict[int, tuple[int, int]]) -> dict:
    """Video snapshots, display snapshots, and the `count` consumer's checkpoints."""
    from django.db import connections, transaction

    from counting.models import VideoDisplayCount
    from counting.services.projection import COUNT_CONSUMER
    from likes_project.eventlog.models import ConsumerCheckpoint
    p = _params(plan, base_ms)
    snapshots_insert("SELECT %s || lpad(i::text, 6, '0') FROM generate_series(0, %s - 1) AS i UNION ALL SELECT %s",
                     [SEED_VIDEO_PREFIX, plan.videos, SEED_HOT_VIDEO], author_id=author_id())
    watermark = {str(part): f"{ms}-0" for part, (ms, _n) in sorted(heads.items())}
    snapshot_id = int(time.time() * 1_000_000)
    with transaction.atomic(using="default"), connections["default"].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        cur.execute(
            f"INSERT INTO {table(VideoDisplayCount)} (video_id, generation, manifest_id, raw_active_count, "
            "risk_hidden_count, policy_hidden_count, display_count, snapshot_id, generated_at, watermark) "
            "SELECT g.v, %(g)s, %(manifest)s, count(*) FILTER (WHERE mod(g.ver, 2) = 1), 0, 0, "
            "count(*) FILTER (WHERE mod(g.ver, 2) = 1), %(sid)s, now(), %(wm)s::jsonb "
            f"FROM ({_GEN_SQL}) AS g GROUP BY g.v",
            {**p, "g": gen.generation, "manifest": gen.manifest_id, "sid": snapshot_id, "wm": json.dumps(watermark)})
        displays = cur.rowcount
        for part, (ms, n) in sorted(heads.items()):
            ConsumerCheckpoint.objects.update_or_create(consumer=COUNT_CONSUMER, partition=part,
                                                        defaults={"last_done_id": f"{ms}-0", "applied_total": n})
        cur.execute(f"ANALYZE {table(VideoDisplayCount)}")
    return {"displays": displays}


def _in_thread(fn, *args) -> dict:
    """`fn(*args)` timed, on the thread's own connections (closed at the end)."""
    from django.db import connections
    t = time.monotonic()
    try:
        return {**fn(*args), "s": round(time.monotonic() - t, 1)}
    finally:
        connections.close_all()


def seed(plan: Plan) -> dict:
    """Write the data set (the caller emptied the tables first): every relation shard and count partition
    at once (a thread and a connection each), then `default`. Returns what was written and how long it took."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    from counting import routing as count_routing
    t0 = time.monotonic()
    uids = users_ensure(plan.users)
    t_users = time.monotonic() - t0
    gen = count_routing.load_generation()
    base_ms = int((time.time() - 3 * 86400) * 1000)  # three days ago: older than anything a command writes
    shards, parts = seed_shards(), partitions()
    with ThreadPoolExecutor(max_workers=len(shards) + len(parts)) as pool:
        futures = {alias: pool.submit(_in_thread, _seed_shard, alias, plan, uids, base_ms) for alias in shards}
        futures |= {alias: pool.submit(_in_thread, _seed_partition, alias, plan, uids, base_ms, gen)
                    for alias in parts}
        done = {alias: f.result() for alias, f in futures.items()}
    heads: dict[int, tuple[int, int]] = {}
    for alias in shards:
        for part, (ms, n) in done[alias].pop("heads").items():
            old = heads.get(part, (0, 0))
            heads[part] = (max(old[0], ms), old[1] + n)
        log(f"  seeded {alias}: {done[alias]['relations']:,} relations, {done[alias]['events']:,} outbox rows in "
            f"{done[alias]['s']}s")
    for alias in parts:
        log(f"  seeded {alias}: {done[alias]['projected']:,} projection rows, {done[alias]['buckets']:,} vbuckets in "
            f"{done[alias]['s']}s")
    t = time.monotonic()
    default = {**_seed_default(plan, base_ms, gen, heads), "s": round(time.monotonic() - t, 1)}
    connections.close_all()
    return {
        "plan": plan.__dict__ | {"relations": plan.relations}, "users_s": round(t_users, 1),
        "shards": {a: done[a] for a in shards}, "partitions": {a: done[a] for a in parts}, "default": default,
        "relations": sum(done[a]["relations"] for a in shards), "events": sum(done[a]["events"] for a in shards),
        "projected": sum(done[a]["projected"] for a in parts), "buckets": sum(done[a]["buckets"] for a in parts),
        "seconds": round(time.monotonic() - t0, 1),
    }


def verify_sample(plan: Plan, *, rng: random.Random, n: int = 2000) -> dict:
    """The SQL hashing against the Python routing on `n` sampled relations: each on its shard with the version the
    shape says, its projection row in its bucket on its partition (and nowhere else), its outbox rows in its stream."""
    from counting import routing as count_routing
    from counting.models import LikeCountProjection
    from likes_project.eventlog import streams
    from relations import routing as relation_routing
    from relations.events import aggregate_key
    from relations.models import LikeRelation, OutboxEvent
    uids = users_ensure(plan.users)
    gen = count_routing.load_generation()
    wrong: Counter = Counter()
    picks = []
    for _ in range(n):
        if plan.hot and rng.random() < 0.1:
            j = rng.randrange(plan.hot)
            picks.append((uids[j], SEED_HOT_VIDEO, 1))
        else:
            i, j = rng.randrange(plan.videos), rng.randrange(plan.per_video)
            picks.append((uids[(i * plan.per_video + j) % plan.users], video_id(i), expected_version(plan, i, j)))
    for user_id, vid, ver in picks:
        alias, agg = relation_routing.alias_for_user(user_id), aggregate_key(user_id, vid)
        wrong["relation shard / version"] += rows(alias, f"SELECT relation_version FROM {table(LikeRelation)} WHERE "
                                                         "user_id = %s AND video_id = %s", [user_id, vid]) != [(ver,)]
        wrong["outbox rows / stream partition"] += rows(
            alias, f"SELECT count(*), count(DISTINCT stream_partition), min(stream_partition) FROM "
                   f"{table(OutboxEvent)} WHERE aggregate_key = %s", [agg]) != [(ver, 1, streams.partition_for(agg))]
        vb = count_routing.virtual_bucket(gen.space, vid, user_id)
        for part in partitions():
            found = rows(part, f"SELECT virtual_bucket, projected_version FROM {table(LikeCountProjection)} WHERE "
                               "generation = %s AND user_id = %s AND video_id = %s", [gen.generation, user_id, vid])
            wrong["projection bucket / partition"] += found != ([(vb, ver)] if part == gen.routes[vb].partition else [])
    wrong = {k: v for k, v in wrong.items() if v}
    return {"sampled": n, "wrong": wrong, "ok": not wrong}


