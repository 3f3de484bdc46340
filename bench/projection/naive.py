"""The count pipeline's naive baseline: a counter row per video, fed by the same consumer framework and versioned
absolute-state rule as ours (docs/benchmarks.md, "projector")."""

from __future__ import annotations

from bench.harness.seed import consumer_reset, counter_rows, rows

CONSUMER = "naive-count"
COUNT_TABLE = "bench_naive_count"
PROJECTION_TABLE = "bench_naive_projection"
FACTORY = "bench.projection.naive:make"  # harness/roles.py make_projector


class NaiveCountProjector:
    name = CONSUMER

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
                cur.execute(f"SELECT user_id, video_id, state, version FROM {PROJECTION_TABLE} WHERE (user_id, "
                            "video_id) IN (SELECT * FROM unnest(%s::bigint[], %s::text[])) ORDER BY user_id, video_id "
                            "FOR UPDATE", [[k[0] for k in keys], [k[1] for k in keys]])
                state = {(u, v): (s, ver) for u, v, s, ver in cur.fetchall()}
                updates, changed = [], {}
                for e in entries:
                    ev = e.event
                    key = (ev["userId"], ev["videoId"])
                    cur_state, cur_version = state.get(key, ("UNLIKED", 0))
                    if ev["relationVersion"] <= cur_version:
                        duplicates += ev["relationVersion"] == cur_version
                        stale += ev["relationVersion"] < cur_version
                        continue
                    if ev["absoluteState"] != cur_state:
                        updates.append((1 if ev["absoluteState"] == "LIKED" else -1, ev["videoId"]))
                    state[key] = changed[key] = (ev["absoluteState"], ev["relationVersion"])
                    applied += 1
                if updates:
                    cur.executemany(f"UPDATE {COUNT_TABLE} SET like_count = like_count + %s WHERE video_id = %s",
                                    sorted(updates, key=lambda u: u[1]))
                if changed:
                    cur.executemany(
                        f"INSERT INTO {PROJECTION_TABLE} AS p (user_id, video_id, state, version) VALUES (%s, %s, %s, "
                        "%s) ON CONFLICT (user_id, video_id) DO UPDATE SET state = EXCLUDED.state, version = "
                        "EXCLUDED.version WHERE p.version < EXCLUDED.version",
                        [(u, v, s, ver) for (u, v), (s, ver) in sorted(changed.items())])
        except DatabaseError as exc:
            result.failed = {e.entry_id: Retryable(f"{exc.__class__.__name__}: {exc}") for e in entries}
            return result
        result.done = {e.entry_id for e in entries}
        result.applied, result.duplicates, result.stale = applied, duplicates, stale
        return result


def alias() -> str:
    from django.conf import settings
    return settings.COUNT_PARTITION_ALIASES[0]


def make() -> NaiveCountProjector:
    return NaiveCountProjector(alias())


def tables(videos: list[str]) -> None:
    """The naive baseline's tables in one count partition, with a counter row for each of `videos`."""
    from django.db import connections
    with connections[alias()].cursor() as cur:
        counter_rows(cur, COUNT_TABLE, videos)
        cur.execute(f"CREATE TABLE IF NOT EXISTS {PROJECTION_TABLE} (user_id bigint NOT NULL, video_id varchar(64) NOT "
                    "NULL, state varchar(8) NOT NULL, version bigint NOT NULL, PRIMARY KEY (user_id, video_id))")


def reset() -> None:
    """Empty the naive projection, zero its counters, drop its checkpoints and dead letters."""
    from django.db import connections
    with connections[alias()].cursor() as cur:
        cur.execute(f"TRUNCATE {PROJECTION_TABLE}")
        cur.execute(f"UPDATE {COUNT_TABLE} SET like_count = 0 WHERE like_count <> 0")
    consumer_reset(CONSUMER)


def counts(videos: list[str] | None = None) -> dict[str, int]:
    """video -> its counter row (the non-zero ones, or those of `videos`)."""
    where, params = ("like_count <> 0", []) if videos is None else ("video_id = ANY(%s)", [videos])
    sql = f"SELECT video_id, like_count FROM {COUNT_TABLE} WHERE {where}"
    return {v: int(n) for v, n in rows(alias(), sql, params)}
