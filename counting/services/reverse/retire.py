"""Retirement of deleted videos' reverse rows (state/tombstone, sort, recent; every generation)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.db import connections

from counting.models import LikeReverseProjection, LikeReverseRecent, LikeReverseSort, ReverseIndexGeneration
from counting.services.group_kit import table
from relations import selectors as video_selectors

RETIRE_VIDEO_BATCH = 500


@dataclass
class ReverseRetireReport:
    videos: int = 0  # deleted videos considered
    deleted: dict[str, dict[str, int]] = field(default_factory=dict)  # alias -> table -> rows deleted
    more: bool = False  # a chunk was full: rows may remain, run again


def reverse_index_retire_deleted(*, video_ids: list[str] | None = None, limit: int = 1000) -> ReverseRetireReport:
    """Delete the reverse rows of these deleted videos on every count partition, at most `limit` rows
    per table per partition per batch of videos. The beat job passes its bounded batch of videos not
    retired yet (`counting.services.retire`); without `video_ids`, every video whose snapshot says
    `deleted` (an operator's full sweep). A job, never a request.

    Transaction: each chunk is one short autocommit statement per partition and table; the recent and sort
    rows go first, so a partly retired video never serves a liker whose state row is gone. Idempotency:
    deleting what is already gone deletes nothing; run again while `more` is true. The count vbuckets are
    left alone (the count endpoints already answer 404 for a deleted video). A late event for a deleted
    video may re-create rows (the projector records versions whatever the status); the caller keeps the
    video pending until the projectors passed its fence, and nothing serves such rows meanwhile (the
    likers endpoints 404 for a deleted video)."""
    report = ReverseRetireReport()
    limit = max(1, int(limit))
    ids = sorted(video_selectors.deleted_video_ids() if video_ids is None else video_ids)
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
                            f"DELETE FROM {table(model)} WHERE id IN (SELECT id FROM {table(model)} "
                            "WHERE generation = %s AND video_id = ANY(%s) LIMIT %s)",
                            [g, batch, limit],
                        )
                        n = cursor.rowcount
                    counts[name] += n
                    report.more = report.more or n >= limit
    return report
