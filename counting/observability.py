"""The counting app's store gauges (registered with `likes_project.observability`, computed by its
refresh job): how old the oldest change not yet in a display snapshot is."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Min

from counting import hotspots, routing
from counting.models import DirtyVideo
from likes_project.observability import Scrape, register_part


def _snapshot_staleness(scrape: Scrape) -> None:
    # One gauge over every count partition: a partition that cannot be read would make it lie low,
    # so any failure drops the whole gauge.
    generation = routing.active().generation
    oldest = None
    for alias in settings.COUNT_PARTITION_ALIASES:
        at = (DirtyVideo.objects.using(alias).filter(generation=generation)
              .aggregate(oldest=Min("first_dirty_at"))["oldest"])
        if at is not None and (oldest is None or at < oldest):
            oldest = at
    scrape.family("likes_display_snapshot_oldest_dirty_age_seconds",
                  "Age of the oldest change not yet in a display snapshot (0 when none)."
                  ).add_since(oldest)


def hotspot_figures() -> tuple[dict[int, hotspots.Window], hotspots.Suggestion | None]:
    """Both windows' figures and the suggested move (the gauge part and the console's panel read the same)."""
    from counting.services.migration.ledger import LEDGER

    windows = {s: hotspots.read(s) for s in hotspots.WINDOWS_S}
    return windows, hotspots.suggest(windows[hotspots.SUGGEST_WINDOW_S], busy=LEDGER.units_in_flight())


def hotspot_window_from(families: dict[str, list[tuple[dict, float]]], seconds: int) -> hotspots.Window:
    """A window rebuilt from the stored gauges (the console's front page reads only those): the partitions'
    writes, each one's hottest buckets, the hottest videos."""
    window, w = hotspots.Window(seconds), f"{seconds}s"
    for labels, n in families.get("likes_partition_writes", []):
        if labels.get("window") == w:
            window.partitions[labels["partition"]] = int(n or 0)
    for labels, n in families.get("likes_hotspot_bucket_writes", []):
        if labels.get("window") == w:
            window.buckets.setdefault(labels["partition"], []).append((int(labels["bucket"]), int(n or 0)))
    for hot in window.buckets.values():
        hot.sort(key=lambda b: (-b[1], b[0]))
    window.videos = sorted(((labels["video"], int(n or 0)) for labels, n in families.get(
        "likes_hotspot_video_writes", []) if labels.get("window") == w), key=lambda v: (-v[1], v[0]))
    return window


def _hotspots(scrape: Scrape) -> None:
    """M4, M11 with bounded cardinality: the 20 hottest videos and each partition's 20 hottest buckets per window,
    the partitions' and relation shards' writes, the skew, the top users' writes by rank (no user ids in metrics:
    the console shows them to those who may see them) and whether a bucket move is suggested."""
    windows, suggestion = hotspot_figures()
    videos = scrape.family("likes_hotspot_video_writes", "Writes of the hottest videos over the window.")
    bucket_family = scrape.family("likes_hotspot_bucket_writes", "Writes of each partition's hottest buckets.")
    users = scrape.family("likes_hotspot_user_writes", "Writes of the hottest users over the window, by rank.")
    parts = scrape.family("likes_partition_writes", "Count events applied per count partition over the window.")
    share = scrape.family("likes_partition_write_share", "A count partition's share of the window's writes.")
    shards = scrape.family("likes_relation_shard_writes", "Relation events applied per relation shard.")
    skew = scrape.family("likes_partition_skew_ratio", "The hottest count partition's writes over the mean.")
    for seconds, w in windows.items():
        window = f"{seconds}s"
        for video_id, n in w.videos:
            videos.add(n, window=window, video=video_id)
        for alias, hot in w.buckets.items():
            for vb, n in hot:
                bucket_family.add(n, window=window, partition=alias, bucket=str(vb))
            parts.add(w.partitions[alias], window=window, partition=alias)
            share.add(w.share(alias), window=window, partition=alias)
        for rank, (_user, n) in enumerate(w.users, start=1):
            users.add(n, window=window, rank=str(rank))
        for alias, n in sorted(w.shards.items()):
            shards.add(n, window=window, shard=alias)
        skew.add(w.skew, window=window)
    scrape.family("likes_hotspot_move_suggested", "1 while a bucket move is suggested (the console shows it)."
                  ).add(1.0 if suggestion else 0.0)


def register() -> None:
    from counting.services.migration.ledger import LEDGER
    from likes_project.ledgers import observability as ledger_gauges

    register_part("snapshot_staleness", _snapshot_staleness)
    register_part("hotspots", _hotspots)
    ledger_gauges.register(LEDGER)


def count_partition_roles() -> dict[str, str]:
    """/readyz detail (with the token): per configured count partition, "N buckets" routed there by the
    active manifest, or "empty, no routes" (configured, not yet given buckets by a migration: not an
    error, issue 13 §1). Empty before the first generation exists."""
    try:
        gen = routing.active()
    except routing.NoActiveGeneration:
        return {}
    return {alias: (f"{len(gen.buckets_on(alias))} buckets" if gen.buckets_on(alias) else "empty, no routes")
            for alias in settings.COUNT_PARTITION_ALIASES}
