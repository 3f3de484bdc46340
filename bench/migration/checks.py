"""What the driver reads back after the load: the projection lag of the load's events around each migration
(from the durable records), the routes and fences after the moves, and the final exact check."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from bench.common import percentile, rounded
from bench.migration import BURST_VIDEO_PREFIX, LOAD_VIDEO_PREFIX, SEED_VIDEO_PREFIX


def _t(model) -> str:
    return model._meta.db_table


class EventLags:
    """Every event of the relation shards' outbox (stateChangedAt) and its `applied` receipt on any count
    partition (any generation): commit -> applied, per window of stateChangedAt."""

    def __init__(self):
        from django.conf import settings
        from django.db import connections

        from counting.models import CountEventReceipt
        from relations.models import OutboxEvent

        applied: dict[str, dt.datetime] = {}
        for alias in settings.COUNT_PARTITION_ALIASES:
            with connections[alias].cursor() as cur:
                cur.execute(f"SELECT event_id, created_at FROM {_t(CountEventReceipt)} WHERE outcome = 'applied'")
                for event_id, created in cur.fetchall():
                    applied[str(event_id)] = created
        self.events: list[tuple[float, float | None]] = []
        for alias in settings.RELATION_SHARD_ALIASES:
            with connections[alias].cursor() as cur:
                cur.execute(f"SELECT event_id::text, payload->>'stateChangedAt', published_at FROM {_t(OutboxEvent)} "
                            "WHERE payload->>'videoId' LIKE %s", [LOAD_VIDEO_PREFIX + "%"])
                for event_id, changed, published in cur.fetchall():
                    c = dt.datetime.fromisoformat(changed)
                    a = applied.get(event_id)
                    self.events.append((c.timestamp(), (a - c).total_seconds() * 1000 if a else None,
                                        (published - c).total_seconds() * 1000 if published else None))
        self.events.sort()

    def window(self, t0: float, t1: float) -> dict:
        inside = [(lag, pub) for t, lag, pub in self.events if t0 <= t < t1]
        lags = sorted(x for x, _ in inside if x is not None)
        pubs = sorted(p for _, p in inside if p is not None)
        return {"events": len(inside), "unapplied": sum(1 for x, _ in inside if x is None),
                "lag_p50_ms": rounded(percentile(lags, 0.5), 1), "lag_p99_ms": rounded(percentile(lags, 0.99), 1),
                "lag_max_ms": rounded(lags[-1] if lags else None, 1),
                "publish_lag_p50_ms": rounded(percentile(pubs, 0.5), 1),
                "publish_lag_p99_ms": rounded(percentile(pubs, 0.99), 1)}


def authorities() -> dict:
    """Per bucket, the partitions whose fence accepts writes at the bucket's routed epoch (INV-11: exactly one,
    the routed one); the buckets per partition."""
    from django.conf import settings

    from counting import routing
    from counting.models import CountRouteFence

    gen = routing.load_generation()
    writers: dict[int, list[str]] = {vb: [] for vb in range(len(gen.routes))}
    for alias in settings.COUNT_PARTITION_ALIASES:
        for vb, epoch, state in CountRouteFence.objects.using(alias).filter(
                bucket_space_version=gen.space.version).values_list("virtual_bucket", "route_epoch", "state"):
            if state == "ACTIVE" and epoch == gen.routes[vb].epoch:
                writers[vb].append(alias)
    bad = [vb for vb, w in writers.items() if w != [gen.routes[vb].partition]]
    return {"buckets_per_partition": dict(Counter(r.partition for r in gen.routes)),
            "manifest_id": gen.manifest_id, "single_writer": not bad, "bad_buckets": bad[:20]}


def stale_rows(buckets: list[int]) -> dict[str, int] | None:
    """Projection + vbucket rows of `buckets` on the partitions they are NOT routed to (the retired source
    copies, deleted by the cleanup after the retention)."""
    from django.conf import settings
    from django.db import connections

    from counting import routing
    from counting.services.migration import changelog

    gen = routing.load_generation()
    homes = {gen.routes[vb].partition for vb in buckets}
    if len(homes) != 1:
        return None
    out = {}
    for alias in settings.COUNT_PARTITION_ALIASES:
        if alias in homes:
            continue
        with connections[alias].cursor() as cur:
            n = 0
            for table in changelog.TABLES:
                cur.execute(f"SELECT count(*) FROM {table.table} WHERE generation = %s AND virtual_bucket = ANY(%s)",
                            [gen.generation, buckets])
                n += int(cur.fetchone()[0])
        out[alias] = n
    return out


def final_check(acks: list[list], seeded_before: dict[str, int]) -> dict:
    """After the load stopped and the pipeline drained:
      seeded videos   Σ routed vbuckets = what the seed wrote (every one of them, before any move);
      load and burst  the LIKED relations in the shards = Σ routed vbuckets = the display snapshot, per video;
      acknowledged    every relation a command acknowledged is in that state in the facts."""
    from django.conf import settings
    from django.db import connections

    from bench.migration.seed import routed_sums
    from counting.models import VideoDisplayCount
    from relations import routing as relation_routing
    from relations.models import LikeRelation

    seeded_after = routed_sums(SEED_VIDEO_PREFIX)
    seeded_bad = sorted((v, n, seeded_after.get(v, 0)) for v, n in seeded_before.items() if seeded_after.get(v, 0) != n)
    seeded_bad += sorted((v, 0, n) for v, n in seeded_after.items() if v not in seeded_before)
    facts: Counter = Counter()
    for alias in settings.RELATION_SHARD_ALIASES:
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT video_id, count(*) FROM {_t(LikeRelation)} WHERE state = 'LIKED' GROUP BY 1")
            for v, n in cur.fetchall():
                facts[v] += int(n)
    buckets: Counter = Counter()
    for prefix in (LOAD_VIDEO_PREFIX, BURST_VIDEO_PREFIX):
        buckets.update(routed_sums(prefix))
    snaps = dict(VideoDisplayCount.objects.exclude(video_id__startswith=SEED_VIDEO_PREFIX)
                 .values_list("video_id", "display_count"))
    videos = {v for v in set(facts) | set(buckets) | {v for v, n in snaps.items() if n}
              if not v.startswith(SEED_VIDEO_PREFIX)}
    bucket_bad = sorted((v, facts[v], buckets[v]) for v in videos if facts[v] != buckets[v])
    snap_bad = sorted((v, facts[v], snaps.get(v, 0)) for v in videos if facts[v] != snaps.get(v, 0))
    last: dict[tuple[int, str], str] = {}
    for phase in acks:
        for u, v, s in phase:
            last[(u, v)] = s
    by_alias: dict[str, list] = {}
    for (u, v), s in last.items():
        by_alias.setdefault(relation_routing.alias_for_user(u), []).append((u, v, s))
    lost = []
    for alias, items in by_alias.items():
        with connections[alias].cursor() as cur:
            cur.execute(f"SELECT user_id, video_id, state FROM {_t(LikeRelation)} WHERE (user_id, video_id) IN "
                        "(SELECT * FROM unnest(%s::bigint[], %s::text[]))",
                        [[u for u, _, _ in items], [v for _, v, _ in items]])
            stored = {(u, v): s for u, v, s in cur.fetchall()}
        lost += [(u, v, s, stored.get((u, v), "UNLIKED")) for u, v, s in items if stored.get((u, v), "UNLIKED") != s]
    connections.close_all()
    return {"seeded_videos": len(seeded_before), "seeded_liked": sum(seeded_before.values()),
            "seeded_exact": not seeded_bad, "seeded_mismatches": seeded_bad[:10],
            "videos": len(videos), "liked": sum(facts[v] for v in videos), "buckets_exact": not bucket_bad,
            "bucket_mismatches": bucket_bad[:10], "snapshots_exact": not snap_bad,
            "snapshot_mismatches": snap_bad[:10], "acknowledged": len(last), "acknowledged_lost": len(lost),
            "lost_examples": lost[:10]}


# --- the code measured ------------------------------------------------------------------------------------

CODE_FILES = ("counting/services/migration/protocol.py", "counting/services/migration/changelog.py",
              "counting/services/migration/ledger.py", "counting/services/manifests.py",
              "counting/services/projection.py", "counting/services/snapshots.py", "counting/routing.py",
              "counting/jobs.py")


def code_version() -> dict:
    """The commit and the working tree of the files the figures depend on (another engineer may be editing them:
    the spawned processes import them once, at their start)."""
    import hashlib
    import subprocess

    from bench.common import ROOT

    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    digest = hashlib.sha256()
    for name in CODE_FILES:
        path = ROOT / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"") + b"\0")
    modified = [line[3:] for line in git("status", "--porcelain", "--", *CODE_FILES).splitlines() if line]
    return {"commit": git("rev-parse", "--short", "HEAD").strip(), "modified": modified,
            "files_sha256": digest.hexdigest()[:16]}
