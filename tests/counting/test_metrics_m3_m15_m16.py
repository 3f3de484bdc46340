"""The spec's metrics M3, M15 and M16 (issue 32 §2), each driven through the real code path against real PostgreSQL
and Redis, moving by exactly what happened, with the counter-example that must not move it: CAS and unique-key
conflicts of the like command (M3); cache hits, the DB fallback they cost, old-generation refusals and a rebuild's
progress (M15); the reverse index's tombstones, low-version rejections, orphan sort entries and the likers
filter's scan amplification (M16)."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from django.db import connections, transaction
from django.utils import timezone

from counting import routing as count_routing
from counting.models import CountCacheGeneration, LikeReverseSort
from counting.selectors.likers import likers_page_list
from counting.services.count_cache.layers import count_cache_generations_mirror, write_buckets
from likes_project import metrics, observability
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import consume_partition
from likes_project.opsjobs.services import job_run_slice, job_start
from relations import routing as relation_routing
from relations import selectors as relation_selectors
from relations.errors import StaleBaseVersion
from relations.models import LikeRelation, RelationCacheGeneration, UserPrivacy
from relations.services.commands import relation_set_state
from relations.services.relation_cache import RelationCacheProjector, cache_generations_mirror, floors_to_redis
from tests.counting.helpers import drain_reverse, project_reverse, publish_all, stream_event
from tests.factories import TEST_ACTOR
from tests.relations.helpers import cmd

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]
WRITE_PATHS = ["function", "python"]


def moved(names: dict[str, tuple[str, dict]], before: dict[str, float]) -> dict[str, float]:
    """How far each named metric moved since `before` (what `snap` read)."""
    return {key: metrics.value(name, **labels) - before[key] for key, (name, labels) in names.items()}


def snap(names: dict[str, tuple[str, dict]]) -> dict[str, float]:
    return {key: metrics.value(name, **labels) for key, (name, labels) in names.items()}


# --- M3: CAS and unique-key conflicts of the like command -------------------------------------------------------

M3 = {"cas": ("likes_cas_conflicts_total", {}), "unique": ("likes_unique_conflicts_total", {})}


@pytest.mark.parametrize("path", WRITE_PATHS)
def test_m3_a_stale_base_that_loses_the_compare_and_set_is_one_cas_conflict(make_user, make_video, settings, path):
    """M3: the command's CAS loses only where the client's baseVersion is not the locked row's version and the
    command would change the state. A plain like, a stale base asking for the current state (a no-op), and a stale
    base under last-commit-wins are not conflicts."""
    settings.LIKE_COMMAND_WRITE_PATH = path
    make_video("m3-cas", make_user())
    user = make_user()
    before = snap(M3)
    cmd(user, "m3-cas", "LIKED")  # v1
    relation_set_state(user_id=user.pk, video_id="m3-cas", desired_state="LIKED", operation_id="m3-same",
                       base_version=0)  # stale, but already LIKED: nothing to set
    assert moved(M3, before) == {"cas": 0, "unique": 0}
    with pytest.raises(StaleBaseVersion):
        relation_set_state(user_id=user.pk, video_id="m3-cas", desired_state="UNLIKED", operation_id="m3-lost",
                           base_version=0)
    assert moved(M3, before) == {"cas": 1, "unique": 0}
    settings.LIKE_STALE_BASE_POLICY = "last_commit_wins"
    relation_set_state(user_id=user.pk, video_id="m3-cas", desired_state="UNLIKED", operation_id="m3-lcw",
                       base_version=0)  # applied anyway: no compare was made to lose
    assert moved(M3, before) == {"cas": 1, "unique": 0}


@pytest.mark.django_db(databases="__all__", transaction=True)  # the racing insert must be seen by another session
@pytest.mark.parametrize("path", WRITE_PATHS)
def test_m3_a_first_like_that_loses_the_insert_race_is_one_unique_key_conflict(make_user, make_video, settings,
                                                                               path):
    """M3: a first like whose insert waits on another transaction's insert of the same relation, which then
    commits, counts one unique-key conflict (and is decided again on the row it lost to: no CAS conflict)."""
    settings.LIKE_COMMAND_WRITE_PATH = path
    make_video("m3-race", make_user())
    user = make_user()
    alias = relation_routing.alias_for_user(user.pk)
    before = snap(M3)
    pids: queue.Queue = queue.Queue()
    outcome: dict = {}

    def racer() -> None:
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pids.put(cursor.fetchone()[0])
            outcome["result"] = cmd(user, "m3-race", "LIKED")
        except Exception as exc:  # asserted on below
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=racer)
    with transaction.atomic(using=alias):  # the other writer's first insert, not committed yet
        now = timezone.now()
        LikeRelation.objects.using(alias).create(user_id=user.pk, video_id="m3-race", state="LIKED",
                                                 relation_version=1, last_operation_id="other", state_changed_at=now,
                                                 created_at=now, updated_at=now)
        thread.start()
        racer_pid = pids.get(timeout=30)
        deadline = time.monotonic() + 30
        with connections[alias].cursor() as cursor:
            while True:  # until the racer's insert waits on this transaction
                cursor.execute("SELECT pg_backend_pid() = ANY(pg_blocking_pids(%s))", [racer_pid])
                if cursor.fetchone()[0]:
                    break
                assert time.monotonic() < deadline, "the racer never waited on the insert"
    thread.join(timeout=30)
    assert "error" not in outcome, outcome
    result = outcome["result"]
    assert (result.changed, result.result.state, result.result.relation_version) == (False, "LIKED", 1)
    assert moved(M3, before) == {"cas": 0, "unique": 1}


# --- M15: cache hits, DB fallback, old-generation refusals, rebuild progress -------------------------------------

M15_READS = {"hits": ("likes_cache_hits_total", {"cache": "relation"}),
             "misses": ("likes_cache_misses_total", {"cache": "relation"}),
             "db_reads": ("likes_db_fallback_reads_total", {"store": "relation"})}


def test_m15_relation_cache_hits_and_misses_and_the_db_fallback_reads_of_the_misses(make_user, make_video):
    """M15: a cached relation is a hit and costs no database read; a relation not cached is a miss read from the
    user's shard, through the fallback limiter: one fallback read per request, whatever its number of misses."""
    make_video("m15-hit", make_user())
    user = make_user()
    cmd(user, "m15-hit", "LIKED")
    publish_all()
    for p in streams.all_partitions():
        consume_partition(RelationCacheProjector(), partition=p, ignore_backoff=True)
    relation_selectors.reset_generation_cache()
    before = snap(M15_READS)
    relation_selectors.relation_states_get(user_id=user.pk, video_ids=["m15-hit"])
    assert moved(M15_READS, before) == {"hits": 1, "misses": 0, "db_reads": 0}
    relation_selectors.relation_states_get(user_id=user.pk, video_ids=["m15-hit", "m15-cold-1", "m15-cold-2"])
    assert moved(M15_READS, before) == {"hits": 2, "misses": 2, "db_reads": 1}


def _next(model) -> int:
    return model.objects.order_by("-generation").values_list("generation", flat=True)[0] + 1


def test_m15_writes_of_a_generation_that_is_not_live_are_refused_and_counted(make_user):
    """M15: old-generation rejections. A late write to a FAILED generation of the relation cache or the count cache
    is refused and counted; the same writes to the ACTIVE generations are not."""
    active_rel = RelationCacheGeneration.objects.get(status="ACTIVE")
    failed_rel = RelationCacheGeneration.objects.create(generation=_next(RelationCacheGeneration), status="FAILED")
    cache_generations_mirror()
    active_count = CountCacheGeneration.objects.get(status="ACTIVE")
    failed_count = CountCacheGeneration.objects.create(
        generation=_next(CountCacheGeneration), status="FAILED",
        projection_generation=active_count.projection_generation, route_manifest_id=active_count.route_manifest_id,
        build_from=timezone.now(), started_at=timezone.now())
    count_cache_generations_mirror()
    names = {"relation": ("likes_relcache_generation_refused_total", {}),
             "count": ("likes_count_cache_bucket_refused_total", {"reason": "GEN_FAILED"})}
    before = snap(names)
    user = make_user()
    fact = ("LIKED", 1)
    floors_to_redis({(active_rel.generation, user.pk, "m15-old"): fact})
    write_buckets(active_count.generation, [("m15-old", 3, 1, 1, 1)])
    assert moved(names, before) == {"relation": 0, "count": 0}
    floors_to_redis({(failed_rel.generation, user.pk, "m15-old"): fact,
                     (failed_rel.generation, user.pk, "m15-old-2"): fact})
    assert write_buckets(failed_count.generation, [("m15-old", 3, 2, 2, 1)]) == {"GEN_FAILED": 1}
    assert moved(names, before) == {"relation": 2, "count": 1}


def _rebuild_gauges() -> dict[tuple[str, frozenset], float]:
    """The rebuild-progress families of the store gauges, as the refresh job computes them."""
    scrape = observability.collect()
    return {(name, frozenset(labels.items())): v for name in ("likes_generation_rebuilding",
                                                              "likes_generation_rebuild_units_done")
            for labels, v in (scrape.families[name].samples if name in scrape.families else [])}


def test_m15_a_rebuilds_progress_is_exported_chunk_by_chunk(make_user, make_video):
    """M15: generation rebuild progress. While a relation-cache rebuild runs one relation per chunk, the gauges say
    it is building and how many units its step has done after each slice; the other generation tables say they are
    not building."""
    make_video("m15-rb", make_user())
    for _ in range(3):
        cmd(make_user(), "m15-rb", "LIKED")
    relcache = frozenset({("model", "relations.relationcachegeneration")})
    backfill = relcache | {("step", "backfill")}
    assert _rebuild_gauges()[("likes_generation_rebuilding", relcache)] == 0
    job = job_start(kind="relcache.rebuild", actor=TEST_ACTOR, params={"chunk": 1})
    started = _rebuild_gauges()
    assert started[("likes_generation_rebuilding", relcache)] == 1
    assert ("likes_generation_rebuild_units_done", backfill) not in started  # no chunk done yet
    for done in (1, 2):
        assert job_run_slice(job.pk, max_chunks=1)[1] == "parked"
        gauges = _rebuild_gauges()
        assert gauges[("likes_generation_rebuild_units_done", backfill)] == done
    rebuilding = {labels for (name, labels), v in gauges.items() if name == "likes_generation_rebuilding"}
    assert len(rebuilding) >= 4  # relation cache, count cache, reverse index, restore
    assert {labels for (name, labels), v in gauges.items() if name == "likes_generation_rebuilding" and v} == {
        relcache}


# --- M16: the reverse index -----------------------------------------------------------------------------------

M16_PROJECTOR = {"tombstones": ("likes_reverse_tombstones_written_total", {}),
                 "low_version": ("likes_events_stale_total", {"consumer": "reverse"})}




def test_m16_the_reverse_projector_counts_tombstones_and_low_version_rejections():
    """M16: an UNLIKED version writes a tombstone (first seen or over a like); a version below the row's is a
    low-version rejection. Counter-examples: a duplicate version and a higher LIKED move neither."""
    steps = [
        ((2, "UNLIKED"), {"tombstones": 1, "low_version": 0}),  # v2 first: a tombstone with no row before it
        ((1, "LIKED"), {"tombstones": 1, "low_version": 1}),  # the late v1 cannot revive it
        ((2, "UNLIKED"), {"tombstones": 1, "low_version": 1}),  # v2 again: a duplicate, not a low version
        ((3, "LIKED"), {"tombstones": 1, "low_version": 1}),
        ((4, "UNLIKED"), {"tombstones": 2, "low_version": 1}),  # over a like
    ]
    before = snap(M16_PROJECTOR)
    for (version, state), expected in steps:
        stream_event(9161, "m16-rev", version, state)
        assert all(r.status == "ok" for r in project_reverse())
        assert moved(M16_PROJECTOR, before) == expected, (version, state)


M16_LIKERS = {"scanned": ("likes_likers_scanned_total", {}), "returned": ("likes_likers_returned_total", {}),
              "orphans": ("likes_reverse_orphan_sort_entries_total", {})}


def test_m16_the_likers_page_counts_scanned_returned_and_orphan_sort_entries(make_user, make_video, author):
    """M16: a likers page counts the entries it popped and the likers it returned (their ratio is the privacy
    filter's scan amplification) and the orphan sort entries it popped: an entry with no LIKED state row behind it,
    which is never served. Counter-example: a page of visible likers scans what it returns and finds no orphan."""
    make_video("m16-lk", author)
    first, private, last = make_user(), make_user(), make_user()
    for user in (first, private, last):
        cmd(user, "m16-lk", "LIKED")
    drain_reverse()
    before = snap(M16_LIKERS)
    page = likers_page_list(caller_id=author.pk, video_id="m16-lk", limit=10)
    assert [x.user_id for x in page.items] == [last.pk, private.pk, first.pk]
    assert moved(M16_LIKERS, before) == {"scanned": 3, "returned": 3, "orphans": 0}

    UserPrivacy.objects.create(user_id=private.pk, likes_private=True)
    orphan = make_user()  # never liked it: an entry with no state row behind it
    gen = count_routing.reverse_active()
    LikeReverseSort.objects.using(gen.alias_of(orphan.pk)).create(
        generation=gen.generation, video_id="m16-lk", user_id=orphan.pk, reverse_shard=gen.shard_of(orphan.pk),
        liked_at=timezone.now())
    before = snap(M16_LIKERS)
    page = likers_page_list(caller_id=author.pk, video_id="m16-lk", limit=10)
    assert [x.user_id for x in page.items] == [last.pk, first.pk]
    assert page.popped == 4
    assert moved(M16_LIKERS, before) == {"scanned": 4, "returned": 2, "orphans": 1}
