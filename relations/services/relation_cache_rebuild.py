"""The relation cache's whole-cache rebuild (RCACHE-7) on the one generation lifecycle:

  SHADOW      G+1 created with the baseline watermark W (per shard, the highest outbox id); from its
              commit on the projector writes G+1 too (tail capture) and readers bypass Redis;
  BACKFILLING scan the facts shard by shard in id chunks into G+1's durable floor, then Redis;
  CATCHING_UP replay the facts changed since the scan began;
  VERIFYING   sample the facts: G+1 must hold at least each one's version;
  ACTIVE      CAS switch (G -> RETIRED), mark G+1's content whole (sentinel).

A failure at any point leaves G+1 FAILED and reads back on G (`likes_project.generations`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from likes_project import generations
from likes_project.audit.services import Actor, system_actor
from likes_project.generations import Lifecycle, RebuildFailed, RunReport, StepContext, StepResult
from likes_project.waiting import wait_until
from relations import cache, routing
from relations.models import LikeRelation, OutboxEvent, RelationCacheGeneration
from relations.services.relation_cache import REBUILD_JOB, cache_generations_mirror, floors_advance, floors_to_redis

REBUILD_PERMISSION = "relations.rebuild_relation_cache"
DEFAULT_CHUNK = 2000


def _watermark() -> dict[str, int]:
    return {alias: OutboxEvent.objects.using(alias).aggregate(m=Max("id"))["m"] or 0
            for alias in routing.all_aliases()}


def _estimated_rows(aliases: list[str]) -> int:
    """The planner's row estimate of the relation tables (a full count would scan them)."""
    total = 0
    for alias in aliases:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = %s::regclass",
                           [LikeRelation._meta.db_table])
            row = cursor.fetchone()
            total += int(row[0]) if row else 0
    return total


def _scan(ctx: StepContext, cursor: dict | None, *, since=None) -> StepResult:
    """One chunk of relation facts (id order, shard by shard) into the generation's floor and Redis."""
    aliases = routing.all_aliases()
    cursor = cursor or {"alias": 0, "last_id": 0}
    chunk = int(ctx.params.get("chunk") or DEFAULT_CHUNK)
    total = None if since is not None or cursor != {"alias": 0, "last_id": 0} else _estimated_rows(aliases)
    while cursor["alias"] < len(aliases):
        alias = aliases[cursor["alias"]]
        qs = LikeRelation.objects.using(alias).filter(id__gt=cursor["last_id"])
        if since is not None:
            qs = qs.filter(updated_at__gte=since)
        rows = list(qs.order_by("id").values_list("id", "user_id", "video_id", "state", "relation_version")[:chunk])
        if not rows:
            cursor = {"alias": cursor["alias"] + 1, "last_id": 0}
            continue
        floors_to_redis(floors_advance(alias=alias, generations=[ctx.row.generation], facts=[r[1:] for r in rows]))
        done_here = ctx.state.setdefault("scanned_by_alias", {}).get(alias, 0) + len(rows)
        if since is None:
            ctx.state["scanned_by_alias"][alias] = done_here
            ctx.count("scanned", len(rows))
            ctx.say(f"  {alias}: {done_here} relations scanned")
        else:
            ctx.count("caught_up", len(rows))
        return StepResult({"alias": cursor["alias"], "last_id": rows[-1][0]}, done=len(rows), total=total)
    return StepResult(None, total=total)


_SAMPLE_SQL = (f"SELECT l.user_id, l.video_id, l.relation_version FROM unnest(%s::bigint[]) AS r(id) CROSS JOIN "
               f"LATERAL (SELECT user_id, video_id, relation_version FROM {LikeRelation._meta.db_table} "
               "WHERE id >= r.id ORDER BY id LIMIT 1) AS l")


def _sample_facts(alias: str, n: int) -> list[tuple[int, str, int]]:
    """About `n` relations of the shard, each the first at or after a random id: an index seek each (an OFFSET
    walked up to the whole table for every sample), at the cost of favouring rows after a gap of ids."""
    bounds = LikeRelation.objects.using(alias).aggregate(lo=Min("id"), hi=Max("id"))
    if bounds["lo"] is None:
        return []
    picks = sorted({random.randint(bounds["lo"], bounds["hi"]) for _ in range(n)})
    with connections[alias].cursor() as cursor:
        cursor.execute(_SAMPLE_SQL, [picks])
        return list(dict.fromkeys(cursor.fetchall()))


def _behind(generation: int, facts: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    """The facts whose version the generation's cache does not hold yet."""
    out = []
    for user_id, video_id, version in facts:
        cached = cache.relation_cache_read(generation, user_id, [video_id]).get(video_id)
        if cached is None or cached[1] < version:
            out.append((user_id, video_id, version))
    return out


def _sample_verify(generation: int) -> tuple[int, int]:
    """Sample relations from every shard: the generation's cache must hold at least the fact's version. A fact
    committed while the check ran is only as far as the projector got: one the cache lacks is looked at again
    until RELATION_CACHE_VERIFY_SETTLE_S passes (the tail capture brings it; a real gap never closes)."""
    per_shard = max(1, settings.RELATION_CACHE_SAMPLE_SIZE // max(1, len(routing.all_aliases())))
    facts = [f for alias in routing.all_aliases() for f in _sample_facts(alias, per_shard)]
    behind = _behind(generation, facts)

    def caught_up() -> bool:
        behind[:] = _behind(generation, behind)
        return not behind

    if behind:
        wait_until(caught_up, timeout_s=settings.RELATION_CACHE_VERIFY_SETTLE_S)
    return len(facts), len(behind)


class RelationCacheLifecycle(Lifecycle):
    kind, model, target_type = "relcache", RelationCacheGeneration, "cache_generation"
    size_params = ("chunk",)

    def create_fields(self, *, params, previous, state):
        state["scan_started"] = timezone.now().isoformat()
        return {"baseline_watermark": _watermark()}

    def describe(self, row):
        return f"baseline watermark {row.baseline_watermark}"

    def backfill(self, ctx, cursor):
        return _scan(ctx, cursor)

    def catch_up(self, ctx, cursor):
        result = _scan(ctx, cursor, since=parse_datetime(ctx.state["scan_started"]))
        if result.cursor is None:
            ctx.say(f"  caught up {ctx.stats.get('caught_up', 0)} relations changed after the scan started")
        return result

    def verify(self, ctx):
        sampled, mismatches = _sample_verify(ctx.row.generation)
        ctx.stats.update(sampled=sampled, mismatches=mismatches)
        ctx.say(f"  sample check: {sampled} relations, {mismatches} mismatches")
        if mismatches:
            raise RebuildFailed(f"{mismatches} of {sampled} sampled relations disagree")

    def after_change(self, row):
        cache_generations_mirror()

    def after_activate(self, row):
        cache_generations_mirror(sentinel_for=row.generation)


LIFECYCLE = RelationCacheLifecycle()
JOB_KIND = generations.lifecycle_job_kind(LIFECYCLE, job_kind=REBUILD_JOB, permission=REBUILD_PERMISSION)


@dataclass(kw_only=True)
class RebuildReport(RunReport):
    ALIASES = {**RunReport.ALIASES, "watermark": "baseline_watermark"}

    scanned: int = 0
    caught_up: int = 0
    watermark: dict = field(default_factory=dict)


def relation_cache_rebuild(*, actor: Actor | None = None, progress=None, chunk: int | None = None,
                           fail_after_scan: bool = False) -> RebuildReport:
    """Rebuild the whole relation cache into G+1 in this process (the command's foreground; the admin
    and the loss detector start the same job on the workers). `fail_after_scan` is a test hook: the run
    fails right after the baseline scan. Raises RebuildRunning while another rebuild runs."""
    params = {"chunk": chunk} if chunk else {}
    if fail_after_scan:
        params["fail_after"] = "backfill"
    row = generations.rebuild_inline(REBUILD_JOB, actor=actor or system_actor("relcache-rebuild"), params=params,
                                     say=progress)
    return RebuildReport.of(row)
