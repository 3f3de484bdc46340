"""The one generation lifecycle, driven through each of its three users (relation cache, count cache,
reverse index) with real processes:

- a rebuild killed in the middle (SIGKILL of the command running it) is reclaimed: its generation goes
  FAILED, reads stay on / go back to the ACTIVE generation, and the next rebuild is accepted;
- a rebuild that hits the Celery time limit goes FAILED at once;
- a rebuild longer than the Celery time limit completes as chunked slices, each resuming from the
  persisted cursor (in process, slice by slice, and on a real worker that enforces the limit).
"""

from __future__ import annotations

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone

from counting import routing as count_routing
from counting import selectors as count_selectors
from counting.services.count_cache.rebuild import LIFECYCLE as COUNT_CACHE
from counting.services.reverse.rebuild import LIFECYCLE as REVERSE
from likes_project.audit.models import AuditRecord
from likes_project.errors import InvalidInput
from likes_project.eventlog.models import Lease
from likes_project.generations import BUILDING, RebuildRunning, generation_start, rebuild_inline
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_start, jobs_sweep
from likes_project.opsjobs.tasks import run_job_task
from relations import selectors as relation_selectors
from relations.models import RelationCacheGeneration
from relations.services.commands import relation_set_state
from relations.services.relation_cache_rebuild import LIFECYCLE as RELCACHE
from tests import drills
from tests.counting.helpers import drain
from tests.factories import TEST_ACTOR

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def _relcache_readable():
    relation_selectors.reset_generation_cache()
    return relation_selectors.cache_generation_for_reads()


def _count_cache_readable():
    return count_selectors.count_cache_generations_get(fresh=True).active


def _reverse_readable():
    return count_routing.reverse_active().generation


# name -> (lifecycle, its ops-job kind, the command with a one-row chunk, job params, what readers use)
USERS = {
    "relcache": (RELCACHE, "relcache.rebuild", ["rebuild_relation_cache", "--chunk", "1"], {"chunk": 1},
                 _relcache_readable),
    "count_cache": (COUNT_CACHE, "count_cache.rebuild", ["rebuild_count_cache", "--batch", "1"], {"batch": 1},
                    _count_cache_readable),
    "reverse": (REVERSE, "reverse.rebuild", ["rebuild_reverse_index", "--shards", "3", "--chunk", "1"],
                {"shards": 3, "chunk": 1}, _reverse_readable),
}
ROWS = 24


@pytest.fixture
def population(make_user, make_video):
    """ROWS likes over four videos, published and projected: every rebuild has ROWS rows or more to copy."""
    author = make_user()
    videos = [make_video(f"gl-{i}", author).video_id for i in range(4)]
    for n in range(ROWS):
        user = make_user()
        relation_set_state(user_id=user.pk, video_id=videos[n % 4], desired_state="LIKED", operation_id=f"gl-{n}")
    drain()
    from counting.services.snapshots import display_snapshot_refresh

    display_snapshot_refresh()
    return videos


def _row(lc, generation):
    return lc.model.objects.get(pk=generation)


def _backfilled(lc, generation) -> int:
    row = lc.model.objects.filter(pk=generation).first()
    return 0 if row is None else (row.progress.get("steps", {}).get("backfill") or {}).get("done", 0)


# --- a rebuild killed in the middle -----------------------------------------------------------------


@drills.scaled_pass_only()  # a process fault (SIGKILL of the run): on the deployment's topology (D141)
@pytest.mark.parametrize("user", list(USERS))
def test_a_rebuild_killed_in_the_middle_is_reclaimed_and_the_next_one_is_accepted(user, population):
    lc, job_kind, command, params, readable = USERS[user]
    active_before = lc.model.objects.get(status="ACTIVE").generation
    proc = drills.start(["manage.py", *command], GENERATION_THROTTLE_S="0.1", OPS_JOB_LEASE_S="2")
    try:
        generation = drills.wait_for(lambda: lc.model.objects.filter(status__in=BUILDING).values_list(
            "generation", flat=True).first(), what="the rebuild to start")
        drills.wait_for(lambda: _backfilled(lc, generation) >= 3, what="three chunks of the backfill")
    finally:
        output = drills.kill(proc)  # SIGKILL: no handler runs, the run cannot mark anything itself
    killed = _row(lc, generation)
    assert killed.status == "BACKFILLING", output
    job = OpsJob.objects.get(pk=killed.job_id)
    assert job.status == "RUNNING" and job.holder  # the dead slice's holder is still recorded

    # Counter-example: without the reclaim the building generation would stay forever (relation-cache
    # readers bypass Redis while it exists).
    if user == "relcache":
        assert readable() is None
    drills.wait_for(lambda: not Lease.objects.filter(resource=lc.lease_resource, expires_at__gte=timezone.now())
                    .exists(), what="the dead holder's lease to expire")
    report = jobs_sweep()
    assert job.pk in report.abandoned
    failed = _row(lc, generation)
    assert failed.status == "FAILED" and failed.failure_reason.startswith("abandoned")
    assert AuditRecord.objects.filter(action=f"{lc.audit_prefix}.rebuild_abandoned", target_id=str(generation),
                                      job_id=job.pk).exists()
    assert OpsJob.objects.get(pk=job.pk).status == "FAILED"
    assert readable() == active_before  # reads are on the ACTIVE generation

    # The next rebuild is accepted and runs to the end.
    row = rebuild_inline(job_kind, actor=TEST_ACTOR, params=params)
    assert (row.generation, row.status) == (generation + 1, "ACTIVE")
    assert _row(lc, active_before).status == "RETIRED"
    assert readable() == generation + 1


def test_a_start_also_reclaims_a_dead_run_without_the_sweeper(population):
    """The reclaim does not depend on the sweeper: starting a rebuild fails a building generation whose
    job is gone, and audits it."""
    from django.db import transaction

    with transaction.atomic(using="default"):
        orphan = generation_start(RELCACHE, actor=TEST_ACTOR, params={})  # no job runs it
    with transaction.atomic(using="default"):
        new = generation_start(RELCACHE, actor=TEST_ACTOR, params={})
    assert _row(RELCACHE, orphan.generation).status == "FAILED"
    assert new.generation == orphan.generation + 1
    assert AuditRecord.objects.filter(action="relcache.rebuild_abandoned", target_id=str(orphan.generation)).exists()


def test_a_second_rebuild_is_refused_while_one_is_alive(population):
    job_start(kind="relcache.rebuild", actor=TEST_ACTOR)  # queued: alive, waiting for a worker
    with pytest.raises(RebuildRunning) as refused:
        job_start(kind="relcache.rebuild", actor=TEST_ACTOR)
    assert refused.value.code == "relcache_rebuild_running"
    assert OpsJob.objects.count() == 1  # the refused start left no job behind


BAD_SIZES = [(user, name, value) for user, (lc, *_rest) in USERS.items() for name in lc.size_params
             for value in (0, -3, "2", True)]


@pytest.mark.parametrize(("user", "name", "value"), BAD_SIZES)
def test_a_bad_size_parameter_is_refused_before_anything_is_written(user, name, value):
    lc, job_kind, _command, params, _readable = USERS[user]
    generations_before = lc.model.objects.count()
    with pytest.raises(InvalidInput) as refused:
        job_start(kind=job_kind, actor=TEST_ACTOR, params={**params, name: value})
    assert refused.value.code == "invalid_parameter" and name in refused.value.message
    assert OpsJob.objects.count() == 0
    assert lc.model.objects.count() == generations_before
    assert not AuditRecord.objects.filter(action=f"{lc.audit_prefix}.rebuild_start").exists()


# --- the Celery time limit -----------------------------------------------------------------------------


@pytest.mark.parametrize("user", list(USERS))
def test_a_rebuild_that_hits_the_time_limit_fails_at_once_and_reads_stay(user, population, monkeypatch):
    lc, job_kind, _command, params, readable = USERS[user]
    active_before = lc.model.objects.get(status="ACTIVE").generation
    real = type(lc).backfill
    chunks = []

    def backfill_then_time_limit(self, ctx, cursor):
        chunks.append(cursor)
        if len(chunks) == 3:
            raise SoftTimeLimitExceeded()  # what Celery raises in the task when its soft limit passes
        return real(self, ctx, cursor)

    monkeypatch.setattr(type(lc), "backfill", backfill_then_time_limit)
    job = job_start(kind=job_kind, actor=TEST_ACTOR, params=params)
    run_job_task(job.pk)
    job.refresh_from_db()
    row = _row(lc, job.state["generation"])
    assert (job.status, row.status) == ("FAILED", "FAILED")
    assert "SoftTimeLimitExceeded" in row.failure_reason and "SoftTimeLimitExceeded" in job.last_error
    assert readable() == active_before
    monkeypatch.setattr(type(lc), "backfill", real)
    assert rebuild_inline(job_kind, actor=TEST_ACTOR, params=params).status == "ACTIVE"


# --- longer than the time limit: chunked, resumed slices ---------------------------------------------


def test_a_slice_is_far_below_the_celery_time_limits():
    assert settings.OPS_JOB_SLICE_S < settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] > settings.OPS_JOB_LEASE_S


@pytest.mark.parametrize("user", list(USERS))
def test_a_rebuild_runs_as_chunked_slices_each_resuming_where_the_last_stopped(user, population, settings):
    lc, job_kind, _command, params, _readable = USERS[user]
    settings.OPS_JOB_SLICE_S = 0  # every slice does one chunk, then parks: the most slices a run can take
    job = job_start(kind=job_kind, actor=TEST_ACTOR, params=params)
    generation = job.state["generation"]
    seen = []
    for _ in range(500):
        run_job_task(job.pk)
        job.refresh_from_db()
        row = _row(lc, generation)
        seen.append((row.status, row.progress.get("step"), row.progress.get("cursor"), job.done))
        if job.finished:
            break
    assert (job.status, row.status) == ("SUCCEEDED", "ACTIVE")
    assert job.slices == len(seen) > ROWS  # one chunk of one row per slice, at least
    dones = [d for *_x, d in seen]
    assert dones == sorted(dones)  # progress only moves forward
    cursors = [c for _s, step, c, _d in seen if step == "backfill" and c is not None]
    assert len(cursors) == len({str(c) for c in cursors})  # every slice started where the last one stopped
    assert row.progress["steps"]["backfill"]["done"] >= ROWS
    if user == "count_cache":  # every routed bucket row written once per pass, however many slices it took
        assert row.stats["rows_written"] == sum(row.stats["rows"].values()) + row.stats["caught_up_rows"]
        assert sum(row.stats["rows"].values()) >= ROWS // 2
    else:  # each relation scanned exactly once across all the slices
        assert row.stats["scanned"] == ROWS


@drills.scaled_pass_only()  # a process fault (a worker's hard time limit): on the deployment's topology (D141)
@pytest.mark.parametrize(("slice_s", "hard_s"), [("0.5", 4), ("60", 20)], ids=["sliced", "one_slice_counter_example"])
def test_a_rebuild_longer_than_the_time_limit_completes_on_a_real_worker(population, slice_s, hard_s):
    """A real Celery worker enforcing a 2 s soft / 4 s hard time limit runs a rebuild that needs far
    longer (one-row chunks, a pause between them): each 0.5 s slice persists its cursor and re-enqueues
    the next one, so no task ever meets the limit and the run ends ACTIVE. The counter-example removes
    the slicing (a 60 s slice): the soft time limit stops the task and the generation is FAILED, never left
    building. Its hard limit is 20 s, a backstop only: at 4 s a loaded machine's worker was sometimes killed while it
    still recorded the failure, leaving the job for a sweeper this test does not run."""
    from likes_project.celery import app

    # A task carries the time limits of whoever sends it: the worker (which sends every next slice) is
    # configured with 2 s / 4 s, and so is the first message.
    worker = drills.start(["-m", "celery", "-A", "likes_project", "worker", "-Q", "ops", "-c", "1",
                           "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"],
                          LIKES_TEST_NUDGES="1", OPS_JOB_SLICE_S=slice_s, GENERATION_THROTTLE_S="0.2",
                          CELERY_TASK_SOFT_TIME_LIMIT="2", CELERY_TASK_TIME_LIMIT=str(hard_s), OPS_JOB_LEASE_S="5")
    try:
        job = job_start(kind="relcache.rebuild", actor=TEST_ACTOR, params={"chunk": 1})
        app.send_task("opsjobs.run", args=[job.pk], queue="ops", soft_time_limit=2, time_limit=hard_s)
        # The sweeper runs too, as beat runs it: a worker the hard limit killed leaves its job to be abandoned.
        drills.wait_for(lambda: jobs_sweep() is not None and OpsJob.objects.get(pk=job.pk).finished, timeout_s=120,
                        what="the job to end")
    finally:
        output = drills.kill(worker)
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("ops")
    job.refresh_from_db()
    row = RelationCacheGeneration.objects.get(pk=job.state["generation"])
    if slice_s == "60":
        assert (job.status, row.status) == ("FAILED", "FAILED"), output
        # The soft limit's exception, or (on a loaded machine) the hard limit's kill that the sweeper found.
        assert "SoftTimeLimitExceeded" in row.failure_reason or "abandoned" in row.failure_reason, (
            row.failure_reason, output[-3000:])
        assert relation_selectors.cache_generation_for_reads() == row.previous_generation
        return
    assert (job.status, row.status) == ("SUCCEEDED", "ACTIVE"), output
    assert row.stats["scanned"] == ROWS
    assert job.slices >= 3
    assert (job.finished_at - job.started_at).total_seconds() > 4  # longer than the hard limit, yet not killed
    assert "TimeLimitExceeded" not in output


def test_the_failure_reason_names_the_exception_that_started_it():
    """A time limit that interrupts a query is followed by the driver's error while the block unwinds: the
    reason leads with the time limit (the counter-example above asserts it), then names what followed."""
    from billiard.exceptions import SoftTimeLimitExceeded
    from django.db import ProgrammingError

    from likes_project.generations.engine import failure_reason

    try:
        try:
            raise SoftTimeLimitExceeded()
        except SoftTimeLimitExceeded:
            raise ProgrammingError("can't change 'autocommit' now") from None
    except ProgrammingError as exc:
        assert failure_reason(exc) == "ProgrammingError: can't change 'autocommit' now"  # `from None` hides it
    try:
        try:
            raise SoftTimeLimitExceeded()
        except SoftTimeLimitExceeded as exc:
            raise ProgrammingError("can't change 'autocommit' now") from exc
    except ProgrammingError as exc:
        reason = failure_reason(exc)
    assert reason == "SoftTimeLimitExceeded: SoftTimeLimitExceeded() (then ProgrammingError: can't change " \
                     "'autocommit' now)"
