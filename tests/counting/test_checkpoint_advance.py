"""The checkpoint's advance under the consumer's lease (issue 34 §2): one statement that renews the lease, or gives
it up on a pass's last batch, and moves the checkpoint only while the grant is the lease and never backwards."""

from __future__ import annotations

import pytest

from likes_project import leases
from likes_project.eventlog import streams
from likes_project.eventlog.consumer import checkpoint_advance
from likes_project.eventlog.models import ConsumerCheckpoint
from tests.counting.helpers import lease_expire, publish_all
from tests.counting.test_projection import like_published
from tests.relations.helpers import cmd

# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__", transaction=True)]


@pytest.fixture
def video(make_user, make_video):
    return make_video("vid-c", make_user())


def test_the_checkpoint_renews_the_lease_in_its_own_transaction_and_only_for_its_holder(make_user, video):
    """Issue 34 §2: a batch's checkpoint carries the lease's renewal (one commit, not two). Renewed only while the
    grant is the lease: the old holder's advance neither moves the checkpoint nor extends the new holder's lease."""
    from likes_project.eventlog.models import Lease

    p = like_published(make_user(), video.video_id)
    entries = streams.read_after(p, "0-0", 10)
    ConsumerCheckpoint.objects.get_or_create(consumer="count", partition=p)
    old = leases.lease_acquire(resource=f"consumer:count:{p}", holder="old", ttl_s=1)
    lease_expire(old)  # expired, nobody took it: still the lease, so its checkpoint renews it
    assert checkpoint_advance(consumer="count", partition=p, grant=old, to_id=entries[-1].entry_id, applied=1,
                              renew_ttl_s=300) is True
    assert leases.lease_is_current(old)
    lease_expire(old)
    new = leases.lease_acquire(resource=old.resource, holder="new", ttl_s=1)
    before = Lease.objects.get(resource=old.resource).expires_at
    assert checkpoint_advance(consumer="count", partition=p, grant=old, to_id=entries[-1].entry_id, applied=0,
                              renew_ttl_s=300) is False
    assert Lease.objects.get(resource=old.resource).expires_at == before and leases.lease_is_current(new)


def test_the_checkpoint_never_moves_backwards_and_the_last_batch_gives_the_lease_up_with_it(make_user, video):
    """Issue 34 §2: the advance is one statement. It refuses to move the checkpoint back (an error, not a silent
    write), and `release` expires the lease in that statement, so the next holder may start at once."""

    user = make_user()
    p = like_published(user, video.video_id)
    cmd(user, video.video_id, "UNLIKED")  # the same (user, video): the same partition
    publish_all()
    entries = streams.read_after(p, "0-0", 10)
    assert len(entries) == 2
    ConsumerCheckpoint.objects.get_or_create(consumer="count", partition=p)
    grant = leases.lease_acquire(resource=f"consumer:count:{p}", holder="one", ttl_s=30)
    assert checkpoint_advance(consumer="count", partition=p, grant=grant, to_id=entries[1].entry_id, applied=2)
    with pytest.raises(RuntimeError, match="backwards"):
        checkpoint_advance(consumer="count", partition=p, grant=grant, to_id=entries[0].entry_id, applied=0)
    cp = ConsumerCheckpoint.objects.get(consumer="count", partition=p)
    assert (cp.last_done_id, cp.applied_total) == (entries[1].entry_id, 2)
    assert checkpoint_advance(consumer="count", partition=p, grant=grant, to_id=entries[1].entry_id, applied=0,
                              release=True)
    assert not leases.lease_is_current(grant) and leases.lease_is_ours(grant)
    assert leases.lease_acquire(resource=grant.resource, holder="two", ttl_s=30).token == grant.token + 1
