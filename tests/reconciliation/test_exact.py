"""Online coverage against a projection that is ahead of the source (T27), exact mode's refusals when a
barrier is missing (T28), what commands see while an exact barrier holds, and what only exact mode can
claim (issue 11 §1, REC-4, REC-5), each with its counter-example."""

from __future__ import annotations

import pytest

from counting.services.projection import COUNT_CONSUMER
from likes_project import leases, metrics
from likes_project.audit.models import AuditRecord
from likes_project.eventlog.services import consumer_switch_set
from likes_project.opsjobs.services import job_run_inline
from reconciliation.models import RunStatus
from reconciliation.services import cut as cut_module
from reconciliation.services import repair
from relations import routing
from relations.models import LikeRelation
from relations.services import write_barrier
from tests.counting.helpers import drain, lease_expire
from tests.factories import TEST_ACTOR
from tests.reconciliation import helpers as live

pytestmark = [pytest.mark.topology, pytest.mark.schema, *live.LIVE_STORES]

GLOBAL_KEY = 1280000594  # write_barrier._GLOBAL_NS: a shard's global key; +1 is the per-video namespace


def _liked_then_unliked(api, make_user, make_video, video_id: str):
    """A video with three likes; its first liker then unlikes (v2), all drained: the projection holds v2."""
    video, users = live.api_liked_video(api, make_user, make_video, video_id, 3)
    u = users[0]
    assert live.api_like(api, u, video_id, "UNLIKED").status_code == 200
    drain()
    return video, users, u


def _source_back_to_v1(user, video_id: str) -> None:
    """The source read taken before v2 committed: the relation row as it was at v1 (LIKED)."""
    assert live.sql(routing.alias_for_user(user.pk), f"UPDATE {LikeRelation._meta.db_table} SET state = 'LIKED', "
               "relation_version = 1 WHERE user_id = %s AND video_id = %s", [user.pk, video_id]) == 1


def _refused(run, because: str) -> None:
    assert run.status == RunStatus.REFUSED, (run.status, run.refused_because, list(run.diffs.values()))
    assert because in run.refused_because
    assert run.diffs_found == 0 and not run.diffs.exists()  # nothing is claimed
    finish = AuditRecord.objects.get(action="reconcile.finish", target_id=str(run.pk))
    assert finish.outcome == "refused" and because in finish.params["refusedBecause"]


# --- T27 -----------------------------------------------------------------------------------------


# spec §7 drill 14: coverage with the projection ahead of the source.
def test_t27_a_projected_version_above_the_source_passes_coverage_with_the_outbox_evidence(
        api, make_user, make_video):
    video, _users, u = _liked_then_unliked(api, make_user, make_video, "ex-t27")
    _source_back_to_v1(u, video.video_id)
    run = live.run_check("coverage", videos=[video.video_id])
    # The projection's v2 UNLIKED is proven by the outbox row of v2: neither a mismatch nor a gap.
    assert (run.status, run.diffs_found) == ("PASSED", 0), list(run.diffs.values())
    assert run.checked == 3


def test_t27_counter_example_a_projected_version_no_outbox_row_has_fails_coverage(api, make_user, make_video):
    video, _users, u = _liked_then_unliked(api, make_user, make_video, "ex-t27-no")
    _source_back_to_v1(u, video.video_id)
    live.projection_set_version(u.pk, video.video_id, 7)  # v7 UNLIKED: no source transaction ever wrote it
    run = live.run_check("coverage", videos=[video.video_id])
    assert run.status == "FAILED"
    [diff] = run.diffs.all()
    assert diff.layer == "projection"
    [row] = diff.detail["relations"]
    assert row["userId"] == u.pk and row["source"] == ["LIKED", 1] and row["projected"] == ["UNLIKED", 7]
    assert row["verdict"] == "projected version above the source without outbox evidence"


def test_t27_counter_example_an_outbox_row_of_another_state_is_no_evidence(api, make_user, make_video):
    video, _users, u = _liked_then_unliked(api, make_user, make_video, "ex-t27-state")
    _source_back_to_v1(u, video.video_id)
    live.projection_set_version(u.pk, video.video_id, 2, state="LIKED")  # the outbox's v2 says UNLIKED
    run = live.run_check("coverage", videos=[video.video_id])
    assert run.status == "FAILED"
    [diff] = run.diffs.all()
    assert diff.detail["relations"][0]["verdict"] == "projected version above the source without outbox evidence"


# --- T28 -----------------------------------------------------------------------------------------


def test_t28_exact_is_refused_while_the_count_consumer_is_paused(api, make_user, make_video):
    video, _ = live.api_liked_video(api, make_user, make_video, "ex-paused", 2)
    consumer_switch_set(consumer=COUNT_CONSUMER, paused=True, reason="test", actor=TEST_ACTOR)
    _refused(live.run_check("exact", videos=[video.video_id]), "paused")
    ran = live.manage("reconcile", "--mode", "exact", "--video", video.video_id, "--json")
    assert ran.code == 2 and ran.json["status"] == "REFUSED" and "paused" in ran.json["refusedBecause"]
    # Counter-example: resumed, the same check passes.
    consumer_switch_set(consumer=COUNT_CONSUMER, paused=False, reason="test", actor=TEST_ACTOR)
    assert live.run_check("exact", videos=[video.video_id]).status == "PASSED"


def test_t28_exact_is_refused_when_a_lease_changes_hands_during_the_barrier(api, make_user, make_video, monkeypatch):
    video, _ = live.api_liked_video(api, make_user, make_video, "ex-lease", 2)
    taken: list[leases.LeaseGrant] = []

    def another_worker_takes_over(grants):
        # The cut's grant of one partition runs out and another consumer takes the partition.
        lease_expire(grants[0])
        other = leases.lease_acquire(resource=grants[0].resource, holder="another-worker", ttl_s=30)
        assert other is not None and other.token > grants[0].token
        taken.append(other)

    monkeypatch.setattr(cut_module, "after_leases_taken", another_worker_takes_over)
    _refused(live.run_check("exact", videos=[video.video_id]), "a lease changed hands")
    leases.lease_release(taken.pop())
    ran = live.manage("reconcile", "--mode", "exact", "--video", video.video_id, "--json")
    assert ran.code == 2 and "a lease changed hands" in ran.json["refusedBecause"], ran.out
    leases.lease_release(taken.pop())
    # Counter-example: the leases stay where the cut put them.
    seen = []
    monkeypatch.setattr(cut_module, "after_leases_taken", seen.append)
    run = live.run_check("exact", videos=[video.video_id])
    assert run.status == "PASSED" and len(seen) == 1
    assert not any(leases.lease_is_current(g) for g in seen[0])  # and the cut gave them back at its end


@pytest.mark.parametrize("scope", ["all", "video"])
def test_t28_exact_is_refused_when_the_write_barrier_cannot_be_established(api, make_user, make_video, settings,
                                                                           scope):
    video, _ = live.api_liked_video(api, make_user, make_video, f"ex-nobarrier-{scope}", 2)
    settings.RECONCILE_BARRIER_ACQUIRE_MS = 100
    settings.RECONCILE_BARRIER_MAX_MS = 100
    first, alias = settings.RELATION_SHARD_ALIASES[0], settings.RELATION_SHARD_ALIASES[-1]
    # A like command's transaction in flight on the last shard: it holds the shared lock the barrier
    # needs there (the barrier, raised in shard order, has already taken the first shard's).
    if scope == "all":
        held = ("SELECT pg_advisory_xact_lock_shared(%s, 0)", [GLOBAL_KEY])
        argv = ["--all"]
    else:
        held = ("SELECT pg_advisory_xact_lock_shared(%s, hashtext(%s))", [GLOBAL_KEY + 1, video.video_id])
        argv = ["--video", video.video_id]
    with live.shard_transaction_holding(alias, *held):
        run = live.run_check("exact", videos=None if scope == "all" else [video.video_id], all_videos=scope == "all")
        _refused(run, f"the write barrier on {alias} was not reached")
        ran = live.manage("reconcile", "--mode", "exact", *argv, "--json")
        assert ran.code == 2 and ran.json["status"] == "REFUSED" and ran.json["refusedBecause"], ran.out
        # What the refused barrier had taken on the first shard was released: commands go on there.
        newcomer = make_user(shard=first)
        assert live.Background(live.api_like, api, newcomer, video.video_id).join().status_code == 200
    # Counter-example: once that transaction ended, the barrier is established and the check passes.
    drain()
    run = live.run_check("exact", videos=[video.video_id])
    assert run.status == "PASSED" and run.barrier_held_ms is not None, run.refused_because


# --- commands meeting a barrier ------------------------------------------------------------------


def test_a_command_meeting_the_barrier_waits_and_is_applied_once_it_lowers(api, make_user, make_video, settings):
    video, _ = live.api_liked_video(api, make_user, make_video, "ex-wait", 1)
    settings.RECONCILE_BARRIER_MAX_MS = 30_000  # a bound; the barrier is lowered as soon as the command waits
    raised, waits = [], metrics.value("likes_write_barrier_waits_total")

    def hold_until_a_command_waits():
        barrier = write_barrier.barrier_raise([video.video_id], timeout_ms=1000)
        raised.append(barrier)
        try:
            live.wait_until(lambda: metrics.value("likes_write_barrier_waits_total") > waits, what="a waiting command")
        finally:
            write_barrier.barrier_lower(barrier)

    holder = live.Background(hold_until_a_command_waits)
    live.wait_until(lambda: raised, what="the barrier")
    u = make_user()
    resp = live.api_like(api, u, video.video_id)
    holder.join()
    assert resp.status_code == 200, resp.content
    assert resp.json()["state"] == "LIKED" and resp.json()["changed"] is True
    assert metrics.value("likes_write_barrier_waits_total") > waits  # it did meet the barrier
    assert u.pk in live.facts_liked(video.video_id)
    drain()
    assert live.displayed(video.video_id) == 2


def test_a_command_meeting_the_barrier_past_its_limit_gets_503_write_barrier_and_writes_nothing(
        api, make_user, make_video, settings):
    video, _ = live.api_liked_video(api, make_user, make_video, "ex-503", 1)
    elsewhere = make_video("ex-503-b", make_user())
    settings.RECONCILE_BARRIER_MAX_MS = 100
    u = make_user()
    barrier = write_barrier.barrier_raise([video.video_id], timeout_ms=1000)
    try:
        resp = live.Background(live.api_like, api, u, video.video_id, key="ex-503-op").join()
        other = live.Background(live.api_like, api, u, elsewhere.video_id, key="ex-503-other").join()
    finally:
        write_barrier.barrier_lower(barrier)
    assert resp.status_code == 503, resp.content
    body = resp.json()
    assert body["code"] == "write_barrier" and body["message"] and body["retryAfterSeconds"] == 1
    assert resp["Retry-After"] == "1"
    assert live.shard_writes(u.pk, video.video_id) == (0, 0, 0)  # its transaction rolled back: nothing written
    assert other.status_code == 200  # the barrier holds only its own videos
    # The same operation, retried after the barrier: applied once.
    again = live.api_like(api, u, video.video_id, key="ex-503-op")
    assert again.status_code == 200 and again.json()["changed"] is True
    assert live.shard_writes(u.pk, video.video_id) == (1, 1, 1)
    drain()
    assert live.displayed(video.video_id) == 2


def test_commands_during_exact_runs_are_never_500_and_lose_nothing(api, make_user, make_video, settings):
    video, first = live.api_liked_video(api, make_user, make_video, "ex-busy", 2)
    settings.RECONCILE_BARRIER_MAX_MS = 50  # some commands meet a barrier past their limit
    users = [make_user() for _ in range(30)]
    answers: dict[int, object] = {}

    def like_all():
        for u in users:
            answers[u.pk] = live.api_like(api, u, video.video_id, key=f"busy-{u.pk}")

    liker = live.Background(like_all)
    runs = []
    while liker.thread.is_alive() and len(runs) < 25:
        runs.append(live.run_check("exact", videos=[video.video_id]))
    liker.join()
    assert runs and all(r.status in ("PASSED", "REFUSED") for r in runs), [(r.status, r.diffs_found) for r in runs]
    assert all(r.refused_because for r in runs if r.status == "REFUSED")
    statuses = {resp.status_code for resp in answers.values()}
    assert statuses <= {200, 503}, statuses
    accepted = {pk for pk, resp in answers.items() if resp.status_code == 200}
    refused = {pk for pk, resp in answers.items() if resp.status_code == 503}
    for pk in refused:
        assert answers[pk].json()["code"] == "write_barrier" and answers[pk]["Retry-After"]
        assert live.shard_writes(pk, video.video_id) == (0, 0, 0)
    assert live.facts_liked(video.video_id) == accepted | {u.pk for u in first}
    for u in users:  # a refused one is retried with its key; an accepted one replays
        resp = live.api_like(api, u, video.video_id, key=f"busy-{u.pk}")
        assert resp.status_code == 200 and resp.json()["replayed"] is (u.pk in accepted)
    drain()
    assert live.displayed(video.video_id) == 32
    assert live.run_check("exact", videos=[video.video_id]).status == "PASSED"


# --- what only exact mode claims -------------------------------------------------------------------


def test_exact_finds_what_the_online_modes_cannot_claim_and_passes_after_the_repair(api, make_user, make_video):
    video, _users, u = _liked_then_unliked(api, make_user, make_video, "ex-only")
    _source_back_to_v1(u, video.video_id)  # the facts say v1 LIKED; the projection v2 UNLIKED
    assert live.run_check("identity", videos=[video.video_id]).status == "PASSED"
    assert live.run_check("coverage", videos=[video.video_id]).status == "PASSED"  # v2 has its outbox evidence
    exact = live.run_check("exact", videos=[video.video_id])
    assert exact.status == "FAILED"
    [diff] = exact.diffs.all()
    assert (diff.layer, diff.expected, diff.actual) == ("projection", 3, 2)
    assert diff.detail["relations"] == [{"userId": u.pk, "source": ["LIKED", 1], "projected": ["UNLIKED", 2],
                                         "verdict": "differs at the cut"}]
    req = repair.repair_request(actor=live.REQUESTER, source="facts", reason="exact diff", diff_ids=[diff.pk])
    req = repair.repair_approve(repair_id=req.pk, actor=live.APPROVER)
    job_run_inline(req.job_id)
    req.refresh_from_db()
    assert req.status == "SUCCEEDED", (req.error, req.result)
    assert req.result["layers"]["projection"] == [video.video_id]
    assert live.run_check("exact", videos=[video.video_id]).status == "PASSED"
    assert live.displayed(video.video_id) == 3 == len(live.facts_liked(video.video_id))
