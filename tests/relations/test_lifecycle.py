"""Settings and lifecycle (issue 5 §3) against real stores: the privacy settings API, another user's liked
list, account deletion through the real publisher and projectors, and test-matrix row T34 (a late like
after a video deletion and after an account deletion)."""

from __future__ import annotations

import io
import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from rest_framework.authtoken.models import Token

from counting import routing as reverse_routing
from counting.models import LikeReverseProjection, LikeReverseSort
from likes_project.audit.models import AuditRecord
from likes_project.errors import RateLimited
from likes_project.eventlog import streams
from relations import routing
from relations.models import AccountStatus, LikeCommand, LikeRelation, OutboxEvent, UserPrivacy
from relations.services import accounts
from relations.services.accounts import account_delete
from relations.services.social import friendship_set
from tests.counting.helpers import (
    bucket_sum,
    drain_all,
    envelopes,
    project_all,
    project_reverse,
    projection_row,
    publish_all,
)
from tests.factories import TEST_ACTOR, run_jobs
from tests.relations.helpers import cmd, outbox_rows, relation_row, total

# Transactional: the publisher only takes rows whose transaction has committed (architecture §4).
pytestmark = [pytest.mark.topology, pytest.mark.django_db(databases="__all__", transaction=True)]


def sort_users(video_id: str) -> set[int]:
    """Who has a sort entry (a visible-candidate liker) for the video in the active generation."""
    gen = reverse_routing.reverse_active().generation
    out = set()
    for alias in settings.COUNT_PARTITION_ALIASES:
        out |= set(LikeReverseSort.objects.using(alias).filter(generation=gen, video_id=video_id)
                   .values_list("user_id", flat=True))
    return out


def reverse_state(user_id: int, video_id: str) -> tuple[str, int] | None:
    gen = reverse_routing.reverse_active()
    row = LikeReverseProjection.objects.using(gen.alias_of(user_id)).filter(
        generation=gen.generation, video_id=video_id, user_id=user_id).first()
    return None if row is None else (row.state, row.relation_version)


def likers_ids(client, video_id: str) -> list[int]:
    r = client.get(f"/v1/videos/{video_id}/likers", {"limit": 100})
    assert r.status_code == 200, r.content
    return [i["userId"] for i in r.json()["items"]]


def put_json(client, url: str, body) -> object:
    data = body if isinstance(body, str) else json.dumps(body)
    return client.put(url, data=data, content_type="application/json")


def relations_of(user) -> list[tuple[str, str, int, str]]:
    return sorted(LikeRelation.objects.using(routing.alias_for_user(user.pk)).filter(user_id=user.pk).values_list(
        "video_id", "state", "relation_version", "last_operation_id"))


# --- privacy settings API ---------------------------------------------------------------------------


def test_privacy_defaults_and_partial_updates(make_user, api):
    user = make_user()
    client = api.as_user(user)
    assert client.get("/v1/me/privacy").json() == {"likesPrivate": False, "likersPublic": False}
    r = put_json(client, "/v1/me/privacy", {"likesPrivate": True, "somethingElse": 5})  # unknown keys ignored
    assert (r.status_code, r.json()) == (200, {"likesPrivate": True, "likersPublic": False})
    r = put_json(client, "/v1/me/privacy", {"likersPublic": True})  # an absent key keeps its value
    assert (r.status_code, r.json()) == (200, {"likesPrivate": True, "likersPublic": True})
    assert client.get("/v1/me/privacy").json() == {"likesPrivate": True, "likersPublic": True}
    row = UserPrivacy.objects.get(user_id=user.pk)
    assert (row.likes_private, row.likers_public) == (True, True)
    audits = list(AuditRecord.objects.filter(action="privacy.set", target_id=str(user.pk)).order_by("id")
                  .values_list("actor", "channel", "outcome"))
    assert audits == [(f"user:{user.pk}", "api", "applied")] * 2
    put_json(client, "/v1/me/privacy", {"likesPrivate": False})
    assert client.get("/v1/me/privacy").json() == {"likesPrivate": False, "likersPublic": True}


@pytest.mark.parametrize("body, code", [
    ({"likesPrivate": "true"}, "invalid_privacy"),
    ({"likesPrivate": 1}, "invalid_privacy"),
    ({"likersPublic": None}, "invalid_privacy"),
    ({"likesPrivate": True, "likersPublic": 0}, "invalid_privacy"),
    ({}, "invalid_privacy"),
    ({"unknown": True}, "invalid_privacy"),
    ("", "invalid_json"),
    ("[true]", "invalid_body"),
])
def test_privacy_put_is_strict_and_changes_nothing_on_error(make_user, api, body, code):
    user = make_user()
    client = api.as_user(user)
    r = put_json(client, "/v1/me/privacy", body)
    assert (r.status_code, r.json()["code"]) == (400, code)
    assert not UserPrivacy.objects.filter(user_id=user.pk).exists()
    assert not AuditRecord.objects.filter(action="privacy.set").exists()


def test_privacy_needs_authentication(api):
    assert api.anonymous().get("/v1/me/privacy").status_code == 401
    assert put_json(api.anonymous(), "/v1/me/privacy", {"likesPrivate": True}).status_code == 401


def test_likes_private_set_through_the_api_hides_the_user_from_likers(make_user, make_video, author, api):
    make_video("lc-hide", author)
    shy, open_ = make_user(), make_user()
    cmd(shy, "lc-hide", "LIKED")
    cmd(open_, "lc-hide", "LIKED")
    drain_all()
    assert set(likers_ids(api.as_user(author), "lc-hide")) == {shy.pk, open_.pk}
    assert put_json(api.as_user(shy), "/v1/me/privacy", {"likesPrivate": True}).status_code == 200
    assert likers_ids(api.as_user(author), "lc-hide") == [open_.pk]
    put_json(api.as_user(author), "/v1/me/privacy", {"likersPublic": True})
    assert set(likers_ids(api.as_user(shy), "lc-hide")) == {shy.pk, open_.pk}  # the owner still sees themself
    assert likers_ids(api.as_user(make_user()), "lc-hide") == [open_.pk]
    assert sort_users("lc-hide") == {shy.pk, open_.pk}  # hidden at read time, not removed


def test_per_video_likers_visibility_by_the_author_only(make_user, make_video, author, api):
    make_video("lc-vis", author)
    make_video("lc-vis-private", author, visibility="private")
    other = make_user()
    cmd(other, "lc-vis", "LIKED")
    drain_all()
    url = "/v1/videos/lc-vis/likers-visibility"
    assert api.as_user(other).get("/v1/videos/lc-vis/likers").json()["code"] == "likers_not_visible"
    r = put_json(api.as_user(other), url, {"likersPublic": True})
    assert (r.status_code, r.json()["code"]) == (403, "not_author")
    r = put_json(api.as_user(other), "/v1/videos/lc-vis-private/likers-visibility", {"likersPublic": True})
    assert (r.status_code, r.json()["code"]) == (404, "video_not_found")
    r = put_json(api.as_user(other), "/v1/videos/lc-none/likers-visibility", {"likersPublic": True})
    assert (r.status_code, r.json()["code"]) == (404, "video_not_found")
    r = put_json(api.as_user(author), url, {"likersPublic": "yes"})
    assert (r.status_code, r.json()["code"]) == (400, "invalid_privacy")
    r = put_json(api.as_user(author), url, {})
    assert (r.status_code, r.json()["code"]) == (400, "invalid_privacy")
    assert api.as_user(other).get("/v1/videos/lc-vis/likers").status_code == 403
    r = put_json(api.as_user(author), url, {"likersPublic": True})
    assert (r.status_code, r.json()) == (200, {"videoId": "lc-vis", "likersPublic": True})
    assert likers_ids(api.as_user(other), "lc-vis") == [other.pk]
    # The override wins over the author's setting both ways.
    put_json(api.as_user(author), "/v1/me/privacy", {"likersPublic": True})
    put_json(api.as_user(author), url, {"likersPublic": False})
    assert api.as_user(other).get("/v1/videos/lc-vis/likers").status_code == 403
    assert AuditRecord.objects.filter(action="video.likers_visibility", target_id="lc-vis").count() == 2


# --- another user's liked list ------------------------------------------------------------------------


def user_likes(client, username, **params):
    return client.get(f"/v1/users/{username}/likes", params)


def test_another_users_likes_private_public_and_owner(make_user, make_video, author, api):
    target, viewer = make_user(), make_user()
    for vid in ("lc-l1", "lc-l2", "lc-l3"):
        make_video(vid, author)
        cmd(target, vid, "LIKED")
    mine = api.as_user(target).get("/v1/me/likes").json()
    assert [i["videoId"] for i in mine["items"]] == ["lc-l3", "lc-l2", "lc-l1"]

    r = user_likes(api.as_user(viewer), target.username)
    assert (r.status_code, r.json()) == (200, mine)

    put_json(api.as_user(target), "/v1/me/privacy", {"likesPrivate": True})
    r = user_likes(api.as_user(viewer), target.username)
    assert (r.status_code, r.json()["code"]) == (403, "likes_private")
    r = user_likes(api.as_user(target), target.username)  # the owner always sees everything
    assert (r.status_code, r.json()) == (200, mine)

    put_json(api.as_user(target), "/v1/me/privacy", {"likesPrivate": False})
    assert user_likes(api.as_user(viewer), target.username).status_code == 200


def test_another_users_likes_pages_with_a_cursor_bound_to_the_listed_user(make_user, make_video, author, api):
    target, other, viewer = make_user(), make_user(), make_user()
    for i in range(5):
        make_video(f"lc-p{i}", author)
        cmd(target, f"lc-p{i}", "LIKED")
        cmd(other, f"lc-p{i}", "LIKED")
    client = api.as_user(viewer)
    got, cursor = [], None
    for _ in range(10):
        r = user_likes(client, target.username, limit=2, **({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200, r.content
        got += [i["videoId"] for i in r.json()["items"]]
        cursor = r.json()["nextCursor"]
        if cursor is None:
            break
    assert got == [f"lc-p{i}" for i in reversed(range(5))]
    first = user_likes(client, target.username, limit=2).json()["nextCursor"]
    r = user_likes(client, other.username, limit=2, cursor=first)
    assert (r.status_code, r.json()["code"]) == (400, "invalid_cursor")
    r = user_likes(client, target.username, limit=0)
    assert (r.status_code, r.json()["code"]) == (400, "invalid_limit")


def test_another_users_likes_hides_videos_the_viewer_cannot_see(make_user, make_video, author, api):
    target, viewer = make_user(), make_user()
    friendship_set(user_a=author.pk, user_b=target.pk, present=True, actor=TEST_ACTOR)
    make_video("lc-pub", author)
    make_video("lc-friends", author, visibility="friends")
    cmd(target, "lc-pub", "LIKED")
    cmd(target, "lc-friends", "LIKED")
    assert [i["videoId"] for i in user_likes(api.as_user(target), target.username).json()["items"]] == [
        "lc-friends", "lc-pub"]
    assert [i["videoId"] for i in user_likes(api.as_user(viewer), target.username).json()["items"]] == ["lc-pub"]


def test_another_users_likes_unknown_banned_or_deleted_is_404(make_user, api):
    viewer, banned, gone = make_user(), make_user(), make_user()
    AccountStatus.objects.create(user_id=banned.pk, status="banned")
    account_delete(user_id=gone.pk, actor=TEST_ACTOR)
    for name in ("no-such-user", banned.username, gone.username):
        r = user_likes(api.as_user(viewer), name)
        assert (r.status_code, r.json()["code"]) == (404, "user_not_found"), name
    assert user_likes(api.anonymous(), viewer.username).status_code == 401


# --- account deletion ---------------------------------------------------------------------------------


def test_delete_account_unlikes_everything_and_the_projections_converge(make_user, make_video, author, api):
    doomed, keeper = make_user(), make_user()
    vids = [f"lc-d{i}" for i in range(5)]
    for vid in vids:
        make_video(vid, author)
        cmd(doomed, vid, "LIKED")
    cmd(keeper, vids[0], "LIKED")
    cmd(doomed, vids[4], "UNLIKED")  # already withdrawn: v2, untouched by the deletion
    drain_all()
    doomed_client = api.as_user(doomed)
    assert [bucket_sum(v) for v in vids] == [2, 1, 1, 1, 0]
    assert set(likers_ids(api.as_user(author), vids[0])) == {doomed.pk, keeper.pk}

    out, err = io.StringIO(), io.StringIO()
    call_command("delete_account", doomed.username, "--progress-every", "2", stdout=out, stderr=err)
    assert "4 of 4 likes withdrawn" in out.getvalue()
    assert err.getvalue().splitlines() == [f"{doomed.username}: 2 likes handled, 2 withdrawn...",
                                           f"{doomed.username}: 4 likes handled, 4 withdrawn..."]

    assert AccountStatus.objects.get(user_id=doomed.pk).status == "deleted"
    doomed.refresh_from_db()
    assert doomed.is_active is False
    assert not Token.objects.filter(user_id=doomed.pk).exists()
    assert doomed_client.get("/v1/me/likes").status_code == 401  # the old token no longer works
    audit = AuditRecord.objects.get(action="account.delete", target_id=str(doomed.pk))
    assert (audit.channel, audit.outcome) == ("cli", "marked")
    done = AuditRecord.objects.get(action="account.delete.withdrawn", target_id=str(doomed.pk))
    assert (done.channel, done.outcome) == ("cli", "applied")
    assert {k: done.params[k] for k in ("scanned", "unliked", "skipped", "failed")} == {
        "scanned": 4, "unliked": 4, "skipped": 0, "failed": 0}

    for vid in vids[:4]:
        row = relation_row(doomed.pk, vid)
        assert (row.state, row.relation_version, row.last_operation_id) == (
            "UNLIKED", 2, f"sys/account-delete/{doomed.pk}/{vid}")
        events = outbox_rows(doomed.pk, vid)
        assert [(e.relation_version, e.payload["absoluteState"]) for e in events] == [(1, "LIKED"), (2, "UNLIKED")]
    assert (relation_row(doomed.pk, vids[4]).state, relation_row(doomed.pk, vids[4]).relation_version) == (
        "UNLIKED", 2)
    assert len(outbox_rows(doomed.pk, vids[4])) == 2  # no new event for an already withdrawn like
    assert relation_row(keeper.pk, vids[0]).state == "LIKED"

    drain_all()
    assert [bucket_sum(v) for v in vids] == [1, 0, 0, 0, 0]
    assert sort_users(vids[0]) == {keeper.pk}  # the index converged, not merely hidden at read time
    assert all(reverse_state(doomed.pk, v) == ("UNLIKED", 2) for v in vids)
    assert likers_ids(api.as_user(author), vids[0]) == [keeper.pk]
    count_row = projection_row(doomed.pk, vids[1])
    assert (count_row.projected_state, count_row.projected_version) == ("UNLIKED", 2)


def test_rerunning_delete_account_changes_nothing(make_user, make_video, author):
    doomed = make_user()
    for vid in ("lc-r1", "lc-r2"):
        make_video(vid, author)
        cmd(doomed, vid, "LIKED")
    first = account_delete(user_id=doomed.pk, actor=TEST_ACTOR)
    assert (first.already_deleted, first.scanned, first.unliked) == (False, 2, 2)
    before = (relations_of(doomed), total(OutboxEvent), total(LikeCommand))
    out = io.StringIO()
    call_command("delete_account", doomed.username, stdout=out, stderr=io.StringIO())
    assert "already marked deleted" in out.getvalue() and "0 of 0 likes withdrawn" in out.getvalue()
    assert (relations_of(doomed), total(OutboxEvent), total(LikeCommand)) == before
    # Withdrawing again under the same system id is a no-op too (what a run resumed after a crash does).
    assert accounts._unlike(user_id=doomed.pk, video_id="lc-r1") is False
    assert (relations_of(doomed), total(OutboxEvent), total(LikeCommand)) == before
    assert list(AuditRecord.objects.filter(action="account.delete").order_by("id").values_list("outcome", flat=True)
                ) == ["marked", "resumed"]


@override_settings(RATE_LIMIT_ENABLED=True, RATE_LIMIT_RELATION_PER_MINUTE=1)
def test_delete_account_is_not_stopped_by_the_relation_rate_limit(make_user, make_video, author):
    doomed = make_user()
    make_video("lc-rl", author)
    cmd(doomed, "lc-rl", "LIKED")  # spends the relation's only token
    with pytest.raises(RateLimited):  # the limiter is armed for this relation
        cmd(doomed, "lc-rl", "UNLIKED")
    result = account_delete(user_id=doomed.pk, actor=TEST_ACTOR)
    assert (result.unliked, result.skipped, result.failed) == (1, 0, 0)
    row = relation_row(doomed.pk, "lc-rl")
    assert (row.state, row.relation_version) == ("UNLIKED", 2)
    assert [e.payload["absoluteState"] for e in outbox_rows(doomed.pk, "lc-rl")] == ["LIKED", "UNLIKED"]


def test_delete_account_command_checks_the_actor_permission(make_user):
    doomed = make_user()
    clerk = make_user()
    with pytest.raises(CommandError, match=r"lacks the permission relations\.change_accountstatus"):
        call_command("delete_account", doomed.username, "--actor", clerk.username, stdout=io.StringIO())
    assert not AccountStatus.objects.filter(user_id=doomed.pk).exists()
    clerk.user_permissions.add(Permission.objects.get(codename="change_accountstatus"))
    call_command("delete_account", doomed.username, "--actor", clerk.username, stdout=io.StringIO(),
                 stderr=io.StringIO())
    assert AccountStatus.objects.get(user_id=doomed.pk).status == "deleted"
    assert AuditRecord.objects.get(action="account.delete").actor == clerk.username
    with pytest.raises(CommandError, match="user_not_found"):
        call_command("delete_account", "nobody-here", stdout=io.StringIO())


def test_admin_account_delete_view_is_permission_checked_and_audited(make_user, make_video, author):
    doomed = make_user()
    make_video("lc-adm", author)
    cmd(doomed, "lc-adm", "LIKED")
    staff = get_user_model().objects.create_user("lc-staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    url = "/admin/relations/account-delete/"
    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="change_accountstatus"))
    assert client.get(url).status_code == 200
    r = client.post(url, {"username": doomed.username})  # not confirmed: a form error, nothing done
    assert r.status_code == 200 and not AccountStatus.objects.filter(user_id=doomed.pk).exists()
    r = client.post(url, {"username": doomed.username, "confirm": "on"})
    assert r.status_code == 302  # the account is hidden at once, the withdrawal is a job
    assert AccountStatus.objects.get(user_id=doomed.pk).status == "deleted"
    assert relation_row(doomed.pk, "lc-adm").state == "LIKED"
    [job] = run_jobs()
    assert relation_row(doomed.pk, "lc-adm").state == "UNLIKED"
    assert "1 of 1 likes withdrawn" in client.get(r["Location"]).content.decode()  # the job's page
    assert AuditRecord.objects.get(action="account.delete").channel == "admin"
    assert AuditRecord.objects.get(action="account.delete").job_id == job.pk


# --- T34 ----------------------------------------------------------------------------------------------


def test_t34_a_like_published_before_an_account_deletion_and_consumed_after_stays_invisible(
        make_user, make_video, author, api):
    user, keeper = make_user(), make_user()
    make_video("lc-t34a", author)
    cmd(user, "lc-t34a", "LIKED")
    cmd(keeper, "lc-t34a", "LIKED")
    publish_all()  # the like events are on the stream, not consumed yet
    account_delete(user_id=user.pk, actor=TEST_ACTOR)
    viewer = api.as_user(author)

    # The late like is consumed AFTER the deletion committed; the deletion's UNLIKED is not consumed yet.
    project_all()
    project_reverse()
    assert user.pk in sort_users("lc-t34a")  # the projection holds the late like for now ...
    assert likers_ids(viewer, "lc-t34a") == [keeper.pk]  # ... but AccountStatus hides it at read time

    drain_all()  # the deletion's UNLIKED (version 2) arrives
    assert reverse_state(user.pk, "lc-t34a") == ("UNLIKED", 2)
    assert sort_users("lc-t34a") == {keeper.pk}
    assert bucket_sum("lc-t34a") == 1

    # The like event is delivered once more, late (a redelivery): version 1 < 2 changes nothing.
    v1 = envelopes(user.pk, "lc-t34a")[0]
    assert v1["relationVersion"] == 1
    streams.publish_pipeline([v1])
    project_all()
    project_reverse()
    assert reverse_state(user.pk, "lc-t34a") == ("UNLIKED", 2)
    assert sort_users("lc-t34a") == {keeper.pk}
    assert bucket_sum("lc-t34a") == 1
    assert likers_ids(viewer, "lc-t34a") == [keeper.pk]


def test_t34_b_a_deleted_video_then_a_late_like_serves_neither_likers_nor_count(make_user, make_video, author, api):
    user = make_user()
    make_video("lc-t34b", author)
    cmd(user, "lc-t34b", "LIKED")  # not published yet
    viewer = api.as_user(author)
    assert viewer.get("/v1/videos/lc-t34b/like-count").status_code == 200
    make_video("lc-t34b", author, status="deleted")
    drain_all()  # the late like is consumed after the deletion
    # The projections still record the version (they apply by version, whatever the video's status);
    # serving is refused at read time and the rows are retired by a job.
    assert reverse_state(user.pk, "lc-t34b") == ("LIKED", 1)
    assert user.pk in sort_users("lc-t34b")
    for client in (viewer, api.as_user(user)):
        r = client.get("/v1/videos/lc-t34b/likers")
        assert (r.status_code, r.json()["code"]) == (404, "video_not_found")
        r = client.get("/v1/videos/lc-t34b/likers/recent")
        assert (r.status_code, r.json()["code"]) == (404, "video_not_found")
        r = client.get("/v1/videos/lc-t34b/like-count")
        assert (r.status_code, r.json()["code"]) == (404, "video_not_found")
    assert user_likes(api.as_user(make_user()), user.username).json()["items"] == []
