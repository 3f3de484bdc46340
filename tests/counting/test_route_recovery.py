"""Routes after a crash and routes that lie (issue 33 §3; ROUTE-3, ROUTE-4, BKT-7, T22), each beside its
counter-example: the materialised route table rebuilt from the active manifest when it disagrees (by hand or by
the migrations' beat) and left alone when it agrees; a tampered route table that changes nothing the
projector, the aggregators, reconciliation or recovery use (they route by the active manifest's immutable
items); a cold video with only the bucket rows it touched; a crash while a migration cleans up its source
copy, and crashes of a scale-in. The migration protocol end to end: tests/counting/test_bucket_migration.py."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connections

from counting import routing as count_routing
from counting.models import (
    BucketMigration,
    CountBucketRoute,
    CountProjectionGeneration,
    LikeCountProjection,
    VideoLikeCountVbucket,
)
from counting.selectors import video_vbuckets_get
from counting.services import manifests
from counting.services.migration import changelog, ledger, protocol
from counting.tasks import bucket_migrations_cleanup_task
from likes_project.audit.models import AuditRecord
from likes_project.eventlog import streams
from reconciliation.services.recovery import restore, snapshot
from tests.counting.helpers import ALL_DB, drain, envelopes, mark_all_sent, project_all
from tests.counting.test_bucket_migration import (
    Crash,
    S,
    _authorities,
    _exact_everywhere,
    _gen,
    _run,
    crashed_then_resumed,
)
from tests.reconciliation import helpers as live
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology]


def _table(version: int) -> dict[int, tuple[str, int]]:
    return {vb: (p, e) for vb, p, e in CountBucketRoute.objects.filter(bucket_space_version=version).values_list(
        "virtual_bucket", "physical_partition", "route_epoch")}


def _row_versions() -> set[tuple[str, int]]:
    """(xmin, bucket) of every materialised route row: a row written again gets a new xmin."""
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT xmin::text, virtual_bucket FROM {CountBucketRoute._meta.db_table}")
        return set(cursor.fetchall())


def _elsewhere(alias: str) -> str:
    """Another bootstrap count partition than `alias` (one every manifest may name in any topology)."""
    return next(a for a in settings.COUNT_BOOTSTRAP_PARTITIONS if a != alias)


def _rebuilds() -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action="routes.rebuild").order_by("id"))


# --- ROUTE-3: the route table rebuilt from the active manifest ------------------------------------------


@ALL_DB
def test_route3_after_a_crash_between_the_pointer_and_the_routes_the_beat_rebuilds_them_from_the_manifest():
    """ROUTE-3: the active pointer names a new sealed manifest but the route rows still say the old one (what a
    crash between the two writes leaves; the cutover makes them in one transaction, so today a partial
    restore of `default` does it), with a hand edit, a lost row and a stray row on top. The active pointer
    decides: the migrations' beat puts the table back to exactly the manifest's items, audited once; run
    again, it finds nothing to do."""
    gen = _gen()
    items = manifests.manifest_items(gen.manifest_id)
    moved = [(vb, _elsewhere(p), e + 1) if vb < 8 else (vb, p, e) for vb, p, e in items]
    new = manifests.manifest_seal(bucket_space_version=gen.space.version, virtual_buckets=gen.space.virtual_buckets,
                                  items=moved)
    assert CountProjectionGeneration.objects.filter(generation=gen.generation, active_manifest_id=gen.manifest_id) \
        .update(active_manifest_id=new.pk) == 1  # the CAS committed; the crash came before the routes
    CountBucketRoute.objects.filter(bucket_space_version=gen.space.version, virtual_bucket=20).update(route_epoch=99)
    CountBucketRoute.objects.filter(bucket_space_version=gen.space.version, virtual_bucket=21).delete()
    CountBucketRoute.objects.create(bucket_space_version=gen.space.version, virtual_bucket=gen.space.virtual_buckets,
                                    physical_partition=items[0][1], route_epoch=1)
    wrong = [*range(8), 20, 21, gen.space.virtual_buckets]
    assert manifests.routes_disagreeing() == wrong

    bucket_migrations_cleanup_task()  # the beat

    assert _table(gen.space.version) == {vb: (p, e) for vb, p, e in moved}
    assert manifests.routes_disagreeing() == []
    [audit] = _rebuilds()
    assert audit.params["manifestId"] == new.pk and audit.params["changed"] == len(wrong)
    assert audit.params["buckets"] == wrong and audit.actor == manifests.ROUTES_SWEEPER
    # Idempotent: the same sweep again changes nothing and audits nothing (that it writes no row either is
    # the next test's: inside this test's transaction a rewritten row would keep its xmin).
    assert manifests.routes_rebuild() == 0
    bucket_migrations_cleanup_task()
    assert len(_rebuilds()) == 1


@ALL_DB
def test_route3_an_agreeing_route_table_is_not_rewritten_by_the_beat():
    """ROUTE-3's counter-example: the table agrees with the active manifest, so the beat writes nothing (no
    row gets a new version, nothing is audited)."""
    gen = _gen()
    assert manifests.routes_disagreeing() == []
    before = _row_versions()
    assert len(before) == gen.space.virtual_buckets
    bucket_migrations_cleanup_task()
    assert _row_versions() == before and _rebuilds() == []


# --- ROUTE-4: a tampered route table changes nothing anyone routes by ----------------------------------------


def _tamper_routes() -> dict[int, tuple[str, int]]:
    """Every materialised route points at another partition and epoch than the active manifest says (the
    table is mutable: a hand edit, a half-applied restore of `default`). Returns what the manifest says."""
    gen = _gen()
    truth = {vb: (r.partition, r.epoch) for vb, r in enumerate(gen.routes)}
    for vb, (p, e) in truth.items():
        CountBucketRoute.objects.filter(bucket_space_version=gen.space.version, virtual_bucket=vb).update(
            physical_partition=_elsewhere(p), route_epoch=e + 7)
    count_routing.reset_cache()
    assert len(manifests.routes_disagreeing()) == gen.space.virtual_buckets
    return truth


@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("close_db_connections")
def test_route4_with_a_tampered_route_table_the_projector_aggregators_and_reconciliation_use_the_manifest(
        api, make_user, make_video):
    """ROUTE-4, ROUTE-1: with every materialised route wrong, the routes everyone reads are still the active
    manifest's: a new like is applied where its bucket lives (a route-table route would be refused by the
    partition's fence forever), the display snapshot and the per-video view sum the manifest's replicas, and
    an exact reconciliation passes. Counter-example: the same like before the tampering, counted alike."""
    live.api_liked_video(api, make_user, make_video, "r4-agg", 6)
    assert live.displayed("r4-agg") == 6  # the counter-example: routes and table agree
    truth = _tamper_routes()
    gen = count_routing.active()
    assert {vb: (r.partition, r.epoch) for vb, r in enumerate(gen.routes)} == truth
    late = make_user()
    assert live.api_like(api, late, "r4-agg").status_code == 200
    drain()
    vb = count_routing.virtual_bucket(gen.space, "r4-agg", late.pk)
    assert LikeCountProjection.objects.using(truth[vb][0]).filter(
        generation=gen.generation, user_id=late.pk, video_id="r4-agg", projected_state="LIKED").exists()
    view = video_vbuckets_get(video_id="r4-agg")
    assert view.routed_sum == 7 and view.unrouted_rows == 0
    live.counts_match_the_facts(["r4-agg"])  # displayed 7 and an exact run over every video PASSED


@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("close_db_connections")
def test_route4_recovery_dumps_and_restores_by_the_manifest_not_by_a_tampered_route_table(
        api, make_user, make_video):
    """ROUTE-4, SNAP-8: a recovery snapshot taken while the route table lies dumps each partition's rows of the
    buckets the pinned manifest routes there (every projection row, none missed), and a restore of it
    replays and checks identity by the same manifest. Counter-example: the artifacts hold exactly the rows
    the partitions hold under the manifest."""
    live.api_liked_video(api, make_user, make_video, "r4-rec", 5)
    gen = _gen()
    held = {alias: LikeCountProjection.objects.using(alias).filter(
        generation=gen.generation, virtual_bucket__in=gen.buckets_on(alias)).count()
        for alias in settings.COUNT_PARTITION_ALIASES}
    assert sum(held.values()) >= 5
    _tamper_routes()
    snap = live.snapshot_take("while the route table lies")
    assert snap.status == "SEALED", snap.failure
    assert snap.manifest_id == gen.manifest_id
    assert {a["partition"]: a["rows"] for a in snap.artifacts if a["kind"] == "projection"} == held
    assert snapshot.snapshot_verify(snap.pk, actor=live.OPERATOR)["usable"] is True
    drill = restore.test_restore(snap.pk, actor=live.OPERATOR)
    assert drill["ok"] is True, drill
    assert drill["totals"]["likedRelations"] == drill["totals"]["bucketSum"] == sum(held.values())


# --- BKT-7: sparse buckets ---------------------------------------------------------------------------------


def _projected(users, video_id: str, desired: str = "LIKED") -> None:
    """The users' commands on the video, their events in the stream and the count projector run over them,
    all inside the test's transaction (the events are published by hand: the publisher takes committed rows
    only)."""
    for u in users:
        cmd(u, video_id, desired)
    events = [e for u in users for e in envelopes(u.pk, video_id)]
    mark_all_sent()
    streams.publish_pipeline(events)
    assert all(r.status == "ok" for r in project_all())


def _bucket_rows(video_id: str) -> dict[int, tuple[str, int]]:
    """bucket -> (partition, count) of the video's rows of the active generation, on every partition."""
    gen = _gen()
    rows = [(vb, alias, n) for alias in settings.COUNT_PARTITION_ALIASES
            for vb, n in VideoLikeCountVbucket.objects.using(alias).filter(
                generation=gen.generation, video_id=video_id).values_list("virtual_bucket", "active_count")]
    assert len({vb for vb, _a, _n in rows}) == len(rows), "a bucket with two rows"
    return {vb: (alias, n) for vb, alias, n in rows}


@ALL_DB
def test_bkt7_a_cold_video_gets_only_the_bucket_rows_its_likes_touched(make_user, make_video):
    """BKT-7: a video liked by k users has one bucket row per distinct bucket of those k relations (at most
    k, never V pre-created), each on the partition the manifest routes it to; an unlike and a re-like add no
    row. Counter-example: a hotter video spreads over more buckets, still one row per bucket it touched."""
    gen = _gen()
    video = make_video("bkt7-cold", make_user())
    users = [make_user() for _ in range(3)]
    _projected(users, video.video_id)
    _projected(users[:1], video.video_id, "UNLIKED")
    _projected(users[:1], video.video_id, "LIKED")
    touched = {count_routing.virtual_bucket(gen.space, video.video_id, u.pk) for u in users}
    rows = _bucket_rows(video.video_id)
    assert set(rows) == touched and len(rows) <= len(users) < gen.space.virtual_buckets
    assert all(alias == gen.routes[vb].partition for vb, (alias, _n) in rows.items())
    assert sum(n for _a, n in rows.values()) == len(users)

    hot = make_video("bkt7-hot", make_user())
    fans = [make_user() for _ in range(30)]
    _projected(fans, hot.video_id)
    spread = _bucket_rows(hot.video_id)
    assert set(spread) == {count_routing.virtual_bucket(gen.space, hot.video_id, u.pk) for u in fans}
    assert 1 < len(spread) <= len(fans) and sum(n for _a, n in spread.values()) == len(fans)


# --- T22: a crash while the source copy is cleaned up, and a scale-in crashed at every step ------------------


# spec §7 drill 11: a crash in RETIRED.
@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("close_db_connections")
@pytest.mark.parametrize("direction", ["scale-out", "scale-in"])
def test_t22_a_crash_while_retired_cleans_the_source_copy_keeps_one_authority_and_the_beat_finishes_it(
        api, make_user, make_video, settings, monkeypatch, direction):
    """T22, MIG-2 RETIRED: the cleanup of the source copy dies after its first deleted batch. The route CAS was
    long done: the target stays the only authority, counts stay exact, and the beat's next run deletes the
    rest (idempotent per the ledger). Counter-example: the source held the rows until the cleanup began."""
    settings.BUCKET_MIGRATION_RETENTION_S = 0
    videos = [f"t22-ret-{i}" for i in range(2)]
    for v in videos:
        live.api_liked_video(api, make_user, make_video, v, 5)
    first, second = settings.COUNT_BOOTSTRAP_PARTITIONS[:2]
    source, target = (first, settings.COUNT_PARTITION_ALIASES[-1]) if direction == "scale-out" else (second, first)
    moving = _gen().buckets_on(source)
    assert changelog.rows_count(source, generation=_gen().generation, buckets=moving) > 0
    delete, crashed = changelog.rows_delete, []

    def dies_after_one_batch(alias, *, generation, buckets, batch=20000, on_batch=None):
        if crashed or not BucketMigration.objects.filter(state=S.RETIRED).exists():  # a target cleared first
            return delete(alias, generation=generation, buckets=buckets, batch=batch, on_batch=on_batch)

        def crash():
            crashed.append(alias)
            raise Crash("killed while cleaning up")
        return delete(alias, generation=generation, buckets=buckets, batch=1, on_batch=crash)

    monkeypatch.setattr(changelog, "rows_delete", dies_after_one_batch)
    m = _run(moving, target)
    assert crashed == [source] and m.state == S.RETIRED and m.source_cleaned_at is None, (m.state, m.error)
    left = changelog.rows_count(source, generation=_gen().generation, buckets=moving)
    assert left > 0  # part of the source copy is still there
    assert _authorities(moving) == {vb: [target] for vb in moving}  # never reopened, never two
    _exact_everywhere(videos)
    assert protocol.migrations_cleanup_due() == [m.pk]  # the beat
    m = ledger.migration_get(m.pk)
    assert m.source_cleaned_at is not None
    assert changelog.rows_count(source, generation=_gen().generation, buckets=moving) == 0
    assert _authorities(moving) == {vb: [target] for vb in moving}
    _exact_everywhere(videos)


# spec §7 drill 11: scale-in.
@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("close_db_connections")
@pytest.mark.parametrize("point", ["prepare", "copy", "catch_up", "cutover_draining", "cutover_sealed", "verify"])
def test_t22_a_scale_in_crashed_at_any_step_resumes_to_one_authority_and_exact_counts(
        api, make_user, make_video, point, settings):
    """T22, T24, MIG-1: scale-in (every bucket of one bootstrap partition onto the other) stopped at every step
    and resumed by a new job; before the CAS the source is the only writer, after it the target. The same
    protocol as scale-out (tests/counting/test_bucket_migration.py crashes that one)."""
    settings.BUCKET_MIGRATION_COPY_CHUNK = 3
    videos = [f"t22-in-{point}-{i}" for i in range(2)]
    for v in videos:
        live.api_liked_video(api, make_user, make_video, v, 5)
    source, target = settings.COUNT_BOOTSTRAP_PARTITIONS[1], settings.COUNT_BOOTSTRAP_PARTITIONS[0]
    moving = _gen().buckets_on(source)
    crashed_then_resumed(point, moving, target, videos, reason="scale in")
    assert _gen().buckets_on(source) == []
    assert _authorities(moving) == {vb: [target] for vb in moving}
    _exact_everywhere(videos)


@pytest.mark.django_db(databases="__all__")
def test_each_partitions_bucket_array_is_exactly_its_routed_buckets():
    """The snapshot's sums and the bucket layer's refresh read a partition's buckets through one array literal
    (`GenerationRoutes.buckets_array`, issue 34 §2): PostgreSQL must read back exactly `buckets_on`, every bucket
    routed once over all partitions."""
    gen = count_routing.active()
    seen = []
    for alias in settings.COUNT_PARTITION_ALIASES:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT COALESCE(array_agg(b ORDER BY b), '{}') FROM unnest(%s::int[]) AS b",
                           [gen.buckets_array(alias)])
            assert cursor.fetchone()[0] == gen.buckets_on(alias)
        seen += gen.buckets_on(alias)
    assert sorted(seen) == list(range(len(gen.routes)))
