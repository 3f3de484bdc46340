"""Reads of the risk ledger's projection (never writes, never a transaction): which relations are hidden,
and how many LIKED count-projection rows that hides per video (the display snapshot's and the identity
check's `risk_hidden`, REC-2)."""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings
from django.db import connections

from counting import routing
from counting.models import LikeCountProjection, VideoDisplayCount
from counting.risk.models import RiskRelationState

OPERATOR_PERMISSION = "risk.request_riskdecision"  # who sees risk-hidden likers (PRIV-1)


def risk_hidden_users(*, video_id: str, user_ids) -> set[int]:
    """Which of these users' relations with the video are risk-hidden now."""
    ids = list(user_ids)
    if not ids:
        return set()
    return set(RiskRelationState.objects.filter(video_id=video_id, user_id__in=ids, hidden=True)
               .values_list("user_id", flat=True))


def risk_hidden_exists(*, video_id: str) -> bool:
    """Whether any relation with the video is risk-hidden now (one indexed probe)."""
    return RiskRelationState.objects.filter(video_id=video_id, hidden=True).exists()


def risk_hidden_sets(video_ids) -> dict[str, list[int]]:
    """video -> its risk-hidden users (bounded by the decisions' sizes)."""
    out: dict[str, list[int]] = defaultdict(list)
    for video_id, user_id in (RiskRelationState.objects.filter(video_id__in=list(video_ids), hidden=True)
                              .order_by("video_id", "user_id").values_list("video_id", "user_id")):
        out[video_id].append(user_id)
    return dict(out)


def hidden_keys(hidden: dict[str, list[int]]) -> tuple[list[int], list[str]]:
    """The (user, video) arrays of the hidden sets, for an `unnest(%s::bigint[], %s::text[])`."""
    pairs = [(u, v) for v, users in sorted(hidden.items()) for u in users]
    return [u for u, _v in pairs], [v for _u, v in pairs]


def _liked_rows_per_video(gen: routing.GenerationRoutes, condition: str, params: list) -> dict[str, int]:
    """video -> its LIKED projection rows that meet `condition` (SQL over user_id and video_id, with `params`), each
    counted on the partition its bucket is routed to."""
    out: dict[str, int] = defaultdict(int)
    for alias in settings.COUNT_PARTITION_ALIASES:
        buckets = gen.buckets_on(alias)
        if not buckets:
            continue
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"SELECT video_id, count(*) FROM {LikeCountProjection._meta.db_table} WHERE generation = %s "
                f"AND {condition} AND projected_state = 'LIKED' AND virtual_bucket + 0 = ANY(%s) GROUP BY video_id",
                [gen.generation, *params, buckets])
            for video_id, n in cursor.fetchall():
                out[video_id] += int(n)
    return dict(out)


def risk_hidden_counts(gen: routing.GenerationRoutes, video_ids) -> dict[str, int]:
    """video -> its LIKED projection rows whose relation is risk-hidden: what the display subtracts as
    `risk_hidden_count`."""
    hidden = risk_hidden_sets(video_ids)
    if not hidden:
        return {}
    return _liked_rows_per_video(gen, "(user_id, video_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))",
                                 list(hidden_keys(hidden)))


def policy_hidden_counts(gen: routing.GenerationRoutes, video_ids) -> dict[str, int]:
    """video -> its LIKED projection rows whose account is banned, down-weighted or frozen, the risk-hidden ones
    left out (subtracted once): what the display subtracts as `policy_hidden_count` (issue 32 §1)."""
    from relations.selectors.privacy import policy_hidden_user_ids

    users = policy_hidden_user_ids()
    if not users:
        return {}
    hidden_users, hidden_videos = hidden_keys(risk_hidden_sets(video_ids))
    return _liked_rows_per_video(
        gen, "video_id = ANY(%s) AND user_id = ANY(%s::bigint[]) "
             "AND (user_id, video_id) NOT IN (SELECT * FROM unnest(%s::bigint[], %s::text[]))",
        [list(video_ids), users, hidden_users, hidden_videos])


def display_adjustments(video_ids) -> dict[str, tuple[int, int]]:
    """video -> (risk_hidden_count, policy_hidden_count) of its display snapshot."""
    return {v: (r, p) for v, r, p in VideoDisplayCount.objects.filter(video_id__in=list(video_ids))
            .values_list("video_id", "risk_hidden_count", "policy_hidden_count")}
