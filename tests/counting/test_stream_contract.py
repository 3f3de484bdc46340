"""The stream partitioning contract is stored data with pinned outputs (architecture §7)."""

import pytest

from likes_project.eventlog import streams
from likes_project.eventlog.models import StreamContract
from likes_project.eventlog.services import stream_contract_ensure

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__")]

# aggregateKey -> partition under contract v1 (sha256-be64, seed "likes-stream-v1", utf8, P = 8)
GOLDEN = {"7:V9001": 4, "1:v-public-1": 5, "123456:viral": 1}


def test_stream_contract_v1_golden_vectors():
    c = streams.active_contract()
    assert (c.version, c.topic, c.hash_algorithm, c.hash_seed, c.partitions) == (
        1, "likes:events", "sha256-be64", "likes-stream-v1", 8)
    assert {k: streams.partition_for(k) for k in GOLDEN} == GOLDEN


def test_changing_the_setting_never_changes_the_stored_contract(settings):
    settings.STREAM_PARTITIONS = 16
    assert stream_contract_ensure().partitions == 8
    streams.reset_cache()
    assert streams.active_contract().partitions == 8
    assert StreamContract.objects.count() == 1


def test_one_relation_always_maps_to_one_partition():
    assert len({streams.partition_for("42:some-video") for _ in range(5)}) == 1
    assert {streams.partition_for(f"{u}:v") for u in range(200)} == set(range(8))


def test_stream_keys_carry_a_hash_tag_per_partition(settings):
    assert streams.stream_key(3) == f"{settings.LIKES_REDIS_PREFIX}:events:{{3}}"


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_streams_are_trimmed_only_below_every_checkpoint_and_the_window(make_user, make_video):
    import uuid

    from likes_project.eventlog.services import streams_trim
    from relations.services.commands import relation_set_state
    from tests.counting.helpers import consume_everything, project_all, publish_all

    author = make_user()
    make_video("trim-v", author)
    users = [make_user() for _ in range(6)]
    for u in users:
        relation_set_state(user_id=u.pk, video_id="trim-v", desired_state="LIKED", operation_id=uuid.uuid4().hex)
    publish_all()
    total = sum(streams.length(p) for p in streams.all_partitions())
    assert total == 6
    assert sum(streams_trim(retention_s=0).values()) == 0  # no consumer has read anything yet
    project_all()
    # issue 9 §3: the consumers that have no checkpoint row yet (reverse, relcache) hold the trim back
    assert sum(streams_trim(retention_s=0).values()) == 0
    consume_everything()
    assert sum(streams_trim(retention_s=3600).values()) == 0  # consumed, but inside the window
    assert sum(streams_trim(retention_s=0).values()) == 6  # consumed and outside the window
    assert sum(streams.length(p) for p in streams.all_partitions()) == 0
