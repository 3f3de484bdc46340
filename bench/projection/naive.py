"""The naive baseline of the count-pipeline benchmark: a single counter row per video, fed by the same
consumer framework as ours."""

from __future__ import annotations

from bench.dataset import consumer_reset, counter_rows
from bench.projection import LIKED, UNLIKED

NAIVE_CONSUMER = "naive-count"
NAIVE_COUNT_TABLE = "bench_naive_count"
NAIVE_PROJECTION_TABLE = "bench_naive_projection"


class NaiveCountProjector:
    """The naive consumer the issue compares against, run by the same `consume_partition` framework.

    Same versioned absolute-state rule as ours (unknown = UNLIKED v0; a version not above the stored
    one changes nothing), kept in its own small table keyed (user_id, video_id), but the count is ONE
    row per video: every event that flips a relation runs
    `UPDATE bench_naive_count SET like_count = like_count + delta WHERE video_id = %s` in the batch's
    transaction. The updates are sorted by video id (so two consumers never deadlock) and sent with
    executemany (one pipelined round trip, as ours does); the row lock is held until the commit, so on
    a hot video the consumers of all partitions queue on that one row. No receipts, fences or dirty
    marks: less work per event than ours."""

    name = NAIVE_CONSUMER

    def __init__(self, alias: str):
        self.alias = alias

    def validate(self, entry) -> None:
        from relations.events import validate_event

        validate_event(entry.event)

    def apply(self, entries, *, consumer: str, partition: int, token: int):
        from django.db import DatabaseError, connections, transaction

        from likes_project.eventlog.consumer import ApplyResult, Retryable

        result = ApplyResult()
        applied = duplicates = stale = 0
        try:
            with transaction.atomic(using=self.alias, durable=True), connections[self.alias].cursor() as cur:
                keys = sorted({(e.event["userId"], e.event["videoId"]) for e in entries})
                cur.execute(
                    f"SELECT user_id, video_id, state, version FROM {NAIVE_PROJECTION_TABLE} "
                    "WHERE (user_id, video_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[])) "
                    "ORDER BY user_id, video_id FOR UPDATE",
                    [[k[0] for k in keys], [k[1] for k in keys]],
                )
                state = {(u, v): (s, ver) for u, v, s, ver in cur.fetchall()}
                updates: list[tuple[int, str]] = []
                changed: dict[tuple[int, str], tuple[str, int]] = {}
                for e in entries:
                    ev = e.event
                    key = (ev["userId"], ev["videoId"])
                    cur_state, cur_version = state.get(key, (UNLIKED, 0))
                    if ev["relationVersion"] <= cur_version:
                        if ev["relationVersion"] == cur_version:
                            duplicates += 1
                        else:
                            stale += 1
                        continue
                    if ev["absoluteState"] != cur_state:
                        updates.append((1 if ev["absoluteState"] == LIKED else -1, ev["videoId"]))
                    state[key] = changed[key] = (ev["absoluteState"], ev["relationVersion"])
                    applied += 1
                updates.sort(key=lambda u: u[1])
                if updates:
                    cur.executemany(
                        f"UPDATE {NAIVE_COUNT_TABLE} SET like_count = like_count + %s WHERE video_id = %s", updates)
                if changed:
                    cur.executemany(
                        f"INSERT INTO {NAIVE_PROJECTION_TABLE} AS p (user_id, video_id, state, version) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT (user_id, video_id) DO UPDATE SET "
                        "state = EXCLUDED.state, version = EXCLUDED.version WHERE p.version < EXCLUDED.version",
                        [(u, v, s, ver) for (u, v), (s, ver) in sorted(changed.items())],
                    )
        except DatabaseError as exc:
            result.failed = {e.entry_id: Retryable(f"{exc.__class__.__name__}: {exc}") for e in entries}
            return result
        result.done = {e.entry_id for e in entries}
        result.applied, result.duplicates, result.stale = applied, duplicates, stale
        return result


def naive_alias() -> str:
    from django.conf import settings

    return settings.COUNT_PARTITION_ALIASES[0]


def make_projector(variant: str):
    """`ours` (counting's CountProjector) or the naive one."""
    if variant == "ours":
        from counting.services.projection import CountProjector

        return CountProjector()
    return NaiveCountProjector(naive_alias())


def naive_tables(videos: list[str]) -> None:
    """The naive baseline's tables in one count partition, with a counter row for each of `videos`."""
    from django.db import connections

    with connections[naive_alias()].cursor() as cur:
        counter_rows(cur, NAIVE_COUNT_TABLE, videos)
        cur.execute(f"CREATE TABLE IF NOT EXISTS {NAIVE_PROJECTION_TABLE} ("
                    " user_id bigint NOT NULL, video_id varchar(64) NOT NULL, state varchar(8) NOT NULL,"
                    " version bigint NOT NULL, PRIMARY KEY (user_id, video_id))")


def reset_naive() -> None:
    """Empty the naive projection, zero its counters, and drop its checkpoints and dead letters."""
    from django.db import connections

    with connections[naive_alias()].cursor() as cur:
        cur.execute(f"TRUNCATE {NAIVE_PROJECTION_TABLE}")
        cur.execute(f"UPDATE {NAIVE_COUNT_TABLE} SET like_count = 0 WHERE like_count <> 0")
    consumer_reset(NAIVE_CONSUMER)
