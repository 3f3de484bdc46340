"""What coverage is measured against, over the same rows in the same run:

naive    per chunk of videos (the same keyset pagination and chunk size as a coverage run), the LIKED count
         of every video in the facts (COUNT(*) per video on each relation shard) against its LIKED projection
         rows (COUNT(*) per video on each count partition). No versions, no outbox evidence, no wait for
         events in flight, no routing: it finds a count that differs, not which relation, and an offsetting
         +1/-1 passes it. The cheapest check an application could call "the counts match".
ceiling  one hand-written statement per database, no Python in the loop: a GROUP BY video_id over the whole
         table, giving per video the LIKED count and an XOR of a 64-bit hash of every (user, state,
         version), on the relation shards and on the projection rows (active generation, routed buckets);
         then the per-video aggregates are compared. It reads and digests every row once, which is the
         floor for any check that looks at every relation (the facts and the projection live in different
         databases, so a real join would need dblink/postgres_fdw and would only add the transfer).
"""

from __future__ import annotations

import time
from collections import Counter

_HASH = "hashtextextended({u}::text || '/' || {s} || '/' || {v}::text, 0)"


def _t(model) -> str:
    return model._meta.db_table


def _videos_after(after: str, limit: int) -> list[str]:
    from django.conf import settings
    from django.db import connections

    from relations.models import LikeRelation

    found: set[str] = set()
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT DISTINCT video_id FROM {_t(LikeRelation)} WHERE video_id > %s ORDER BY video_id "
                        "LIMIT %s", [after, limit])
            found |= {r[0] for r in cur.fetchall()}
    return sorted(found)[:limit]


def naive_compare() -> dict:
    """The naive baseline over every video: relations covered, videos, videos whose counts differ."""
    from django.conf import settings
    from django.db import connections

    from counting import routing as count_routing
    from counting.models import LikeCountProjection
    from relations.models import LikeRelation

    gen = count_routing.load_generation()
    t0 = time.perf_counter()
    after, relations, videos, chunks = "", 0, 0, 0
    mismatched: list[tuple[str, int, int]] = []
    for _ in range(10_000_000):  # bounded: one chunk per pass, the keyset ends it
        chunk = _videos_after(after, settings.RECONCILE_BATCH_VIDEOS)
        if not chunk:
            break
        facts: Counter = Counter()
        projected: Counter = Counter()
        for alias in settings.RELATION_SHARD_ALIASES:
            with connections[alias].cursor() as cur:
                cur.execute(f"SELECT video_id, count(*), count(*) FILTER (WHERE state = 'LIKED') "
                            f"FROM {_t(LikeRelation)} WHERE video_id = ANY(%s) GROUP BY video_id", [chunk])
                for v, n, liked in cur.fetchall():
                    relations += n
                    facts[v] += liked
        for alias in settings.COUNT_PARTITION_ALIASES:
            with connections[alias].cursor() as cur:
                cur.execute(f"SELECT video_id, count(*) FROM {_t(LikeCountProjection)} WHERE generation = %s "
                            "AND video_id = ANY(%s) AND projected_state = 'LIKED' GROUP BY video_id",
                            [gen.generation, chunk])
                for v, liked in cur.fetchall():
                    projected[v] += liked
        mismatched += [(v, facts[v], projected[v]) for v in chunk if facts[v] != projected[v]]
        videos += len(chunk)
        chunks += 1
        after = chunk[-1]
    elapsed = time.perf_counter() - t0
    return {"variant": "naive", "relations": relations, "videos": videos, "chunks": chunks,
            "mismatched_videos": len(mismatched), "mismatches": mismatched[:10], "elapsed_s": round(elapsed, 3),
            "relations_per_s": round(relations / elapsed, 1) if elapsed else None}


def sql_ceiling() -> dict:
    """The raw SQL ceiling over every video (each statement timed; statement timeout lifted for them)."""
    from django.conf import settings
    from django.db import connections, transaction

    from counting import routing as count_routing
    from counting.models import LikeCountProjection
    from relations.models import LikeRelation

    gen = count_routing.load_generation()
    t0 = time.perf_counter()
    facts: dict[str, list[int]] = {}
    projected: dict[str, list[int]] = {}
    statements: dict[str, float] = {}
    relations = 0

    def fold(into: dict, rows) -> None:
        for v, n, liked, digest in rows:
            cell = into.setdefault(v, [0, 0, 0])
            cell[0] += int(n)
            cell[1] += int(liked)
            cell[2] ^= int(digest)

    for alias in settings.RELATION_SHARD_ALIASES:
        ts = time.perf_counter()
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute(f"SELECT video_id, count(*), count(*) FILTER (WHERE state = 'LIKED'), "
                        f"bit_xor({_HASH.format(u='user_id', s='state', v='relation_version')}) "
                        f"FROM {_t(LikeRelation)} GROUP BY video_id")
            rows = cur.fetchall()
        relations += sum(int(r[1]) for r in rows)
        fold(facts, rows)
        statements[alias] = round(time.perf_counter() - ts, 3)
    for alias in settings.COUNT_PARTITION_ALIASES:
        ts = time.perf_counter()
        with transaction.atomic(using=alias), connections[alias].cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 0")
            cur.execute(f"SELECT video_id, count(*), count(*) FILTER (WHERE projected_state = 'LIKED'), "
                        f"bit_xor({_HASH.format(u='user_id', s='projected_state', v='projected_version')}) "
                        f"FROM {_t(LikeCountProjection)} WHERE generation = %s AND virtual_bucket = ANY(%s) "
                        "GROUP BY video_id", [gen.generation, gen.buckets_on(alias)])
            rows = cur.fetchall()
        fold(projected, rows)
        statements[alias] = round(time.perf_counter() - ts, 3)
    mismatched = sorted(v for v in set(facts) | set(projected) if facts.get(v) != projected.get(v))
    elapsed = time.perf_counter() - t0
    return {"variant": "ceiling", "relations": relations, "videos": len(facts), "statements_s": statements,
            "mismatched_videos": len(mismatched), "mismatches": mismatched[:10], "elapsed_s": round(elapsed, 3),
            "relations_per_s": round(relations / elapsed, 1) if elapsed else None}
