"""A change of the bucket contract (issue 13 §5; BKT-6, T20): a new bucket space, a generation built on it from
the facts and caught up while commands go on, the same count of every video in both generations at the switch
barrier, the exact reconciliation after the switch; refusals that write nothing; the command's contract."""

from __future__ import annotations

import pytest

from counting import routing as count_routing
from counting.models import BucketMigration, CountBucketSpace, CountProjectionGeneration
from counting.services.migration import ledger
from likes_project.errors import DomainError
from likes_project.eventlog import streams
from likes_project.opsjobs.models import OpsJob
from likes_project.opsjobs.services import job_run_inline, job_start
from reconciliation.jobs import BUCKET_SPACE_JOB
from reconciliation.services.recovery import bucket_space
from reconciliation.services.recovery import generation as recovery_generation
from tests.counting.helpers import drain, publish_all
from tests.reconciliation import helpers as live

pytestmark = [pytest.mark.topology, pytest.mark.schema, *live.LIVE_STORES]


# spec §7 drill 10: V changed, switched only through a shadow generation.
def test_a_bucket_space_switch_under_live_load_gives_the_same_counts_in_both_generations(
        api, make_user, make_video):
    videos = [f"bs-{i}" for i in range(4)]
    for v in videos:
        live.api_liked_video(api, make_user, make_video, v, 5)
    users = [make_user() for _ in range(16)]
    unliker = users[0]

    def traffic():
        for i, u in enumerate(users):
            assert live.api_like(api, u, videos[i % len(videos)]).status_code == 200
            drain()
        assert live.api_like(api, unliker, videos[0], "UNLIKED").status_code == 200
        drain()

    old = count_routing.load_generation()
    during = live.Background(traffic)
    job = job_run_inline(job_start(kind=BUCKET_SPACE_JOB, actor=live.OPERATOR, params={"virtualBuckets": 4096}).pk)
    during.join()
    assert job.status == "SUCCEEDED", job.last_error
    report = job.result
    assert report["virtualBuckets"] == 4096 and report["videosCompared"] >= len(videos)
    assert report["exactRun"]["status"] == "PASSED", report["exactRun"]
    new = count_routing.load_generation()
    assert (new.generation, new.space.version, new.space.virtual_buckets) == (report["generation"], 2, 4096)
    assert CountProjectionGeneration.objects.get(pk=old.generation).status == "RETIRED"  # still readable
    assert CountBucketSpace.objects.get(version=1).virtual_buckets == old.space.virtual_buckets  # never edited
    drain()
    assert sum(len(live.facts_liked(v)) for v in videos) == 4 * 5 + len(users) - 1  # every acknowledged like
    live.counts_match_the_facts(videos)


def test_the_switch_barrier_holds_while_the_live_consumer_lags_the_stream(api, make_user, make_video, monkeypatch):
    """The shadow generation is replayed up to the live consumer's checkpoints, never past them. A like published
    after the drain and not yet consumed live is in neither generation at the barrier, and reaches the new one through
    the live consumer after the switch. Before, the replay read to the stream head: the shadow counted a like the live
    generation had not yet, and the barrier refused a correct change (drill 10's "sometimes refused")."""
    live.api_liked_video(api, make_user, make_video, "bs-lag", 3)
    late, replay = make_user(), recovery_generation._replay

    def replay_after_a_late_like(gen, positions, **kw):
        if not late.liked:
            late.liked = live.api_like(api, late, "bs-lag").status_code == 200
            publish_all()  # in the stream; no live count pass runs in this test until the exact run's drain
        return replay(gen, positions, **kw)

    late.liked = False
    monkeypatch.setattr(recovery_generation, "_replay", replay_after_a_late_like)
    job = job_run_inline(job_start(kind=BUCKET_SPACE_JOB, actor=live.OPERATOR, params={"virtualBuckets": 256}).pk)
    assert late.liked
    assert job.status == "SUCCEEDED", job.last_error
    assert job.result["exactRun"]["status"] == "PASSED", job.result["exactRun"]
    assert count_routing.load_generation().space.virtual_buckets == 256
    drain()
    assert len(live.facts_liked("bs-lag")) == 4
    live.counts_match_the_facts(["bs-lag"])


def test_a_switch_refuses_a_barrier_check_when_the_new_generation_is_past_the_live_consumer(api, make_user,
                                                                                           make_video):
    """The guard behind the test above: a caller that replayed past the live checkpoints gets a refusal that names the
    cause, before any check or write, and the count leases are given back."""
    live.api_liked_video(api, make_user, make_video, "bs-ahead", 1)
    assert live.api_like(api, make_user(), "bs-ahead").status_code == 200
    publish_all()  # in the stream, not consumed live
    active = count_routing.load_generation()
    heads = {p: streams.last_generated_id(p) for p in streams.all_partitions()}
    checked = []
    with pytest.raises(recovery_generation.RestoreFailed, match="past the live consumer"):
        recovery_generation.generation_switch(active, active, heads, token=1, say=print, what="test",
                                              at_barrier=checked.append)
    assert checked == [] and count_routing.load_generation().generation == active.generation
    drain()  # the leases were released: the live consumer passes again
    live.counts_match_the_facts(["bs-ahead"])


@pytest.mark.parametrize("params,code", [({"virtualBuckets": 0}, "invalid_vbuckets"),
                                         ({"virtualBuckets": 1 << 20}, "invalid_vbuckets"),
                                         ({"virtualBuckets": "many"}, "invalid_vbuckets"),
                                         ({"virtualBuckets": 64, "seed": "x" * 65}, "invalid_seed")])
def test_a_bad_request_is_refused_before_a_job_or_a_bucket_space_exists(params, code):
    with pytest.raises(DomainError) as info:
        job_start(kind=BUCKET_SPACE_JOB, actor=live.OPERATOR, params=params)
    assert info.value.code == code
    assert not OpsJob.objects.filter(kind=BUCKET_SPACE_JOB).exists()
    assert list(CountBucketSpace.objects.values_list("version", flat=True)) == [1]


def test_a_bucket_space_change_waits_for_an_unfinished_migration():
    ledger.migration_plan(target="cnt_02", buckets="0-3", reason="x", actor=live.REQUESTER)
    with pytest.raises(bucket_space.BucketSpaceRefused):
        job_start(kind=BUCKET_SPACE_JOB, actor=live.OPERATOR, params={"virtualBuckets": 64})
    assert BucketMigration.objects.count() == 1 and CountBucketSpace.objects.count() == 1


def test_the_command_prints_the_new_space_and_refuses_bad_input_with_a_code(api, make_user, make_video):
    live.api_liked_video(api, make_user, make_video, "bs-cli", 3)
    approver = live.member_of("likes-approver")
    bad = live.manage("bucket_space_create", "--vbuckets", "0", "--actor", approver.username, "--json")
    assert bad.code == 1 and bad.json["code"] == "invalid_vbuckets"
    ran = live.manage("bucket_space_create", "--vbuckets", "256", "--seed", "s2", "--actor", approver.username,
                      "--json")
    assert ran.code == 0, ran.err
    out = ran.json
    assert (out["status"], out["bucketSpaceVersion"], out["virtualBuckets"], out["seed"]) == ("ACTIVE", 2, 256, "s2")
    assert out["exactRun"]["status"] == "PASSED"
    viewer = live.member_of("likes-viewer")
    denied = live.manage("bucket_space_create", "--vbuckets", "64", "--actor", viewer.username, "--json")
    assert denied.code == 1 and denied.json["code"] == "permission_denied"
