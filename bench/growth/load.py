"""The growth benchmark's loader: the relations `a .. b-1` of the plan streamed with COPY ... FROM STDIN into
every store, as the service leaves them once every event was published and consumed, then what derives from
them (vbuckets, display snapshots, the recent-likers summary, consumer checkpoints) and ANALYZE.

Per relation (user u, video v, version n, state s), generated in Python chunk by chunk:
  relation shard of u   the LikeRelation row (s, n); per version k = 1..n one LikeCommand (changed, the verdict
                        of version k) and one OutboxEvent (SENT, the payload the like command writes, its stream
                        partition and an entry id in publish order), as `likes_relation_apply` writes them;
  count partition       the LikeCountProjection row (s, n) on the partition its virtual bucket is routed to;
  reverse partition     the LikeReverseProjection row (tombstones included) and, when LIKED, the LikeReverseSort
                        entry (liked_at = the LIKED version's stateChangedAt) on `placement[reverse shard]`.
One connection and one COPY per table per database, each committed once its rows are all sent. The
vbuckets are then summed in SQL from the projection rows this load added (and added to the existing ones:
bucket_version grows by one per applied change, as the projector does), the display snapshots are summed
from the routed vbuckets, and the recent-likers summary is recomputed from the sort entries."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bench.common import pg_conninfo
from bench.growth import HOT_VIDEO, PREFIX, log
from bench.growth.plan import (
    BASE_MS,
    CORE,
    CORE_PREFIX,
    HEAVY,
    HEAVY_USER,
    LIGHT_PREFIX,
    STEP_MS,
    VIDEO_PREFIX,
    Plan,
    core_name,
    state_of,
)

CHUNK = 20_000  # relations generated and sent per round
EVENT_TYPE = "LikeRelationChanged"


def _t(model) -> str:
    return model._meta.db_table


class _Clock:
    """Millisecond epoch -> the text COPY and the event payload want, with the seconds part cached."""

    def __init__(self):
        self.cache: dict[int, tuple[str, str]] = {}

    def _sec(self, s: int) -> tuple[str, str]:
        hit = self.cache.get(s)
        if hit is None:
            if len(self.cache) > 50_000:
                self.cache.clear()
            d = datetime.fromtimestamp(s, UTC)
            hit = self.cache[s] = (d.strftime("%Y-%m-%d %H:%M:%S"), d.strftime("%Y-%m-%dT%H:%M:%S"))
        return hit

    def pg(self, ms: int) -> str:
        s, r = divmod(ms, 1000)
        return f"{self._sec(s)[0]}.{r:03d}+00"

    def iso(self, ms: int) -> str:
        # datetime.isoformat() with "Z", as relations.events.event_payload writes it (never a whole second here)
        s, r = divmod(ms, 1000)
        return f"{self._sec(s)[1]}.{r:03d}000Z"


# --- users and videos ----------------------------------------------------------------------------------


@dataclass
class Users:
    heavy: int = 0
    light: list[int] = field(default_factory=list)
    core: list[int] = field(default_factory=list)

    def uid(self, kind: str, n: int) -> int:
        return self.heavy if kind == HEAVY else self.core[n] if kind == CORE else self.light[n]


def users_ensure(plan: Plan, n: int, users: Users) -> Users:
    """auth_user rows (unusable passwords) for the heavy user, the light users and the core users the first `n`
    relations name, in one statement each (idempotent); their ids in plan order."""
    from django.db import connections

    def insert(cur, name_sql: str, params: list) -> None:
        cur.execute(
            "INSERT INTO auth_user (password, last_login, is_superuser, username, first_name, last_name, email, "
            f"is_staff, is_active, date_joined) SELECT '!bench', NULL, false, {name_sql}, '', '', '', false, true, "
            "now() FROM generate_series(%s, %s - 1) AS i ON CONFLICT (username) DO NOTHING", params)

    cores = plan.core_users_started(n)
    with connections["default"].cursor() as cur:
        insert(cur, "%s", [HEAVY_USER, 0, 1])
        insert(cur, "%s || lpad(i::text, 7, '0')", [LIGHT_PREFIX, 0, plan.hot_rel])
        insert(cur, "%s || lpad(i::text, 7, '0')", [CORE_PREFIX, len(users.core), cores])
        cur.execute("SELECT id FROM auth_user WHERE username = %s", [HEAVY_USER])
        users.heavy = cur.fetchone()[0]
        if not users.light:
            cur.execute("SELECT id FROM auth_user WHERE username LIKE %s ORDER BY username", [LIGHT_PREFIX + "%"])
            users.light = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT id FROM auth_user WHERE username LIKE %s AND username >= %s ORDER BY username",
                    [CORE_PREFIX + "%", core_name(len(users.core))])
        users.core += [r[0] for r in cur.fetchall()][:cores - len(users.core)]
        cur.execute("ANALYZE auth_user")
    if len(users.light) != plan.hot_rel or len(users.core) != cores:
        raise RuntimeError(f"users: {len(users.light)} light of {plan.hot_rel}, {len(users.core)} core of {cores}")
    return users


def videos_ensure(plan: Plan, n: int) -> int:
    """Public active snapshots of the catalog's videos and the hot video (bulk, idempotent)."""
    from bench.dataset import author_id, snapshots_insert

    c = plan.catalog(n)
    snapshots_insert("SELECT %s || lpad(i::text, 7, '0') FROM generate_series(0, %s - 1) AS i UNION ALL SELECT %s",
                     [VIDEO_PREFIX, c, HOT_VIDEO], author_id=author_id())
    return c + 1


# --- the COPY streams ----------------------------------------------------------------------------------

REL_COLS = ("user_id, video_id, state, relation_version, last_operation_id, state_changed_at, created_at, "
            "updated_at")
CMD_COLS = ("user_id, operation_id, video_id, desired_state, result_state, result_version, changed, base_version, "
            "device_id, client_sequence, created_at")
OUT_COLS = ("event_id, aggregate_key, relation_version, event_type, schema_version, payload, xact_id, status, "
            "retry_count, next_retry_at, claimed_by, claim_expires_at, last_error, stream_key, stream_entry_id, "
            "stream_partition, stream_entry_ms, stream_entry_seq, created_at, published_at")
PROJ_COLS = ("generation, user_id, video_id, projected_state, projected_version, bucket_space_version, "
             "virtual_bucket, updated_at")
RPROJ_COLS = "generation, video_id, user_id, relation_version, state, liked_at, reverse_shard, updated_at"
SORT_COLS = "generation, video_id, reverse_shard, liked_at, user_id"


class Copies:
    """One connection and one open COPY per (alias, table); `write` sends a chunk, `commit` ends them all. A
    failure before `commit` closes the connections, which aborts every COPY and its transaction."""

    def __init__(self, stack: contextlib.ExitStack):
        self.stack = stack
        self.copies: dict[tuple[str, str], object] = {}
        self.managers: dict[tuple[str, str], object] = {}
        self.conns: dict[tuple[str, str], object] = {}
        self.xids: dict[tuple[str, str], int] = {}
        self.rows: Counter = Counter()

    def open(self, alias: str, table: str, columns: str) -> None:
        import psycopg

        conn = psycopg.connect(**pg_conninfo(alias), connect_timeout=10)
        self.stack.callback(conn.close)
        cur = conn.cursor()
        cur.execute("SET statement_timeout = 0")
        self.xids[(alias, table)] = cur.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
        self.conns[(alias, table)] = conn
        manager = cur.copy(f"COPY {table} ({columns}) FROM STDIN")
        self.copies[(alias, table)] = manager.__enter__()
        self.managers[(alias, table)] = manager

    def write(self, buffers: dict[tuple[str, str], list[str]]) -> None:
        for key, lines in buffers.items():
            if lines:
                self.copies[key].write("".join(lines))
                self.rows[key] += len(lines)

    def commit(self) -> None:
        """End every COPY, then commit each table's transaction."""
        for key, manager in self.managers.items():
            manager.__exit__(None, None, None)
            self.conns[key].commit()
        self.managers.clear()
        self.copies.clear()


@dataclass
class Loaded:
    relations: int = 0
    liked: Counter = field(default_factory=Counter)  # per video: LIKED relations this load added
    heads: dict[int, int] = field(default_factory=dict)  # stream partition -> highest entry ms
    rows: dict = field(default_factory=dict)


def copy_relations(plan: Plan, users: Users, a: int, b: int) -> Loaded:
    """COPY the relations a .. b-1 (and their commands, outbox rows, projection rows, reverse rows)."""
    from django.conf import settings

    from counting import routing as count_routing
    from counting.models import LikeCountProjection, LikeReverseProjection, LikeReverseSort
    from likes_project.eventlog import streams
    from likes_project.hashing import length_prefixed_utf8, stable_hash
    from relations import routing
    from relations.models import LikeCommand, LikeRelation, OutboxEvent

    gen = count_routing.active()
    rgen = count_routing.reverse_active()
    contract = streams.active_contract()
    space = gen.space
    routes = [r.partition for r in gen.routes]
    g, rg, bsv = gen.generation, rgen.generation, space.version
    t_rel, t_cmd, t_out = _t(LikeRelation), _t(LikeCommand), _t(OutboxEvent)
    t_proj, t_rproj, t_sort = _t(LikeCountProjection), _t(LikeReverseProjection), _t(LikeReverseSort)
    key_prefix = f"{settings.LIKES_REDIS_PREFIX}:events:"
    clock = _Clock()
    out = Loaded()
    rel_alias: dict[int, str] = {}
    rev_shard: dict[int, int] = {}
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        copies = Copies(stack)
        for alias in settings.RELATION_SHARD_ALIASES:
            copies.open(alias, t_rel, REL_COLS)
            copies.open(alias, t_cmd, CMD_COLS)
            copies.open(alias, t_out, OUT_COLS)
        for alias in settings.COUNT_PARTITION_ALIASES:
            copies.open(alias, t_proj, PROJ_COLS)
            copies.open(alias, t_rproj, RPROJ_COLS)
            copies.open(alias, t_sort, SORT_COLS)
        xid = {alias: copies.xids[(alias, t_out)] for alias in settings.RELATION_SHARD_ALIASES}
        buffers: dict[tuple[str, str], list[str]] = defaultdict(list)
        n_chunk = 0
        next_log = a + 500_000
        for idx, kind, number, vid in plan.relations(a, b):
            uid = users.uid(kind, number)
            ralias = rel_alias.get(uid)
            if ralias is None:
                ralias = rel_alias[uid] = routing.alias_for_user(uid)
                rev_shard[uid] = rgen.shard_of(uid)
            state, ver = state_of(idx)
            t_base = BASE_MS + idx * STEP_MS
            t_last = t_base + ver
            agg = f"{uid}:{vid}"
            part = streams.partition_for(agg, contract)
            skey = f"{key_prefix}{{{part}}}"
            last_pg = clock.pg(t_last)
            buffers[(ralias, t_rel)].append(
                f"{uid}\t{vid}\t{state}\t{ver}\t{PREFIX}{idx}-{ver}\t{last_pg}\t{clock.pg(t_base + 1)}\t{last_pg}\n")
            cmds, outs = buffers[(ralias, t_cmd)], buffers[(ralias, t_out)]
            for k in range(1, ver + 1):
                s_k = "LIKED" if k % 2 else "UNLIKED"
                prev = "UNLIKED" if k % 2 else "LIKED"
                op = f"{PREFIX}{idx}-{k}"
                t_k = t_base + k
                pg_k = clock.pg(t_k)
                cmds.append(f"{uid}\t{op}\t{vid}\t{s_k}\t{s_k}\t{k}\tt\t\\N\t\t\\N\t{pg_k}\n")
                eid = str(uuid.uuid4())
                payload = (f'{{"eventId": "{eid}", "eventType": "{EVENT_TYPE}", "schemaVersion": 1, '
                           f'"aggregateKey": "{agg}", "relationVersion": {k}, "absoluteState": "{s_k}", '
                           f'"previousState": "{prev}", "previousVersion": {k - 1}, "userId": {uid}, '
                           f'"videoId": "{vid}", "sourceShard": "{ralias}", "operationId": "{op}", '
                           f'"stateChangedAt": "{clock.iso(t_k)}"}}')
                outs.append(f"{eid}\t{agg}\t{k}\t{EVENT_TYPE}\t1\t{payload}\t{xid[ralias]}\tSENT\t0\t{pg_k}\t\t\\N\t"
                            f"\t{skey}\t{t_k}-0\t{part}\t{t_k}\t0\t{pg_k}\t{clock.pg(t_k + 20)}\n")
            if out.heads.get(part, 0) < t_last:
                out.heads[part] = t_last
            vb = stable_hash(space.hash_algorithm, space.hash_seed,
                             length_prefixed_utf8(vid, str(uid))) % space.virtual_buckets
            seen_pg = clock.pg(t_last + 30)
            buffers[(routes[vb], t_proj)].append(f"{g}\t{uid}\t{vid}\t{state}\t{ver}\t{bsv}\t{vb}\t{seen_pg}\n")
            shard = rev_shard[uid]
            palias = rgen.placement[shard]
            liked = state == "LIKED"
            buffers[(palias, t_rproj)].append(
                f"{rg}\t{vid}\t{uid}\t{ver}\t{state}\t{last_pg if liked else chr(92) + 'N'}\t{shard}\t{seen_pg}\n")
            if liked:
                buffers[(palias, t_sort)].append(f"{rg}\t{vid}\t{shard}\t{last_pg}\t{uid}\n")
                out.liked[vid] += 1
            out.relations += 1
            n_chunk += 1
            if n_chunk >= CHUNK:
                copies.write(buffers)
                buffers.clear()
                n_chunk = 0
                if idx >= next_log:
                    rate = (idx - a) / max(time.monotonic() - t0, 0.001)
                    log(f"  ... {idx + 1:,} relations sent ({rate:,.0f}/s)")
                    next_log = idx + 500_000
        copies.write(buffers)
        t_sent = time.monotonic()
        copies.commit()
        out.rows = {f"{alias}.{table}": n for (alias, table), n in sorted(copies.rows.items())}
    log(f"  COPY of {out.relations:,} relations: sent in {t_sent - t0:.0f}s, committed after "
        f"{time.monotonic() - t_sent:.0f}s more")
    return out


# --- what derives from the rows ----------------------------------------------------------------------


def change_seqs() -> dict[str, int]:
    """Per count partition: the highest change_seq given out so far (rows above it are this load's)."""
    from django.conf import settings
    from django.db import connections

    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute("SELECT last_value, is_called FROM count_change_seq")
            last, called = cur.fetchone()
            out[alias] = int(last) if called else int(last) - 1
    return out


def vbuckets_add(seq_before: dict[str, int]) -> dict[str, int]:
    """The vbuckets of the projection rows this load added, added to the stored ones: per (video, bucket) the
    LIKED rows, and the bucket version grown by one per applied change (sum of the rows' versions)."""
    from django.conf import settings
    from django.db import connections, transaction

    from counting import routing as count_routing
    from counting.models import LikeCountProjection, VideoLikeCountVbucket

    gen = count_routing.active()
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute("SET LOCAL work_mem = '256MB'")
            cur.execute(
                f"INSERT INTO {_t(VideoLikeCountVbucket)} AS b (generation, video_id, virtual_bucket, "
                "bucket_space_version, active_count, bucket_version, frozen, updated_at) "
                "SELECT generation, video_id, virtual_bucket, bucket_space_version, "
                "count(*) FILTER (WHERE projected_state = 'LIKED'), sum(projected_version), false, max(updated_at) "
                f"FROM {_t(LikeCountProjection)} WHERE generation = %s AND change_seq > %s "
                "GROUP BY generation, video_id, virtual_bucket, bucket_space_version "
                "ON CONFLICT (generation, video_id, virtual_bucket) DO UPDATE SET "
                "active_count = b.active_count + EXCLUDED.active_count, "
                "bucket_version = b.bucket_version + EXCLUDED.bucket_version, "
                "updated_at = greatest(b.updated_at, EXCLUDED.updated_at)",
                [gen.generation, seq_before[alias]])
            out[alias] = cur.rowcount
    return out


def display_counts() -> dict[str, int]:
    """video -> its display snapshot's raw count, for this benchmark's videos."""
    from counting.models import VideoDisplayCount

    return dict(VideoDisplayCount.objects.filter(video_id__startswith=PREFIX)
                .values_list("video_id", "raw_active_count"))


def bucket_sums() -> dict[str, int]:
    """video -> Σ of its routed vbuckets, over every count partition (this benchmark's videos)."""
    from django.conf import settings
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import VideoLikeCountVbucket

    gen = count_routing.active()
    sums: Counter = Counter()
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute("SET statement_timeout = 0")
            cur.execute(f"SELECT video_id, sum(active_count) FROM {_t(VideoLikeCountVbucket)} WHERE generation = %s "
                        "AND video_id LIKE %s AND virtual_bucket = ANY(%s) GROUP BY video_id",
                        [gen.generation, PREFIX + "%", gen.buckets_on(alias)])
            for v, n in cur.fetchall():
                sums[v] += int(n)
    return dict(sums)


def displays_write(sums: dict[str, int]) -> int:
    """The display snapshots (raw = display = Σ routed vbuckets; nothing risk- or policy-hidden)."""
    from django.db import connections, transaction
    from django.utils import timezone

    from counting import routing as count_routing
    from counting.models import VideoDisplayCount

    gen = count_routing.active()
    videos = sorted(sums)
    with transaction.atomic(using="default"), connections["default"].cursor() as cur:
        cur.execute("SET LOCAL statement_timeout = 0")
        cur.execute(
            f"INSERT INTO {_t(VideoDisplayCount)} (video_id, generation, manifest_id, raw_active_count, "
            "risk_hidden_count, policy_hidden_count, display_count, snapshot_id, generated_at, watermark) "
            "SELECT v, %s, %s, c, 0, 0, c, %s, %s, '{}'::jsonb FROM unnest(%s::text[], %s::bigint[]) AS x(v, c) "
            "ON CONFLICT (video_id) DO UPDATE SET generation = EXCLUDED.generation, "
            "manifest_id = EXCLUDED.manifest_id, raw_active_count = EXCLUDED.raw_active_count, risk_hidden_count = 0, "
            "policy_hidden_count = 0, display_count = EXCLUDED.display_count, snapshot_id = EXCLUDED.snapshot_id, "
            "generated_at = EXCLUDED.generated_at",
            [gen.generation, gen.manifest_id, int(time.time() * 1_000_000), timezone.now(), videos,
             [sums[v] for v in videos]])
        return cur.rowcount


def recent_rebuild() -> dict[str, int]:
    """The recent-likers summary (REV-10) of this benchmark's videos recomputed from the sort entries: per
    count partition and video, the newest RECENT_KEEP entries of that partition's reverse shards."""
    from django.conf import settings
    from django.db import connections, transaction

    from counting import routing as count_routing
    from counting.models import LikeReverseRecent, LikeReverseSort
    from counting.services.reverse.projector import RECENT_KEEP

    rg = count_routing.reverse_active().generation
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute("SET LOCAL work_mem = '256MB'")
            cur.execute(f"DELETE FROM {_t(LikeReverseRecent)} WHERE generation = %s AND video_id LIKE %s",
                        [rg, PREFIX + "%"])
            cur.execute(
                f"INSERT INTO {_t(LikeReverseRecent)} (generation, video_id, user_id, liked_at) "
                "SELECT generation, video_id, user_id, liked_at FROM (SELECT generation, video_id, user_id, liked_at, "
                "row_number() OVER (PARTITION BY video_id ORDER BY liked_at DESC, user_id DESC) AS rn "
                f"FROM {_t(LikeReverseSort)} WHERE generation = %s AND video_id LIKE %s) s WHERE rn <= %s",
                [rg, PREFIX + "%", RECENT_KEEP])
            out[alias] = cur.rowcount
    return out


def checkpoints_advance(heads: dict[int, int]) -> None:
    """Every consumer of the event log is past the loaded events: its checkpoint on each stream partition at
    the highest loaded entry, or where it already is when that is further."""
    from likes_project.eventlog.models import ConsumerCheckpoint
    from likes_project.eventlog.registry import CONSUMERS
    from likes_project.eventlog.streams import entry_id_key

    for consumer in CONSUMERS:
        for part, ms in sorted(heads.items()):
            cp, _ = ConsumerCheckpoint.objects.get_or_create(consumer=consumer, partition=part)
            if entry_id_key(cp.last_done_id) < (ms, 0):
                cp.last_done_id = f"{ms}-0"
                cp.save(update_fields=["last_done_id"])


def vacuum_all(bound_s: float = 900.0) -> dict:
    """VACUUM (ANALYZE) every loaded table, then a CHECKPOINT, then wait (bounded) until no autovacuum worker is
    on a bench database: the loaded history in the steady state a long-lived database is in (hint bits and the
    visibility map set, statistics current), and no maintenance of the load running during the measurements."""
    from django.conf import settings
    from django.db import connections

    from counting.models import (
        LikeCountProjection,
        LikeReverseProjection,
        LikeReverseRecent,
        LikeReverseSort,
        VideoDisplayCount,
        VideoLikeCountVbucket,
    )
    from relations.models import LikeCommand, LikeRelation, OutboxEvent, VideoSnapshot

    todo = [(a, m) for a in settings.RELATION_SHARD_ALIASES for m in (LikeRelation, LikeCommand, OutboxEvent)]
    todo += [(a, m) for a in settings.COUNT_PARTITION_ALIASES
             for m in (LikeCountProjection, VideoLikeCountVbucket, LikeReverseProjection, LikeReverseSort,
                       LikeReverseRecent)]
    todo += [("default", VideoSnapshot), ("default", VideoDisplayCount)]
    t0 = time.monotonic()
    for alias, model in todo:
        with connections[alias].cursor() as cur:
            cur.execute("SET statement_timeout = 0")
            cur.execute(f"VACUUM (ANALYZE) {_t(model)}")
            cur.execute("SET statement_timeout = DEFAULT")
    t_vacuum = time.monotonic() - t0
    checkpoint = True
    with connections["default"].cursor() as cur:
        cur.execute("SET statement_timeout = 0")
        try:
            cur.execute("CHECKPOINT")
        except Exception as exc:  # not a superuser: the checkpointer's own schedule then
            checkpoint = False
            log(f"  CHECKPOINT refused ({exc.__class__.__name__}); going on")
        cur.execute("SET statement_timeout = DEFAULT")
    t1 = time.monotonic()
    workers = 0
    for _ in range(int(bound_s)):  # bounded wait, one look a second
        with connections["default"].cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' "
                        "AND datname LIKE 'likes_bench%%'")
            workers = cur.fetchone()[0]
        if not workers:
            break
        time.sleep(1.0)  # an autovacuum worker is still on a bench database
    return {"vacuum_s": round(t_vacuum, 1), "checkpoint": checkpoint, "checkpoint_and_wait_s":
            round(time.monotonic() - t1, 1), "autovacuum_workers_left": workers}


# --- disk ------------------------------------------------------------------------------------------------


def disk_used() -> dict:
    """pg_database_size of every bench database, and pg_total_relation_size of the big tables (summed over the
    databases that hold them), in bytes."""
    from django.conf import settings
    from django.db import connections

    from counting.models import (
        LikeCountProjection,
        LikeReverseProjection,
        LikeReverseSort,
        VideoDisplayCount,
        VideoLikeCountVbucket,
    )
    from relations.models import LikeCommand, LikeRelation, OutboxEvent, VideoSnapshot

    databases = {}
    for alias in settings.DATABASES:
        with connections[alias].cursor() as cur:
            cur.execute("SELECT current_database(), pg_database_size(current_database())")
            name, size = cur.fetchone()
            databases[name] = int(size)
    tables: Counter = Counter()
    shards = [(a, m) for a in settings.RELATION_SHARD_ALIASES for m in (LikeRelation, LikeCommand, OutboxEvent)]
    parts = [(a, m) for a in settings.COUNT_PARTITION_ALIASES
             for m in (LikeCountProjection, VideoLikeCountVbucket, LikeReverseProjection, LikeReverseSort)]
    for alias, model in [*shards, *parts, ("default", VideoSnapshot), ("default", VideoDisplayCount),
                         ("default", None)]:
        table = "auth_user" if model is None else _t(model)
        with connections[alias].cursor() as cur:
            cur.execute("SELECT pg_total_relation_size(%s::regclass)", [table])
            tables[table] += int(cur.fetchone()[0])
    return {"databases": databases, "total": sum(databases.values()), "tables": dict(tables)}


# --- one size ----------------------------------------------------------------------------------------------


def grow(plan: Plan, users: Users, a: int, b: int) -> dict:
    """Grow the data set from `a` to `b` relations; returns what was written, how long each step took, and the
    consistency check of the load (per video, the display snapshot grew by the LIKED relations loaded)."""
    from django.db import connections

    steps: dict[str, float] = {}
    t0 = time.monotonic()

    def step(name: str, t: float) -> float:
        now = time.monotonic()
        steps[name] = round(now - t, 1)
        return now

    users_ensure(plan, b, users)
    videos = videos_ensure(plan, b)
    t = step("users_and_videos", t0)
    before = display_counts()
    seq_before = change_seqs()
    connections.close_all()
    loaded = copy_relations(plan, users, a, b)
    t = step("copy", t)
    buckets = vbuckets_add(seq_before)
    t = step("vbuckets", t)
    sums = bucket_sums()
    wrong = [v for v in set(sums) | set(loaded.liked) | set(before)
             if sums.get(v, 0) != before.get(v, 0) + loaded.liked.get(v, 0)]
    displays = displays_write(sums)
    t = step("displays", t)
    recent = recent_rebuild()
    t = step("recent_likers", t)
    checkpoints_advance(loaded.heads)
    maintenance = vacuum_all()
    step("vacuum_analyze_checkpoint", t)
    seconds = round(time.monotonic() - t0, 1)
    log(f"grew {a:,} -> {b:,} relations in {seconds}s ({steps}); {len(wrong)} videos whose buckets do not add up")
    return {"from": a, "to": b, "seconds": seconds, "steps": steps, "relations": loaded.relations,
            "rows": loaded.rows, "vbuckets_upserted": buckets, "displays_written": displays,
            "recent_rows": recent, "videos": videos, "users": {"light": len(users.light), "core": len(users.core)},
            "maintenance": maintenance, "bucket_mismatches": len(wrong), "bucket_mismatch_sample": sorted(wrong)[:10],
            "hot_video_display": sums.get(HOT_VIDEO, 0)}
