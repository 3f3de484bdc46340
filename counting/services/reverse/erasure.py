"""A deleted account leaves the projections keyed by user (issue 31 §4, PRIV-4): the eraser `projections`, which
the account deletion runs after its own step on the relation shards (`relations.services.erasure`).

That step deletes the account's UNLIKED tombstones from the facts (their versions kept in the slot's floor) once
every internal consumer has applied the withdrawal. The projections then hold, for each of those relations, an
UNLIKED row under the real user id: the count projection's per-relation version (LIKE_COUNT_PROJECTION) and the
reverse index's state row (LIKE_REVERSE_PROJECTION, in every generation). They are deleted here, not moved to a
pseudonym, for the reasons the relation step gives: an UNLIKED row counts nothing (no bucket changes, REC-1 holds),
has no sort entry nor recent-likers row (an UNLIKED reverse row reads as no row), and a fact deleted with its slot's
floor raised agrees with no projection row as with an UNLIKED one (REC-4, `swept_tombstones`). Only the relations
whose fact is gone are touched (`relations_without_fact`): a relation still LIKED (a refused withdrawal) keeps its
rows, as its fact does, and the eraser run on its own, before the relation step, changes nothing reconciliation
would see.

Order and cost: the reverse index has no index by user (its key is generation, video, user), so the videos come
from the count projection's rows of the user (indexed by generation and user), and the reverse rows go first: a
crash in between finds the same videos again. The reverse rows of a generation live on the partition its placement
gives the user's reverse shard. A count projection row in a bucket an unfinished bucket migration moves is left
for a later run (reported as `deferred`): a delete is not in the change log the migration copies by, so the
target would keep the row. What stays possible, as for any swept tombstone: an event of the user delivered again
later (a redriven dead letter, a restore's replay) is projected under the real id with nothing to lose against.
"""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings
from django.db import connections, transaction

from counting import routing
from counting.models import (
    BucketMigration,
    CountProjectionGeneration,
    LikeCountProjection,
    LikeReverseProjection,
    ReverseIndexGeneration,
)
from likes_project.ledgers.model import LedgerState
from relations.services.erasure import relations_without_fact

PROJ, REV = LikeCountProjection._meta.db_table, LikeReverseProjection._meta.db_table
MIGRATION_IN_FLIGHT = (LedgerState.PREPARE, LedgerState.COPYING, LedgerState.CATCHING_UP, LedgerState.CUTOVER,
                       LedgerState.VERIFY)


def _migrating_buckets() -> dict[int, set[int]]:
    """generation -> the virtual buckets an unfinished migration is moving."""
    out: dict[int, set[int]] = defaultdict(set)
    for generation, buckets in BucketMigration.objects.filter(state__in=MIGRATION_IN_FLIGHT).values_list(
            "generation", "buckets"):
        out[generation].update(buckets)
    return out


def projections_erase_user(user_id: int) -> dict:
    """Delete a deleted account's UNLIKED rows from the count projection and the reverse index, every generation
    (the eraser `projections`; run by the account deletion once its events were consumed). Returns
    {"reverse_rows", "count_rows", "deferred", "kept_liked"}.

    Transaction: one durable transaction per count partition for each of the two tables.
    Idempotency: only the user's UNLIKED rows of relations without a fact are deleted; a second run finds none (but
    the deferred ones)."""
    user_id = int(user_id)
    generations = list(CountProjectionGeneration.objects.values_list("generation", flat=True))
    rows: dict[str, list[tuple[int, str, int, str]]] = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"SELECT generation, video_id, virtual_bucket, projected_state FROM {PROJ} "
                           "WHERE generation = ANY(%s) AND user_id = %s", [generations, user_id])
            rows[alias] = cursor.fetchall()
    # Only relations whose fact is gone: a row the facts still hold is what reconciliation compares it with.
    videos = sorted(relations_without_fact(user_id=user_id, video_ids=sorted(
        {video for found in rows.values() for _g, video, _vb, _s in found})))
    report = {"reverse_rows": 0, "count_rows": 0, "deferred": 0,
              "kept_liked": sum(1 for found in rows.values() for *_k, state in found if state == "LIKED")}
    if videos:
        by_alias: dict[str, list[int]] = defaultdict(list)
        for row in ReverseIndexGeneration.objects.order_by("generation"):  # every generation that may hold rows
            gen = routing.reverse_from_row(row)
            by_alias[gen.alias_of(user_id)].append(gen.generation)
        for alias, gens in sorted(by_alias.items()):
            with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
                cursor.execute(f"DELETE FROM {REV} WHERE generation = ANY(%s) AND video_id = ANY(%s) AND user_id = %s "
                               "AND state = 'UNLIKED'", [gens, videos, user_id])
                report["reverse_rows"] += cursor.rowcount
    moving = _migrating_buckets()
    gone = set(videos)
    for alias, found in rows.items():
        unliked = [(g, video, vb) for g, video, vb, state in found if state == "UNLIKED" and video in gone]
        doomed = [(g, video) for g, video, vb in unliked if vb not in moving.get(g, ())]
        report["deferred"] += len(unliked) - len(doomed)
        if not doomed:
            continue
        with transaction.atomic(using=alias, durable=True), connections[alias].cursor() as cursor:
            cursor.execute(f"DELETE FROM {PROJ} WHERE user_id = %s AND projected_state = 'UNLIKED' AND "
                           "(generation, video_id) IN (SELECT * FROM unnest(%s::int[], %s::text[]))",
                           [user_id, [g for g, _v in doomed], [v for _g, v in doomed]])
            report["count_rows"] += cursor.rowcount
    return report
