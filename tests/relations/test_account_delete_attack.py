"""Account deletion cannot be defeated by its own victim (issue 10 §1).

Before the fix the deletion withdrew each like under operation id `account-delete:<uid>:<vid>` inside the
user's own idempotency space, which the API's Idempotency-Key alphabet accepts. A user about to be deleted
could plant that key first: with `UNLIKED` (then like again under another key) the deletion replayed the
stored no-op and the like stayed counted for good; with `LIKED` the deletion raised IdempotencyKeyReused
and stopped at that video while its audit record said "applied". The deletion now applies its withdrawals
through a system path under ids of a namespace the API refuses, and its audit records what happened."""

from __future__ import annotations

import json

import pytest

from likes_project.audit.models import AuditRecord
from likes_project.errors import InvalidInput
from relations import validation
from relations.services import accounts
from relations.services.accounts import account_delete, delete_operation_id
from tests.counting.helpers import bucket_sum, drain_all
from tests.factories import TEST_ACTOR
from tests.relations.helpers import relation_row

pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def put_state(client, video_id: str, state: str, key: str):
    return client.put(f"/v1/videos/{video_id}/like-relation", data=json.dumps({"desiredState": state}),
                      content_type="application/json", HTTP_IDEMPOTENCY_KEY=key)


def old_scheme_key(user_id: int, video_id: str) -> str:
    return f"account-delete:{user_id}:{video_id}"  # what the deletion used before the fix


@pytest.mark.parametrize("planted", ["UNLIKED", "LIKED"])
def test_a_planted_deletion_key_does_not_keep_a_like_counted(make_user, make_video, author, api, planted):
    victim = make_user()
    videos = ["ada-1", "ada-2", "ada-3"]
    for vid in videos:
        make_video(vid, author)
    client = api.as_user(victim)
    attacked = videos[1]
    if planted == "UNLIKED":
        # The planted no-op under the old deletion id, then the like under a fresh key.
        assert put_state(client, attacked, "UNLIKED", old_scheme_key(victim.pk, attacked)).status_code == 200
    for vid in videos:
        key = old_scheme_key(victim.pk, vid) if planted == "LIKED" and vid == attacked else f"k-{vid}"
        assert put_state(client, vid, "LIKED", key).status_code == 200
    drain_all()
    assert [bucket_sum(v) for v in videos] == [1, 1, 1]

    result = account_delete(user_id=victim.pk, actor=TEST_ACTOR)

    assert (result.scanned, result.unliked, result.skipped, result.failed) == (3, 3, 0, 0)
    assert relation_row(victim.pk, attacked).state == "UNLIKED"  # the deletion did not stop at it
    drain_all()
    assert [bucket_sum(v) for v in videos] == [0, 0, 0]  # and nothing stays counted
    done = AuditRecord.objects.get(action="account.delete.withdrawn", target_id=str(victim.pk))
    assert done.outcome == "applied" and (done.params["unliked"], done.params["failed"]) == (3, 0)


def test_the_api_can_never_produce_a_deletion_operation_id(make_user, make_video, author, api):
    victim = make_user()
    make_video("ada-ns", author)
    key = delete_operation_id(victim.pk, "ada-ns")
    with pytest.raises(InvalidInput):
        validation.operation_id(key)
    resp = put_state(api.as_user(victim), "ada-ns", "UNLIKED", key)
    assert resp.status_code == 400 and resp.json()["code"] == "invalid_idempotency_key", resp.content
    assert relation_row(victim.pk, "ada-ns") is None  # nothing was written


def test_a_refused_withdrawal_is_counted_as_failed_and_the_audit_says_partial(make_user, make_video, author, api,
                                                                                monkeypatch):
    victim = make_user()
    for vid in ("ada-f1", "ada-f2"):
        make_video(vid, author)
        assert put_state(api.as_user(victim), vid, "LIKED", f"k-{vid}").status_code == 200
    real_unlike = accounts._unlike

    def refuse_one(*, user_id, video_id):
        if video_id == "ada-f1":  # a domain rule refusing this relation (none does today: the seam is tested)
            raise InvalidInput("refused for the test", code="test_refused")
        return real_unlike(user_id=user_id, video_id=video_id)

    monkeypatch.setattr(accounts, "_unlike", refuse_one)
    result = account_delete(user_id=victim.pk, actor=TEST_ACTOR)

    assert (result.scanned, result.unliked, result.failed) == (2, 1, 1)
    done = AuditRecord.objects.get(action="account.delete.withdrawn", target_id=str(victim.pk))
    assert done.outcome == "partial" and done.params["failed_videos"] == ["ada-f1"]
    assert relation_row(victim.pk, "ada-f1").state == "LIKED" and relation_row(victim.pk, "ada-f2").state == "UNLIKED"
