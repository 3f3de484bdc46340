"""The reverse "who liked" index (REV-1 … REV-4, issue 5 §1): the generation bootstrap, the reverse
projector on the shared consumer framework, and the shadow-generation rebuild.

For a batch of events read from one stream partition:
  every live generation (ACTIVE, and SHADOW during a rebuild) -> reverse shard of the user -> the count
  partition `placement[shard]` -> per partition ONE local transaction that checks the consumer fence,
  skips receipted (generation, position)s, folds the versioned REV-2 rule over the locked state rows,
  deletes the exact old sort entries, inserts the new ones, updates the state/tombstone rows and writes
  the receipts. The framework advances the checkpoint only over entries whose every group committed.

`liked_at` is always the relation transaction's `stateChangedAt` (for a rebuild: the fact's
`state_changed_at`), never a publish, delivery or consume time. Serving filters (deleted videos,
privacy, bans, blocks) are applied at read time by the likers API, not here (REV-6): the projection
keeps recording versions and tombstones whatever the video's status.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import random
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from counting.services.projection import TOPIC, _check_consumer_fence, validate_event
from likes_project import metrics
from likes_project.eventlog.consumer import ApplyResult, Retryable
from likes_project.eventlog.streams import StreamEntry
from relations import reverse_routing, routing
from relations.models import (
    LikeRelation,
    LikeReverseProjection,
    LikeReverseRecent,
    LikeReverseSort,
    RelationState,
    ReverseEventReceipt,
    ReverseGenerationStatus,
    ReverseIndexGeneration,
    VideoSnapshot,
    VideoStatus,
)

logger = logging.getLogger(__name__)

LIKED, UNLIKED = RelationState.LIKED.value, RelationState.UNLIKED.value
CONSUMER = "reverse"
RECENT_KEEP = 20  # K: rows of the recent-likers summary kept per (generation, video) on each partition


def _t(model) -> str:
    return model._meta.db_table


# --- generations -------------------------------------------------------------------------------


def reverse_index_bootstrap() -> ReverseIndexGeneration:
    """Generation 1, ACTIVE (sha256-be64, seed "likes-reverse-v1", decimal-ascii-v1, R = 8, shards
    round-robin over the count partitions) when no generation exists yet.

    Transaction: one durable transaction on `default`. Idempotency: an existing generation is kept."""
    existing = ReverseIndexGeneration.objects.filter(status=ReverseGenerationStatus.ACTIVE).first()
    if existing is not None:
        return existing
    latest = ReverseIndexGeneration.objects.order_by("-generation").first()
    if latest is not None:
        return latest  # generations exist but none is ACTIVE: an operator decides, not a bootstrap
    shards = reverse_routing.REVERSE_V1_SHARDS
    try:
        with transaction.atomic(using="default", durable=True):
            ReverseIndexGeneration.objects.create(
                generation=1, status=ReverseGenerationStatus.ACTIVE,
                hash_algorithm=reverse_routing.HASH_SHA256_BE64, hash_seed=reverse_routing.REVERSE_V1_SEED,
                user_id_encoding=reverse_routing.ENCODING_DECIMAL_ASCII, shards=shards,
                placement=reverse_routing.round_robin_placement(shards), activated_at=timezone.now(),
            )
    except IntegrityError:
        pass  # a concurrent bootstrap won
    return ReverseIndexGeneration.objects.get(generation=1)


# --- the REV-2 fold, shared by the projector and the rebuild ------------------------------------


@dataclass(frozen=True)
class Item:
    """One relation change aimed at one generation's rows: an event (ref = stream entry id) or, in a
    rebuild, a relation fact (ref = "")."""

    generation: int
    shard: int
    video_id: str
    user_id: int
    version: int
    state: str
    changed_at: dt.datetime
    ref: str = ""
    event_id: str = ""

    @property
    def key(self) -> tuple[int, str, int]:
        return (self.generation, self.video_id, self.user_id)


@dataclass
class Row:
    state: str
    version: int
    liked_at: dt.datetime | None
    shard: int


@dataclass
class GroupOutcome:
    verdicts: dict[tuple[int, str], str] = field(default_factory=dict)  # (generation, ref) -> verdict
    failed: Exception | None = None


def fold_items(items: list[Item], before: dict[tuple[int, str, int], Row]
               ) -> tuple[dict[tuple[int, str, int], Row], list[tuple[Item, str]]]:
    """REV-2 in stream order, in memory: a version not above the current one changes nothing; a higher
    UNLIKED makes a tombstone (no sort entry); a higher LIKED (v13 across a missing v12 included) puts
    the entry at that version's own stateChangedAt. Unknown relations start as UNLIKED v0."""
    state = {k: Row(r.state, r.version, r.liked_at, r.shard) for k, r in before.items()}
    verdicts = []
    for it in items:
        cur = state.get(it.key) or Row(UNLIKED, 0, None, it.shard)
        if it.version <= cur.version:
            verdicts.append((it, "duplicate" if it.version == cur.version else "stale"))
            continue
        state[it.key] = Row(it.state, it.version, it.changed_at if it.state == LIKED else None, it.shard)
        verdicts.append((it, "applied"))
    return state, verdicts


def _ensure_state_rows(alias: str, items: list[Item], now) -> None:
    """Create missing state rows as UNLIKED v0 placeholders (equivalent to "never seen") in their own
    committed statement, so the group transaction only locks existing rows, in key order: the
    projector and a rebuild's backfill of the same SHADOW rows then never race on an insert."""
    rows = sorted({(it.generation, it.video_id, it.user_id, it.shard) for it in items})
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_t(LikeReverseProjection)} (generation, video_id, user_id, relation_version, state, "
            "liked_at, reverse_shard, updated_at) SELECT g, v, u, 0, 'UNLIKED', NULL, s, %s "
            "FROM unnest(%s::int[], %s::text[], %s::bigint[], %s::int[]) AS t(g, v, u, s) ORDER BY g, v, u "
            "ON CONFLICT (generation, video_id, user_id) DO NOTHING",
            [now, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]],
        )


def _fold_and_write(cursor, items: list[Item], now) -> list[tuple[Item, str]]:
    """Inside the caller's transaction: lock the state rows, fold, then move the sort entries (exact
    delete with the stored liked_at, then insert) and update the state/tombstone rows."""
    _lock_videos(cursor, {(it.generation, it.video_id) for it in items})
    keys = sorted({it.key for it in items})
    cursor.execute(
        f"SELECT generation, video_id, user_id, state, relation_version, liked_at, reverse_shard "
        f"FROM {_t(LikeReverseProjection)} WHERE (generation, video_id, user_id) IN "
        "(SELECT * FROM unnest(%s::int[], %s::text[], %s::bigint[])) ORDER BY generation, video_id, user_id "
        "FOR UPDATE",
        [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]],
    )
    before = {(g, v, u): Row(s, ver, at, sh) for g, v, u, s, ver, at, sh in cursor.fetchall()}
    after, verdicts = fold_items(items, before)
    deletes, inserts, updates = [], [], []
    for key in sorted(after):
        old, new = before.get(key), after[key]
        if old is not None and (old.state, old.version) == (new.state, new.version):
            continue
        g, video_id, user_id = key
        had = old is not None and old.state == LIKED
        has = new.state == LIKED
        if had and (not has or old.liked_at != new.liked_at):
            deletes.append((g, video_id, old.shard, old.liked_at, user_id))
        if has and (not had or old.liked_at != new.liked_at):
            inserts.append((g, video_id, new.shard, new.liked_at, user_id))
        updates.append((new.state, new.version, new.liked_at, now, g, video_id, user_id))
    if deletes:
        cursor.executemany(
            f"DELETE FROM {_t(LikeReverseSort)} WHERE generation = %s AND video_id = %s AND reverse_shard = %s "
            "AND liked_at = %s AND user_id = %s",
            deletes,
        )
    if inserts:
        cursor.executemany(
            f"INSERT INTO {_t(LikeReverseSort)} (generation, video_id, reverse_shard, liked_at, user_id) "
            "VALUES (%s, %s, %s, %s, %s)",
            inserts,
        )
    if updates:
        cursor.executemany(
            f"UPDATE {_t(LikeReverseProjection)} SET state = %s, relation_version = %s, liked_at = %s, "
            "updated_at = %s WHERE generation = %s AND video_id = %s AND user_id = %s",
            updates,
        )
    _recent_write(cursor, deletes, inserts)
    return verdicts


def _recent_lock_key(generation: int, video_id: str) -> int:
    digest = hashlib.sha256(f"likes-reverse-recent:{generation}:{video_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_videos(cursor, videos: set[tuple[int, str]]) -> None:
    """Transaction-scoped advisory locks on the (generation, video)s of a group, in key order, taken
    before any row lock: two groups touching the same video's recent summary on one partition are
    serialised, so a refill can never re-insert a liker another group is removing."""
    keys = sorted({_recent_lock_key(g, v) for g, v in videos})
    if keys:
        cursor.execute("SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS t(k)", [keys])


def _recent_write(cursor, deletes: list[tuple], inserts: list[tuple]) -> None:
    """Keep the recent-likers summary in step with the sort entries just written (same transaction):
    remove the rows of entries that went away, add the new entries, refill from this partition's sort
    entries where a removed row was among the kept ones, then prune every touched video to the newest
    RECENT_KEEP rows. Every read is bounded (K rows per shard of this partition)."""
    table = _t(LikeReverseRecent)
    touched = {(g, v) for g, v, _s, _t_, _u in deletes} | {(g, v) for g, v, _s, _t_, _u in inserts}
    if not touched:
        return
    refill: set[tuple[int, str]] = set()
    for g, video_id, _shard, _at, user_id in deletes:
        cursor.execute(f"DELETE FROM {table} WHERE generation = %s AND video_id = %s AND user_id = %s",
                       [g, video_id, user_id])
        if cursor.rowcount:
            refill.add((g, video_id))
    if inserts:
        cursor.executemany(
            f"INSERT INTO {table} (generation, video_id, user_id, liked_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (generation, video_id, user_id) DO UPDATE SET liked_at = EXCLUDED.liked_at",
            [(g, video_id, user_id, at) for g, video_id, _s, at, user_id in inserts],
        )
    alias = cursor.db.alias
    for g, video_id in sorted(refill):
        gen = reverse_routing.load_generation(g)
        local = [s for s in range(gen.shards) if gen.placement[s] == alias]
        cursor.execute(
            f"INSERT INTO {table} (generation, video_id, user_id, liked_at) "
            "SELECT %s, %s, e.user_id, e.liked_at FROM unnest(%s::int[]) AS f(s) CROSS JOIN LATERAL "
            f"(SELECT liked_at, user_id FROM {_t(LikeReverseSort)} WHERE generation = %s AND video_id = %s "
            "AND reverse_shard = f.s ORDER BY liked_at DESC, user_id DESC LIMIT %s) e "
            "ON CONFLICT (generation, video_id, user_id) DO NOTHING",
            [g, video_id, local, g, video_id, RECENT_KEEP],
        )
    for g, video_id in sorted(touched):
        cursor.execute(
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE generation = %s AND video_id = %s "
            "ORDER BY liked_at DESC, user_id DESC OFFSET %s)",
            [g, video_id, RECENT_KEEP],
        )


def reverse_facts_apply(*, alias: str, items: list[Item]) -> list[tuple[Item, str]]:
    """Apply relation facts (a rebuild's backfill) to the rows on count partition `alias`.

    Transaction: one durable transaction on `alias`. Idempotency: versions decide; re-applying a fact
    is a duplicate."""
    if not items:
        return []
    now = timezone.now()
    _ensure_state_rows(alias, items, now)
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        return _fold_and_write(cursor, items, now)


def _apply_group(alias: str, items: list[Item], *, consumer: str, partition: int, token: int) -> GroupOutcome:
    """One local transaction on count partition `alias`: fence, receipts, fold, sort entries."""
    out = GroupOutcome()
    now = timezone.now()
    _ensure_state_rows(alias, items, now)
    with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
        _check_consumer_fence(cursor, consumer, partition, token)
        generations = sorted({it.generation for it in items})
        cursor.execute(
            f"SELECT generation, source_offset FROM {_t(ReverseEventReceipt)} WHERE generation = ANY(%s) "
            "AND source_topic = %s AND source_partition = %s AND source_offset = ANY(%s)",
            [generations, TOPIC, partition, sorted({it.ref for it in items})],
        )
        receipted = {(g, ref) for g, ref in cursor.fetchall()}
        fresh = []
        for it in items:
            if (it.generation, it.ref) in receipted:  # a replay after a crash past the commit
                out.verdicts[(it.generation, it.ref)] = "duplicate"
            else:
                fresh.append(it)
        if not fresh:
            return out
        verdicts = _fold_and_write(cursor, fresh, now)
        cursor.executemany(
            f"INSERT INTO {_t(ReverseEventReceipt)} (generation, source_topic, source_partition, source_offset, "
            "event_id, outcome, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (generation, source_topic, source_partition, source_offset) DO NOTHING",
            [(it.generation, TOPIC, partition, it.ref, it.event_id[:64], verdict, now) for it, verdict in verdicts],
        )
        for it, verdict in verdicts:
            out.verdicts[(it.generation, it.ref)] = verdict
    return out


_RANK = {"applied": 2, "duplicate": 1, "stale": 0}


class ReverseIndexProjector:
    """Consumer `reverse` on the shared framework (`relations.project_reverse` runs it per stream
    partition). Writes every live generation: ACTIVE, and SHADOW from its creation on."""

    name = CONSUMER

    def validate(self, entry: StreamEntry) -> None:
        validate_event(entry.event)

    def apply(self, entries: list[StreamEntry], *, consumer: str, partition: int, token: int) -> ApplyResult:
        result = ApplyResult()
        try:
            generations = reverse_routing.live_generations()
        except (DatabaseError, reverse_routing.ReverseContractInvalid) as exc:
            result.failed = {e.entry_id: Retryable(str(exc)) for e in entries}
            return result
        if not generations:
            error = Retryable("no live reverse index generation")
            result.failed = {e.entry_id: error for e in entries}
            return result
        groups: dict[str, list[Item]] = defaultdict(list)
        for entry in entries:
            ev = entry.event
            changed_at = parse_datetime(ev["stateChangedAt"])
            for gen in generations:
                shard = gen.shard_of(ev["userId"])
                groups[gen.placement[shard]].append(Item(
                    gen.generation, shard, ev["videoId"], ev["userId"], ev["relationVersion"], ev["absoluteState"],
                    changed_at, entry.entry_id, str(ev["eventId"])))
        verdict: dict[str, str] = {}
        failed: dict[str, Exception] = {}
        for alias, items in sorted(groups.items()):
            try:
                out = _apply_group(alias, items, consumer=consumer, partition=partition, token=token)
            except (Retryable, DatabaseError) as exc:
                logger.warning("reverse group on %s failed (%s); it will be replayed", alias, exc.__class__.__name__)
                for it in items:
                    failed[it.ref] = exc if isinstance(exc, Retryable) else Retryable(str(exc))
                continue
            for (_g, ref), v in out.verdicts.items():
                if ref not in verdict or _RANK[v] > _RANK[verdict[ref]]:
                    verdict[ref] = v
        for entry in entries:
            if entry.entry_id in failed:
                result.failed[entry.entry_id] = failed[entry.entry_id]
                continue
            result.done.add(entry.entry_id)
            v = verdict.get(entry.entry_id, "duplicate")
            if v == "applied":
                result.applied += 1
            elif v == "duplicate":
                result.duplicates += 1
            else:
                result.stale += 1
        return result


# --- retirement of deleted videos (issue 5 §3) ----------------------------------------------------


@dataclass
class ReverseRetireReport:
    videos: int = 0  # deleted videos considered
    deleted: dict[str, dict[str, int]] = field(default_factory=dict)  # alias -> table -> rows deleted
    more: bool = False  # a chunk was full: rows may remain, run again


RETIRE_VIDEO_BATCH = 500


def reverse_index_retire_deleted(*, limit: int = 1000) -> ReverseRetireReport:
    """Delete the reverse rows (state/tombstone, sort, recent; every generation) of videos whose
    VideoSnapshot status is `deleted`, on every count partition, at most `limit` rows per table per
    partition per batch of deleted videos. A job, never a request (issue 5 §3).

    Transaction: each chunk is one short autocommit statement per partition and table; the recent and sort
    rows go first, so a partly retired video never serves a liker whose state row is gone. Idempotency:
    deleting what is already gone deletes nothing; run again while `more` is true. The count vbuckets are
    left alone (the count endpoints already answer 404 for a deleted video). A late event for a deleted
    video may re-create rows (the projector records versions whatever the status); the next run removes
    them, and nothing serves them meanwhile (the likers endpoints 404 for a deleted video)."""
    report = ReverseRetireReport()
    limit = max(1, int(limit))
    ids = list(VideoSnapshot.objects.filter(status=VideoStatus.DELETED).order_by("video_id")
               .values_list("video_id", flat=True))
    report.videos = len(ids)
    tables = [("recent", LikeReverseRecent), ("sort", LikeReverseSort), ("state", LikeReverseProjection)]
    generations = list(ReverseIndexGeneration.objects.order_by("generation").values_list("generation", flat=True))
    for alias in settings.COUNT_PARTITION_ALIASES:
        counts = report.deleted.setdefault(alias, {name: 0 for name, _m in tables})
        for start in range(0, len(ids), RETIRE_VIDEO_BATCH):
            batch = ids[start:start + RETIRE_VIDEO_BATCH]
            for g in generations:
                for name, model in tables:
                    with connections[alias].cursor() as cursor:
                        cursor.execute(  # (generation, video_id, ...) unique indexes bound each chunk
                            f"DELETE FROM {_t(model)} WHERE id IN (SELECT id FROM {_t(model)} WHERE generation = %s "
                            "AND video_id = ANY(%s) LIMIT %s)",
                            [g, batch, limit],
                        )
                        n = cursor.rowcount
                    counts[name] += n
                    report.more = report.more or n >= limit
    return report


# --- shadow-generation rebuild (REV-4) -----------------------------------------------------------


class ReverseRebuildFailed(Exception):
    pass


@dataclass
class ReverseRebuildReport:
    generation: int
    previous: int | None
    shards: int
    status: str
    scanned: int = 0
    caught_up: int = 0
    sampled: int = 0
    mismatches: int = 0


def reverse_generation_shadow_create(*, shards: int) -> ReverseIndexGeneration:
    """Create generation G+1 as SHADOW with R = `shards` (the same hash contract, shards round-robin
    over the count partitions). From this commit on the projector writes it too (tail capture).

    Transaction: one durable transaction on `default`. Idempotency: none; a second SHADOW is refused."""
    if shards < 1:
        raise ReverseRebuildFailed("--shards must be at least 1")
    with transaction.atomic(using="default", durable=True):
        top = ReverseIndexGeneration.objects.select_for_update().order_by("-generation").first()
        if ReverseIndexGeneration.objects.filter(status=ReverseGenerationStatus.SHADOW).exists():
            raise ReverseRebuildFailed("a reverse index rebuild is already running (a SHADOW generation exists)")
        active = ReverseIndexGeneration.objects.filter(status=ReverseGenerationStatus.ACTIVE).first()
        return ReverseIndexGeneration.objects.create(
            generation=(top.generation + 1) if top else 1, status=ReverseGenerationStatus.SHADOW,
            hash_algorithm=active.hash_algorithm if active else reverse_routing.HASH_SHA256_BE64,
            hash_seed=active.hash_seed if active else reverse_routing.REVERSE_V1_SEED,
            user_id_encoding=active.user_id_encoding if active else reverse_routing.ENCODING_DECIMAL_ASCII,
            shards=shards, placement=reverse_routing.round_robin_placement(shards),
        )


def _facts_into(gen: reverse_routing.ReverseGeneration, facts) -> int:
    """Route (user, video, state, version, state_changed_at) facts to the generation's partitions."""
    by_alias: dict[str, list[Item]] = defaultdict(list)
    for user_id, video_id, state, version, changed_at in facts:
        shard = gen.shard_of(user_id)
        by_alias[gen.placement[shard]].append(Item(gen.generation, shard, video_id, user_id, version, state,
                                                   changed_at))
    for alias, items in sorted(by_alias.items()):
        reverse_facts_apply(alias=alias, items=items)
    return sum(len(v) for v in by_alias.values())


def reverse_index_backfill(*, generation: int, chunk: int = 2000, since: dt.datetime | None = None,
                           progress=None) -> int:
    """Replay the relation facts (LIKED rows with their state_changed_at as liked_at, UNLIKED rows as
    tombstones) into `generation`, shard by shard in id chunks; `since` limits it to facts changed at
    or after that time (the catch-up pass). Each chunk is one transaction per count partition."""
    say = progress or (lambda msg: None)
    gen = reverse_routing.load_generation(generation)
    total = 0
    for alias in routing.all_aliases():
        last_id, done = 0, 0
        qs = LikeRelation.objects.using(alias)
        if since is not None:
            qs = qs.filter(updated_at__gte=since)
        while True:
            rows = list(qs.filter(id__gt=last_id).order_by("id").values_list(
                "id", "user_id", "video_id", "state", "relation_version", "state_changed_at")[:chunk])
            if not rows:
                break
            last_id = rows[-1][0]
            done += _facts_into(gen, [r[1:] for r in rows])
            if since is None:
                say(f"  {alias}: {done} relations replayed into generation {generation}")
        total += done
    return total


def reverse_index_verify(*, generation: int, sample: int | None = None, changed_before: dt.datetime) -> tuple[int, int]:
    """Sample relation facts on every shard and check the generation holds them: the state row at
    least at the fact's version and, at the same version, the same state, liked_at = state_changed_at
    and a sort entry exactly at it. Facts changed after `changed_before` may legitimately be ahead of
    the index (the projector catches them up) and are not counted as mismatches."""
    gen = reverse_routing.load_generation(generation)
    per_shard = max(1, (sample or settings.RELATION_CACHE_SAMPLE_SIZE) // max(1, len(routing.all_aliases())))
    sampled = mismatches = 0
    for alias in routing.all_aliases():
        ids = list(LikeRelation.objects.using(alias).values_list("id", flat=True))
        for pk in sorted(random.sample(ids, min(per_shard, len(ids)))):
            user_id, video_id, state, version, changed_at, updated_at = LikeRelation.objects.using(alias).values_list(
                "user_id", "video_id", "state", "relation_version", "state_changed_at", "updated_at").get(pk=pk)
            sampled += 1
            target = gen.alias_of(user_id)
            row = LikeReverseProjection.objects.using(target).filter(
                generation=generation, video_id=video_id, user_id=user_id).first()
            if row is None or row.relation_version < version:
                mismatches += updated_at < changed_before
                continue
            if row.relation_version > version:
                continue  # the fact moved on since we read it
            entry = LikeReverseSort.objects.using(target).filter(
                generation=generation, video_id=video_id, user_id=user_id).values_list(
                "reverse_shard", "liked_at").first()
            if state == LIKED:
                ok = row.state == LIKED and row.liked_at == changed_at and entry == (gen.shard_of(user_id), changed_at)
            else:
                ok = row.state == UNLIKED and row.liked_at is None and entry is None
            mismatches += not ok
    return sampled, mismatches


def reverse_generation_activate(*, generation: int, previous: int | None) -> None:
    """The CAS switch: SHADOW `generation` -> ACTIVE and the ACTIVE `previous` -> RETIRED, in one
    durable transaction on `default`; refused if either moved since the rebuild began."""
    now = timezone.now()
    with transaction.atomic(using="default", durable=True):
        rows = {r.generation: r for r in ReverseIndexGeneration.objects.select_for_update()
                .filter(status__in=[ReverseGenerationStatus.ACTIVE, ReverseGenerationStatus.SHADOW])
                .order_by("generation")}
        active = next((g for g, r in rows.items() if r.status == ReverseGenerationStatus.ACTIVE), None)
        if active != previous or rows.get(generation) is None or rows[generation].status != "SHADOW":
            raise ReverseRebuildFailed(f"CAS refused: ACTIVE is {active}, expected {previous}; "
                                       f"generation {generation} must still be SHADOW")
        if previous is not None:
            ReverseIndexGeneration.objects.filter(generation=previous, status=ReverseGenerationStatus.ACTIVE).update(
                status=ReverseGenerationStatus.RETIRED, finished_at=now)
        ReverseIndexGeneration.objects.filter(generation=generation, status=ReverseGenerationStatus.SHADOW).update(
            status=ReverseGenerationStatus.ACTIVE, activated_at=now)


def reverse_index_rebuild(*, shards: int, progress=None, chunk: int = 2000, sample: int | None = None,
                          fail_after_backfill: bool = False) -> ReverseRebuildReport:
    """Shadow-generation rebuild (REV-4): 1 create G+1 SHADOW (the projector now writes it too),
    2 replay the relation facts into it with progress, 3 catch up facts changed since the replay began,
    4 sample-verify against the facts, 5 CAS-switch G+1 ACTIVE and G RETIRED. Any failure leaves G+1
    FAILED and G ACTIVE; G's rows are never touched (its cursors stay readable in the retention window).
    """
    say = progress or (lambda msg: None)
    previous = ReverseIndexGeneration.objects.filter(status=ReverseGenerationStatus.ACTIVE).values_list(
        "generation", flat=True).first()
    new = reverse_generation_shadow_create(shards=shards)
    g = new.generation
    report = ReverseRebuildReport(generation=g, previous=previous, shards=shards, status="SHADOW")
    say(f"generation {g}: SHADOW (R={shards}, placement {new.placement}); previous ACTIVE {previous}")
    try:
        started = timezone.now()
        report.scanned = reverse_index_backfill(generation=g, chunk=chunk, progress=say)
        if fail_after_backfill:
            raise ReverseRebuildFailed("injected failure after the backfill")
        catchup_started = timezone.now()
        report.caught_up = reverse_index_backfill(generation=g, chunk=chunk, since=started)
        say(f"  caught up {report.caught_up} relations changed since the replay began")
        report.sampled, report.mismatches = reverse_index_verify(generation=g, sample=sample,
                                                                 changed_before=catchup_started)
        say(f"  sample check: {report.sampled} relations, {report.mismatches} mismatches")
        if report.mismatches:
            raise ReverseRebuildFailed(f"{report.mismatches} of {report.sampled} sampled relations disagree")
        reverse_generation_activate(generation=g, previous=previous)
        report.status = "ACTIVE"
        say(f"generation {g}: ACTIVE; generation {previous}: RETIRED")
    except (ReverseRebuildFailed, DatabaseError, reverse_routing.ReverseContractInvalid) as exc:
        ReverseIndexGeneration.objects.filter(generation=g, status=ReverseGenerationStatus.SHADOW).update(
            status=ReverseGenerationStatus.FAILED, failure_reason=str(exc)[:512], finished_at=timezone.now())
        metrics.inc("likes_reverse_rebuild_failed_total")
        logger.error("ALERT reverse index rebuild of generation %s failed: %s", g, exc)
        report.status = "FAILED"
        say(f"generation {g}: FAILED ({exc}); generation {previous} stays ACTIVE")
    return report
