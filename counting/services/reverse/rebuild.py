"""The reverse index's generations (REV-4): the bootstrap of generation 1, and the rebuild into a new
generation (a new R or hash contract) on the one generation lifecycle:

  SHADOW      G+1 created with its contract and placement; from its commit on the projector writes
              it too (tail capture);
  BACKFILLING replay the relation facts (LIKED rows at their state_changed_at, UNLIKED rows as
              tombstones), shard by shard in id chunks;
  CATCHING_UP the facts changed since the replay began;
  VERIFYING   sample the facts against G+1's state rows and sort entries;
  ACTIVE      CAS switch, G -> RETIRED. G's rows are never touched: its cursors answer 410 from now on.

A failure leaves G+1 FAILED and G ACTIVE (`likes_project.generations`).
"""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from counting import routing
from counting.models import LikeReverseProjection, LikeReverseSort, ReverseIndexGeneration
from counting.services.reverse.projector import Item, reverse_facts_apply
from likes_project.audit.services import Actor, system_actor
from likes_project.errors import InvalidInput
from likes_project.generations import (
    GenerationStatus,
    Lifecycle,
    RebuildFailed,
    RunReport,
    StepContext,
    StepResult,
    lifecycle_job_kind,
    rebuild_inline,
)
from relations import routing as relation_routing
from relations.events import LIKED, UNLIKED
from relations.models import LikeRelation

REBUILD_JOB = "reverse.rebuild"
REBUILD_PERMISSION = "counting.rebuild_reverse_index"
DEFAULT_CHUNK = 2000
ReverseRebuildFailed = RebuildFailed
SYSTEM = system_actor("reverse-index")


def reverse_index_bootstrap() -> ReverseIndexGeneration:
    """Generation 1, ACTIVE (sha256-be64, seed "likes-reverse-v1", decimal-ascii-v1, R = 8, shards
    round-robin over the count partitions) when no generation exists yet.

    Transaction: one durable transaction on `default`. Idempotency: an existing generation is kept."""
    existing = ReverseIndexGeneration.objects.filter(status=GenerationStatus.ACTIVE).first()
    if existing is not None:
        return existing
    latest = ReverseIndexGeneration.objects.order_by("-generation").first()
    if latest is not None:
        return latest  # generations exist but none is ACTIVE: an operator decides, not a bootstrap
    shards = routing.REVERSE_V1_SHARDS
    try:
        with transaction.atomic(using="default", durable=True):
            ReverseIndexGeneration.objects.create(
                generation=1, status=GenerationStatus.ACTIVE, hash_algorithm=routing.HASH_SHA256_BE64,
                hash_seed=routing.REVERSE_V1_SEED, user_id_encoding=routing.ENCODING_DECIMAL_ASCII, shards=shards,
                placement=routing.round_robin_placement(shards), activated_at=timezone.now(),
            )
    except IntegrityError:
        pass  # a concurrent bootstrap won
    return ReverseIndexGeneration.objects.get(generation=1)


def _facts_into(gen: routing.ReverseGeneration, facts) -> int:
    """Route (user, video, state, version, state_changed_at) facts to the generation's partitions."""
    by_alias: dict[str, list[Item]] = defaultdict(list)
    for user_id, video_id, state, version, changed_at in facts:
        shard = gen.shard_of(user_id)
        by_alias[gen.placement[shard]].append(Item(gen.generation, shard, video_id, user_id, version, state,
                                                   changed_at))
    for alias, items in sorted(by_alias.items()):
        reverse_facts_apply(alias=alias, items=items)
    return sum(len(v) for v in by_alias.values())


def _replay(ctx: StepContext, cursor: dict | None, *, since: dt.datetime | None = None) -> StepResult:
    """One id chunk of relation facts (shard by shard) into the generation; `since` limits it to the
    facts changed at or after that time (the catch-up)."""
    gen = routing.reverse_generation_load(ctx.row.generation)
    aliases = relation_routing.all_aliases()
    chunk = int(ctx.params.get("chunk") or DEFAULT_CHUNK)
    cursor = cursor or {"alias": 0, "last_id": 0}
    while cursor["alias"] < len(aliases):
        alias = aliases[cursor["alias"]]
        qs = LikeRelation.objects.using(alias).filter(id__gt=cursor["last_id"])
        if since is not None:
            qs = qs.filter(updated_at__gte=since)
        rows = list(qs.order_by("id").values_list("id", "user_id", "video_id", "state", "relation_version",
                                                  "state_changed_at")[:chunk])
        if not rows:
            cursor = {"alias": cursor["alias"] + 1, "last_id": 0}
            continue
        n = _facts_into(gen, [r[1:] for r in rows])
        if since is None:
            done = ctx.state.setdefault("replayed_by_alias", {}).get(alias, 0) + n
            ctx.state["replayed_by_alias"][alias] = done
            ctx.count("scanned", n)
            ctx.say(f"  {alias}: {done} relations replayed into generation {gen.generation}")
        else:
            ctx.count("caught_up", n)
        return StepResult({"alias": cursor["alias"], "last_id": rows[-1][0]}, done=n)
    return StepResult(None)


def reverse_index_verify(*, generation: int, sample: int | None = None, changed_before: dt.datetime) -> tuple[int, int]:
    """Sample relation facts on every shard and check the generation holds them: the state row at
    least at the fact's version and, at the same version, the same state, liked_at = state_changed_at
    and a sort entry exactly at it. Facts changed after `changed_before` may legitimately be ahead of
    the index (the projector catches them up) and are not counted as mismatches."""
    gen = routing.reverse_generation_load(generation)
    aliases = relation_routing.all_aliases()
    per_shard = max(1, (sample or settings.RELATION_CACHE_SAMPLE_SIZE) // max(1, len(aliases)))
    sampled = mismatches = 0
    for alias in aliases:
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


class ReverseIndexLifecycle(Lifecycle):
    kind, model, target_type = "reverse", ReverseIndexGeneration, "reverse_generation"
    size_params = ("chunk", "sample")

    def create_fields(self, *, params, previous, state):
        shards = params.get("shards")
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise InvalidInput("--shards must be at least 1", code="invalid_shards")
        state["replay_started"] = timezone.now().isoformat()
        return {
            "hash_algorithm": previous.hash_algorithm if previous else routing.HASH_SHA256_BE64,
            "hash_seed": previous.hash_seed if previous else routing.REVERSE_V1_SEED,
            "user_id_encoding": previous.user_id_encoding if previous else routing.ENCODING_DECIMAL_ASCII,
            "shards": shards, "placement": routing.round_robin_placement(shards),
        }

    def describe(self, row):
        return f"R={row.shards}, placement {row.placement}"

    def backfill(self, ctx, cursor):
        return _replay(ctx, cursor)

    def catch_up(self, ctx, cursor):
        if cursor is None:
            ctx.state["catchup_started"] = timezone.now().isoformat()
        result = _replay(ctx, cursor, since=parse_datetime(ctx.state["replay_started"]))
        if result.cursor is None:
            ctx.say(f"  caught up {ctx.stats.get('caught_up', 0)} relations changed since the replay began")
        return result

    def verify(self, ctx):
        sampled, mismatches = reverse_index_verify(generation=ctx.row.generation, sample=ctx.params.get("sample"),
                                                   changed_before=parse_datetime(ctx.state["catchup_started"]))
        ctx.stats.update(sampled=sampled, mismatches=mismatches)
        ctx.say(f"  sample check: {sampled} relations, {mismatches} mismatches")
        if mismatches:
            raise RebuildFailed(f"{mismatches} of {sampled} sampled relations disagree")


LIFECYCLE = ReverseIndexLifecycle()
JOB_KIND = lifecycle_job_kind(LIFECYCLE, job_kind=REBUILD_JOB, permission=REBUILD_PERMISSION)


@dataclass(kw_only=True)
class ReverseRebuildReport(RunReport):
    shards: int
    scanned: int = 0
    caught_up: int = 0


def reverse_index_rebuild(*, shards: int, actor: Actor | None = None, progress=None, chunk: int | None = None,
                          sample: int | None = None, fail_after_backfill: bool = False) -> ReverseRebuildReport:
    """Rebuild the reverse index into a generation with R = `shards` in this process (the command's
    foreground; the admin starts the same job on the workers). `fail_after_backfill` is a test hook."""
    params: dict = {"shards": shards}
    if chunk:
        params["chunk"] = chunk
    if sample:
        params["sample"] = sample
    if fail_after_backfill:
        params["fail_after"] = "backfill"
    row = rebuild_inline(REBUILD_JOB, actor=actor or SYSTEM, params=params, say=progress)
    return ReverseRebuildReport.of(row)


def reverse_generation_shadow_create(*, shards: int, actor: Actor | None = None) -> ReverseIndexGeneration:
    """Start a rebuild into a generation with R = `shards` without running it here: the SHADOW
    generation exists (the projector writes it from now on) and its job waits for a worker. Raises
    RebuildRunning while another rebuild is alive."""
    from likes_project.opsjobs.services import job_start

    job = job_start(kind=REBUILD_JOB, actor=actor or SYSTEM, params={"shards": shards})
    return ReverseIndexGeneration.objects.get(pk=job.state["generation"])
