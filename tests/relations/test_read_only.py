"""Read-only likes (issue 14 §3, DEG-1 step 6): while the switch is set every like command answers 503
`likes_read_only` with Retry-After and the caller's current relation, and nothing is written on any relation
shard; reads are unaffected. Clearing it restores commands. Counter-example: the same request without the
switch writes its command and outbox rows."""

from __future__ import annotations

import pytest
from django.conf import settings

from likes_project.audit.models import AuditRecord
from likes_project.audit.services import system_actor
from likes_project.switches import switch_set
from relations.errors import LikesReadOnly
from relations.models import LikeCommand, LikeRelation, OutboxEvent
from relations.services.commands import relation_set_state
from tests.factories import put_like
from tests.relations.helpers import assert_command_shape, assert_error, body_of

pytestmark = [pytest.mark.topology_independent, pytest.mark.django_db(databases="__all__")]

ACTOR = system_actor("test-operator")
SHARDS = list(settings.RELATION_SHARD_ALIASES)


def shard_counts() -> dict[tuple[str, str], int]:
    """Rows of the command, outbox and relation tables, per relation shard."""
    return {(alias, model.__name__): model.objects.using(alias).count()
            for alias in SHARDS for model in (LikeCommand, OutboxEvent, LikeRelation)}


def read_only(paused: bool, reason: str = "incident 42: shard failover") -> None:
    switch_set(kind="read-only", key=None, paused=paused, reason=reason, actor=ACTOR)


@pytest.fixture
def likers(make_user, make_video):
    """One user per relation shard, each of whom already likes `ro-v` (v1)."""
    video = make_video("ro-v", make_user())
    users = [make_user(shard=alias) for alias in SHARDS]
    for u in users:
        relation_set_state(user_id=u.pk, video_id=video.video_id, desired_state="LIKED",
                           operation_id=f"ro-first-{u.pk}")
    return video, users


def test_read_only_refuses_every_like_command_with_503_and_the_current_relation_and_writes_nothing(
        api, make_user, make_video, likers):
    video, users = likers
    other = make_video("ro-other", make_user())
    read_only(True)
    before = shard_counts()

    for u in users:
        client = api.as_user(u)
        # an unlike of the like it holds: refused, and the body says it still likes the video (v1)
        data = assert_error(put_like(client, video.video_id, "UNLIKED", f"ro-unlike-{u.pk}"), 503, "likes_read_only")
        assert data["currentRelation"] == {"state": "LIKED", "relationVersion": 1}
        assert data["retryAfterSeconds"] == settings.READ_ONLY_RETRY_AFTER_S
        resp = put_like(client, other.video_id, "LIKED", f"ro-like-{u.pk}")
        data = assert_error(resp, 503, "likes_read_only")
        assert resp["Retry-After"] == str(settings.READ_ONLY_RETRY_AFTER_S)
        assert data["currentRelation"] == {"state": "UNLIKED", "relationVersion": 0}  # never acted on it
        # a retry of an operation that succeeded before is a command too
        assert_error(put_like(client, video.video_id, "LIKED", f"ro-first-{u.pk}"), 503, "likes_read_only")
        # the service itself refuses, whoever calls it
        with pytest.raises(LikesReadOnly):
            relation_set_state(user_id=u.pk, video_id=other.video_id, desired_state="LIKED", operation_id="ro-svc")

    assert shard_counts() == before  # no command, outbox or relation row on any shard

    # reads are unaffected
    for u in users:
        client = api.as_user(u)
        resp = client.get(f"/v1/videos/{video.video_id}/like-relation")
        assert resp.status_code == 200
        assert body_of(resp) == {"videoId": video.video_id, "state": "LIKED", "relationVersion": 1}
        resp = client.get(f"/v1/like-operations/ro-first-{u.pk}")
        assert resp.status_code == 200 and body_of(resp)["state"] == "LIKED"


def test_clearing_read_only_restores_commands_and_without_it_the_same_request_writes(api, likers):
    video, users = likers
    u = users[0]
    alias = SHARDS[0]
    client = api.as_user(u)
    read_only(True)
    assert_error(put_like(client, video.video_id, "UNLIKED", "ro-later"), 503, "likes_read_only")
    before = shard_counts()

    read_only(False, reason="incident 42 over")
    resp = put_like(client, video.video_id, "UNLIKED", "ro-later")  # the same request, now accepted
    assert resp.status_code == 200, resp.content
    data = body_of(resp)
    assert_command_shape(data)
    assert (data["state"], data["relationVersion"], data["changed"], data["replayed"]) == ("UNLIKED", 2, True, False)
    after = shard_counts()
    assert after[(alias, "LikeCommand")] == before[(alias, "LikeCommand")] + 1
    assert after[(alias, "OutboxEvent")] == before[(alias, "OutboxEvent")] + 1
    assert {k: v for k, v in after.items() if k[0] != alias} == {k: v for k, v in before.items() if k[0] != alias}


def test_setting_and_clearing_read_only_is_audited_and_needs_a_reason(api, likers):
    from likes_project.errors import InvalidInput
    from relations.models import LikesReadOnlySwitch

    with pytest.raises(InvalidInput) as refused:
        switch_set(kind="read-only", key=None, paused=True, reason="  ", actor=ACTOR)
    assert refused.value.code == "reason_required"
    assert not LikesReadOnlySwitch.objects.exists() and not AuditRecord.objects.filter(target_type="likes").exists()

    read_only(True, reason="drill")
    read_only(False, reason="drill over")
    records = list(AuditRecord.objects.filter(target_type="likes").order_by("id"))
    assert [(r.action, r.target_id, r.actor, r.params["reason"]) for r in records] == [
        ("likes.read_only_pause", "global", "test-operator", "drill"),
        ("likes.read_only_resume", "global", "test-operator", "drill over"),
    ]
    row = LikesReadOnlySwitch.objects.get()
    assert (row.scope, row.paused, row.updated_by) == ("global", False, "test-operator")
